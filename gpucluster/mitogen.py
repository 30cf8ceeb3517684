"""Mitogen, opt-in: the environment that runs a converge over Mitogen's own linear strategy.

The default is Ansible's stock ``linear`` strategy (ansible.cfg). Mitogen keeps one Python per
host for the whole run and ships each module once, which shortens a converge, but it follows
ansible-core's internals and lags its releases, so it is never the default:
``GPUCLUSTER_MITOGEN=1`` (or ``gpucluster converge --mitogen``) turns it on, through Mitogen's
public plugin path and Ansible's documented ``ANSIBLE_STRATEGY`` / ``ANSIBLE_STRATEGY_PLUGINS``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from gpucluster.errors import InputError

ENV_SWITCH = "GPUCLUSTER_MITOGEN"
STRATEGY = "mitogen_linear"


def wanted(flag: bool = False) -> bool:
    return flag or os.environ.get(ENV_SWITCH, "0") == "1"


def strategy_env() -> dict[str, str]:
    """The variables that make ansible-playbook run the play over Mitogen's linear strategy."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        raise InputError(f"{ENV_SWITCH}=1: Mitogen is not installed in this Python (pip install mitogen)")
    plugins = Path(spec.origin).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": STRATEGY}
