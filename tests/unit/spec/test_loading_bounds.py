"""Hostile stack files, bills of materials and stack outputs: bounded, one line per problem, exit 2.

Each case here was a crash, a hang, a huge error or a silent misreading before:
a YAML file nested 30,000 deep segfaulted the C loader, an alias bomb expanded into an
integer field, ``bom:`` read /dev/zero, a 5000-digit integer raised ValueError, ``"2"``
was read as 2, a repeated key silently won, NaN came through JSON, and a Pulumi secret
was printed. Cases that crashed or hung run the command in a child process with a kill
timeout and a memory limit, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.spec import DEFAULT_BOM, load_spec
from gpucluster.spec.loader import MAX_DEPTH, MAX_INT_DIGITS, MAX_STACK_BYTES
from gpucluster.spec.models import Secret
from tests.unit.bounded import cli

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "Pulumi.lab.yaml"
AWS = REPO / "Pulumi.aws-h100.yaml"
GOLDEN = REPO / "tests" / "golden" / "outputs"
CIPHERTEXT = "v1:Zm9vYmFyU0VDUkVUY2lwaGVydGV4dA=="


def _one_error(rc: int, err: str, *needles: str) -> str:
    """Exit 2 and exactly one short `error:` line holding every needle; return the line."""
    assert rc == 2, (rc, err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in err
    assert len(lines[0]) < 400, lines[0][:1000]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["spec", "validate", str(path)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _doc(example: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(example.read_text())
    return copy.deepcopy(data)


def _write(directory: Path, doc: dict[str, Any] | str, name: str = "Pulumi.t.yaml") -> Path:
    path = directory / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


# --- size and nesting depth, checked before the C parser builds anything -------------------


def _deep_flow(n: int) -> str:
    return "config:\n  gpucluster:name: " + "[" * n + "]" * n + "\n"


def _deep_compact(n: int) -> str:
    return "config:\n  gpucluster:name:\n    " + "- " * n + "x\n"


def _deep_block(n: int) -> str:
    return "config:\n  gpucluster:name:\n" + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(n))


@pytest.mark.parametrize("make", [_deep_flow, _deep_compact, _deep_block], ids=["flow", "compact-seq", "block-map"])
def test_a_deeply_nested_stack_file_is_refused_not_a_segfault(tmp_path: Path, make: Any) -> None:
    stack = _write(tmp_path, make(30_000 if make is not _deep_block else 300))
    proc = cli("spec", "validate", str(stack))
    _one_error(proc.returncode, proc.stderr, str(stack), f"{MAX_DEPTH} levels")


def test_nesting_at_the_limit_is_still_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Depth is counted in nodes: config (1) > gpucluster:name (2) > the list's nodes.
    stack = _write(tmp_path, _deep_flow(MAX_DEPTH - 2))
    rc, _, err = _validate(stack, capsys)
    # Read in full, then refused by the model: a list where a name goes (and required keys missing).
    assert rc == 2 and "gpucluster.name: must be a string (got list)" in err and "levels" not in err, err


def test_a_deeply_nested_bom_is_refused_not_a_segfault(tmp_path: Path) -> None:
    doc = _doc(LAB)
    doc["config"]["gpucluster:bom"] = "bom.yaml"
    stack = _write(tmp_path, doc)
    (tmp_path / "bom.yaml").write_text("schema: " + "[" * 30_000 + "]" * 30_000 + "\n")
    proc = cli("spec", "validate", str(stack))
    _one_error(proc.returncode, proc.stderr, "bom.yaml", f"{MAX_DEPTH} levels")


def test_an_oversized_stack_file_is_refused_with_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.read_text() + "#" + "x" * MAX_STACK_BYTES + "\n"
    stack = _write(tmp_path, text)
    rc, _, err = _validate(stack, capsys)
    _one_error(rc, err, str(stack), f"{MAX_STACK_BYTES >> 20} MiB")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_a_stack_file(device: str) -> None:
    proc = cli("spec", "validate", device)
    _one_error(proc.returncode, proc.stderr, device, "not a regular file")


# --- anchors and aliases ------------------------------------------------------------------


def _billion_laughs() -> str:
    lines = ['lol0: &a0 "lol"']
    lines += [f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    body = "\n".join("  " + line for line in lines)
    text = LAB.read_text().replace("      count: 2\n", "      count: *a9\n", 1)
    return text.replace("config:\n", "config:\n" + body + "\n", 1)


def test_an_alias_bomb_in_an_integer_field_is_refused_unexpanded(tmp_path: Path) -> None:
    stack = _write(tmp_path, _billion_laughs())
    proc = cli("spec", "validate", str(stack))
    line = _one_error(proc.returncode, proc.stderr, str(stack), "anchor")
    assert "lol" not in line


def test_yaml_anchors_and_aliases_are_refused_in_stack_files(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.read_text().replace("    - name: gpu\n", "    - &pool\n      name: gpu\n", 1)
    text = text.replace("  gpucluster:fabric:\n", "  gpucluster:extra: *pool\n  gpucluster:fabric:\n", 1)
    stack = _write(tmp_path, text)
    rc, _, err = _validate(stack, capsys)
    _one_error(rc, err, "line 9", "anchors and aliases")


# --- where `bom:` may point -------------------------------------------------------------------


def _bom_case(tmp_path: Path, case: str) -> str:
    """Set up ``case`` under tmp_path; return the value of `bom:`."""
    if case == "dotdot-etc-passwd":
        return "x/" + "../" * 30 + "etc/passwd"
    if case == "symlink-dev-zero":
        (tmp_path / "bom.yaml").symlink_to("/dev/zero")
    elif case == "symlink-etc-passwd":
        (tmp_path / "bom.yaml").symlink_to("/etc/passwd")
    elif case == "fifo":
        os.mkfifo(tmp_path / "bom.yaml")
    elif case == "directory":
        (tmp_path / "bom.yaml").mkdir()
    elif case == "too-large":
        (tmp_path / "bom.yaml").write_text(DEFAULT_BOM.read_text() + "#" + "x" * (2 << 20) + "\n")
    return "bom.yaml"


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("dotdot-etc-passwd", "outside"),
        ("symlink-dev-zero", "outside"),
        ("symlink-etc-passwd", "outside"),
        ("fifo", "not a regular file"),
        ("directory", "not a regular file"),
        ("too-large", "1 MiB"),
    ],
)
def test_bom_is_a_small_regular_file_beside_the_stack(tmp_path: Path, case: str, reason: str) -> None:
    doc = _doc(LAB)
    doc["config"]["gpucluster:bom"] = _bom_case(tmp_path, case)
    stack = _write(tmp_path, doc)
    proc = cli("spec", "validate", str(stack))
    _one_error(proc.returncode, proc.stderr, "gpucluster.bom", reason)


@pytest.mark.parametrize("where", ["beside", "below", "symlink-inside"])
def test_a_bom_beside_or_below_the_stack_is_read(tmp_path: Path, where: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / ("boms/mine.yaml" if where != "beside" else "mine.yaml")
    real.parent.mkdir(exist_ok=True)
    real.write_text(DEFAULT_BOM.read_text())
    value = str(real.relative_to(tmp_path))
    if where == "symlink-inside":
        (tmp_path / "bom.yaml").symlink_to(real)
        value = "bom.yaml"
    doc = _doc(LAB)
    doc["config"]["gpucluster:bom"] = value
    rc, _, err = _validate(_write(tmp_path, doc), capsys)
    assert rc == 0, err


# --- integers, strict types ---------------------------------------------------------------------


def test_a_5000_digit_integer_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.read_text().replace("count: 2\n", "count: " + "9" * 5000 + "\n", 1)
    rc, _, err = _validate(_write(tmp_path, text), capsys)
    _one_error(rc, err, "line 10", f"at most {MAX_INT_DIGITS} digits")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("count", "2"),
        ("count", True),
        ("count", 2.0),
        ("mtu", "9000"),
        ("mtu", 9000.0),
        ("boot_timeout_s", "120"),
        ("ipoib", "yes"),
        ("ipoib", 1),
    ],
)
def test_strict_types_nothing_is_coerced(tmp_path: Path, field: str, value: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    # YAML floats are not integers either, even 9000.0: a field that counts takes an integer.
    example = REPO / ("Pulumi.onprem-h100-ib.yaml" if field == "ipoib" else "Pulumi.lab.yaml")
    doc = _doc(example)
    config = doc["config"]
    where = {
        "count": (lambda: config["gpucluster:node_pools"][0], "gpucluster.node_pools[0].count"),
        "mtu": (lambda: config["gpucluster:fabric"], "gpucluster.fabric.mtu"),
        "boot_timeout_s": (lambda: config["gpucluster:target"], "gpucluster.target.boot_timeout_s"),
        "ipoib": (lambda: config["gpucluster:fabric"]["partitions"][0], "gpucluster.fabric.partitions[0].ipoib"),
    }
    find, path = where[field]
    section = find()
    section[field] = value
    rc, _, err = _validate(_write(tmp_path, doc, example.name), capsys)
    _one_error(rc, err, f"{path}: must be")


# --- duplicate keys ---------------------------------------------------------------------------------


def test_a_repeated_top_level_key_is_refused_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.read_text() + "  gpucluster:name: other\n"
    stack = _write(tmp_path, text)
    last = len(text.splitlines())
    rc, _, err = _validate(stack, capsys)
    _one_error(rc, err, f"line {last}", "duplicate key 'gpucluster:name'", "line 4")


def test_a_repeated_nested_key_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = LAB.read_text().replace("      count: 2\n", "      count: 2\n      count: 20\n", 1)
    rc, _, err = _validate(_write(tmp_path, text), capsys)
    _one_error(rc, err, "line 11", "duplicate key 'count'")


def test_a_repeated_key_in_the_bom_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bom.yaml").write_text(DEFAULT_BOM.read_text() + "schema: 2\n")
    doc = _doc(LAB)
    doc["config"]["gpucluster:bom"] = "bom.yaml"
    rc, _, err = _validate(_write(tmp_path, doc), capsys)
    _one_error(rc, err, "bom.yaml", "duplicate key 'schema'")


# --- stack outputs JSON --------------------------------------------------------------------------------


def _inventory(tmp_path: Path, outputs_text: str, stack: Path = LAB) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "outputs.json"
    path.write_text(outputs_text)
    return cli("inventory", "--outputs", str(path), "--stack", str(stack), "-o", str(tmp_path / "inv.yml"))


def _lab_outputs_with(key: str, raw_value: str) -> str:
    data = json.loads((GOLDEN / "lab.json").read_text())
    data[key] = "@@"
    return json.dumps(data).replace('"@@"', raw_value)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "Infinity"),
        ("1e999", "out of range"),
        ("9" * 5000, f"at most {MAX_INT_DIGITS} digits"),
        ("[" * 100_000 + "]" * 100_000, f"{MAX_DEPTH} levels"),
    ],
    ids=["nan", "inf", "-inf", "1e999", "5000-digits", "deep"],
)
def test_hostile_json_numbers_and_nesting_are_one_line(tmp_path: Path, raw: str, needle: str) -> None:
    proc = _inventory(tmp_path, _lab_outputs_with("extra", raw))
    _one_error(proc.returncode, proc.stderr, "outputs.json", needle)
    assert not (tmp_path / "inv.yml").exists()


def test_a_repeated_json_key_is_refused_with_its_path(tmp_path: Path) -> None:
    text = (GOLDEN / "lab.json").read_text()
    text = text.replace('"name": "gpu-2",', '"name": "gpu-2", "name": "stor-1",', 1)
    proc = _inventory(tmp_path, text)
    _one_error(proc.returncode, proc.stderr, "outputs.nodes[1]", "duplicate key 'name'")


def test_an_oversized_outputs_file_is_refused(tmp_path: Path) -> None:
    from gpucluster.outputs import MAX_OUTPUTS_BYTES

    text = (GOLDEN / "lab.json").read_text()
    proc = _inventory(tmp_path, text + " " * MAX_OUTPUTS_BYTES)
    _one_error(proc.returncode, proc.stderr, "outputs.json", "MiB")


# --- Pulumi secrets -------------------------------------------------------------------------------------


def _aws_with(tmp_path: Path, **target: Any) -> Path:
    doc = _doc(AWS)
    doc["config"]["gpucluster:target"].update(target)
    return _write(tmp_path, doc, "Pulumi.aws-h100.yaml")


def test_a_secret_ssh_key_is_accepted_and_never_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = _aws_with(tmp_path, ssh_public_key={"secure": CIPHERTEXT})
    cluster = load_spec(stack)
    assert cluster.spec.target.kind == "aws"
    key = cluster.spec.target.ssh_public_key
    assert isinstance(key, Secret)
    assert CIPHERTEXT not in repr(cluster.spec) and CIPHERTEXT not in str(key)
    for argv in (["spec", "validate", str(stack)], ["spec", "show", str(stack)],
                 ["spec", "show", "--json", str(stack)]):
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert CIPHERTEXT not in captured.out + captured.err
    assert json.loads(json.dumps(cluster.as_dict()))["spec"]["target"]["ssh_public_key"] == "[secret]"


def test_the_inventory_never_carries_a_secret(tmp_path: Path) -> None:
    stack = _aws_with(tmp_path, ssh_public_key={"secure": CIPHERTEXT})
    proc = _inventory(tmp_path, (GOLDEN / "aws-h100.json").read_text(), stack)
    assert proc.returncode == 0, proc.stderr
    assert CIPHERTEXT not in (tmp_path / "inv.yml").read_text() + proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda c: c["gpucluster:node_pools"][0].update(count={"secure": CIPHERTEXT}),
         "gpucluster.node_pools[0].count"),
        (lambda c: c["gpucluster:fabric"].update(mtu={"secure": CIPHERTEXT}), "gpucluster.fabric.mtu"),
        (lambda c: c["gpucluster:target"].update(tags={"secure": CIPHERTEXT}), "gpucluster.target.tags"),
        (lambda c: c["gpucluster:target"].update(region={"secure": CIPHERTEXT}), "gpucluster.target.region"),
        (lambda c: c.update({"gpucluster:name": {"secure": CIPHERTEXT}}), "gpucluster.name"),
        (lambda c: c.update({"gpucluster:target": {"secure": CIPHERTEXT}}), "gpucluster.target"),
    ],
    ids=["count", "mtu", "tags", "region", "name", "whole-target"],
)
def test_a_secret_where_none_may_be_is_one_line_without_the_ciphertext(
    tmp_path: Path, mutate: Any, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _doc(AWS)
    mutate(doc["config"])
    rc, out, err = _validate(_write(tmp_path, doc, "Pulumi.aws-h100.yaml"), capsys)
    line = _one_error(rc, err, f"{path}: a Pulumi secret")
    assert CIPHERTEXT not in line + out


@pytest.mark.parametrize(
    "value",
    [{"secure": CIPHERTEXT, "extra": CIPHERTEXT}, {"secure": 12345}, {"secure": ""}],
    ids=["extra-key", "not-text", "empty"],
)
def test_a_malformed_secret_is_one_line_without_the_ciphertext(
    tmp_path: Path, value: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _validate(_aws_with(tmp_path, ssh_public_key=value), capsys)
    line = _one_error(rc, err, "gpucluster.target.ssh_public_key: ")
    assert CIPHERTEXT not in line and "12345" not in line


def test_other_errors_beside_a_secret_do_not_show_it(tmp_path: Path) -> None:
    stack = _aws_with(tmp_path, ssh_public_key={"secure": CIPHERTEXT}, kind="azure")
    with pytest.raises(InputError) as err:
        load_spec(stack)
    assert CIPHERTEXT not in "\n".join(err.value.lines())


# --- error lines stay short ------------------------------------------------------------------------------


def test_a_huge_value_is_not_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(LAB)
    doc["config"]["gpucluster:node_pools"][0]["count"] = "x" * 100_000
    rc, _, err = _validate(_write(tmp_path, doc), capsys)
    _one_error(rc, err, "gpucluster.node_pools[0].count")
