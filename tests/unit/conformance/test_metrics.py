"""The Prometheus textfiles: every written file is read back with prometheus_client's own parser,
and its families are held to Prometheus' naming rules (base units in the name, variable parts
in labels, ``cluster`` and ``node`` on every family)."""

from __future__ import annotations

import ast
import os
import re
import stat
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpucluster.conformance import metrics
from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import PROM_DIR, PROM_FILE, write_all
from gpucluster.conformance.verdict import CheckResult
from tests.unit.conformance.report_example import INTER_FLOOR_GBPS, example_report

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "tests" / "conformance"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parsed(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        assert family.name not in out, f"{family.name} appears twice"
        out[family.name] = [(s.labels, s.value) for s in family.samples]
    return out


def written(report: Report, tmp_path: Path) -> dict[str, Samples]:
    write_all(report, tmp_path)
    return {node: parsed((tmp_path / PROM_DIR / node / PROM_FILE).read_text()) for node in report.nodes}


def one(samples: Samples, family: str, **labels: str) -> float:
    found = [v for lab, v in samples[family] if all(lab.get(k) == want for k, want in labels.items())]
    assert len(found) == 1, (family, labels, samples.get(family))
    return found[0]


def test_every_file_parses_and_every_family_names_its_cluster_and_node(tmp_path):
    files = written(example_report(), tmp_path)
    assert set(files) == {"gpu-1", "gpu-2", "gpu-3"}
    for node, families in files.items():
        assert families, node
        for name, samples in families.items():
            assert re.fullmatch(r"gpucluster_conformance_[a-z0-9_]+", name), name
            assert samples, f"{name}: a family without samples"
            for labels, _ in samples:
                assert labels["cluster"] == "example" and labels["node"] == node, (name, labels)


def test_the_verdict_and_each_checks_outcome(tmp_path):
    files = written(example_report(), tmp_path)
    assert one(files["gpu-1"], metrics.PASS) == 1.0
    assert one(files["gpu-3"], metrics.PASS) == 0.0
    # The service is a label of its own beside the bare check ID.
    failed = one(files["gpu-3"], metrics.CHECK_OUTCOME, check="GC-SYS-003", service="nvidia-persistenced",
                 outcome="failed")
    assert failed == 1.0
    assert one(files["gpu-3"], metrics.CHECK_OUTCOME, check="GC-SYS-003", service="chrony", outcome="passed") == 1.0
    assert one(files["gpu-1"], metrics.CHECK_OUTCOME, check="GC-OS-001", service="", outcome="passed") == 1.0
    assert one(files["gpu-1"], metrics.CHECK_OUTCOME, check="GC-OS-001", service="", outcome="failed") == 0.0
    assert one(files["gpu-1"], metrics.CHECK_DURATION, check="GC-OS-001", service="") == pytest.approx(0.21)
    assert one(files["gpu-1"], metrics.LAST_RUN) == 1795446212.0


def test_figures_in_base_units_with_the_peer_as_a_label(tmp_path):
    files = written(example_report(), tmp_path)
    gpu2 = files["gpu-2"]
    pairs = "gpucluster_conformance_allreduce_pair_busbw_bytes_per_second"
    assert one(gpu2, pairs, peer="gpu-1", check="GC-AR-003") == pytest.approx(45.0e9)
    assert one(gpu2, pairs, peer="gpu-3", check="GC-AR-003") == pytest.approx(30.4e9)
    busbw = "gpucluster_conformance_allreduce_busbw_bytes_per_second"
    assert one(files["gpu-1"], busbw, check="GC-AR-001") == pytest.approx(178.2e9)
    assert one(files["gpu-1"], "gpucluster_conformance_allreduce_busbw_floor_bytes_per_second",
               check="GC-AR-002") == pytest.approx(INTER_FLOOR_GBPS * 1e9)
    assert one(gpu2, "gpucluster_conformance_clock_offset_seconds") == pytest.approx(0.000412)
    assert one(gpu2, "gpucluster_conformance_link_mtu_bytes") == 9000.0
    for samples in files.values():
        for name in samples:
            assert not [n for n in files if n.replace("-", "_") in name], f"{name}: a peer in a metric name"


def test_a_failed_measurement_still_exports_what_it_measured(tmp_path):
    gpu3 = written(example_report(), tmp_path)["gpu-3"]
    assert one(gpu3, metrics.CHECK_OUTCOME, check="GC-AR-003", service="", outcome="failed") == 1.0
    assert one(gpu3, "gpucluster_conformance_allreduce_pair_busbw_bytes_per_second",
               peer="gpu-2") == pytest.approx(30.4e9)
    assert one(gpu3, "gpucluster_conformance_allreduce_busbw_bytes_per_second",
               check="GC-AR-002") == pytest.approx(35.1e9)


def test_units_are_converted_to_bytes_seconds_and_flops(tmp_path):
    figures = {"min_hca_gbps_gpu-2": 100.0, "write_mib_s": 512.0, "read_latency_s": 0.02,
               "tflops_burn_torch_cuda:0_bf16": 400.5, "tflops_gpu-burn_gpu1_fp32": 50.0,
               "burn_torch_max_temp_c": 71, "gpu_burn_max_temp_c": None, "engines": "burn_torch",
               "osds": 3, "leap_status": "Normal", "mystery": 7, "nan": float("nan")}
    report = Report(meta={"cluster": "u"}, nodes=["n"],
                    results=[CheckResult("n", "GC-BURN-001", "failed", "too slow", figures)])
    n = written(report, tmp_path)["n"]
    assert one(n, "gpucluster_conformance_rdma_write_min_hca_bytes_per_second", peer="gpu-2") == 12.5e9
    assert one(n, "gpucluster_conformance_rados_bench_bytes_per_second", direction="write") == 512 * 2**20
    assert one(n, "gpucluster_conformance_rados_bench_latency_seconds", direction="read") == 0.02
    flops = "gpucluster_conformance_burn_floating_point_operations_per_second"
    assert one(n, flops, engine="burn_torch", device="cuda:0", precision="bf16") == pytest.approx(400.5e12)
    assert one(n, flops, engine="gpu-burn", device="gpu1", precision="fp32") == pytest.approx(50e12)
    # The engine is a label whatever key the figure came under; a None temperature is no sample.
    assert n["gpucluster_conformance_burn_gpu_max_temperature_celsius"] == [
        ({"cluster": "u", "node": "n", "check": "GC-BURN-001", "service": "", "engine": "burn_torch"}, 71.0)]
    assert one(n, "gpucluster_conformance_ceph_osds") == 3.0
    # Words, unknown keys and non-finite numbers are no samples: a unit never hides in a label value.
    values = {v for samples in n.values() for labels, _ in samples for v in labels.values()}
    assert not {"Normal", "mystery", "nan"} & values
    assert all(name.startswith("gpucluster_conformance_") for name in n)


def test_family_names_carry_their_base_unit():
    suffix = {"GB/s": "_bytes_per_second", "Gb/s": "_bytes_per_second", "MiB/s": "_bytes_per_second",
              "s": "_seconds", "B": "_bytes", "°C": "_celsius", "TFLOP/s": "_floating_point_operations_per_second",
              "IOPS": "_operations_per_second"}
    labels: dict[str, tuple[str, ...]] = {}
    for fig in metrics.FIGURES:
        if fig.unit:
            assert fig.family.endswith(suffix[fig.unit]), fig
        else:
            assert not re.search(r"_(bytes|seconds|gbps|mib|s)$", fig.family), fig
        assert not re.search(r"gbps|mib_s|_tflops|temp_c", fig.family), fig
        # Two keys feeding one family must give it the same labels.
        assert labels.setdefault(fig.family, fig.labels) == fig.labels, fig.family


def _recorded_keys() -> list[tuple[str, str]]:
    """(file:line, key) for every figure the conformance suite records; f-string parts become "x"."""
    out = []
    for path in sorted(SUITE.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        loops = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and isinstance(node.iter, ast.Tuple):
                first = node.target.elts[0]
                if isinstance(first, ast.Name):
                    loops[first.id] = [e.elts[0].value for e in node.iter.elts
                                       if isinstance(e, ast.Tuple) and isinstance(e.elts[0], ast.Constant)]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "figure"):
                continue
            arg = node.args[0]
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if isinstance(arg, ast.Constant):
                out.append((where, arg.value))
            elif isinstance(arg, ast.JoinedStr):
                out.append((where, "".join(v.value if isinstance(v, ast.Constant) else "x" for v in arg.values)))
            elif isinstance(arg, ast.Name) and arg.id in loops:
                out += [(where, key) for key in loops[arg.id]]
            else:
                pytest.fail(f"{where}: a figure key this test cannot read")
    return out


def test_every_figure_the_suite_records_is_a_family_or_a_word():
    keys = _recorded_keys()
    # The reader finds the figures of every module, the Ceph suite's bench among them.
    assert len(keys) > 30
    assert any(where.startswith("tests/conformance/ceph/test_ceph.py:") and key == "write_mib_s"
               for where, key in keys)
    unknown = [(where, key) for where, key in keys
               if metrics.classify(key) is None and key not in metrics.TEXT_FIGURES]
    assert not unknown, f"figures no family takes (add them to metrics.FIGURES or TEXT_FIGURES): {unknown}"
    both = [key for _, key in keys if metrics.classify(key) is not None and key in metrics.TEXT_FIGURES]
    assert not both


def test_the_textfile_is_replaced_whole_and_private(tmp_path, monkeypatch):
    path = tmp_path / PROM_FILE
    path.write_text("old 1\n")
    metrics.write_textfile(example_report(), "gpu-1", path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert parsed(path.read_text())[metrics.PASS][0][1] == 1.0
    assert [p.name for p in tmp_path.iterdir()] == [PROM_FILE]

    def broken(_registry: object, *args: object) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("prometheus_client.exposition.generate_latest", broken)
    before = path.read_text()
    with pytest.raises(OSError):
        metrics.write_textfile(example_report(), "gpu-3", path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == [PROM_FILE]
