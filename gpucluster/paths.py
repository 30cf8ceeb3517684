"""Where a stack's files live on the controller: the one place that answers it.

Every target hands off the same two files, in one folder per cluster:

- ``outputs.json``: the stack outputs (``pulumi stack output --json``, or what ``gpucluster lab up``
  exports);
- ``inventory.yml``: what ``gpucluster inventory`` makes of them.

Beside them, the Kubernetes control plane's role fetches ``admin.conf`` (the node contract's
``kubeconfig_name``, in the inventory's folder), unless the inventory moves it: so
:attr:`StackPaths.kubeconfig_file` asks the inventory (:meth:`Inventory.kubeconfig_file`, the one judge).

The folder is the lab's own folder for a lab or a platform twin (``<state_dir>/<name>/``, beside
the lab's state, SSH key and nodes), and ``$GPUCLUSTER_STATE_DIR/clusters/<name>/`` for every other target
(the folder that already holds the cluster's known_hosts, :mod:`gpucluster.runs`). Run folders of
converge and verify go under one ``runs/`` folder.

Nothing here creates a file, and nothing reads one but the stack file and, for the kubeconfig alone,
the stack's inventory where it exists. ``gpucluster paths --stack FILE`` prints the same answer for the
Makefile, scripts and people.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpucluster import runs
from gpucluster.errors import InputError
from gpucluster.inventory_model import read_inventory
from gpucluster.spec import load_spec
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.contract import NodeContract
from gpucluster.spec.models import LabTarget

REPO_ROOT = Path(__file__).resolve().parent.parent
# converge's and verify's run folders (`<UTC time>-<6 hex>-<label>`, gpucluster/runs.py), under the
# folder the command runs in: an installed package has no checkout to write into.
RUNS_DIR = Path("runs")
OUTPUTS_NAME = "outputs.json"
INVENTORY_NAME = "inventory.yml"
# The cluster-admin kubeconfig the control plane's role fetches beside the inventory (its client key:
# the folder is the cluster's own, not a checkout's runs/): the node contract's name for it, stated
# there once. An inventory that sets kubernetes_control_plane_kubeconfig_fetch_dest moves it: ask
# StackPaths.kubeconfig_file, which reads that inventory (gpucluster.inventory_model.Inventory.kubeconfig_file).
KUBECONFIG_NAME: str = NodeContract.model_fields["kubeconfig_name"].default


def lab_dir(state_root: str | Path, name: str) -> Path:
    """A lab's own folder: its state, key pair, nodes, outputs and inventory (the lab's marker guards it)."""
    return Path(state_root) / name


def cluster_dir(cluster_name: str) -> Path:
    """The controller's folder of a cluster on a real target (its known_hosts lives there too)."""
    return runs.state_root() / "clusters" / cluster_name


@dataclass(frozen=True)
class StackPaths:
    """The files of one stack. ``lab_dir`` and ``lab_state_root`` are set for a lab only."""

    stack: Path
    cluster: str
    target: str
    folder: Path
    outputs_file: Path
    inventory_file: Path
    runs_dir: Path
    lab_dir: Path | None
    lab_state_root: Path | None

    @property
    def kubeconfig_file(self) -> Path:
        """Where the control plane's role fetches the stack's cluster-admin kubeconfig.

        Where the stack's inventory exists, its answer (:meth:`Inventory.kubeconfig_file`: its
        ``kubernetes_control_plane_kubeconfig_fetch_dest``, else the node contract's name beside it),
        which the role, converge and ``up`` follow too; an InputError naming the inventory when it
        cannot be read. Before there is one, the contract's default place, beside where ``gpucluster
        inventory`` writes it. A property, not a field: the inventory, not the stack, decides it.
        """
        if self.inventory_file.is_file():
            return read_inventory(self.inventory_file)[0].kubeconfig_file(self.inventory_file)
        return self.contract_kubeconfig_file

    @property
    def contract_kubeconfig_file(self) -> Path:
        """The node contract's own place for the kubeconfig: its name beside the inventory file (what
        :attr:`kubeconfig_file` gives where the inventory does not move it). Reads nothing."""
        return self.inventory_file.resolve().parent / KUBECONFIG_NAME

    def as_dict(self) -> dict[str, str | None]:
        return {
            "stack": str(self.stack),
            "cluster": self.cluster,
            "target": self.target,
            "folder": str(self.folder),
            "outputs_file": str(self.outputs_file),
            "inventory_file": str(self.inventory_file),
            "kubeconfig_file": str(self.kubeconfig_file),
            "runs_dir": str(self.runs_dir),
            "lab_dir": None if self.lab_dir is None else str(self.lab_dir),
            "lab_state_root": None if self.lab_state_root is None else str(self.lab_state_root),
        }


def stack_paths(cluster: Cluster) -> StackPaths:
    """The files of the stack a loaded spec describes."""
    target = cluster.spec.target
    twin = cluster.spec.twin
    state_root = (Path(target.state_dir) if isinstance(target, LabTarget)
                  else Path(twin.state_dir) if twin is not None else None)
    folder = lab_dir(state_root, cluster.name) if state_root is not None else cluster_dir(cluster.name)
    return StackPaths(
        stack=Path(str(cluster.source)),
        cluster=cluster.name,
        target=target.kind,
        folder=folder,
        outputs_file=folder / OUTPUTS_NAME,
        inventory_file=folder / INVENTORY_NAME,
        runs_dir=RUNS_DIR,
        lab_dir=folder if state_root is not None else None,
        lab_state_root=state_root,
    )


def resolve(stack: str | Path) -> StackPaths:
    """The files of the stack in this stack file (InputError when the file is not a valid spec)."""
    return stack_paths(load_spec(stack))


def existing_inventory(paths: StackPaths) -> Path:
    """The stack's inventory, or InputError naming the command that writes it."""
    if paths.inventory_file.is_file():
        return paths.inventory_file
    if paths.lab_dir is not None:
        remedy = f"is the lab up? run `gpucluster lab up --stack {paths.stack}`"
    else:
        remedy = (f"write it with `gpucluster inventory --outputs {paths.outputs_file} --stack {paths.stack} "
                  f"-o {paths.inventory_file}`, or pass --inventory FILE")
    raise InputError(f"no inventory at {paths.inventory_file}: {remedy}", source=str(paths.stack))
