"""nvidia-smi's default table (gpucluster.parsers.nvidia_smi.table): a published capture and failing fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


def test_default_table_h200(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_10.txt"))
    assert r.kind == "table" and r.status == "ok"
    assert (r.driver_version, r.cuda_version) == ("590.48.01", "13.1")
    [g] = r.gpus
    assert g["name"] == "NVIDIA H200" and g["persistence_mode"] == "On"
    assert g["bus_id"] == "00000000:83:00.0"
    assert (g["power_draw_w"], g["power_limit_w"]) == (77.0, 700.0)
    assert (g["memory_used_mib"], g["memory_total_mib"]) == (0, 143771)
    assert g["temperature_c"] == 28 and g["mig_mode_current"] == "Disabled"
    assert g["ecc_volatile_uncorrectable"] == 0


def test_default_table_with_ecc_errors_fails(sample: Sample) -> None:
    text = sample("nvidia_smi_10.txt").replace("Off |                    0 |", "Off |                    4 |")
    assert parse(text).status == "failed"


def test_table_err_readings_fail(sample: Sample) -> None:
    # How the default table shows a GPU whose sensors NVML cannot read.
    text = sample("nvidia_smi_10.txt").replace("| N/A   28C    P0             77W /  700W |",
                                                "| ERR!  ERR!   ERR!         ERR! / ERR!  |")  # fmt: skip
    r = parse(text)
    assert r.status == "failed" and r.gpus
    assert any("ERR!" in n for n in r.notes)


def test_table_ecc_cell_err_fails(sample: Sample) -> None:
    text = sample("nvidia_smi_10.txt").replace("Off |                    0 |", "Off |                 ERR! |")
    assert parse(text).status == "failed"


def test_table_without_processes_box_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_10.txt")
    assert parse(text[: text.index("| Processes:")]).status == "incomplete"


@pytest.mark.parametrize("bad_first", [True, False])
def test_table_snapshots_keep_the_ecc_errors(sample: Sample, bad_first: bool) -> None:
    # `nvidia-smi -l 5` prints one table after the other.
    good = sample("nvidia_smi_10.txt")
    bad = good.replace("Off |                    0 |", "Off |                    4 |")
    r = parse(bad + good if bad_first else good + bad)
    assert r.status == "failed"
    [g] = r.gpus
    assert g["ecc_volatile_uncorrectable"] == 4
