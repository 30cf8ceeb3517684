"""rdma_fabric on EFA nodes: the image's EFA stack is detected with the collection's
detect_preinstalled / preinstalled_plan filters and adopted, replaced or refused; the aws-ofi-nccl
plugin must be present; the NCCL settings select libfabric's efa provider. Each test renders the
role's own tasks against the AWS example stack's inventory."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.render.nccl import nccl_settings
from gpucluster.spec.models import Fabric, Platform
from tests.unit.roles.render import (
    NATIVE,
    REPO,
    ROLES,
    TEXT,
    _resolve,
    first_host,
    host_context,
    inventory_for,
    role_vars,
)

TASKS = ROLES / "rdma_fabric" / "tasks"
RECORD = (REPO / "tests" / "data" / "samples" / "efa_installed_packages_01.txt").read_text()  # installer 1.47.0


def _tasks(name: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((TASKS / name).read_text())
    return tasks


def _named(tasks: list[dict[str, Any]], start: str) -> dict[str, Any]:
    found = [t for t in tasks if t["name"].startswith(start)]
    assert len(found) == 1, start
    return found[0]


def _vars(fabric: str = "efa", group: str = "gpu", **extra: Any) -> dict[str, Any]:
    inventory = inventory_for(fabric)
    return role_vars("rdma_fabric", host_context(inventory, first_host(inventory, group)), extra)


def test_efa_section_runs_on_nodes_whose_platform_has_an_efa_rail() -> None:
    include = _named(yaml.safe_load((TASKS / "main.yml").read_text()), "Provide EFA")
    assert include["ansible.builtin.include_tasks"]["file"] == "efa.yml"
    when = "{{ " + include["when"] + " }}"
    assert NATIVE.from_string(when).render(_vars("efa")) is True
    for fabric in ("infiniband", "roce", "ethernet"):
        assert NATIVE.from_string(when).render(_vars(fabric)) is False, fabric


def test_efa_nodes_that_take_no_heavy_packages_are_told_so_and_download_nothing() -> None:
    """The EFA installer and the aws-ofi-nccl plugin are the GPU software stack's network half: a
    target whose nodes take no heavy packages (the lab's, the AWS p5 twin's: no route to AWS's
    installer site, no EFA device) gets neither, as it gets no NCCL, and converge says so instead of
    failing on the download; `converge --heavy` brings them back."""
    main = yaml.safe_load((TASKS / "main.yml").read_text())
    provide, report = _named(main, "Provide EFA"), _named(main, "Report that EFA's user space is left out")
    caps = {**_vars("efa")["gpucluster_capabilities"], "heavy_packages": False}
    light = _vars("efa", gpucluster_capabilities=caps)
    assert light["rdma_fabric_efa_enabled"] is False
    assert NATIVE.from_string("{{ " + provide["when"] + " }}").render(light) is False
    assert NATIVE.from_string("{{ " + report["when"] + " }}").render(light) is True
    assert "heavy_packages" in report["ansible.builtin.debug"]["msg"]
    heavy = _vars("efa", gpucluster_capabilities=caps, gpucluster_heavy_packages=True)
    assert NATIVE.from_string("{{ " + provide["when"] + " }}").render(heavy) is True
    assert NATIVE.from_string("{{ " + report["when"] + " }}").render(_vars("efa")) is False


def _plan(v: dict[str, Any], record: str | None, prefix: bool) -> dict[str, Any]:
    """The role's decision task, given what the probe tasks would register on the node."""
    task = _named(_tasks("efa.yml"), "Decide what to do")
    reg = {"__rdma_fabric_efa_record": ({"content": base64.b64encode(record.encode()).decode()} if record is not None
                                        else {"failed": True, "msg": "file not found"}),
           "__rdma_fabric_efa_prefix": {"stat": {"exists": prefix}}}
    ctx = dict(v, **reg)
    for name, expr in task["vars"].items():
        ctx[name] = _resolve(expr, ctx)
    plan: dict[str, Any] = _resolve(task["ansible.builtin.set_fact"]["__rdma_fabric_efa_plan"], ctx)
    return plan


@pytest.mark.parametrize(("pin", "record", "prefix", "policy", "action"), [
    ("1.47.0", RECORD, True, "adopt_or_fail", "adopt"),          # the image's EFA is the pin
    ("1.48.0", RECORD, True, "adopt_or_fail", "fail"),           # another version, policy fail
    ("1.48.0", RECORD, True, "adopt_or_replace", "replace"),     # another version, policy replace
    ("1.48.0", None, False, "adopt_or_fail", "install"),         # nothing there: install the pin
    ("1.48.0", None, True, "adopt_or_fail", "fail"),             # a prefix at an unknown version
    ("", RECORD, True, "adopt_or_fail", "adopt"),                # no pin: the image's EFA as it is
    ("", None, False, "adopt_or_replace", "fail"),               # no pin and nothing to adopt
])
def test_the_image_efa_stack_is_adopted_replaced_or_refused(pin: str, record: str | None, prefix: bool,
                                                            policy: str, action: str) -> None:
    v = _vars(rdma_fabric_efa_version=pin, rdma_fabric_preinstalled=policy)
    plan = _plan(v, record, prefix)
    assert plan["action"] == action, plan["message"]
    if action == "fail" and pin:
        assert "1.47.0" in plan["message"] or "unknown" in plan["message"]
        assert pin in plan["message"] and "adopt_or_replace" in plan["message"]
    if action == "adopt" and not pin:
        assert plan["message"] == "efa: no pin in the bill of materials, adopting the image's EFA 1.47.0 as it is"
    if action == "fail" and not pin:
        assert "gpucluster/data/bom.yaml" in plan["message"] and "rdma_fabric_efa_version" in plan["message"]


def test_a_refused_stack_stops_the_run_and_only_install_or_replace_runs_the_installer() -> None:
    tasks = _tasks("efa.yml")
    stop = _named(tasks, "Stop where the EFA stack differs")
    install = _named(tasks, "Install the pinned EFA installer")
    for action, stops, installs in (("adopt", False, False), ("fail", True, False), ("install", False, True),
                                    ("replace", False, True)):
        ctx = {"__rdma_fabric_efa_plan": {"action": action, "message": "m"}}
        holds = NATIVE.from_string("{{ " + stop["ansible.builtin.assert"]["that"] + " }}").render(ctx)
        assert (holds is False) == stops
        assert NATIVE.from_string("{{ " + install["when"] + " }}").render(ctx) is installs
    assert tasks.index(stop) < tasks.index(install)
    assert install["ansible.builtin.include_tasks"] == "efa_install.yml"


def test_the_installer_comes_from_the_pinned_url_or_the_air_gapped_folder() -> None:
    v = _vars(rdma_fabric_efa_version="1.47.0")
    tasks = _tasks("efa_install.yml")
    download = _named(tasks, "Download the EFA installer")["ansible.builtin.get_url"]
    assert _resolve(download["url"], v) == "https://efa-installer.amazonaws.com/aws-efa-installer-1.47.0.tar.gz"
    assert _resolve(download["dest"], v).startswith("/var/cache/gpucluster/efa-installer/1.47.0/")
    copy = _named(tasks, "Copy the EFA installer")["ansible.builtin.copy"]
    local = dict(v, rdma_fabric_efa_local_dir="/srv/efa")
    assert _resolve(copy["src"], local) == "/srv/efa/aws-efa-installer-1.47.0.tar.gz"
    run = _named(tasks, "Run the EFA installer")
    assert run["ansible.builtin.command"] == "./efa_installer.sh -y"
    assert _resolve(run["args"]["chdir"], v) == "/var/cache/gpucluster/efa-installer/1.47.0/aws-efa-installer"


def test_a_copied_installer_is_checked_against_its_sha256() -> None:
    check = _named(_tasks("efa_install.yml"), "Check the copied EFA installer")
    that = "{{ " + check["ansible.builtin.assert"]["that"] + " }}"
    good = {"__rdma_fabric_efa_tarball_stat": {"stat": {"checksum": "ab" * 32}},
            "rdma_fabric_efa_installer_sha256": "AB" * 32}
    assert NATIVE.from_string(that).render(good) is True
    bad = dict(good, rdma_fabric_efa_installer_sha256="cd" * 32)
    assert NATIVE.from_string(that).render(bad) is False


def test_without_the_aws_ofi_nccl_plugin_the_run_stops_and_with_it_nccl_can_load_it() -> None:
    v = _vars()
    tasks = _tasks("efa.yml")
    find = _named(tasks, "Look for the aws-ofi-nccl plugin")["ansible.builtin.find"]
    assert _resolve(find["paths"], v) == ["/opt/amazon/ofi-nccl", "/opt/aws-ofi-nccl"]
    assert find["patterns"] == ["libnccl-net.so"]  # the name NCCL dlopens without NCCL_NET_PLUGIN
    stop = _named(tasks, "Stop where no aws-ofi-nccl plugin")
    that = "{{ " + stop["ansible.builtin.assert"]["that"] + " }}"
    none: dict[str, Any] = {"__rdma_fabric_ofi_nccl": {"files": []}}
    assert NATIVE.from_string(that).render(none) is False
    msg = TEXT.from_string(stop["ansible.builtin.assert"]["fail_msg"]).render(
        dict(v, **none, __rdma_fabric_efa_plan={"action": "adopt"}))
    assert "falls back to TCP sockets" in msg and "/opt/amazon/ofi-nccl" in msg

    # The Deep Learning AMI on Ubuntu: the plugin under lib/x86_64-linux-gnu.
    found = {"__rdma_fabric_ofi_nccl": {"files": [
        {"path": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"}]}}
    assert NATIVE.from_string(that).render(found) is True
    ld = _named(tasks, "Put the aws-ofi-nccl plugin")
    text = TEXT.from_string(ld["ansible.builtin.copy"]["content"]).render(dict(v, **found, ansible_managed="m"))
    assert text.splitlines()[1:] == ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"]
    assert ld["notify"] == "Refresh the dynamic linker's cache"
    handlers = yaml.safe_load((ROLES / "rdma_fabric" / "handlers" / "main.yml").read_text())
    assert any(h["name"] == ld["notify"] and h["ansible.builtin.command"] == "ldconfig" for h in handlers)


def test_nccl_on_efa_selects_libfabrics_efa_provider() -> None:
    # The renderer GC-NET-006 reads too: "FI_PROVIDER="efa" ... This must be set to "efa""
    # (https://github.com/awsdocs/amazon-ec2-user-guide/blob/master/doc_source/efa-start-nccl-base.md).
    v = _vars()
    platform = v["gpucluster_platforms"][v["gpucluster_platform"]]
    got = nccl_settings(Fabric.model_validate(v["gpucluster_fabric"]), Platform.model_validate(platform),
                        v.get("gpucluster_fabric_interface"))
    assert got["FI_PROVIDER"] == "efa"
    assert not any(k.startswith("NCCL_IB_") for k in got)
    # The role looks for libnccl-net.so because the settings name no other plugin.
    assert "NCCL_NET_PLUGIN" not in got


def test_role_files_exist() -> None:
    for name in ("efa.yml", "efa_install.yml"):
        assert (TASKS / name).is_file()
    assert Path(TASKS / "efa.yml").read_text().count("gpucluster.cluster.preinstalled_plan") == 1
    assert Path(TASKS / "efa.yml").read_text().count("gpucluster.cluster.detect_preinstalled") == 1
