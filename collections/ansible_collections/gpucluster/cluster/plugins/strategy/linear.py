"""Strategy `gpucluster.cluster.linear`: Ansible's linear strategy run over Mitogen when Mitogen is installed.

Mitogen (pinned in requirements.txt) keeps one Python interpreter per host alive for the whole
run and ships each module once, instead of starting Python and unpacking the module on the host
for every task. On lab nodes it cut a no-op converge of 3 nodes from 391 s to 145 s on the same
loaded host (docs/roles.md, "Converge speed"). Task order, handlers and results are the linear
strategy's.

Without Mitogen (an ansible-playbook from another Python), or with GPUCLUSTER_MITOGEN=0, this is
plain ``linear``, with a warning in the first case.
"""

from __future__ import annotations

import os

from ansible.plugins.loader import strategy_loader
from ansible.utils.display import Display

_display = Display()
_Linear = strategy_loader.get("linear", class_only=True)

if os.environ.get("GPUCLUSTER_MITOGEN", "1") == "0":
    StrategyModule = _Linear
else:
    try:
        import ansible_mitogen.loaders  # checks the Ansible version first
        import ansible_mitogen.strategy
    except ImportError:
        _display.warning("gpucluster_linear: Mitogen is not installed; running the plain linear strategy "
                         "(pip install -r requirements.txt for the faster one).")
        StrategyModule = _Linear
    else:
        class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[no-redef]
            """Linear, with Mitogen's connection and module execution."""
