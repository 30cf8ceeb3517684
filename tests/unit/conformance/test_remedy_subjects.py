"""A report's next steps name what failed (issue 26): the node, the run's inventory and folder, the
service, interface, HCA, GPU or peer the failure names; what a failure does not name is said in
words, never left as a token for the reader to spot."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from gpucluster.conformance import checks, remedies
from gpucluster.conformance.report_data import Report, findings
from gpucluster.conformance.reports import _system_out, markdown, write_all
from gpucluster.conformance.verdict import CLUSTER, CheckResult

INVENTORY = "inventories/lab/hosts.yml"
TOKEN = re.compile(r"(?<![\w<-])[A-Z][A-Z0-9_]*(?![\w-])")
# Upper-case words that are a command's own arguments or a tool's names, not something to substitute.
COMMAND_WORDS = frozenset({
    "AWS", "CLOCK", "ECC", "FI_EP_RDM", "FI_PROVIDER", "INFO", "LD_LIBRARY_PATH", "NCCL_DEBUG",
    "NCCL_NET_PLUGIN", "NET", "NVRM", "OFI", "PAGE_RETIREMENT", "PERFORMANCE", "POWER", "ROW_REMAPPER",
    "TEMPERATURE",
})
# The tokens the table used to leave in its steps; none may come back in prose either.
OLD_TOKENS = frozenset({
    "INV", "NODE", "SERVICE", "DEV", "RAIL", "TABLE", "MGMT_IP", "FABRIC_IP", "PEER_FABRIC_IP", "PEER_RAIL_IP",
    "PEER_HCA", "RUN_DIR", "MOUNT_PATH", "POOL", "POD", "LEVEL", "BUS", "NGPUS", "DEVICE", "PORT", "HOST", "N",
})


def placeholders(step: str) -> list[str]:
    """Unfilled fields and upper-case tokens left to substitute, in a step as a report shows it."""
    left = re.findall(r"\{[a-z_]+\}", step)
    for i, part in enumerate(step.split("`")):
        words = set(TOKEN.findall(re.sub(r"<[^<>]*>", "", part)))
        left += sorted(words - COMMAND_WORDS) if i % 2 else sorted(words & OLD_TOKENS)
    return left


def full_subject() -> remedies.Subject:
    return remedies.Subject(node="gpu-1", inventory=INVENTORY, run_dir="/runs/verify-1", service="chrony",
                            interface="enp154s0np0", peer="gpu-2", hca="mlx5_3", gpu="5", port="1",
                            rail="enp64s0np0")


def one_finding(result: CheckResult, meta: dict | None = None) -> list[str]:
    report = Report(meta={"inventory": INVENTORY, **(meta or {})}, nodes=["gpu-1", "gpu-2"], results=[result])
    (f,) = findings(report)
    return list(f.remedy)


# --- the table ---------------------------------------------------------------------------------


def test_every_field_a_template_uses_is_one_a_failure_can_fill():
    known = {f.name for f in fields(remedies.Subject)}
    assert set(remedies.FIELDS) == known
    for r in (*remedies._REMEDIES, remedies.UNREACHABLE):
        used = set(re.findall(r"\{([a-z_]+)\}", " ".join(r.templates)))
        assert used <= known, (r.check_id, used - known)


def test_no_step_leaves_a_placeholder_filled_or_not():
    for r in (*remedies._REMEDIES, remedies.UNREACHABLE):
        for subject in (remedies.Subject(), full_subject()):
            for step in r.filled(subject):
                assert not placeholders(step), (r.check_id, placeholders(step), step)


@pytest.mark.parametrize("check_id", sorted(remedies.SUBJECTS))
def test_a_check_with_a_structured_subject_names_it_in_its_steps(check_id):
    assert check_id in checks.CHECKS
    subject = full_subject()
    steps = " ".join(remedies.REMEDIES[check_id].filled(subject))
    assert not placeholders(steps), placeholders(steps)
    for name in ("node", *remedies.SUBJECTS[check_id]):
        assert getattr(subject, name) in steps, (check_id, name)
        # Given, a field is never said in words.
        assert remedies.FIELDS[name] not in steps, (check_id, name)


def test_the_doc_says_in_words_what_to_substitute():
    text = remedies.markdown()
    assert "<the failing node>" in text and "<the inventory the run used>" in text
    assert "systemctl status <the service the check names>" in text
    assert not re.search(r"\{[a-z_]+\}", text)


# --- a failing result's steps, in every report -------------------------------------------------


def test_a_failed_service_names_the_service_the_node_and_the_inventory():
    steps = one_finding(CheckResult("gpu-1", "GC-SYS-003", "failed", "chrony is inactive", param="chrony",
                                    log="logs/checks/gpu-1/GC-SYS-003[chrony].log"))
    assert steps[0] == ("Run `systemctl status chrony` and `journalctl -u chrony -b --no-pager | tail -50` "
                        "on gpu-1.")
    assert f"`gpucluster converge --inventory {INVENTORY} --limit gpu-1`" in steps[1]
    assert not [p for s in steps for p in placeholders(s)]


def test_a_fabric_interface_failure_names_the_interface_it_judged():
    steps = one_finding(CheckResult("gpu-1", "GC-NET-001", "failed", "enp154s0np0 is DOWN",
                                    {"interface": "enp154s0np0", "operstate": "DOWN"}))
    assert "`ip -s link show enp154s0np0` on gpu-1" in steps[0]
    assert "`ethtool enp154s0np0`" in steps[1]
    assert f"--inventory {INVENTORY} --limit gpu-1 --tags rdma_fabric" in steps[2]
    assert not [p for s in steps for p in placeholders(s)]


def test_a_gpudirect_failure_names_the_gpu_and_hca_that_fell_short():
    figures = {"rdma_floor_gbps": 300.0, "gdr_gbps_gpu0_mlx5_0": 390.0, "gdr_gbps_gpu5_mlx5_3": 12.0}
    steps = one_finding(CheckResult("gpu-1", "GC-RDMA-002", "failed", "GPU 5 over mlx5_3 to gpu-2: 12 Gb/s",
                                    figures))
    assert "`ib_write_bw -d mlx5_3 --use_cuda=5 --report_gbits -F -D 5 <fabric address of the peer the " \
           "message names>` on gpu-1" in steps[0]
    assert not [p for s in steps for p in placeholders(s)]


def test_a_slow_pair_names_the_peer_and_the_node():
    figures = {"floor_gbps": 10.0, "pair_busbw_gbps_gpu-2": 0.002, "pair_busbw_gbps_gpu-3": 11.0}
    steps = one_finding(CheckResult("gpu-1", "GC-AR-003", "failed", "slow with gpu-2", figures))
    assert "`iperf3 -s` on gpu-2, `iperf3 -c <fabric address of gpu-2> -P 8 -t 10` on gpu-1" in steps[0]


def test_the_same_failure_on_several_nodes_limits_the_converge_to_them_all():
    report = Report(meta={"inventory": INVENTORY}, nodes=["gpu-1", "gpu-2"], results=[
        CheckResult(n, "GC-GPU-005", "failed", "persistence mode is off") for n in ("gpu-1", "gpu-2")])
    (f,) = findings(report)
    assert f.remedy[0].endswith("on gpu-1 and gpu-2.")
    assert f"--inventory {INVENTORY} --limit gpu-1,gpu-2 --tags nvidia_driver" in f.remedy[1]


def test_a_cluster_level_failure_says_which_node_in_words():
    steps = one_finding(CheckResult(CLUSTER, "GC-K8S-001", "failed", "gpu-2 is NotReady"))
    assert "`kubectl describe node <the failing node>`" in steps[0]
    assert CLUSTER not in " ".join(steps)


def test_an_unknown_interface_is_said_in_words():
    # OCI's ports are the provider's: GC-NET-001 records no interface of its own there.
    steps = one_finding(CheckResult("gpu-1", "GC-NET-001", "failed", "rdma3: no address"))
    assert "`ip -s link show <the node's fabric interface, gpucluster_fabric_interface in the inventory>`" \
           in steps[0]


def test_every_report_of_a_run_names_the_node_its_inventory_and_run_folder(tmp_path: Path):
    report = Report(meta={"inventory": INVENTORY, "unreachable": {"gpu-2": "Connection timed out"}},
                    nodes=["gpu-1", "gpu-2"], results=[
                        CheckResult("gpu-1", "GC-SYS-003", "failed", "nvidia-dcgm is failed", param="nvidia-dcgm"),
                        CheckResult("gpu-2", "GC-OS-001", "error", "node unreachable: Connection timed out")])
    write_all(report, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "`systemctl status nvidia-dcgm`" in md and f"--inventory {INVENTORY} --limit gpu-1`" in md
    assert f"`ssh -F {tmp_path}/ssh/probe/ssh_config gpu-2 true`" in md
    html = (tmp_path / "summary.html").read_text()
    assert "<code>systemctl status nvidia-dcgm</code>" in html
    assert f"<code>ssh -F {tmp_path}/ssh/probe/ssh_config gpu-2 true</code>" in html
    data = json.loads((tmp_path / "results.json").read_text())
    steps = [s for f in data["findings"] for s in f["remedy"]["steps"]]
    assert any("journalctl -u nvidia-dcgm" in s for s in steps)
    assert not [p for s in steps for p in placeholders(s)]
    # Read back, the report names the same run folder.
    again = findings(Report.from_json(data))
    assert any(f"ssh -F {tmp_path}/ssh/probe/ssh_config gpu-2" in s for f in again for s in f.remedy)


def test_junits_next_step_names_the_node_and_service():
    r = CheckResult("gpu-1", "GC-SYS-003", "failed", "chrony is inactive", param="chrony")
    out = _system_out(r, [], None)
    assert "next step: Run `systemctl status chrony` and `journalctl -u chrony -b --no-pager | tail -50` on gpu-1." \
        in out


def test_markdown_of_a_failed_check_has_no_placeholder(tmp_path: Path):
    report = Report(meta={"inventory": INVENTORY, "run_dir": str(tmp_path)}, nodes=["gpu-1"], results=[
        CheckResult("gpu-1", "GC-NET-002", "failed", "enp154s0np0 MTU 1500, the spec says 9000",
                    {"interface": "enp154s0np0", "mtu": 1500})])
    text = markdown(report)
    steps = text.split("- Next steps")[1].split("\n## ")[0]
    assert "`ip link show enp154s0np0` on gpu-1" in steps
    assert not [p for line in steps.splitlines() for p in placeholders(line)]


def test_a_checks_own_log_names_the_service_the_node_and_the_inventory(tmp_path: Path):
    from gpucluster.conformance.plugin import write_check_logs

    r = CheckResult("gpu-1", "GC-SYS-003", "failed", "chrony is inactive", param="chrony",
                    log="logs/checks/gpu-1/GC-SYS-003[chrony].log")
    write_check_logs(tmp_path, [r], {}, INVENTORY)
    text = (tmp_path / r.log).read_text()
    assert "  1. Run `systemctl status chrony` and `journalctl -u chrony -b --no-pager | tail -50` on gpu-1." in text
    assert f"--inventory {INVENTORY} --limit gpu-1" in text


def test_a_port_not_active_names_the_device_and_port_that_failed():
    figures = {"failed_ports": ["mlx5_3:1", "mlx5_9:1"]}
    steps = one_finding(CheckResult("gpu-1", "GC-NET-004", "failed", "not ACTIVE at 400 Gb/s: mlx5_3/ports/1: "
                                    "DOWN 400 Gb/s; mlx5_9/ports/1: ACTIVE 200 Gb/s", figures))
    assert steps[0].startswith("Run `ibstat mlx5_3 1` (or `cat /sys/class/infiniband/mlx5_3/ports/1/{state,rate}`) "
                               "on gpu-1, and the same for each other port the message names.")
    assert "`mlxlink -d mlx5_3`" in steps[2]
    assert not [p for s in steps for p in placeholders(s)]
    # Read back from results.json (figures as JSON gives them), the same names.
    again = CheckResult.from_json(json.loads(json.dumps(
        CheckResult("gpu-1", "GC-NET-004", "failed", "x", figures).to_json())))
    assert remedies.subject(again) == remedies.Subject(node="gpu-1", hca="mlx5_3", port="1")


def test_a_rail_failure_names_the_nodes_own_netdev_on_the_rail():
    configured = one_finding(CheckResult("gpu-1", "GC-RAIL-001", "failed", "enp64s0np0: MTU 1500",
                                         {"rails": 2, "failed_rails": ["enp64s0np0"]}))
    assert ("run `networkctl status enp64s0np0`, `ip addr show dev enp64s0np0`, `ip rule` and "
            "`ip route show table all dev enp64s0np0` on gpu-1.") in configured[0]
    reach = one_finding(CheckResult("gpu-1", "GC-RAIL-002", "failed", "full-size frames lost on rail(s) rail1",
                                    {"failed_rails": ["enp64s0np0"]}))
    assert "`ping -M do -s <fabric MTU minus 28> -I enp64s0np0 <the peer's address on the rail>` on gpu-1" in reach[0]
    assert not [p for s in configured + reach for p in placeholders(s)]


def test_a_slow_pair_names_the_interface_its_runs_went_over():
    figures = {"floor_gbps": 10.0, "pair_busbw_gbps_gpu-2": 0.002, "interface": "enp71s0"}
    steps = one_finding(CheckResult("gpu-1", "GC-AR-003", "failed", "slow with gpu-2", figures))
    assert ("On gpu-1 look at `ip -s link show enp71s0` (errors, drops) and `tc qdisc show dev enp71s0` (a shaping "
            "or netem qdisc left behind: `tc qdisc del dev enp71s0 root`), and on gpu-2 at its interface on the "
            "same network.") == steps[1]
