"""dcgm-exporter reads the node's one DCGM host engine (nvidia-dcgm, which gpu_validation runs) instead
of embedding a second one in its own process."""

from __future__ import annotations

from gpucluster.render.os_packages import DCGM_HOSTENGINE
from tests.unit.roles.render import first_host, host_context, inventory_for, render_template, role_vars


def test_the_exporter_connects_to_the_nodes_host_engine() -> None:
    inventory = inventory_for("infiniband")
    ctx = role_vars("monitoring", host_context(inventory, first_host(inventory, "gpu")))
    unit = render_template("monitoring", "dcgm-exporter.service.j2",
                           {**ctx, "__monitoring_dcgm_exporter_path": "/usr/bin/dcgm-exporter"})
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(f"--remote-hostengine-info {DCGM_HOSTENGINE}"), exec_start
    assert DCGM_HOSTENGINE == "localhost:5555"  # nv-hostengine's default listener (the constant's source)
    assert "Wants=nvidia-dcgm.service" in unit and "After=nvidia-dcgm.service" in unit
