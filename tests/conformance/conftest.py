"""The conformance suite: its wiring (inventory, the `node` fixture, markers, result collection,
the run folder's reports) is the pytest plugin :mod:`gpucluster.conformance.plugin`.

Run it with ``gpucluster verify`` or directly::

    pytest tests/conformance --inventory inventory.yml [--run-dir DIR] [-n 4 --dist loadgroup]

This folder ships inside the package as ``gpucluster.suite``, so `gpucluster verify` runs the
same checks from an installed wheel as from a checkout.
"""

pytest_plugins = ["gpucluster.conformance.plugin"]
