"""The one ``no_log`` expression every task that handles a secret carries.

It hides the task's arguments and results unless the operator sets ``gpucluster_debug_no_log``
(``gpucluster converge --debug-no-log``) to see why a secret-handling task failed.
"""

NO_LOG = "{{ not (gpucluster_debug_no_log | default(false) | bool) }}"
