"""Each bare-metal machine's install seed, as the bare-metal target renders it, in a folder a PXE/HTTP
server serves by MAC (`gpucluster render --stack FILE --out DIR`).

The seed is cloud-init's NoCloud data source: ``user-data`` (cloud-config, or Subiquity's
``autoinstall:`` for ``provisioning: autoinstall``), ``meta-data`` (instance-id and hostname),
``vendor-data`` (empty) and, for cloud-init provisioning, ``network-config``. The machine's boot
entry names its folder, ``ds=nocloud-net;s=http://SERVER/PATH/${net0/mac:hexhyp}/`` (NoCloud's
seedfrom: https://docs.cloud-init.io/en/latest/reference/datasources/nocloud.html), and iPXE's
``hexhyp`` type writes the MAC as lower-case hyphen-separated hex (https://ipxe.org/cfg/mac), the
folder's name here. The content is the target program's own (stacks/targets/baremetal.py
``node_data`` and stacks/components/userdata.py's renderers): no second copy of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpucluster.errors import InputError
from gpucluster.files import write_whole
from gpucluster.spec import Cluster
from gpucluster.spec.models import BaremetalTarget

INDEX = "index.json"


@dataclass(frozen=True)
class Seed:
    node: str
    mac: str  # the management MAC, as the spec declares it
    files: dict[str, str]  # NoCloud file name -> content

    @property
    def folder(self) -> str:
        """The folder a boot entry names with iPXE's ``${net0/mac:hexhyp}``."""
        return mac_folder(self.mac)


def mac_folder(mac: str) -> str:
    return mac.strip().lower().replace(":", "-")


def _target(cluster: Cluster) -> BaremetalTarget:
    target = cluster.spec.target
    if not isinstance(target, BaremetalTarget):
        raise InputError(f"gpucluster:target.kind: seeds are for bare metal; this stack targets {target.kind!r}, "
                         "whose machines its cloud boots with the same data", source=str(cluster.source))
    return target


def node_seed(cluster: Cluster, node_name: str) -> Seed:
    """One machine's seed, rendered by the bare-metal target program."""
    from gpucluster.plan import import_program, target_module

    target = _target(cluster)
    baremetal = target_module("baremetal")
    userdata = import_program("components.userdata")
    declared = {n.name: n for n in target.nodes}[node_name]
    data = baremetal.node_data(cluster, cluster.node(node_name), declared)
    autoinstall = target.provisioning == "autoinstall"
    files = {
        "user-data": userdata.render_autoinstall(data) if autoinstall else userdata.render_cloud_init(data),
        "meta-data": yaml.safe_dump({"instance-id": f"{cluster.name}-{node_name}", "local-hostname": node_name},
                                    sort_keys=False),
        "vendor-data": "",
    }
    if not autoinstall:
        files["network-config"] = userdata.render_network_config(data)
    return Seed(node_name, declared.management_mac, files)


def machine_seeds(cluster: Cluster) -> tuple[Seed, ...]:
    """Every declared machine's seed (the spec refuses two machines of one MAC, and lower-case MACs only)."""
    return tuple(node_seed(cluster, n.name) for n in _target(cluster).nodes)


def _write(path: Path, text: str) -> bool:
    # Read by the site's web server: the seeds hold public keys and addresses, no secret.
    return write_whole(path, text, mode=0o644, skip_unchanged=True)


def write_seeds(cluster: Cluster, out: Path) -> tuple[tuple[Seed, ...], list[Path]]:
    """Render every machine's seed (all of them first: bad input writes nothing), then write each
    folder and ``index.json`` under ``out``. Returns the seeds and the files that changed."""
    seeds = machine_seeds(cluster)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: not a folder")
    index = {"cluster": cluster.name, "provisioning": _target(cluster).provisioning,
             "seedfrom": "ds=nocloud-net;s=http://SERVER/PATH/${net0/mac:hexhyp}/",
             "machines": [{"node": s.node, "management_mac": s.mac, "folder": s.folder,
                           "bmc_address": next(n.bmc_address for n in _target(cluster).nodes if n.name == s.node)}
                          for s in seeds]}
    changed: list[Path] = []
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        folder = out / seed.folder
        if folder.is_symlink():
            raise InputError(f"--out {out}: {seed.folder} is a link; remove it (a seed is written only into a folder)")
        folder.mkdir(exist_ok=True)
        for name, text in seed.files.items():
            if _write(folder / name, text):
                changed.append(folder / name)
    if _write(out / INDEX, json.dumps(index, indent=2) + "\n"):
        changed.append(out / INDEX)
    return seeds, changed
