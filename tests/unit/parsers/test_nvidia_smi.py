"""nvidia-smi parser: published -q, CSV, nvlink, topo and table captures, and failing fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput
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


@pytest.mark.parametrize(
    ("name", "links", "speed"), [("nvidia_smi_05.txt", 12, 25.0), ("nvidia_smi_06.txt", 18, 26.562)]
)
def test_nvlink_status(sample: Sample, name: str, links: int, speed: float) -> None:
    r = parse(sample(name))
    assert r.kind == "nvlink" and r.status == "ok"
    [g] = r.gpus
    assert g["active_links"] == links and g["inactive_links"] == 0
    assert {link["speed_gbytes_per_s"] for link in g["links"]} == {speed}


def test_nvlink_inactive_links() -> None:
    text = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-abc)\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n"
    [g] = parse(text).gpus
    assert (g["active_links"], g["inactive_links"]) == (1, 1)
    assert g["links"][1] == {"link": 1, "state": "inactive", "speed_gbytes_per_s": None}


def test_topo_matrix_with_ansi_header(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_08.txt"))
    assert r.kind == "topo" and r.status == "ok"
    assert r.matrix == {
        "GPU0": {"GPU0": "X", "CPU Affinity": "0-19", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    }
    assert r.gpus[0]["cpu_affinity"] == "0-19"


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


def test_query_with_no_gpu_is_incomplete() -> None:
    r = parse("\n==============NVSMI LOG==============\n\nDriver Version : 535.1\n")
    assert r.status == "incomplete"


def test_not_nvidia_smi() -> None:
    with pytest.raises(NotToolOutput):
        parse("| Diagnostic | Result |\n")


# ---- hostile and broken output -----------------------------------------------------------

# QUERY_BAD made healthy: the same layout with every counter zero and nothing pending.
QUERY_GOOD = (
    QUERY_BAD.replace("DRAM Uncorrectable            : 2", "DRAM Uncorrectable            : 0")
    .replace("Uncorrectable Error               : 2", "Uncorrectable Error               : 0")
    .replace("Pending                           : Yes", "Pending                           : No")
    + "    Processes                             : None\n"
)


def test_query_good_fixture_is_ok() -> None:
    assert parse(QUERY_GOOD).status == "ok"


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


HANDLE_ERROR = "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n"


@pytest.mark.parametrize("name", ["nvidia_smi_10.txt", "nvidia_smi_01.txt", "nvidia_smi_02.txt"])
def test_device_handle_error_fails(sample: Sample, name: str) -> None:
    r = parse(HANDLE_ERROR + sample(name))
    assert r.status == "failed"
    assert any("could not reach a GPU" in n for n in r.notes)


@pytest.mark.parametrize(
    "text",
    [
        HANDLE_ERROR,
        "Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ],
)
def test_only_an_error_is_failed_not_bad_input(text: str) -> None:
    r = parse(text)
    assert (r.kind, r.status) == ("error", "failed")


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


@pytest.mark.parametrize(("value", "status"), [("ERR!", "failed"), ("nan", "incomplete"), ("-1", "incomplete")])
def test_csv_ecc_counter_that_is_not_a_count(value: str, status: str) -> None:
    text = (
        "index, name, ecc.errors.uncorrected.volatile.total, remapped_rows.failure\n"
        f"0, NVIDIA A100-SXM4-80GB, {value}, No\n"
    )
    assert parse(text).status == status


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


def test_csv_row_cut_short_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_02.txt")
    row = text.splitlines()[1]
    r = parse(text.rstrip("\n") + "\n" + row[:200])  # a second GPU's row cut after 200 characters
    assert r.status == "incomplete" and len(r.gpus) == 1


def test_table_without_processes_box_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_10.txt")
    assert parse(text[: text.index("| Processes:")]).status == "incomplete"


def test_topo_without_legend_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_08.txt")
    assert parse(text[: text.index("Legend")]).status == "incomplete"


@pytest.mark.parametrize("bad_first", [True, False])
def test_query_snapshots_merge_worst_first(bad_first: bool) -> None:
    bad = QUERY_BAD + "    Processes                             : None\n"
    r = parse(bad + QUERY_GOOD if bad_first else QUERY_GOOD + bad)
    assert r.status == "failed"
    [g] = r.gpus  # one GPU, seen twice
    assert g["ecc_volatile_uncorrectable"] == 2 and g["remapped_rows_pending"] is True


@pytest.mark.parametrize("bad_first", [True, False])
def test_csv_snapshots_merge_worst_first(bad_first: bool) -> None:
    header = "index, pci.bus_id, ecc.errors.uncorrected.volatile.total, remapped_rows.pending\n"
    good, bad = "0, 00000000:07:00.0, 0, No\n", "0, 00000000:07:00.0, 3, Yes\n"
    r = parse(header + (bad + header + good if bad_first else good + header + bad))
    assert r.status == "failed"
    [g] = r.gpus
    assert g["ecc.errors.uncorrected.volatile.total"] == 3 and g["remapped_rows.pending"] == "Yes"


@pytest.mark.parametrize("bad_first", [True, False])
def test_table_snapshots_keep_the_ecc_errors(sample: Sample, bad_first: bool) -> None:
    # `nvidia-smi -l 5` prints one table after the other.
    good = sample("nvidia_smi_10.txt")
    bad = good.replace("Off |                    0 |", "Off |                    4 |")
    r = parse(bad + good if bad_first else good + bad)
    assert r.status == "failed"
    [g] = r.gpus
    assert g["ecc_volatile_uncorrectable"] == 4


def test_csv_field_over_the_csv_module_limit_is_not_an_exception(sample: Sample) -> None:
    text = sample("nvidia_smi_02.txt").replace("NVIDIA H100 80GB HBM3", "x" * 200_000, 1)
    assert parse(text).status == "incomplete"


@pytest.mark.parametrize("block", ["Volatile", "Aggregate"])
def test_query_uncorrectable_count_alone_fails(block: str) -> None:
    lines = QUERY_GOOD.split("\n")
    at = lines.index(f"        {block}") + 4  # its DRAM Uncorrectable line
    lines[at] = lines[at].replace(": 0", ": 5")
    r = parse("\n".join(lines))
    assert r.status == "failed"
    assert any(f"5 {block.lower()} uncorrectable ECC errors" in n for n in r.notes)
