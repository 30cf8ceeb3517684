"""What a pool's image ships, against the bill of materials, before anything is created.

A pool names the manifest of the image it boots (``node_pools[].image_manifest``; on Azure the
manifest whose ``urns`` list the target's image is found without one). For each component converge
adopts or stops on (the driver and the NVIDIA container toolkit on GPU pools, EFA on pools whose
platform has EFA rails, containerd on the pools container_runtime runs on), the one decision the roles take,
:func:`gpucluster.render.os_packages.preinstalled_action`, is taken here on the manifest's version:
where it says ``fail``, converge would stop on every node of the pool after the instances are
billing, so ``spec validate`` and ``preflight`` stop first (exit 2) and name the two ways out: a
bill-of-materials overlay pinning what the image ships (for containerd, lowering its floor), or
another image (for containerd, the policy adopt_or_replace, which replaces it). A container toolkit
at or above the pin is adopted (AT_LEAST_COMPONENTS): only an older one can stop converge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpucluster.render.os_packages import (
    AT_LEAST_COMPONENTS,
    FLOOR_COMPONENTS,
    IMAGE_CONTAINERD,
    deb_version_compare,
    preinstalled_action,
    upstream_version,
    version_matches,
)
from gpucluster.spec.cluster import Cluster, pool_platform
from gpucluster.spec.models import AzureTarget, Bom, ClusterSpec, ImageComponent, ImageManifest, NodePool
from gpucluster.spec.os import pool_os

NS = "gpucluster"
CLOUD_TARGETS = ("aws", "azure", "oci")
OVERLAY_DOC = 'README, "Bill of materials overlay"'


@dataclass(frozen=True)
class Decision:
    """The roles' decision for one component of one pool, taken on the manifest's version."""

    pool: str
    where: str
    manifest: str
    component: str
    found: str
    pin: str
    policy: str
    runfile: bool
    action: str
    message: str
    # The image's package (containerd: moby-containerd, containerd.io); '' where the manifest names none.
    package: str = ""


def pool_manifest(spec: ClusterSpec, pool: NodePool, manifests: Mapping[str, ImageManifest]) -> ImageManifest | None:
    """The manifest of the image ``pool`` boots: the pool's ``image_manifest``, else on Azure the one
    whose ``urns`` list the target's image; None where neither names one."""
    if pool.image_manifest:
        return manifests.get(pool.image_manifest)
    if isinstance(spec.target, AzureTarget):
        return next((m for m in manifests.values() if spec.target.image in m.urns), None)
    return None


def reference_problems(spec: ClusterSpec, manifests: Mapping[str, ImageManifest]) -> list[str]:
    """A pool's ``image_manifest`` that names no manifest, or one of another target, OS or image."""
    problems = []
    for i, pool in enumerate(spec.node_pools):
        if not pool.image_manifest:
            continue
        where = f"{NS}.node_pools[{i}].image_manifest"
        manifest = manifests.get(pool.image_manifest)
        if manifest is None:
            known = ", ".join(sorted(manifests)) or "none shipped"
            problems.append(f"{where}: no image manifest {pool.image_manifest!r} in gpucluster/data/images "
                            f"(one of {known})")
            continue
        if manifest.target != spec.target.kind:
            problems.append(f"{where}: {manifest.name} describes an {manifest.target} image; this stack's target "
                            f"is {spec.target.kind}")
            continue
        if manifest.os != pool_os(spec, pool):
            problems.append(f"{where}: {manifest.name} is a {manifest.os} image; the pool runs {pool_os(spec, pool)} "
                            "(target.os or the pool's os)")
        if isinstance(spec.target, AzureTarget) and manifest.urns and spec.target.image not in manifest.urns:
            problems.append(f"{where}: {manifest.name} describes {', '.join(manifest.urns)}; the target boots "
                            f"{spec.target.image}")
    return problems


def _component(manifest: ImageManifest, name: str) -> ImageComponent | None:
    return next((comp for key, comp in manifest.components.items() if key == name), None)


def _pins(bom: Bom) -> dict[str, str]:
    return {"nvidia-driver": bom.nvidia_driver.version, "efa": bom.efa.version,
            "container-toolkit": bom.container_toolkit.version, "containerd": bom.containerd.floor}


def _satisfies(component: str, found: str, pin: str) -> bool:
    """``found`` is what converge adopts: the pin, or for a floor component at least the floor (for the
    container toolkit at least the pin)."""
    if component in FLOOR_COMPONENTS or component in AT_LEAST_COMPONENTS:
        return deb_version_compare(found, pin) >= 0
    return version_matches(found, pin)


def _overlay(component: str, found: str, bom: Bom) -> str:
    """The overlay lines that pin what the image ships."""
    if component == "nvidia-driver":
        branch = found.split(".", 1)[0]
        if branch != bom.nvidia_driver.branch:
            return f'nvidia_driver: {{branch: "{branch}", version: "{found}"}}'
        return f'nvidia_driver: {{version: "{found}"}}'
    if component == "containerd":
        return f'containerd: {{floor: "{found}"}}'
    if component == "container-toolkit":
        return f'container_toolkit: {{version: "{upstream_version(found)}"}}'
    return f'efa: {{version: "{found}"}}'


def _shipping(component: str, pin: str, manifest: ImageManifest, manifests: Mapping[str, ImageManifest]) -> list[str]:
    """Manifests of the same target and OS whose image ships ``pin``."""
    out = []
    for other in manifests.values():
        comp = _component(other, component)
        if (other.target == manifest.target and other.os == manifest.os and other.arch == manifest.arch
                and comp is not None and comp.version and _satisfies(component, comp.version, pin)):
            out.append(other.name)
    return sorted(out)


def _components(cluster: Cluster, pool: NodePool) -> list[str]:
    """What converge decides on for ``pool``: the driver on GPU pools (nvidia_driver), EFA where the
    pool's platform has EFA rails (rdma_fabric, on GPU and storage nodes), the NVIDIA container toolkit
    on GPU pools (container_runtime installs it there: the GPU Operator's toolkit is off) and containerd
    on GPU and control-plane pools (container_runtime: playbooks/converge-nodes.yml, deploy-kubernetes.yml)."""
    out = []
    if "gpu" in pool.roles:
        out.append("nvidia-driver")
    platform = cluster.platforms.get(pool_platform(cluster.spec, pool))
    if platform is not None and platform.efa_interfaces and ({"gpu", "storage"} & set(pool.roles)):
        out.append("efa")
    if "gpu" in pool.roles:
        out.append("container-toolkit")
    if {"gpu", "control_plane"} & set(pool.roles):
        out.append("containerd")
    return out


def _found(component: str, comp: ImageComponent | None, bom: Bom) -> str | None:
    """The version the decision is taken on; None where the manifest cannot tell."""
    if comp is None:
        return None
    if comp.version:
        return comp.version
    # Only a branch is published ("GPU-580"): another branch than the pin's certainly differs.
    if component == "nvidia-driver" and comp.branch != bom.nvidia_driver.branch:
        return f"branch {comp.branch}"
    return None


def decisions(cluster: Cluster, manifests: Mapping[str, ImageManifest]) -> tuple[list[Decision], list[str]]:
    """The roles' decision per pool and component where the pool's manifest gives the version, and a
    warning for each one it cannot tell."""
    spec, bom = cluster.spec, cluster.bom
    pins = _pins(bom)
    out: list[Decision] = []
    unknown: list[str] = []
    for i, pool in enumerate(spec.node_pools):
        where = f"{NS}.node_pools[{i}]"
        manifest = pool_manifest(spec, pool, manifests)
        needed = _components(cluster, pool)
        if manifest is None:
            # A pool whose only decision is containerd boots a plain OS image (a control-plane pool):
            # without a manifest it installs the OS archive's containerd, nothing to warn about.
            if set(needed) - set(FLOOR_COMPONENTS) and spec.target.kind in CLOUD_TARGETS:
                unknown.append(f"{where} ({pool.name}): no image manifest names what its image ships, so nothing "
                               f"tells whether converge adopts its {' and '.join(needed)} or stops "
                               "(node_pools[].image_manifest, gpucluster/data/images)")
            continue
        for component in needed:
            comp = _component(manifest, component)
            pin = pins[component]
            found = _found(component, comp, bom)
            floor = component in FLOOR_COMPONENTS
            if found is None:
                stated = (f"only the {component} branch {comp.branch}" if comp is not None
                          else f"no {component} version")
                if floor:
                    which = comp.package if comp is not None and comp.package else " or ".join(IMAGE_CONTAINERD)
                    unknown.append(f"{where} ({pool.name}): image {manifest.name} states {stated}; where it carries "
                                   f"{which}, converge adopts it only if it is at least {pin}, else with "
                                   f"preinstalled: {pool.preinstalled} it "
                                   f"{'stops' if pool.preinstalled == 'adopt_or_fail' else 'replaces it'}")
                    continue
                if component in AT_LEAST_COMPONENTS:
                    unknown.append(f"{where} ({pool.name}): image {manifest.name} states {stated}; where it carries "
                                   f"one, converge adopts it only if it is at least {pin}, else with preinstalled: "
                                   f"{pool.preinstalled} it "
                                   f"{'stops' if pool.preinstalled == 'adopt_or_fail' else 'upgrades it to the pin'}")
                    continue
                unknown.append(f"{where} ({pool.name}): image {manifest.name} states {stated}; converge adopts it "
                               f"only if it is exactly {pin}, else with preinstalled: {pool.preinstalled} it "
                               f"{'stops' if pool.preinstalled == 'adopt_or_fail' else 'replaces it'}")
                continue
            runfile = comp is not None and comp.installed_by == "runfile"
            package = (comp.package or "") if comp is not None else ""
            if floor:
                # The manifest says which package, not which of its family are installed: a replace
                # removes those of the family that are (the role's probe), at most these.
                decided = preinstalled_action(component, pin, found, runfile, pool.preinstalled, floor=True,
                                              package=package, removes=list(IMAGE_CONTAINERD.get(package, ())))
            else:
                decided = preinstalled_action(component, pin, found, runfile, pool.preinstalled)
            out.append(Decision(pool=pool.name, where=where, manifest=manifest.name, component=component,
                                found=found, pin=pin, policy=pool.preinstalled, runfile=runfile,
                                action=decided["action"], message=decided["message"], package=package))
    return out, unknown


def image_findings(cluster: Cluster, manifests: Mapping[str, ImageManifest]) -> tuple[list[str], list[str]]:
    """Lines where converge would stop (exit 2 before anything is created) and warnings."""
    found, warnings = decisions(cluster, manifests)
    problems: list[str] = []
    for d in found:
        if d.component in FLOOR_COMPONENTS:
            _floor_finding(d, manifests, cluster.bom, problems, warnings)
            continue
        at_least = d.component in AT_LEAST_COMPONENTS
        if d.action == "replace":
            verb = "upgrades" if at_least else "replaces"
            warnings.append(f"{d.where} ({d.pool}): converge {verb} image {d.manifest}'s {d.component} {d.found} "
                            f"{'to' if at_least else 'with'} {d.pin} on every node (preinstalled: adopt_or_replace)")
        if d.action != "fail":
            continue
        manifest = manifests[d.manifest]
        others = _shipping(d.component, d.pin, manifest, manifests)
        shipped = f"{d.pin} or later" if at_least else d.pin
        image = (f"boot an image that ships {shipped} ({', '.join(others)} in gpucluster/data/images)" if others
                 else f"boot an image that ships {shipped} and describe it in gpucluster/data/images "
                      "(none of the shipped manifests does)")
        overlay = (f"a bill-of-materials overlay beside the stack file pinning what the image ships "
                   f"(gpucluster:bom: <file> holding {_overlay(d.component, d.found, cluster.bom)}; {OVERLAY_DOC})"
                   if not d.found.startswith("branch ") else
                   "a bill-of-materials overlay pinning the image's driver (its exact version is not published: "
                   "read it on a node with nvidia-smi)")
        # The runfile case stops whatever the policy; its own message says why.
        why = d.message.rstrip(".") if d.runfile else f"the pool's policy is preinstalled: {d.policy}"
        rather = "" if d.runfile else (f". preinstalled: adopt_or_replace would "
                                       f"{'upgrade it to the pin' if at_least else 'replace it'} on every node instead")
        newer = " (an image's at or above it is adopted)" if at_least else ""
        problems.append(f"{d.where} ({d.pool}): image {d.manifest} ships {d.component} {d.found}, the bill of "
                        f"materials pins {d.pin}{newer} and {why}: converge would stop on every node of the pool, "
                        f"after its instances are billing. Two ways out: {overlay}; or {image}{rather}")
    return problems, warnings


def _floor_finding(d: Decision, manifests: Mapping[str, ImageManifest], bom: Bom, problems: list[str],
                   warnings: list[str]) -> None:
    """A floor component's line (containerd): the image's package, its version and the floor; its
    two ways out are an overlay lowering the floor and the policy that replaces the package."""
    what = f"{d.component} {d.found}" + (f" ({d.package})" if d.package else "")
    family = ", ".join(IMAGE_CONTAINERD.get(d.package, ())) or f"the image's {d.component}"
    if d.action == "replace":
        warnings.append(f"{d.where} ({d.pool}): converge replaces image {d.manifest}'s {what}, below the floor "
                        f"{d.pin}, with the OS archive's {d.component} on every node, removing {family} where "
                        "installed (preinstalled: adopt_or_replace)")
    if d.action != "fail":
        return
    others = _shipping(d.component, d.pin, manifests[d.manifest], manifests)
    image = f" (or boot an image whose {d.component} is {d.pin} or later: {', '.join(others)})" if others else ""
    problems.append(f"{d.where} ({d.pool}): image {d.manifest} ships {what}, below the bill of materials' "
                    f"{d.component} floor {d.pin}, and the pool's policy is preinstalled: {d.policy}: converge would "
                    "stop on every node of the pool, after its instances are billing. Two ways out: a "
                    "bill-of-materials overlay beside the stack file lowering the floor (gpucluster:bom: <file> "
                    f"holding {_overlay(d.component, d.found, bom)}; {OVERLAY_DOC}); or the pool's preinstalled: "
                    f"adopt_or_replace, which removes {family} where installed and installs the OS archive's "
                    f"{d.component}{image}")
