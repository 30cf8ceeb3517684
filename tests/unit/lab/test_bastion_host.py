"""A twin's bastion on the host: the site's bastion keeps its host key across `down` (the cluster's
known_hosts holds it, as a real one's would stay), and the host's table is one nft accepts."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpucluster import twin
from gpucluster.lab import firewall, node
from gpucluster.lab.layout import LabLayout
from gpucluster.spec import load_spec

# Starts processes (ssh-keygen, nft): outside `make unit-fast`, the in-process tier.
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]


def _plan(stack: str, tmp_path: Path) -> LabLayout:
    return dataclasses.replace(twin.inputs(load_spec(REPO / stack)).plan, state_root=str(tmp_path))


def test_the_sites_bastion_keeps_its_host_key_across_down(tmp_path: Path) -> None:
    plan = _plan("Pulumi.twin-azure-nd-h100-v5.yaml", tmp_path)
    b = plan.bastion
    assert b is not None and plan.site_bastion
    node.root_dir(plan, b).mkdir(parents=True)
    _, first = node.ensure_files(plan, b, "ssh-ed25519 AAAA lab", [], plan.bastion_cache_dir)
    assert (plan.bastion_cache_dir / "key.pub").read_text().strip() == first
    assert (plan.bastion_cache_dir / "key").stat().st_mode & 0o777 == 0o600
    # `down` removes the lab's folder, the cache stays: the bastion comes back with the same key.
    shutil.rmtree(plan.lab_dir)
    node.root_dir(plan, b).mkdir(parents=True)
    _, again = node.ensure_files(plan, b, "ssh-ed25519 AAAA lab", [], plan.bastion_cache_dir)
    assert again == first
    # A node (or a bastion the stack creates) gets a new one with its new machine, as on the platform.
    shutil.rmtree(plan.lab_dir)
    node.root_dir(plan, b).mkdir(parents=True)
    _, fresh = node.ensure_files(plan, b, "ssh-ed25519 AAAA lab", [])
    assert fresh != first


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin") is None,
                    reason="nft's check needs root and the nftables package (the lab installs it)")
def test_the_hosts_table_is_one_nft_accepts(tmp_path: Path) -> None:
    for stack in ("Pulumi.twin-aws-p5.yaml", "Pulumi.twin-azure-nd-h100-v5.yaml", "Pulumi.twin-oci-h100.yaml"):
        rules = tmp_path / "rules.nft"
        rules.write_text(firewall.rules(_plan(stack, tmp_path)))
        nft = shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin")
        assert nft is not None
        proc = subprocess.run([nft, "-c", "-f", str(rules)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (stack, proc.stderr)
