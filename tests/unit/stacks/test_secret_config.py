"""A target's SSH key kept as a Pulumi secret: ciphertext in the file, plaintext only in the program."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.plan import plan_cluster
from gpucluster.spec import load_spec
from gpucluster.spec.models import Secret
from stacks.__main__ import _unmask, reveal_secrets

ROOT = Path(__file__).resolve().parents[3]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuY2x1c3Rlci1leGFtcGxlLWtleS1yZXBsYWNlLW1l admin@example"
CIPHERTEXT = "v1:Zm9vYmFyYmF6:c2VjcmV0LWNpcGhlcnRleHQ="


def _secret_stack(tmp_path: Path) -> Path:
    doc = yaml.safe_load((ROOT / "Pulumi.azure-h100.yaml").read_text())
    doc["config"]["gpucluster:target"]["ssh_public_key"] = {"secure": CIPHERTEXT}
    path = tmp_path / "Pulumi.azure-h100.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_program_gets_the_decrypted_key_and_plans(tmp_path: Path) -> None:
    cluster = load_spec(_secret_stack(tmp_path))
    assert isinstance(cluster.spec.target.ssh_public_key, Secret)
    revealed = reveal_secrets(cluster, {"ssh_public_key": KEY})
    assert revealed.spec.target.ssh_public_key == KEY
    plan = plan_cluster(revealed)
    assert not plan.failed, [r.rule for r in plan.failed]


def test_a_decrypted_value_that_is_no_key_is_refused_without_showing_it(tmp_path: Path) -> None:
    cluster = load_spec(_secret_stack(tmp_path))
    with pytest.raises(InputError) as err:
        reveal_secrets(cluster, {"ssh_public_key": "hunter2{{ lookup('pipe','id') }}"})
    assert "hunter2" not in str(err.value) and "target.ssh_public_key" in str(err.value)


def test_a_secret_in_the_file_matches_its_decrypted_live_value() -> None:
    file_value = {"kind": "azure", "ssh_public_key": {"secure": CIPHERTEXT}, "admin_cidrs": ["203.0.113.0/24"]}
    live = {"kind": "azure", "ssh_public_key": KEY, "admin_cidrs": ["203.0.113.0/24"]}
    assert _unmask(file_value, live) == live
    assert _unmask({**file_value, "admin_cidrs": ["0.0.0.0/0"]}, live) != live
