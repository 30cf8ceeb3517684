"""Every picture the docs name exists, and every example run of the report has its picture."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.conformance.report_example import SCREENSHOTS

REPO = Path(__file__).resolve().parents[3]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)|<img\s[^>]*src=\"([^\"]+)\"")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _docs() -> list[Path]:
    return [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").rglob("*.md"))]


def _pictures() -> list[tuple[Path, str, Path]]:
    """(document, link as written, file it names) for every local image link of the docs."""
    out = []
    for doc in _docs():
        if not doc.is_file():
            continue
        for m in IMAGE.finditer(doc.read_text(encoding="utf-8")):
            link = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", link):
                continue  # a picture on the web is not ours to keep
            out.append((doc, link, (doc.parent / link.split("#")[0]).resolve()))
    return out


def test_every_picture_the_docs_name_exists_and_is_an_image():
    pictures = _pictures()
    assert len(pictures) >= len(SCREENSHOTS)
    for doc, link, path in pictures:
        assert path.is_file(), f"{doc.relative_to(REPO)} names {link}, which does not exist"
        if path.suffix == ".png":
            with path.open("rb") as f:
                assert f.read(8) == PNG_MAGIC, f"{path.relative_to(REPO)} is not a PNG"
            assert path.stat().st_size > 10_000, f"{path.relative_to(REPO)} is too small to be a page"


def test_each_example_report_has_its_screenshot_in_the_docs():
    named = {path for _, _, path in _pictures()}
    for name in SCREENSHOTS:
        assert (REPO / "docs" / "img" / name).resolve() in named, f"no doc shows docs/img/{name}"
