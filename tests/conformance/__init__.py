"""The conformance checks; installed, this package is ``gpucluster.suite`` (see pyproject.toml)."""
