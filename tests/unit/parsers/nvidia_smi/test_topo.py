"""nvidia-smi topo -m (gpucluster.parsers.nvidia_smi.topo): a published capture, cut short."""

from __future__ import annotations

from collections.abc import Callable

from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


def test_topo_matrix_with_ansi_header(sample: Sample) -> None:
    r = parse(sample("nvidia_smi_08.txt"))
    assert r.kind == "topo" and r.status == "ok"
    assert r.matrix == {
        "GPU0": {"GPU0": "X", "CPU Affinity": "0-19", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    }
    assert r.gpus[0]["cpu_affinity"] == "0-19"


def test_topo_without_legend_is_incomplete(sample: Sample) -> None:
    text = sample("nvidia_smi_08.txt")
    assert parse(text[: text.index("Legend")]).status == "incomplete"
