"""The project's own GPU burn, written with PyTorch: matrix products checked against a reference.

Self-contained (standard library plus a lazily imported ``torch``) so the runner ships this
very file to a node and runs it there: ``python3 burn_torch.py --seconds 60 --json``.

Per device and precision (fp32, tf32, bf16) it multiplies two random n x n matrices for the
given time. The first product is checked against a float64 reference (norm-wise, with a
tolerance fitting the precision); every later product must equal the first one element by
element (a faulty GPU gives different answers to the same question, which is also how
gpu-burn decides). TFLOP/s counts 2n^3 flops per product over the time the products themselves
took (CUDA events around each one; on a CPU, the clock around each), under the sustained load of
the products and their checks: the checks are memory passes that take about as long as a bf16
product on an H100, so a rate over the whole loop would read a healthy GPU at about 60% of its
product rate. ``wall_tflops`` is that whole-loop rate, kept as a figure.

``device="cpu"`` is a fallback for tests only (tiny matrices, no GPU): its figures are
labelled ``cpu-fallback`` and mean nothing for a GPU's health; tf32 does not exist on a CPU
and is computed in fp32 there, which the result says.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

PRECISIONS = ("fp32", "tf32", "bf16")

# Norm-wise relative error allowed between the first product and the float64 reference.
_REFERENCE_TOL = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 2e-2}
# Element-wise: later products against the first. Same inputs, same kernel: equal up to
# a rounding step where a library picks another reduction order.
_REPEAT_TOL = {"fp32": 1e-5, "tf32": 1e-3, "bf16": 1e-2}


@dataclass
class BurnResult:
    device: str
    name: str
    precision: str
    size: int
    seconds: float
    products: int = 0
    tflops: float | None = None  # the products' own rate (see the module docstring)
    wall_tflops: float | None = None  # products over the whole loop, checks included
    errors: int = 0  # wrong elements over all checked products
    reference_error: float | None = None  # norm-wise relative error of the first product
    reference_ok: bool = False
    mode: str = "gpu"  # "gpu" or "cpu-fallback"
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reference_ok and self.errors == 0 and self.products > 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _torch() -> Any:
    # Imported here, not at module level: the host running the suite needs no torch (and
    # neither does the type check, which runs before `make gpu-deps` installs it).
    return importlib.import_module("torch")


def torch_available() -> tuple[bool, str]:
    """Whether torch imports, and why not (for skip reasons)."""
    try:
        torch = _torch()
    except ImportError as exc:
        return False, f"PyTorch is not installed ({exc})"
    return True, f"torch {torch.__version__}"


def matmul_peak_tflops(device: str, precision: str, size: int, seconds: float) -> float:
    """Plain matrix-product rate PyTorch reaches (no checking): the figure burn results sit next to."""
    torch = _torch()
    dtype = _setup(torch, device, precision)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    c = torch.empty(size, size, device=device, dtype=dtype)
    torch.matmul(a, b, out=c)
    _sync(torch, device)
    n = 0
    start = time.perf_counter()
    while True:
        for _ in range(10):
            torch.matmul(a, b, out=c)
        n += 10
        _sync(torch, device)
        if time.perf_counter() - start >= seconds:
            break
    elapsed = time.perf_counter() - start
    return 2.0 * size**3 * n / elapsed / 1e12


def _setup(torch: Any, device: str, precision: str) -> Any:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if device.startswith("cuda"):
        # TF32 only where asked: an fp32 figure must be true fp32.
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return torch.bfloat16 if precision == "bf16" else torch.float32


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def burn(
    device: str,
    precision: str,
    size: int,
    seconds: float,
    *,
    inject_fault_at: int | None = None,
    seed: int = 1234,
) -> BurnResult:
    """Burn one device in one precision. ``inject_fault_at``: corrupt that product (tests)."""
    torch = _torch()
    dtype = _setup(torch, device, precision)
    is_gpu = device.startswith("cuda")
    name = torch.cuda.get_device_name(device) if is_gpu else "cpu"
    res = BurnResult(device=device, name=name, precision=precision, size=size, seconds=seconds,
                     mode="gpu" if is_gpu else "cpu-fallback")
    if not is_gpu:
        res.notes.append("cpu-fallback: a test of the burn logic, not a GPU measurement")
        if precision == "tf32":
            res.notes.append("tf32 does not exist on a CPU: computed in fp32")
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a64 = torch.randn(size, size, generator=gen, dtype=torch.float64)
    b64 = torch.randn(size, size, generator=gen, dtype=torch.float64)
    a = a64.to(device=device, dtype=dtype)
    b = b64.to(device=device, dtype=dtype)
    first = torch.matmul(a, b)
    # float64 reference of the inputs as rounded to `dtype`: only the product's error counts.
    ref = a.double() @ b.double()
    diff = (first.double() - ref).norm() / ref.norm()
    _sync(torch, device)
    res.reference_error = float(diff)
    res.reference_ok = bool(res.reference_error <= _REFERENCE_TOL[precision])
    if not res.reference_ok:
        res.notes.append(
            f"first product off the float64 reference by {res.reference_error:.3g} "
            f"(allowed {_REFERENCE_TOL[precision]:g})"
        )
    tol = _REPEAT_TOL[precision]
    bound = first.abs().float() * tol + tol
    c = torch.empty_like(first)
    wrong = torch.zeros((), dtype=torch.int64, device=device)
    products = 0
    product_s = 0.0
    if is_gpu:
        # Events are recorded on the current device's stream: this thread's device is the burnt one.
        torch.cuda.set_device(device)
    start = time.perf_counter()
    while True:
        marks = []
        for _ in range(10):
            if is_gpu:
                began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                began.record()
                torch.matmul(a, b, out=c)
                ended.record()
                marks.append((began, ended))
            else:
                t0 = time.perf_counter()
                torch.matmul(a, b, out=c)
                product_s += time.perf_counter() - t0
            if inject_fault_at is not None and products == inject_fault_at:
                c.view(-1)[0] += 1000.0
            wrong += ((c.float() - first.float()).abs() > bound).sum()
            products += 1
        _sync(torch, device)
        product_s += sum(began.elapsed_time(ended) for began, ended in marks) / 1000.0
        if time.perf_counter() - start >= seconds:
            break
    elapsed = time.perf_counter() - start
    res.products = products
    res.errors = int(wrong.item())
    flops = 2.0 * size**3 * products
    res.wall_tflops = flops / elapsed / 1e12
    res.tflops = flops / product_s / 1e12 if product_s > 0 else None
    return res


def devices() -> list[str]:
    torch = _torch()
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def burn_all(
    precisions: list[str], size: int, seconds: float, device_list: list[str] | None = None, peak_seconds: float = 0.0
) -> list[dict[str, Any]]:
    """Every GPU in parallel (one thread each: CUDA calls release the GIL), precision after precision."""
    from concurrent.futures import ThreadPoolExecutor

    devs = device_list if device_list is not None else devices()
    out: list[dict[str, Any]] = []
    for prec in precisions:
        with ThreadPoolExecutor(max_workers=max(1, len(devs))) as pool:
            results = list(pool.map(burn, devs, [prec] * len(devs), [size] * len(devs), [seconds] * len(devs)))
        for r in results:
            row = r.to_json()
            if peak_seconds > 0:
                row["matmul_peak_tflops"] = matmul_peak_tflops(r.device, prec, size, peak_seconds)
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="PyTorch GPU burn with reference checking")
    p.add_argument("--seconds", type=float, default=60.0, help="per precision")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--peak-seconds", type=float, default=0.0,
                   help="also measure the unchecked matmul rate for this long per GPU and precision")
    p.add_argument("--cpu-fallback", action="store_true", help="burn the CPU (tests only)")
    args = p.parse_args(argv)
    ok, why = torch_available()
    if not ok:
        print(json.dumps({"status": "unavailable", "reason": why}))
        return 2
    devs = ["cpu"] if args.cpu_fallback else devices()
    if not devs:
        print(json.dumps({"status": "unavailable", "reason": "torch sees no CUDA device"}))
        return 2
    rows = burn_all([x for x in args.precisions.split(",") if x], args.size, args.seconds, devs, args.peak_seconds)
    status = "ok" if all(r["ok"] for r in rows) else "failed"
    print(json.dumps({"status": status, "engine": "burn_torch", "torch": why, "results": rows}))
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
