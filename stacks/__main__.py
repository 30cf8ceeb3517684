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

from gpucluster.errors import InputError  # noqa: E402
from gpucluster.spec import Cluster, load_spec  # noqa: E402
from gpucluster.spec.loader import NAMESPACE, _read_yaml, spec_mapping  # noqa: E402
from stacks.gate import PolicyGate  # noqa: E402


def _check_config_matches(path: Path) -> None:
    file_values = spec_mapping(_read_yaml(path, "stack file"), str(path))
    config = pulumi.Config(NAMESPACE)
    for key, value in file_values.items():
        live = config.get(key)
        if live is None:
            continue
        try:
            parsed = json.loads(live)
        except json.JSONDecodeError:
            parsed = live
        if parsed != value and live != value:
            raise InputError(f"{NAMESPACE}:{key}: Pulumi config differs from {path.name}; edit the stack file only")


def load() -> Cluster:
    path = ROOT / f"Pulumi.{pulumi.get_stack()}.yaml"
    _check_config_matches(path)
    return load_spec(path)


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
