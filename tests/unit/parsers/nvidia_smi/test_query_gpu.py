"""nvidia-smi --query-gpu CSV (gpucluster.parsers.nvidia_smi.query_gpu): published captures and failing fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


@pytest.mark.parametrize(
    ("name", "product", "mib"),
    [("nvidia_smi_02.txt", "NVIDIA H100 80GB HBM3", 81559), ("nvidia_smi_09.txt", "NVIDIA H200", 143771)],
)
def test_csv_query(sample: Sample, name: str, product: str, mib: int) -> None:
    r = parse(sample(name))
    assert r.kind == "csv" and r.status == "ok"
    [g] = r.gpus
    assert len(g) == 212
    assert g["name"] == product and g["index"] == 0
    assert g["memory.total"] == mib  # "memory.total [MiB]" / "81559 MiB"
    assert g["driver_version"] == "590.48.01" and r.driver_version == "590.48.01"
    assert g["fan.speed"] is None  # [N/A]
    assert g["display_mode"] is None  # [Requested functionality has been deprecated]
    assert g["clocks_event_reasons.supported"] == "0x00000000000001FF"  # a bitmask stays text
    assert g["remapped_rows.pending"] == "No"
    assert g["ecc.errors.uncorrected.volatile.total"] == 0


def test_csv_under_load(sample: Sample) -> None:
    [g] = parse(sample("nvidia_smi_07.txt")).gpus
    assert g["utilization.gpu"] == 100
    assert g["power.draw"] == 631.95
    assert g["temperature.gpu"] == 59


def test_csv_with_remap_failure_fails() -> None:
    text = (
        "index, name, memory.total [MiB], ecc.errors.uncorrected.volatile.total, remapped_rows.failure\n"
        "0, NVIDIA A100-SXM4-80GB, 81920 MiB, 0, No\n"
        "1, NVIDIA A100-SXM4-80GB, 81920 MiB, 3, Yes\n"
    )
    r = parse(text)
    assert [g["memory.total"] for g in r.gpus] == [81920, 81920]
    assert r.status == "failed"
    assert any(n.startswith("GPU 1:") for n in r.notes)


@pytest.mark.parametrize(("value", "status"), [("ERR!", "failed"), ("nan", "incomplete"), ("-1", "incomplete")])
def test_csv_ecc_counter_that_is_not_a_count(value: str, status: str) -> None:
    text = (
        "index, name, ecc.errors.uncorrected.volatile.total, remapped_rows.failure\n"
        f"0, NVIDIA A100-SXM4-80GB, {value}, No\n"
    )
    assert parse(text).status == status


def test_csv_row_cut_short_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_02.txt")
    row = text.splitlines()[1]
    r = parse(text.rstrip("\n") + "\n" + row[:200])  # a second GPU's row cut after 200 characters
    assert r.status == "incomplete" and len(r.gpus) == 1


@pytest.mark.parametrize("bad_first", [True, False])
def test_csv_snapshots_merge_worst_first(bad_first: bool) -> None:
    header = "index, pci.bus_id, ecc.errors.uncorrected.volatile.total, remapped_rows.pending\n"
    good, bad = "0, 00000000:07:00.0, 0, No\n", "0, 00000000:07:00.0, 3, Yes\n"
    r = parse(header + (bad + header + good if bad_first else good + header + bad))
    assert r.status == "failed"
    [g] = r.gpus
    assert g["ecc.errors.uncorrected.volatile.total"] == 3 and g["remapped_rows.pending"] == "Yes"


def test_csv_field_over_the_csv_module_limit_is_not_an_exception(sample: Sample) -> None:
    text = sample("nvidia_smi_02.txt").replace("NVIDIA H100 80GB HBM3", "x" * 200_000, 1)
    assert parse(text).status == "incomplete"
