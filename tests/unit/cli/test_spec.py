"""`gpucluster spec validate|show`: --stack, --json and the reachability warnings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpucluster.cli import main
from gpucluster.spec import load_spec
from gpucluster.spec.rules import reachability_warnings

REPO = Path(__file__).resolve().parents[3]


def _copy(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    src = REPO / name
    text = src.read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    dst = tmp_path / name
    dst.write_text(text)
    for extra in ("bom.yaml",):
        if (REPO / extra).exists():
            shutil.copy(REPO / extra, tmp_path / extra)
    return dst


def test_validate_json_lists_the_warnings_of_a_cloud_stack_left_unreachable(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", "--stack", str(REPO / "Pulumi.aws-h100.yaml"), "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["ok"] is True and data["stack"].endswith("Pulumi.aws-h100.yaml")
    joined = "\n".join(data["warnings"])
    assert "gpucluster.target.admin_cidrs[0]: 203.0.113.0/24 is a documentation range" in joined
    assert "gpucluster.target.ssh_public_key: not set" in joined
    # Warnings also reach stderr, one line each, and never stdout's JSON.
    assert err.count("warning: ") == len(data["warnings"])


def test_the_lab_has_no_reachability_warnings() -> None:
    assert reachability_warnings(load_spec(REPO / "Pulumi.lab.yaml").spec) == []


def test_a_real_admin_range_and_a_key_give_no_warning(tmp_path: Path) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxVvB8F3m2pZ9cR1s4yT6uW7aX0bC2dE3fG4hI5jK6L ops@example"
    stack = _copy(tmp_path, "Pulumi.aws-h100.yaml",
                  ("admin_cidrs: [203.0.113.0/24]", f"admin_cidrs: [198.18.4.0/24]\n    ssh_public_key: {key}"))
    assert reachability_warnings(load_spec(stack).spec, env={"SSH_AUTH_SOCK": "/run/agent.sock"}) == []


def test_no_admin_range_is_a_warning_when_the_nodes_are_reached_directly(tmp_path: Path) -> None:
    stack = _copy(tmp_path, "Pulumi.oci-h100.yaml", ("    admin_cidrs: [203.0.113.0/24]\n", ""))
    warnings = reachability_warnings(load_spec(stack).spec)
    assert any(w.startswith("gpucluster.target.admin_cidrs: empty") for w in warnings)


def test_the_private_key_is_a_named_file_or_the_agent_never_a_guess(tmp_path: Path) -> None:
    spec = load_spec(REPO / "Pulumi.oci-h100.yaml").spec
    agentless = [w for w in reachability_warnings(spec, env={}) if "ssh_private_key_file" in w]
    assert agentless == ["gpucluster.target.ssh_private_key_file: not set and no SSH agent here (SSH_AUTH_SOCK is "
                         "empty), so converge and verify have no key to log in with; name the key file, or load the "
                         "key into an agent (ssh-add)"]
    assert not [w for w in reachability_warnings(spec, env={"SSH_AUTH_SOCK": "/a"}) if "ssh_private_key_file" in w]
    key = tmp_path / "id_ed25519"
    key.write_text("not a key")
    key.chmod(0o644)
    named = spec.model_copy(update={"target": spec.target.model_copy(update={"ssh_private_key_file": str(key)})})
    (loose,) = [w for w in reachability_warnings(named, env={}) if "ssh_private_key_file" in w]
    assert "readable by others (mode 644)" in loose and f"chmod 600 {key}" in loose
    key.chmod(0o600)
    assert not [w for w in reachability_warnings(named, env={}) if "ssh_private_key_file" in w]
    key.unlink()
    (gone,) = [w for w in reachability_warnings(named, env={}) if "ssh_private_key_file" in w]
    assert "does not exist on this machine" in gone


def test_positional_and_stack_are_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    stack = str(REPO / "Pulumi.lab.yaml")
    assert main(["spec", "validate", stack]) == 0
    first = capsys.readouterr().out
    assert main(["spec", "validate", "--stack", stack]) == 0
    assert capsys.readouterr().out == first
    assert main(["spec", "show", "--json", "--stack", stack]) == 0
    assert json.loads(capsys.readouterr().out)["name"]


def test_two_different_stacks_or_none_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", str(REPO / "Pulumi.lab.yaml"), "--stack", str(REPO / "Pulumi.aws-h100.yaml")]) == 2
    assert "two stack files" in capsys.readouterr().err
    assert main(["spec", "validate"]) == 2
    assert "--stack FILE" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["plan"], ["preflight"], ["spec", "validate"], ["spec", "show"], ["up"], ["down"]])
def test_every_stack_command_takes_stack_and_the_positional_alias(command: list[str]) -> None:
    from gpucluster.cli import build_parser
    from gpucluster.cli.spec import stack_file

    parser = build_parser()
    assert stack_file(parser.parse_args([*command, "--stack", "Pulumi.x.yaml"])) == "Pulumi.x.yaml"
    assert stack_file(parser.parse_args([*command, "Pulumi.x.yaml"])) == "Pulumi.x.yaml"


def test_every_command_shows_an_example_in_its_help() -> None:
    import argparse

    from gpucluster.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, cmd in sub.choices.items():
        verbs = [a for a in cmd._actions if isinstance(a, argparse._SubParsersAction)]
        leaves = list(verbs[0].choices.items()) if verbs else [(name, cmd)]
        missing += [leaf for leaf, p in leaves if "example" not in (p.epilog or "")]
    assert missing == []
