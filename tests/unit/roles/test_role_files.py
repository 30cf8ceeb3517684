"""The roles' gpucluster.cluster.files tasks: which sections a run writes, which handler acts on
which file, and the per-rail file list rendered by Ansible itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.outputs import OutputRail
from gpucluster.render.rails import rail_settings
from tests.unit.loading import run_local_play
from tests.unit.roles.render import NATIVE, REPO, ROLES, file_entries, render_template

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

COMMON = ROLES / "common"
SECTIONS = ["common_hosts", "common_time", "common_kernel", "common_ssh", "common_firewall", "common_proxy"]


def _sections(run_tags: list[str], skip_tags: list[str]) -> list[str]:
    internal = yaml.safe_load((COMMON / "vars" / "main.yml").read_text())
    assert internal["__common_section_tags"] == SECTIONS
    out: list[str] = NATIVE.from_string(internal["__common_sections"]).render(
        __common_section_tags=SECTIONS, ansible_run_tags=run_tags, ansible_skip_tags=skip_tags)
    return out


@pytest.mark.parametrize(("run_tags", "skip_tags", "expected"), [
    (["all"], [], SECTIONS),
    (["common"], [], SECTIONS),
    (["tagged"], [], SECTIONS),
    (["common_time"], [], ["common_time"]),
    (["common_time", "common_ssh", "nccl"], [], ["common_time", "common_ssh"]),
    (["all"], ["common_firewall"], ["common_hosts", "common_time", "common_kernel", "common_ssh", "common_proxy"]),
    (["all"], ["common"], []),
    (["nccl"], [], []),
])
def test_a_run_writes_the_files_of_the_sections_its_tags_select(run_tags: list[str], skip_tags: list[str],
                                                                 expected: list[str]) -> None:
    assert _sections(run_tags, skip_tags) == expected


def _files_task() -> dict[str, Any]:
    [task] = yaml.safe_load((COMMON / "tasks" / "files.yml").read_text())
    return dict(task)


def test_the_files_task_carries_every_section_tag_and_each_entry_names_its_section() -> None:
    main = yaml.safe_load((COMMON / "tasks" / "main.yml").read_text())
    [imp] = [t for t in main if t.get("ansible.builtin.import_tasks") == "files.yml"]
    assert sorted(set(imp["tags"]) - {"common"}) == sorted(SECTIONS)
    task = _files_task()
    entries = [*task["gpucluster.cluster.files"]["directories"], *task["gpucluster.cluster.files"]["files"]]
    for entry in entries:
        enabled = str(entry["enabled"])
        named = [s for s in SECTIONS if f"'{s}'" in enabled]
        assert len(named) == 1 or "__common_firewall_written" in enabled, entry
    assert "'common_firewall' in __common_sections" in task["vars"]["__common_firewall_written"]


def test_each_handler_acts_on_a_file_the_task_writes() -> None:
    internal = yaml.safe_load((COMMON / "vars" / "main.yml").read_text())
    task = _files_task()
    dests = {str(e["dest"]) for e in file_entries([task])}
    handlers = yaml.safe_load((COMMON / "handlers" / "main.yml").read_text())
    gated = {}
    for handler in handlers:
        conditions = handler.get("when") or []
        text = " ".join(conditions if isinstance(conditions, list) else [conditions])
        names = re.findall(r"(__common_\w+) in __common_files\.changed_paths", text)
        if names:
            gated[handler["name"]] = names
            for name in names:
                assert "{{ " + name + " }}" in dests, f"{handler['name']}: {name} is not a file of files.yml"
                assert str(internal[name]).startswith("/etc/")
    # Every handler the task notifies acts only on its own files.
    assert sorted(task["notify"]) == sorted(gated)


def test_every_common_template_is_written_by_the_files_task() -> None:
    written = {e["src"] for e in file_entries([_files_task()])}
    hosts = (COMMON / "tasks" / "hosts.yml").read_text()
    for template in (COMMON / "templates").glob("*.j2"):
        assert template.name in written or f"'{template.name}'" in hosts, template.name


def test_the_rail_file_list_is_rendered_by_ansible_as_the_template_renders_each_rail(tmp_path: Path) -> None:
    # Ansible's own engine: the JSON-built list, the template lookup, the collection's filters.
    rails = [{"interface": "enp16s0np0", "address": "10.83.2.10", "cidr": "10.83.2.0/24"},
             {"interface": "enp32s0np0.5", "address": "10.83.3.10", "cidr": "10.83.3.0/24"}]
    (tmp_path / "templates").symlink_to(ROLES / "fabric_rails" / "templates")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLES / "fabric_rails" / "defaults" / "main.yml"),
                       str(ROLES / "fabric_rails" / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.copy": {"content": "{{ __fabric_rails_files_wanted | to_json }}",
                                            "dest": str(tmp_path / "out.json")}}],
    }]))
    run_local_play(tmp_path / "play.yml", tmp_path, {"gpucluster_rails": rails, "gpucluster_fabric": {"mtu": 9000}})
    got = json.loads((tmp_path / "out.json").read_text())
    # networkd's drop-in is the networkd role's (roles/networkd), which the rails are handed to.
    assert [e["dest"] for e in got] == [
        "/etc/sysctl.d/60-gpucluster-rails.conf",
        "/etc/systemd/network/05-gpucluster-rail-enp16s0np0.network",
        "/etc/systemd/network/05-gpucluster-rail-enp32s0np0.5.network"]
    ctx = {"ansible_managed": "Ansible managed", "fabric_rails_rails": rails, "fabric_rails_mtu": 9000}
    for entry, item in zip(got[1:], rail_settings([OutputRail.model_validate(r) for r in rails], 9000), strict=True):
        assert entry["content"] == render_template("fabric_rails", "rail.network.j2", {**ctx, "item": item})
        assert entry["mode"] == "0644"


def test_the_controller_floor_is_the_first_ansible_core_that_drops_a_nested_omit() -> None:
    # roles/common/tasks/files.yml leaves keys of a list's mappings out with `omit`: ansible-core
    # 2.19 and newer drop it there; an older core passes the placeholder string on as the value.
    play = yaml.safe_load((REPO / "playbooks" / "validate-inventory.yml").read_text())[0]
    assert play["vars"]["__validate_min_ansible"] == "2.19"
    assert '"ansible-core>=2.19"' in (REPO / "pyproject.toml").read_text()
    assert "else omit }}\"" in (COMMON / "tasks" / "files.yml").read_text()


@pytest.mark.parametrize(("probe", "expected"), [
    ({"stderr": "Error: Could not process rule: Operation not permitted\n", "stdout": ""},
     "Error: Could not process rule: Operation not permitted"),
    # Under a terminal (raw over Mitogen) nft's words reach stdout and stderr holds OpenSSH's notice.
    ({"stderr": "Shared connection to 10.83.0.10 closed.\r\n",
      "stdout": "Error: Could not process rule: Operation not permitted\r\n"},
     "Error: Could not process rule: Operation not permitted"),
    ({"stderr": "", "stdout": ""}, "nft failed"),
])
def test_the_report_gives_nfts_own_words(probe: dict[str, str], expected: str) -> None:
    main = yaml.safe_load((COMMON / "tasks" / "main.yml").read_text())
    [report] = [t for t in main if t.get("name") == "Report what this node leaves to its host"]
    assert NATIVE.from_string(report["vars"]["__common_nft_why"]).render(__common_nft_probe=probe) == expected
