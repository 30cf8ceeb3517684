"""`gpucluster render --out`: each bare-metal machine's seed, by MAC, served over HTTP as a booting
machine's cloud-init (NoCloud's nocloud-net seedfrom) fetches it."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.plan import import_program, target_module
from gpucluster.seeds import mac_folder, machine_seeds, write_seeds
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
ONPREM = REPO / "Pulumi.onprem-h100-ib.yaml"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    out = tmp_path / "www" / "seeds"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "www"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}/seeds"
    finally:
        server.shutdown()
        server.server_close()


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_every_machine_fetches_its_own_seed_by_mac_over_http(served: tuple[Path, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out, base = served
    assert main(["render", "--stack", str(ONPREM), "--out", str(out)]) == 0
    cluster = load_spec(ONPREM)
    target = cluster.spec.target
    baremetal = target_module("baremetal")
    userdata = import_program("components.userdata")
    index = json.loads(_fetch(f"{base}/index.json"))
    assert [m["node"] for m in index["machines"]] == [n.name for n in target.nodes]
    for declared in target.nodes:
        # The boot entry's seedfrom with iPXE's ${net0/mac:hexhyp}: aa-bb-cc-dd-ee-ff.
        seedfrom = f"{base}/{declared.management_mac.lower().replace(':', '-')}/"
        data = baremetal.node_data(cluster, cluster.node(declared.name), declared)
        # What the bare-metal program renders for this machine, byte for byte: no second copy.
        assert _fetch(seedfrom + "user-data") == userdata.render_cloud_init(data)
        assert _fetch(seedfrom + "network-config") == userdata.render_network_config(data)
        assert yaml.safe_load(_fetch(seedfrom + "meta-data")) == {
            "instance-id": f"{cluster.name}-{declared.name}", "local-hostname": declared.name}
        assert _fetch(seedfrom + "vendor-data") == ""
        network = yaml.safe_load(_fetch(seedfrom + "network-config"))
        macs = [e.get("match", {}).get("macaddress") for e in network.get("ethernets", {}).values()]
        assert declared.management_mac.lower() in [m.lower() for m in macs if m], network
    printed = capsys.readouterr().out
    assert f"{len(target.nodes)} machine(s)" in printed


def test_a_second_render_changes_nothing_and_files_are_readable_by_the_web_server(tmp_path: Path) -> None:
    cluster = load_spec(ONPREM)
    seeds, changed = write_seeds(cluster, tmp_path / "s")
    assert len(changed) == len(seeds) * 4 + 1
    again_seeds, again = write_seeds(cluster, tmp_path / "s")
    assert again == [] and again_seeds == seeds
    for path in (tmp_path / "s").rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o644, path


def test_autoinstall_seeds_carry_subiquitys_autoinstall_and_no_network_config(tmp_path: Path) -> None:
    text = ONPREM.read_text()
    assert "provisioning: cloud-init" in text
    stack = tmp_path / "Pulumi.auto.yaml"
    stack.write_text(text.replace("provisioning: cloud-init", "provisioning: autoinstall"))
    seeds = machine_seeds(load_spec(stack))
    for seed in seeds:
        assert set(seed.files) == {"user-data", "meta-data", "vendor-data"}
        doc = yaml.safe_load(seed.files["user-data"])
        assert seed.files["user-data"].startswith("#cloud-config") and "autoinstall" in doc


def test_a_cloud_stack_is_refused_naming_the_field_and_nothing_is_written(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--stack", str(REPO / "Pulumi.aws-h100.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpucluster:target.kind: seeds are for bare metal" in err[0]
    assert not (tmp_path / "o").exists()


def test_two_machines_with_one_mac_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    cluster = load_spec(ONPREM)
    target = cluster.spec.target
    first, second = target.nodes[0], target.nodes[1]
    text = ONPREM.read_text()
    stack = tmp_path / "Pulumi.dup.yaml"
    shutil.copy(ONPREM, stack)
    # One seed folder for two machines: the spec refuses it (MACs are lower case there, so one folder is one MAC).
    stack.write_text(text.replace(f'"{second.management_mac}"', f'"{first.management_mac}"'))
    with pytest.raises(InputError, match=r"nodes\[1\].management_mac: 3c:ec:ef:00:00:11 is used twice"):
        write_seeds(load_spec(stack), tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_link_in_a_seed_folders_place_is_refused(tmp_path: Path) -> None:
    cluster = load_spec(ONPREM)
    out = tmp_path / "o"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / mac_folder(cluster.spec.target.nodes[0].management_mac)).symlink_to(elsewhere)
    with pytest.raises(InputError, match="is a link"):
        write_seeds(cluster, out)
    assert list(elsewhere.iterdir()) == []
