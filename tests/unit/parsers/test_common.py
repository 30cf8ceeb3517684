from __future__ import annotations

import pytest

from gpucluster.parsers.common import clean_lines, last_rewrite, parse_int, parse_number, strip_ansi


def test_last_rewrite_keeps_what_the_terminal_shows() -> None:
    assert last_rewrite("\r10.0% a\r20.0% b ") == "20.0% b "
    assert last_rewrite("line\r") == "line"  # CRLF is not a rewrite


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("0:            8             2     float", "8             2     float"),
        ("   [1,0]<stdout>:#       size         count", "#       size         count"),
        ("\x1b[4mGPU0\tCPU Affinity\x1b[0m", "GPU0\tCPU Affinity"),
        ("   # Out of bounds values : 0 OK", "# Out of bounds values : 0 OK"),
    ],
)
def test_clean_lines_strips_launchers_indent_and_escapes(raw: str, clean: str) -> None:
    assert clean_lines(raw) == [clean]


def test_clean_lines_keep_indent_removes_only_the_common_block_indent() -> None:
    assert clean_lines("   GPU 0\n       Name : x\n", keep_indent=True) == ["GPU 0", "    Name : x", ""]


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[1;31mFAIL\x1b[0m") == "FAIL"


def test_g_numbers() -> None:
    assert parse_number("1e-07") == pytest.approx(1e-07)
    assert parse_int("1.04858e+06") == 1048580
    assert parse_int("951005") == 951005
    assert parse_number("N/A") is None
    assert parse_int("-1") == -1
