"""The PyTorch burn's reference checking, on CPU with tiny matrices (torch from requirements-gpu.in)."""

from __future__ import annotations

import json

import pytest

from gpucluster.conformance import burn_torch
from gpucluster.conformance.gpu_checks import burn_problems

HAVE_TORCH, WHY = burn_torch.torch_available()
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason=f"{WHY}: pip install -r requirements-gpu.in to run it")


@needs_torch
@pytest.mark.parametrize("precision", burn_torch.PRECISIONS)
def test_correct_products_pass_reference_check(precision):
    r = burn_torch.burn("cpu", precision, 48, 0.05)
    assert r.mode == "cpu-fallback" and r.products >= 10
    assert r.reference_ok and r.errors == 0 and r.ok
    assert r.tflops is not None and r.tflops > 0


@needs_torch
def test_injected_fault_is_counted():
    r = burn_torch.burn("cpu", "fp32", 48, 0.05, inject_fault_at=2)
    assert r.errors == 1 and not r.ok


@needs_torch
def test_cpu_tf32_is_labelled():
    r = burn_torch.burn("cpu", "tf32", 16, 0.01)
    assert any("tf32 does not exist on a CPU" in n for n in r.notes)


@needs_torch
def test_script_entry_point_cpu_fallback(capsys):
    rc = burn_torch.main(["--cpu-fallback", "--size", "32", "--seconds", "0.02", "--precisions", "fp32,bf16"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["status"] == "ok" and len(out["results"]) == 2


def test_unknown_precision_rejected():
    if not HAVE_TORCH:
        pytest.skip(WHY)
    with pytest.raises(ValueError):
        burn_torch.burn("cpu", "fp8", 8, 0.01)


def test_burn_verdict_needs_zero_errors_and_floor():
    ok = {"device": "cuda:0", "precision": "bf16", "tflops": 700.0, "errors": 0, "products": 100,
          "reference_ok": True}
    assert burn_problems([ok], {"bf16": 600.0}) == []
    assert burn_problems([dict(ok, tflops=500.0)], {"bf16": 600.0})
    assert burn_problems([dict(ok, errors=3)], {"bf16": 600.0})
    assert burn_problems([dict(ok, products=0)], {"bf16": 600.0})
    assert burn_problems([ok], {})  # no floor: not a pass
