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
