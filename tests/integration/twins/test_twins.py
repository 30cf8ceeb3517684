"""Every platform twin, from nothing to its verdicts, on every CI run (`make twins`; `make test`).

Each Pulumi.twin-*.yaml at the repository root is a real target's stack file with a
gpucluster:twin block. `gpucluster twin check` takes it through the user's own commands: up
--fresh (spec, the lab shaped like the platform, the target's outputs, inventory, converge,
verify), every node rebooted, converge again (nothing may change: idempotent roles, and no
boot service undid their work), verify (no check may fail),
the twin file's fault injected, verify (exactly the fault's checks on that node must fail), then
down. The report of each goes to runs/twins/<twin>.json, its progress to runs/twins/<twin>.log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.twin import run_check

REPO = Path(__file__).resolve().parents[3]
TWIN_STACKS = sorted(REPO.glob("Pulumi.twin-*.yaml"))
OUT = REPO / "runs" / "twins"


@pytest.mark.parametrize("stack", TWIN_STACKS, ids=lambda p: p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
def test_the_twin_converges_verifies_survives_a_reboot_and_names_its_fault(stack: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    name = stack.name.removeprefix("Pulumi.").removesuffix(".yaml")
    with (OUT / f"{name}.log").open("w", encoding="utf-8") as log:
        report = run_check(stack.relative_to(REPO), log)
    (OUT / f"{name}.json").write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    steps = "\n".join(f"{'ok  ' if s.ok else 'FAIL'} {s.name} ({s.seconds:.0f} s): {s.detail}" for s in report.steps)
    print(f"\ntwin {report.twin} ({stack.name}):\n{steps}")
    assert report.ok, f"twin {report.twin}: a step did not hold (log runs/twins/{name}.log):\n{steps}"
