"""The Pulumi program: load the stack's cluster spec once, deploy its target, export the outputs.

The spec is read from the stack file ``Pulumi.<stack>.yaml`` at the repository root through
:func:`gpucluster.spec.load_spec`, the one validation path every command uses, so ``pulumi up``
and ``gpucluster spec validate``/``plan`` can never disagree on what a file means. Values that
reach Pulumi's config from elsewhere (an ESC environment, ``--config``) are not in that file:
the program compares them and stops rather than deploying something the file does not say.

Before the target constructs anything, the program installs the policy gate (``stacks/gate.py``):
the cluster policy (``stacks/policy.py``) is judged by ``pulumi preview`` and ``pulumi up``
themselves, over the resources the engine registers, and a violation stops the run.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # Pulumi runs this file from stacks/; our packages live at the root
    sys.path.insert(0, str(ROOT))

import pulumi  # noqa: E402
from pydantic import TypeAdapter, ValidationError  # noqa: E402

from gpucluster.errors import InputError  # noqa: E402
from gpucluster.spec import Cluster, load_spec  # noqa: E402
from gpucluster.spec.loader import NAMESPACE, read_stack_file, spec_mapping  # noqa: E402
from gpucluster.spec.models import Secret, SshPublicKeyText  # noqa: E402
from stacks.gate import PolicyGate  # noqa: E402


def _unmask(file_value: Any, live_value: Any) -> Any:
    """``file_value`` with each ``{secure: ...}`` replaced by what the engine decrypted there."""
    if Secret.is_secure_value(file_value):
        return live_value
    if isinstance(file_value, dict) and isinstance(live_value, dict):
        return {k: _unmask(v, live_value.get(k)) for k, v in file_value.items()}
    if isinstance(file_value, list) and isinstance(live_value, list) and len(file_value) == len(live_value):
        return [_unmask(v, w) for v, w in zip(file_value, live_value, strict=True)]
    return file_value


def _live(config: pulumi.Config, key: str) -> Any:
    live = config.get(key)
    if live is None:
        return None
    try:
        return json.loads(live)
    except json.JSONDecodeError:
        return live


def _check_config_matches(path: Path) -> None:
    file_values = spec_mapping(read_stack_file(path), str(path))
    config = pulumi.Config(NAMESPACE)
    for key, value in file_values.items():
        live = config.get(key)
        if live is None:
            continue
        parsed = _live(config, key)
        value = _unmask(value, parsed)
        if parsed != value and live != value:
            raise InputError(f"{NAMESPACE}:{key}: Pulumi config differs from {path.name}; edit the stack file only")


def reveal_secrets(cluster: Cluster, live_target: Any) -> Cluster:
    """The cluster with the target's secret SSH key as the engine decrypted it (``live_target``).

    The stack file holds only ciphertext; Pulumi hands the program the plaintext through its
    config. The plaintext is held to the same shape as a key written in clear.
    """
    target = cluster.spec.target
    key = getattr(target, "ssh_public_key", None)
    if not isinstance(key, Secret):
        return cluster
    plain = live_target.get("ssh_public_key") if isinstance(live_target, dict) else None
    try:
        text = TypeAdapter(SshPublicKeyText).validate_python(plain)
    except ValidationError:
        raise InputError(f"{NAMESPACE}:target.ssh_public_key: the decrypted secret is not an OpenSSH public key "
                         "(value not shown)") from None
    spec = cluster.spec.model_copy(update={"target": target.model_copy(update={"ssh_public_key": text})})
    return dataclasses.replace(cluster, spec=spec)


def load() -> Cluster:
    path = ROOT / f"Pulumi.{pulumi.get_stack()}.yaml"
    _check_config_matches(path)
    return reveal_secrets(load_spec(path), _live(pulumi.Config(NAMESPACE), "target"))


def program(cluster: Cluster, gate: PolicyGate | None = None) -> Mapping[str, Any]:
    """Deploy ``cluster``'s target under the policy gate; return the stack outputs."""
    gate = gate if gate is not None else PolicyGate()
    gate.install()
    target = importlib.import_module(f"stacks.targets.{cluster.spec.target.kind}")
    outputs: Mapping[str, Any] = target.deploy(cluster)
    gate.seal()
    return outputs


def main() -> None:
    try:
        cluster = load()
    except InputError as exc:
        raise pulumi.RunError("\n".join(exc.lines())) from None
    for key, value in program(cluster).items():
        pulumi.export(key, value)


if __name__ == "__main__":
    main()
