"""summary.html in a real browser: headless Chromium through Selenium and chromium-driver.

The page is rendered from a synthetic run, opened from a file (no network), and checked where
only a browser can: the banner and the floor line are laid out, every measured size has its
marker, the size labels do not overlap, and the console shows no error.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (scripts/host-packages.txt). Without
them the test skips, except under CI (``CI=true``), where it fails and says what to install.
``GPUCLUSTER_REPORT_SCREENSHOTS=docs/img`` also saves a screenshot of each example run's page there
(report_example.SCREENSHOTS: a failing run with a slow node, a passing run, a run with skips).
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.conformance import html_report
from tests.unit.conformance.report_example import (
    INTER_FLOOR_GBPS,
    INTRA_FLOOR_GBPS,
    SCREENSHOTS,
    SIZES,
    example_report,
)

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
SCREENSHOT_ENV = "GPUCLUSTER_REPORT_SCREENSHOTS"

pytestmark = [pytest.mark.process, pytest.mark.slow]  # a browser start: about ten seconds


def _unavailable(why: str) -> None:
    message = f"{why}: install chromium and chromium-driver (scripts/host-packages.txt; `make setup` does)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        _unavailable(f"selenium is not installed ({exc})")
    binary = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    driver_path = shutil.which(DRIVER)
    if binary is None or driver_path is None:
        _unavailable(f"no {'chromium' if binary is None else DRIVER} on PATH")
    options = webdriver.ChromeOptions()
    # Both paths given: Selenium Manager must not go looking for (or downloading) a browser.
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1100,1600", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "summary.html"
    path.write_text(html_report.render(example_report()), encoding="utf-8")
    return path


@pytest.fixture
def page(browser: Any, report_file: Path) -> Any:
    """The report freshly loaded, the console log emptied of any earlier page's messages."""
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get(report_file.as_uri())
    return browser


def _severe(browser: Any) -> list[dict[str, Any]]:
    return [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]


def _rect(el: Any) -> dict[str, float]:
    return el.parent.execute_script("const r = arguments[0].getBoundingClientRect();"
                                    "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,"
                                    " width: r.width, height: r.height};", el)


def test_banner_floor_points_and_a_quiet_console(page: Any) -> None:
    from selenium.webdriver.common.by import By

    # Read before anything else runs in the page: only the report's own messages are in it.
    severe = _severe(page)
    banner = page.find_element(By.ID, "verdict-banner")
    assert banner.is_displayed() and banner.text.startswith("FAIL")
    assert "198, 40, 40" in banner.value_of_css_property("background-color")  # the FAIL red

    plots = page.find_elements(By.CSS_SELECTOR, "svg.plot")
    assert len(plots) == 2
    for plot, floor in zip(plots, (INTRA_FLOOR_GBPS, INTER_FLOOR_GBPS), strict=True):
        frame = _rect(plot)
        lines = plot.find_elements(By.CSS_SELECTOR, "line.floor-line")
        assert [float(x.get_attribute("data-floor-gbps")) for x in lines] == [floor]
        line = _rect(lines[0])
        assert line["width"] > 100 and frame["top"] < line["top"] < frame["bottom"]
        for series in plot.find_elements(By.CSS_SELECTOR, "g.series"):
            points = series.find_elements(By.CSS_SELECTOR, "circle.point")
            # One marker per measured size, each drawn inside the plot.
            sizes = sorted(int(p.get_attribute("data-size")) for p in points)
            assert sizes == SIZES, series.get_attribute("data-label")
            for p in points:
                r = _rect(p)
                assert r["width"] > 0 and frame["left"] <= r["left"] and r["right"] <= frame["right"]
                assert frame["top"] <= r["top"] and r["bottom"] <= frame["bottom"]
        labels = [_rect(t) for t in plot.find_elements(By.CSS_SELECTOR, "text.x-tick")]
        assert len(labels) == len(SIZES)
        for a, b in itertools.pairwise(labels):
            assert a["right"] <= b["left"], "size labels overlap"

    details = page.find_elements(By.CSS_SELECTOR, "details.skipped-group")
    assert details and not any(d.get_attribute("open") for d in details)
    assert not details[0].find_element(By.TAG_NAME, "ul").is_displayed()

    assert severe == [], f"console errors: {severe}"


@pytest.mark.parametrize("name", sorted(SCREENSHOTS))
def test_each_example_run_renders_and_its_screenshot(browser: Any, tmp_path: Path, name: str) -> None:
    """The pages docs/img/ shows: rendered by the real template, laid out by Chromium, banner as the
    exit code says; saved as the screenshot when GPUCLUSTER_REPORT_SCREENSHOTS names a folder."""
    from selenium.webdriver.common.by import By

    report = SCREENSHOTS[name]()
    path = tmp_path / "summary.html"
    path.write_text(html_report.render(report), encoding="utf-8")
    browser.get("about:blank")
    browser.get_log("browser")
    browser.get(path.as_uri())
    assert _severe(browser) == []
    banner = browser.find_element(By.ID, "verdict-banner")
    assert banner.is_displayed() and banner.text.startswith("PASS" if report.exit_code == 0 else "FAIL")
    groups = browser.find_elements(By.CSS_SELECTOR, "details.skipped-group summary")
    assert len(groups) == len(html_report.skipped_groups(report))
    assert all(g.is_displayed() and g.size["height"] > 0 for g in groups)
    if any(r.check_id == "GC-FLEET-001" for r in report.results):
        assert browser.find_element(By.ID, "fleet").is_displayed()
    folder = os.environ.get(SCREENSHOT_ENV)
    if folder and groups:
        groups[0].click()  # one group open in the picture: the checks a reason covers
        assert browser.find_element(By.CSS_SELECTOR, "details.skipped-group ul").is_displayed()
    if folder:
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1100, min(int(height) + 40, 4000))
        browser.execute_script("window.scrollTo(0, 0)")  # the click scrolled its group into view
        try:
            assert browser.save_screenshot(str(Path(folder).resolve() / name)), name
        finally:
            browser.set_window_size(1100, 1600)


def test_the_console_check_sees_errors(page: Any) -> None:
    # Without this the empty list above could mean a browser that reports nothing at all.
    page.execute_script("console.error('gpucluster-probe')")
    assert any("gpucluster-probe" in e.get("message", "") for e in _severe(page))
