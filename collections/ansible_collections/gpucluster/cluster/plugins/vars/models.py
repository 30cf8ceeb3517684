"""Imports the spec's and the outputs' pydantic models in Ansible's main process, and sets no variable.

The render filters (filter/render.py) validate what a role hands them through these models. Ansible
forks a worker per host-task (multiprocessing's fork context) and loads filter files there, so a
model imported by a filter would cost every such worker the import (about 0.4 s of CPU; half a no-op
converge's controller CPU once went to such imports, docs/roles.md "Converge speed"). Ansible loads
the enabled vars plugins in its main process when it reads the inventory, before it forks any
worker: the models imported here are in every worker's ``sys.modules`` from the start.
Enabled in ansible.cfg (``vars_plugins_enabled``); it runs at the inventory stage only, once.
Where ``gpucluster converge`` names a folder for the run's compiled templates
(``GPUCLUSTER_JINJA_CACHE_DIR``), it installs that cache here too (gpucluster/jinja_cache.py).
It then freezes the main process's objects (``gc.freeze()``): without it, a worker's full garbage
collection walks, and copies the pages of, every object the main process imported, the models too.
"""

from __future__ import annotations

import gc
import os
from typing import Any

from ansible.plugins.vars import BaseVarsPlugin
from ansible.utils.display import Display

# Imported for the workers Ansible forks after reading the inventory (see above). A speed-up only:
# where the package is not importable, the render filters say so when a role calls one.
try:
    import gpucluster.outputs
    import gpucluster.spec.models  # noqa: F401
except ImportError:
    pass

# Compiled templates shared by the workers, in the folder `gpucluster converge` made for the run
# (gpucluster/jinja_cache.py): installed here, in the main process, so every worker forks with it.
if os.environ.get("GPUCLUSTER_JINJA_CACHE_DIR"):
    try:
        from gpucluster import jinja_cache
    except ImportError:
        pass
    else:
        if not jinja_cache.install(os.environ["GPUCLUSTER_JINJA_CACHE_DIR"]):
            Display().warning(f"{os.environ['GPUCLUSTER_JINJA_CACHE_DIR']}: not this user's own 0700 folder; "
                              "templates are compiled without the run's cache")

# What the main process holds now (Ansible's modules, the models) lives for the whole run (its garbage
# collected first, so none of it is kept): frozen, a
# worker's garbage collection never walks it, so a worker neither pays for walking those objects nor
# copies the pages their headers sit on (gc.freeze(), for processes that fork without exec).
gc.collect()
gc.freeze()

DOCUMENTATION = """
    name: models
    short_description: Loads the spec's models in Ansible's main process for the render filters
    description:
      - Imports gpucluster.spec.models and gpucluster.outputs once, before Ansible forks its workers,
        so the render filters' validation costs no worker an import. Sets no variable.
    options:
      stage:
        description: When the plugin runs; it sets nothing, so once, when the inventory is read.
        type: str
        default: inventory
        choices: [all, task, inventory]
"""


class VarsModule(BaseVarsPlugin):
    def get_vars(self, loader: Any, path: str, entities: Any) -> dict[str, Any]:
        return {}
