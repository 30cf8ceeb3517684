"""nvidia-smi nvlink -s and -e (gpucluster.parsers.nvidia_smi.nvlink): published captures and fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


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


def test_nvlink_errors_counters_with_elided_links_are_incomplete(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_12.txt"))
    assert r.kind == "nvlink_errors" and r.status == "incomplete"  # links 2-16 elided ('[...]')
    [g] = r.gpus
    assert g["links"][0] == {"link": 0, "counters": {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 0}}
    assert [link["link"] for link in g["links"]] == [0, 1, 17]


@pytest.mark.parametrize(("value", "status"), [("891", "ok"), ("nan", "incomplete"), ("ERR!", "failed")])
def test_nvlink_errors_judges_only_whether_a_counter_reads(value: str, status: str) -> None:
    # How many errors a link may show is the check's limit, not the parser's.
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abc)\n\t Link 0: Replay Errors: 0\n\t Link 0: CRC Errors: {}\n"
    r = parse(text.format(value))
    assert (r.kind, r.status) == ("nvlink_errors", status)
