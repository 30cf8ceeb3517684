"""nvidia-smi -q (gpucluster.parsers.nvidia_smi.query): published captures and failing fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


def test_query_h100(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_01.txt"))
    assert r.kind == "query" and r.status == "ok"
    assert (r.driver_version, r.cuda_version) == ("590.48.01", "13.1")
    [g] = r.gpus
    assert g["index"] == 0 and g["bus_id"] == "00000000:00:09.0"
    assert g["product_name"] == "NVIDIA H100 80GB HBM3"
    assert g["memory_total_mib"] == 81559
    assert g["persistence_mode"] == "Enabled" and g["mig_mode_current"] == "Disabled"
    assert g["ecc_mode_current"] == "Enabled"
    assert g["ecc_volatile_uncorrectable"] == 0 and g["ecc_aggregate_uncorrectable"] == 0
    assert g["retired_pages_single_bit"] is None and g["retired_pages_pending"] is None  # N/A on H100
    assert g["remapped_rows_pending"] is False and g["remapped_rows_failure"] is False
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["pcie_width_current"], g["pcie_width_max"]) == (
        5,
        5,
        16,
        16,
    )
    assert g["clocks_event_reasons_active"] == ["Idle"]
    assert g["temperature_c"] == 41
    assert g["power_draw_w"] == 69.62 and g["power_limit_w"] == 700.0
    assert g["fabric_state"] == "Completed"


def test_query_retired_pages_8_gpus(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_04.txt"))
    assert r.kind == "query" and r.status == "ok"
    assert r.driver_version == "535.86.10" and r.cuda_version == "12.2"
    assert [g["bus_id"] for g in r.gpus] == [f"0000000{i}:00:00.0" for i in range(1, 9)]
    assert all(g["retired_pages_single_bit"] == 0 and g["retired_pages_double_bit"] == 0 for g in r.gpus)
    assert all(g["retired_pages_pending"] is False for g in r.gpus)
    assert r.gpus[0]["product_name"] is None  # -d PAGE_RETIREMENT shows nothing else


# An A100 -q excerpt in the driver-535 layout (SRAM/DRAM counters), with a pending remap.
QUERY_BAD = """
==============NVSMI LOG==============

Driver Version                            : 535.104.12
CUDA Version                              : 12.2

Attached GPUs                             : 1
GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 2
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 40
            DRAM Uncorrectable            : 2
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
"""


# QUERY_BAD made healthy: the same layout with every counter zero and nothing pending.
QUERY_GOOD = (
    QUERY_BAD.replace("DRAM Uncorrectable            : 2", "DRAM Uncorrectable            : 0")
    .replace("Uncorrectable Error               : 2", "Uncorrectable Error               : 0")
    .replace("Pending                           : Yes", "Pending                           : No")
    + "    Processes                             : None\n"
)


def test_query_uncorrectable_and_pending_remap_fail() -> None:
    r = parse(QUERY_BAD)
    [g] = r.gpus
    assert g["ecc_volatile_uncorrectable"] == 2 and g["ecc_aggregate_uncorrectable"] == 2
    assert g["remapped_rows_pending"] is True
    assert r.status == "failed"
    assert any("row remapping pending" in n for n in r.notes)


def test_query_old_double_bit_layout() -> None:
    text = QUERY_BAD.replace(
        """            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 2
""",
        """            Single Bit
                Device Memory             : 0
                Total                     : 0
            Double Bit
                Device Memory             : 1
                Total                     : 1
""",
    )
    assert parse(text).gpus[0]["ecc_volatile_uncorrectable"] == 1


def test_query_with_no_gpu_is_incomplete() -> None:
    r = parse("\n==============NVSMI LOG==============\n\nDriver Version : 535.1\n")
    assert r.status == "incomplete"


def test_query_good_fixture_is_ok() -> None:
    assert parse(QUERY_GOOD).status == "ok"


@pytest.mark.parametrize(("value", "status"), [("ERR!", "failed"), ("nan", "incomplete"), ("-1", "incomplete"),
                                               ("1e3", "incomplete"), ("Unknown Error", "incomplete")])  # fmt: skip
def test_query_ecc_counter_that_is_not_a_count(value: str, status: str) -> None:
    text = QUERY_GOOD.replace("DRAM Uncorrectable            : 0", f"DRAM Uncorrectable            : {value}", 1)
    r = parse(text)
    assert r.status == status
    assert r.gpus[0]["ecc_volatile_uncorrectable"] is None  # unknown, not zero


def test_query_correctable_counter_unreadable_is_incomplete() -> None:
    r = parse(QUERY_GOOD.replace("DRAM Correctable              : 12", "DRAM Correctable              : nan", 1))
    assert r.status == "incomplete"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("Unrepairable Memory", "Yes"),
        ("Channel Repair Pending", "Yes"),
        ("SRAM Threshold Exceeded", "Yes"),
    ],
)
def test_query_590_repair_flags_fail(sample: Sample, key: str, value: str) -> None:
    text = sample("nvidia_smi_01.txt")
    line = next(line for line in text.splitlines() if line.strip().startswith(key))
    r = parse(text.replace(line, line.replace(": No", f": {value}")))
    assert r.status == "failed"


def test_query_recovery_action_fails(sample: Sample) -> None:
    key = "GPU Recovery Action                                : "
    text = sample("nvidia_smi_01.txt").replace(key + "None", key + "Reset")
    assert parse(text).status == "failed"


def test_query_fewer_blocks_than_attached_is_incomplete() -> None:
    key = "Attached GPUs                             : "
    r = parse(QUERY_GOOD.replace(key + "1", key + "2"))
    assert r.status == "incomplete"


def test_query_block_cut_before_processes_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_01.txt")
    r = parse(text[: text.index("    Fabric")])
    assert r.status == "incomplete"
    assert any("Processes" in n for n in r.notes)


def test_query_page_retirement_only_is_not_held_to_processes(sample: Sample) -> None:
    assert parse(sample("nvidia_smi_04.txt")).status == "ok"  # -d PAGE_RETIREMENT prints no Processes


@pytest.mark.parametrize("bad_first", [True, False])
def test_query_snapshots_merge_worst_first(bad_first: bool) -> None:
    bad = QUERY_BAD + "    Processes                             : None\n"
    r = parse(bad + QUERY_GOOD if bad_first else QUERY_GOOD + bad)
    assert r.status == "failed"
    [g] = r.gpus  # one GPU, seen twice
    assert g["ecc_volatile_uncorrectable"] == 2 and g["remapped_rows_pending"] is True


@pytest.mark.parametrize("block", ["Volatile", "Aggregate"])
def test_query_uncorrectable_count_alone_fails(block: str) -> None:
    lines = QUERY_GOOD.split("\n")
    at = lines.index(f"        {block}") + 4  # its DRAM Uncorrectable line
    lines[at] = lines[at].replace(": 0", ": 5")
    r = parse("\n".join(lines))
    assert r.status == "failed"
    assert any(f"5 {block.lower()} uncorrectable ECC errors" in n for n in r.notes)
