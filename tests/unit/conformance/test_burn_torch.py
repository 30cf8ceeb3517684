"""The PyTorch burn's reference checking, on CPU with tiny matrices.

The burn is a self-contained script that runs under a node's own Python, so these tests run it
the same way: as a file, in an interpreter that has torch (``make gpu-deps`` makes
``.venv-torch``; ``GPUCLUSTER_TORCH_PYTHON`` names another). Without one they skip, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.conformance import burn_torch
from gpucluster.conformance.gpu_checks import burn_problems

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

SCRIPT = Path(burn_torch.__file__)
REPO = Path(__file__).resolve().parents[3]


def _torch_python() -> tuple[str | None, str]:
    named = os.environ.get("GPUCLUSTER_TORCH_PYTHON")
    candidates = [named] if named else [str(REPO / ".venv-torch" / "bin" / "python"), sys.executable]
    for c in candidates:
        if c and Path(c).is_file() and subprocess.run([c, "-c", "import torch"], capture_output=True).returncode == 0:
            return c, f"torch in {c}"
    return None, (f"no Python with torch ({', '.join(str(c) for c in candidates)}): "
                  "make gpu-deps, or set GPUCLUSTER_TORCH_PYTHON")


TORCH_PYTHON, WHY = _torch_python()
needs_torch = pytest.mark.skipif(TORCH_PYTHON is None, reason=WHY)


def _run(code: str) -> object:
    """Run ``code`` in the torch interpreter with the burn script loaded as ``b``; its last
    stdout line is JSON."""
    prelude = ("import importlib.util, json, sys\n"
               f"spec = importlib.util.spec_from_file_location('burn_torch', {str(SCRIPT)!r})\n"
               "b = importlib.util.module_from_spec(spec); sys.modules['burn_torch'] = b; spec.loader.exec_module(b)\n")
    assert TORCH_PYTHON is not None
    res = subprocess.run([TORCH_PYTHON, "-c", prelude + code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _burn(*args: object, **kwargs: object) -> dict:
    call = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    out = _run(f"print(json.dumps(b.burn({call}).to_json()))")
    assert isinstance(out, dict)
    return out


def test_script_needs_nothing_but_the_standard_library_to_load():
    # The node runs this file with its own python3: a project import would break it there.
    res = subprocess.run([sys.executable, "-I", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "--cpu-fallback" in res.stdout


@needs_torch
@pytest.mark.parametrize("precision", burn_torch.PRECISIONS)
def test_correct_products_pass_reference_check(precision):
    r = _burn("cpu", precision, 48, 0.05)
    assert r["mode"] == "cpu-fallback" and r["products"] >= 10
    assert r["reference_ok"] and r["errors"] == 0 and r["ok"]
    assert r["tflops"] is not None and r["tflops"] > 0
    # The verdict's rate is the products' own; the whole loop (checks included) is slower.
    assert 0 < r["wall_tflops"] < r["tflops"]


@needs_torch
def test_injected_fault_is_counted():
    r = _burn("cpu", "fp32", 48, 0.05, inject_fault_at=2)
    assert r["errors"] == 1 and not r["ok"]


@needs_torch
def test_cpu_tf32_is_labelled():
    r = _burn("cpu", "tf32", 16, 0.01)
    assert any("tf32 does not exist on a CPU" in n for n in r["notes"])


@needs_torch
def test_script_entry_point_cpu_fallback():
    assert TORCH_PYTHON is not None
    res = subprocess.run([TORCH_PYTHON, str(SCRIPT), "--cpu-fallback", "--size", "32", "--seconds", "0.02",
                          "--precisions", "fp32,bf16"], capture_output=True, text=True, timeout=300)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert res.returncode == 0 and out["status"] == "ok" and len(out["results"]) == 2


@needs_torch
def test_unknown_precision_rejected():
    out = _run("try:\n    b.burn('cpu', 'fp8', 8, 0.01)\nexcept ValueError as e:\n    print(json.dumps(str(e)))\n"
               "else:\n    print(json.dumps(None))")
    assert out is not None


def test_burn_verdict_needs_zero_errors_and_floor():
    ok = {"device": "cuda:0", "precision": "bf16", "tflops": 700.0, "errors": 0, "products": 100,
          "reference_ok": True}
    assert burn_problems([ok], {"bf16": 600.0}) == []
    assert burn_problems([dict(ok, tflops=500.0)], {"bf16": 600.0})
    assert burn_problems([dict(ok, errors=3)], {"bf16": 600.0})
    assert burn_problems([dict(ok, products=0)], {"bf16": 600.0})
    assert burn_problems([ok], {})  # no floor: not a pass
    # A GPU held to 60% of the H100's dense BF16 peak fails the shipped floor and says its share.
    from gpucluster.spec import load_profiles

    h100 = load_profiles()["h100-sxm-8"]
    floors, peaks = h100.floors.burn_tflops, h100.gpu.burn_peak_tflops
    capped = dict(ok, tflops=0.6 * peaks["bf16"])
    assert burn_problems([capped], floors, peaks) == [
        f"{ok['device']} bf16: 593.7 TFLOP/s under the floor 644.0, 60% of the 989.5 peak"]
