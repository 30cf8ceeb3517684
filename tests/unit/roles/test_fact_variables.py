"""The roles read facts under ``ansible_facts`` only: ansible.cfg sets ``inject_facts_as_vars = False``
(a cost in Ansible's main process for each host and task), so a top-level ``ansible_<fact>`` is
undefined in a converge. Every ``ansible_*`` name the playbooks, roles and templates use is one of
Ansible's own magic or connection variables."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Ansible's magic and connection variables (not facts): what a converge defines with facts left
# under ansible_facts.
MAGIC = {
    "ansible_facts", "ansible_managed", "ansible_check_mode", "ansible_diff_mode", "ansible_version",
    "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_batch", "ansible_play_name",
    "ansible_play_role_names", "ansible_role_names", "ansible_role_name", "ansible_parent_role_names",
    "ansible_dependent_role_names", "ansible_collection_name", "ansible_run_tags", "ansible_skip_tags",
    "ansible_limit", "ansible_forks", "ansible_verbosity", "ansible_config_file", "ansible_inventory_sources",
    "ansible_playbook_python", "ansible_search_path", "ansible_loop", "ansible_loop_var", "ansible_index_var",
    "ansible_host", "ansible_port", "ansible_user", "ansible_connection", "ansible_python_interpreter",
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_ssh_common_args", "ansible_ssh_args",
    "ansible_ssh_extra_args", "ansible_become", "ansible_become_user", "ansible_become_method",
    "ansible_remote_tmp", "ansible_timeout", "ansible_pipelining",
}
_NAME = re.compile(r"\bansible_[a-z0-9_]+")


def test_ansible_cfg_leaves_facts_under_ansible_facts() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    assert cfg.getboolean("defaults", "inject_facts_as_vars") is False


def test_the_roles_read_no_top_level_fact() -> None:
    files = [p for folder in ("roles", "playbooks", "templates")
             for p in (REPO / folder).rglob("*") if p.suffix in (".yml", ".yaml", ".j2")]
    assert len(files) > 50
    found = {(str(p.relative_to(REPO)), name) for p in files
             for name in _NAME.findall(p.read_text(encoding="utf-8")) if name not in MAGIC}
    assert found == set(), f"top-level facts (use ansible_facts.<name>): {sorted(found)[:10]}"
