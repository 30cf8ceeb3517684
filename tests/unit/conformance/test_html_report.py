"""summary.html from the Jinja2 templates: banner, figures beside their floors, skipped checks by
reason, and the bandwidth plot (log size axis labelled at every size, markers, floors)."""

from __future__ import annotations

import itertools
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpucluster.conformance import html_report
from gpucluster.conformance.report_data import Report, Series
from gpucluster.conformance.reports import write_all
from gpucluster.conformance.verdict import CheckResult
from tests.unit.conformance.report_example import (
    INTER_FLOOR_GBPS,
    INTRA_FLOOR_GBPS,
    SIZES,
    SKIP_NO_CEPH,
    example_report,
    passing_report,
)

REPO = Path(__file__).resolve().parents[3]
SVG = "{http://www.w3.org/2000/svg}"


def svgs(page: str) -> list[ET.Element]:
    """Every inline plot, parsed as XML (a malformed one fails here)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def floors(svg: ET.Element) -> list[float]:
    return [float(x.get("data-floor-gbps")) for x in svg.iter(f"{SVG}line") if x.get("class") == "floor-line"]


def texts(svg: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("class") == cls]


def test_banner_says_pass_or_fail():
    fail = html_report.render(example_report())
    assert re.search(r'<div id="verdict-banner" class="banner fail"[^>]*>\s*FAIL<small>2 of 3 node', fail)
    ok = html_report.render(passing_report())
    assert re.search(r'<div id="verdict-banner" class="banner pass"[^>]*>\s*PASS<small>1 of 1 node', ok)
    interrupted = passing_report()
    interrupted.meta["interrupted"] = True
    page = html_report.render(interrupted)
    assert 'class="banner fail"' in page and "<b>INTERRUPTED</b>" in page


def test_the_banner_counts_hosts_not_the_row_of_cluster_level_checks():
    report = Report(meta={"cluster": "k"}, nodes=["gpu-1"],
                    results=[CheckResult("gpu-1", "GC-OS-001", "passed"),
                             CheckResult("(cluster)", "GC-K8S-001", "failed", "node gpu-1 is NotReady")])
    page = html_report.render(report)
    assert re.search(r'class="banner fail"[^>]*>\s*FAIL<small>1 of 1 node\(s\) pass', page)


def test_figures_beside_their_floors():
    page = html_report.render(example_report())
    table = re.search(r'<table id="figures">.*?</table>', page, re.S).group(0)
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]]
    assert ["gpu-1", "GC-AR-001", "bus bandwidth", "178 GB/s", "150 GB/s", "passed"] in rows
    assert ["gpu-3", "GC-AR-002", "bus bandwidth", "35.1 GB/s", "40 GB/s", "failed"] in rows
    assert ["gpu-3", "GC-AR-003", "pair bus bandwidth with gpu-2", "30.4 GB/s", "40 GB/s", "failed"] in rows
    # A floor is shown beside its figure, never as a measured figure of its own; words are not figures.
    assert not [r for r in rows if "floor" in r[2] or r[2] in ("engine", "pair status")]
    # A figure under its floor stands out, whatever its check's outcome (gpu-2's pair with the slow node).
    assert '<td class="num below">30.4 GB/s</td>' in table and '<td class="num">45 GB/s</td>' in table


def test_every_judged_figure_has_its_floor():
    # Pair bandwidth, burn TFLOP/s, RDMA (ib_write_bw and GPUDirect) and host-device copies.
    figures = {"GC-AR-003": {"pair_busbw_gbps_gpu-2": 45.0, "floor_gbps": 40.0},
               "GC-BURN-001": {"tflops_burn_torch_cuda:0_bf16": 640.0, "tflops_gpu-burn_gpu0_fp32": 48.0,
                               "burn_floor_tflops_bf16": 600.0, "burn_floor_tflops_fp32": 50.0},
               "GC-RDMA-001": {"min_hca_gbps_gpu-2": 390.0, "rdma_floor_gbps": 380.0},
               "GC-RDMA-002": {"gdr_gbps_gpu0_mlx5_0": 385.5, "rdma_floor_gbps": 380.0},
               "GC-PCIE-003": {"copy_gbps_h2d_gpu0": 55.2, "copy_gbps_d2h_gpu0": 54.9, "copy_floor_gbps": 50.0}}
    report = Report(meta={"cluster": "f"}, nodes=["gpu-1"],
                    results=[CheckResult("gpu-1", cid, "passed", figures=f) for cid, f in figures.items()])
    rows = {(r.check, r.name): (r.value, r.floor, r.below) for r in html_report.figure_rows(report)}
    assert rows == {
        ("GC-AR-003", "pair bus bandwidth with gpu-2"): ("45 GB/s", "40 GB/s", False),
        ("GC-BURN-001", "burn throughput cuda:0 bf16 (burn_torch)"): ("640 TFLOP/s", "600 TFLOP/s", False),
        ("GC-BURN-001", "burn throughput gpu0 fp32 (gpu-burn)"): ("48 TFLOP/s", "50 TFLOP/s", True),
        ("GC-RDMA-001", "RDMA write, slowest HCA, with gpu-2"): ("390 Gb/s", "380 Gb/s", False),
        ("GC-RDMA-002", "GPUDirect RDMA write, gpu0 on mlx5_0"): ("386 Gb/s", "380 Gb/s", False),
        ("GC-PCIE-003", "d2h copy gpu0"): ("54.9 GB/s", "50 GB/s", False),
        ("GC-PCIE-003", "h2d copy gpu0"): ("55.2 GB/s", "50 GB/s", False),
    }
    from gpucluster.conformance.reports import markdown

    assert "| gpu-1 | GC-BURN-001 | burn throughput gpu0 fp32 (gpu-burn) | **48 TFLOP/s** | 50 TFLOP/s | passed |" \
        in markdown(report)


def test_skipped_checks_are_grouped_by_reason_and_collapsed():
    page = html_report.render(example_report())
    groups = re.findall(r'<details class="skipped-group">\s*<summary>(.*?)</summary>(.*?)</details>', page, re.S)
    assert [summary for summary, _ in groups][:1] == [f"{SKIP_NO_CEPH} (3)"]
    ceph = groups[0][1]
    assert [li.split(":")[0] for li in re.findall(r"<li>(.*?)</li>", ceph)] == ["gpu-1", "gpu-2", "gpu-3"]
    assert "<details open" not in page
    assert "profile cpu-lab has no HCA (2)" in [s for s, _ in groups]


def test_everything_printed_is_escaped():
    report = Report(meta={"cluster": "<b>c</b>"}, nodes=["a"],
                    results=[CheckResult("a", "GC-OS-001", "failed", "<script>alert(1)</script> & more")])
    page = html_report.render(report)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<title>Conformance: &lt;b&gt;c&lt;/b&gt;</title>" in page


def test_one_plot_per_floor_each_run_drawn_once():
    page = html_report.render(example_report())
    intra, inter = svgs(page)
    assert [g.get("data-label") for g in _series(intra)] == ["intra:gpu-1"]
    # The all-node run is recorded by three nodes and each pair by two: one line each.
    assert [g.get("data-label") for g in _series(inter)] == [
        "inter:gpu-1,gpu-2,gpu-3", "pair:gpu-1,gpu-2", "pair:gpu-2,gpu-3"]
    assert floors(intra) == [INTRA_FLOOR_GBPS] and floors(inter) == [INTER_FLOOR_GBPS]
    assert "<h2>Intra-node all-reduce bus bandwidth</h2>" in page


def _series(svg: ET.Element) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if (g.get("class") or "").split()[:1] == ["series"]]


def test_plot_colours_follow_the_verdict():
    # gpu-3 is slow: the all-node run and the pair with it are under the 40 GB/s floor, the pair
    # gpu-1/gpu-2 and the intra-node run are not. A slow run is never in a healthy colour.
    intra, inter = svgs(html_report.render(example_report()))
    drawn = {g.get("data-label"): (g.get("stroke"), "slow" in (g.get("class") or "").split())
             for svg in (intra, inter) for g in _series(svg)}
    slow = {label for label, (_, is_slow) in drawn.items() if is_slow}
    assert slow == {"inter:gpu-1,gpu-2,gpu-3", "pair:gpu-2,gpu-3"}
    for label, (colour, is_slow) in drawn.items():
        assert colour in (html_report.SLOW_COLOURS if is_slow else html_report.HEALTHY_COLOURS), label
    assert not set(html_report.SLOW_COLOURS) & set(html_report.HEALTHY_COLOURS)
    legend = [e for e in inter.iter(f"{SVG}g") if "legend-entry" in (e.get("class") or "")]
    assert [("slow" in (e.get("class") or "")) for e in legend] == [True, False, True]


def test_a_run_is_judged_at_its_verdict_size_and_by_its_pair_figure():
    run = {"label": "pair:gpu-1+gpu-2@rail0", "points": [[1 << 20, 10.0], [1 << 30, 30.0], [1 << 31, 34.0]],
           "verdict_bytes": 1 << 30}
    r = CheckResult("gpu-1", "GC-AR-003", "passed", figures={"floor_gbps": 31.0, "series": [run]})
    assert html_report.judged_busbw(run, r) == 32.0  # the mean at and above the verdict size
    assert html_report.slow_runs([r]) == frozenset()
    r = CheckResult("gpu-1", "GC-AR-003", "passed", figures={"floor_gbps": 33.0, "series": [run]})
    assert html_report.slow_runs([r]) == {"pair:gpu-1+gpu-2@rail0"}
    cut = dict(run, verdict_bytes=1 << 32)  # the budget ended before the verdict size: not measured
    assert html_report.judged_busbw(cut, r) is None
    assert html_report.slow_runs([CheckResult("gpu-1", "GC-AR-003", "passed",
                                               figures={"floor_gbps": 1.0, "series": [cut]})]) == {cut["label"]}
    # No verdict size recorded: the pair figure the check recorded under the peer's name.
    old = {"label": "pair:gpu-1+gpu-2", "points": [[1 << 30, 50.0]]}
    r = CheckResult("gpu-2", "GC-AR-003", "failed", figures={"floor_gbps": 40.0, "pair_busbw_gbps_gpu-1": 35.0,
                                                             "series": [old]})
    assert html_report.judged_busbw(old, r) == 35.0 and html_report.slow_runs([r]) == {"pair:gpu-1+gpu-2"}


def _plot(series: list[Series], floors: list[float] | None = None) -> ET.Element:
    return ET.fromstring(html_report.svg_plot(series, floors, width=600, height=320))


def test_size_axis_is_log_scale_with_a_label_at_every_size():
    svg = _plot([Series("r", [(s, 10.0) for s in SIZES])])
    assert texts(svg, "x-tick") == ["4 KiB", "64 KiB", "1 MiB", "16 MiB", "256 MiB"]
    xs = [float(c.get("cx")) for c in svg.iter(f"{SVG}circle") if c.get("class") == "point"]
    steps = [b - a for a, b in itertools.pairwise(xs)]
    # Each size is 16 times the one before: equal steps on a log axis.
    assert len(xs) == 5 and all(s > 0 for s in steps) and max(steps) - min(steps) < 0.5


def test_bandwidth_axis_has_round_ticks_units_and_the_floor_inside():
    svg = _plot([Series("r", [(1024, 12.0), (1 << 20, 33.0)])], floors=[40.0])
    assert texts(svg, "y-tick") == ["0", "10", "20", "30", "40", "50"]
    titles = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "axis-title"]
    assert "bus bandwidth (GB/s)" in titles and "message size (log scale)" in titles
    ticks = {t.text: float(t.get("y")) - 4 for t in svg.iter(f"{SVG}text") if t.get("class") == "y-tick"}
    [floor] = [line for line in svg.iter(f"{SVG}line") if line.get("class") == "floor-line"]
    assert float(floor.get("y1")) == pytest.approx(ticks["40"], abs=0.2)
    assert "floor 40 GB/s" in [t.text for t in svg.iter(f"{SVG}text")]
    points = [c for c in svg.iter(f"{SVG}circle") if c.get("class") == "point"]
    assert float(points[1].get("cy")) == pytest.approx(ticks["30"] - (ticks["30"] - ticks["40"]) * 0.3, abs=0.2)


def test_no_legend_entry_without_data():
    svg = _plot([Series("empty", []), Series("zero-size only", [(0, 5.0)]), Series("real", [(4096, 1.0)])])
    legend = [t.text for t in svg.iter(f"{SVG}text") if t.text and t.text in ("empty", "zero-size only", "real")]
    assert legend == ["real"]
    assert "No all-reduce figures" in html_report.svg_plot([Series("empty", [])])
    assert "No all-reduce figures" in html_report.render(Report(meta={}, nodes=["a"], results=[]))


def test_many_sizes_get_slanted_labels():
    svg = _plot([Series("r", [(8 << i, 1.0) for i in range(20)])])
    ticks = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "x-tick"]
    assert len(ticks) == 20 and all(t.get("transform", "").startswith("rotate(-45") for t in ticks)
    assert ticks[0].text == "8 B" and ticks[-1].text == "4 MiB"


@pytest.mark.parametrize(("n", "text"), [(8, "8 B"), (4096, "4 KiB"), (3 << 19, "1.5 MiB"), (1 << 30, "1 GiB")])
def test_size_labels(n, text):
    assert html_report.size_label(n) == text


def test_numbers_read_well():
    assert [html_report.number(v) for v in (0, 9000, 35.14, 0.000412, 178.24)] == [
        "0", "9\u2009000", "35.1", "0.000412", "178"]
    assert html_report.nice_ticks(1.9) == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_write_all_writes_the_rendered_page(tmp_path):
    page = write_all(example_report(), tmp_path)["html"].read_text()
    assert page == html_report.render(example_report())
    assert "Prometheus textfile: published to gpu-1:" in page and len(svgs(page)) == 2


def test_the_templates_ship_as_package_data():
    # The package renders its report outside its checkout too (installed from a wheel).
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gpucluster"]
    folder = Path(html_report.__file__).parent / "templates"
    names = sorted(p.relative_to(REPO / "gpucluster").as_posix() for p in folder.glob("*.j2"))
    assert names == ["conformance/templates/plot.svg.j2", "conformance/templates/report.html.j2"]
    missing = [n for n in names if not any(fnmatch(n, g) for g in globs)]
    assert not missing, f"pyproject.toml [tool.setuptools.package-data] gpucluster does not ship {missing}"
