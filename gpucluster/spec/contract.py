"""The node contract: what the roles make on a node and the conformance suite then looks for there.

Each value here was once a role's internal default and, again, a literal in a check; it is now
stated once. The inventory writer (gpucluster/inventory.py) writes it as ``gpucluster_contract``,
the roles' defaults read that variable (``monitoring_textfile_dir: "{{ gpucluster_contract.textfile_dir }}"``),
and the suite reads it back through this model (gpucluster.inventory_model, gpucluster.conformance.nodes).

A role variable set in the inventory (a host's ``monitoring_textfile_dir``, or all.vars') still
wins over the contract's value in the role, as any Ansible default does, and the suite honours the
same variables in Ansible's order (host, then all) through :meth:`NodeContract.overridden`. What the
suite cannot see is not a contract override: set these variables in the inventory itself.
``gpucluster converge`` refuses them given with ``-e`` (:func:`refuse_extra_vars`) and in a
group_vars/ or host_vars/ file beside the inventory or the playbook (gpucluster.converge), either of
which would move the role and not the check.

One fact lives on the controller rather than the node: where the control plane's role fetches the
cluster-admin kubeconfig, ``kubeconfig_name`` in the inventory's own folder (the role's
``{{ inventory_dir }}/{{ gpucluster_contract.kubeconfig_name }}``), which converge makes private and
``gpucluster up`` hands to verify (:meth:`NodeContract.kubeconfig_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster.errors import InputError

# An absolute path of plain components (it reaches a shell on the node and the role's templates).
NodePath = Annotated[str, Field(pattern=r"^(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)+$", max_length=255,
                                description="an absolute path")]
DriverInstallMethod = Literal["distro", "cuda_repo", "runfile"]
# CUDA has no runfile method here: the cuda_toolkit role installs packages only.
ToolkitInstallMethod = Literal["cuda_repo", "distro"]
# A file name (no folder): the inventory's folder holds it.
FileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_+-][A-Za-z0-9._+-]*$", max_length=255,
                                description="a file name")]

# The role variable that overrides each field on a node, as the roles name them.
ROLE_VARS: dict[str, str] = {
    "nvidia_driver_install_method": "nvidia_driver_install_method",
    "cuda_toolkit_install_method": "cuda_toolkit_install_method",
    "textfile_dir": "monitoring_textfile_dir",
    "gpu_burn_dir": "gpu_validation_gpu_burn_install_dir",
    "nccl_tests_dir": "nccl_tests_install_dir",
}

LISTEN_ADDRESS_VAR = "monitoring_node_exporter_listen_address"
# The control plane's role variable that moves the fetched kubeconfig (a path on the controller).
KUBECONFIG_VAR = "kubernetes_control_plane_kubeconfig_fetch_dest"
# That variable's default in the role (roles/kubernetes_control_plane/defaults/main.yml): the one template
# whose value the controller knows, kubeconfig_name in the inventory's folder.
KUBECONFIG_DEFAULT = "{{ inventory_dir }}/{{ gpucluster_contract.kubeconfig_name }}"
_KUBECONFIG_DEFAULT = "".join(KUBECONFIG_DEFAULT.split())
CONTRACT_VAR = "gpucluster_contract"
# What `gpucluster converge -e` may not set: the roles would take it, the suite and `up` never see it.
OVERRIDE_VARS: frozenset[str] = frozenset({*ROLE_VARS.values(), LISTEN_ADDRESS_VAR, KUBECONFIG_VAR, CONTRACT_VAR})


def refuse_extra_vars(extra_vars: Mapping[str, Any]) -> None:
    """InputError, one line naming them, when ``extra_vars`` (``converge -e``) set a contract override:
    the role would follow it and the suite (or ``up``, for the kubeconfig) would not."""
    named = sorted(OVERRIDE_VARS & set(extra_vars))
    if named:
        raise InputError(f"--extra-vars {', '.join(named)}: the node contract's override, which the conformance "
                         "suite reads from the inventory only; set it in the inventory (a host's variables or "
                         "all.vars) instead of with -e")


class NodeContract(BaseModel):
    """What the roles install where, and how, as the conformance suite expects to find it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Where the NVIDIA driver comes from, as the nvidia_driver role decides it from the target's
    # capabilities (:meth:`for_capabilities`): NVIDIA's CUDA repository where the nodes reach it,
    # else Debian's packages. GC-GPU-001 compares the loaded driver with the pin of that method
    # (the BOM's nvidia_driver.version, or its debian_version for distro).
    nvidia_driver_install_method: DriverInstallMethod
    # Where the CUDA toolkit comes from, decided from the same capability as the driver's method
    # (:meth:`for_capabilities`): NVIDIA's CUDA repository (cuda-toolkit-<x-y>, under
    # /usr/local/cuda-<x.y>) where the nodes reach it, else Debian's non-free nvidia-cuda-toolkit.
    # A field of its own, not the driver's method read twice: a driver by runfile still takes CUDA from
    # a repository, and an inventory's cuda_toolkit_install_method moves the cuda_toolkit role and
    # GC-GPU-010 alike (:meth:`overridden`), where the driver's method would move neither.
    cuda_toolkit_install_method: ToolkitInstallMethod
    # node_exporter's textfile collector folder: Debian's prometheus-node-exporter package reads
    # /var/lib/prometheus/node-exporter (its /etc/default/prometheus-node-exporter and
    # prometheus-node-exporter-collectors use it). The monitoring role points the collector at it;
    # verify writes each node's results there (gpucluster.conformance.publish).
    textfile_dir: NodePath = "/var/lib/prometheus/node-exporter"
    # node_exporter's port: 9100, its default (--web.listen-address=":9100") and the one Prometheus'
    # port allocations list for it (github.com/prometheus/prometheus/wiki/Default-port-allocations).
    # The monitoring role listens there; GC-SYS-004 reads the metrics there.
    node_exporter_port: int = Field(9100, ge=1, le=65535)
    # gpu-burn's folder (gpu_validation builds each release into <dir>-<version> and links it here);
    # the gpu_burn binary sits in it. GC-BURN and GC-PCIE-002's load run it.
    gpu_burn_dir: NodePath = "/opt/gpu-burn"
    # nccl-tests' folder (the nccl role builds each release into <dir>-<version> and links it here);
    # its binaries sit under build/ (nccl-tests' Makefile's BUILDDIR). GC-AR and GC-EFA run them.
    nccl_tests_dir: NodePath = "/opt/nccl-tests"
    # The cluster-admin kubeconfig (kubeadm's /etc/kubernetes/admin.conf, under its own name) as the
    # kubernetes_control_plane role fetches it to the controller, in the inventory's folder: the
    # cluster's own folder (gpucluster.paths), never a checkout's. Converge makes it 0600; `up` hands
    # it to verify for the Kubernetes checks.
    kubeconfig_name: FileName = "admin.conf"

    @classmethod
    def for_capabilities(cls, nvidia_repo: bool) -> NodeContract:
        """The contract of a target whose nodes do (``nvidia_repo``) or do not reach NVIDIA's repositories
        (the stack outputs' ``capabilities.nvidia_repo``)."""
        method: ToolkitInstallMethod = "cuda_repo" if nvidia_repo else "distro"
        return cls(nvidia_driver_install_method=method, cuda_toolkit_install_method=method)

    @property
    def nccl_tests_bin_dir(self) -> str:
        """Where nccl-tests' binaries are (all_reduce_perf)."""
        return f"{self.nccl_tests_dir}/build"

    def kubeconfig_file(self, inventory_dir: Path, *sources: Mapping[str, Any]) -> Path:
        """Where the control plane's role fetches the kubeconfig: :data:`KUBECONFIG_VAR` from the first
        of ``sources`` that sets it (Ansible's order, as :meth:`overridden`), else ``kubeconfig_name``
        in ``inventory_dir`` (Ansible's ``inventory_dir``: the folder of the inventory file). The role's
        own default expression (:data:`KUBECONFIG_DEFAULT`) is that place too. Any other template is an
        InputError: only Ansible could resolve it, and converge (which makes the file 0600) and ``up``
        (which hands it to verify) must know the file; so is a relative path (Ansible would resolve it
        against the playbook's folder, which no reader here knows)."""
        source = next((s for s in sources if KUBECONFIG_VAR in s), None)
        value = None if source is None else source[KUBECONFIG_VAR]
        # Jinja ignores the blanks inside the braces: "{{inventory_dir}}/..." is the default too.
        if value is None or (isinstance(value, str) and "".join(value.split()) == _KUBECONFIG_DEFAULT):
            return inventory_dir / self.kubeconfig_name
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            raise InputError(f"{KUBECONFIG_VAR}: {value!r}: a template, which only Ansible resolves; converge and "
                             "up must know the file: give an absolute path on the controller, or leave it unset "
                             f"for {self.kubeconfig_name} beside the inventory")
        if not (isinstance(value, str) and value.startswith("/")):
            raise InputError(f"{KUBECONFIG_VAR}: {value!r}: an absolute path on the controller, or leave it "
                             f"unset for {self.kubeconfig_name} beside the inventory")
        return Path(value)

    def overridden(self, *sources: Mapping[str, Any]) -> NodeContract:
        """The contract as a node's roles applied it: each field's role variable (:data:`ROLE_VARS`)
        from the first of ``sources`` that sets it (Ansible's order: host variables, then all.vars),
        as Ansible takes it: that source decides, even where its value is a template (``{{ ... }}``,
        Ansible's to resolve), which keeps the contract's value rather than a later source's. The
        listen address's port is read after its last ':' even where the address is a template.
        A value the contract's own types refuse is an InputError naming the variable."""
        update: dict[str, Any] = {}
        for field, var in ROLE_VARS.items():
            source = next((s for s in sources if var in s), None)
            if source is None:
                continue
            value = source[var]
            if not (isinstance(value, str) and "{{" in value):
                update[field] = value
        source = next((s for s in sources if LISTEN_ADDRESS_VAR in s), None)
        if source is not None:
            # The monitoring role's listen address ("<address>:<port>") carries the port.
            value = source[LISTEN_ADDRESS_VAR]
            port = value.rpartition(":")[2] if isinstance(value, str) else ""
            if port.isdigit():
                update["node_exporter_port"] = int(port)
            elif not (isinstance(value, str) and "{{" in value):
                raise InputError(f"{LISTEN_ADDRESS_VAR}: {value!r} names no port (<address>:<port>)")
        if not update:
            return self
        try:
            return self.model_validate({**self.model_dump(), **update})
        except ValidationError as exc:
            var_of = {**ROLE_VARS, "node_exporter_port": LISTEN_ADDRESS_VAR}
            raise InputError([f"{var_of.get(str(e['loc'][0]), str(e['loc'][0]))}: {update.get(str(e['loc'][0]))!r}: "
                              f"{e['msg']}" for e in exc.errors()]) from None
