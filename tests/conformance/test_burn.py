"""GPU burn (GC-BURN): gpu-burn where installed, and the project's PyTorch burn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.conformance import burn_torch, run_gpu_burn
from gpucluster.conformance.gpu_checks import burn_problems, gpu_burn_rows
from gpucluster.conformance.remote import node_folder, quote

pytestmark = pytest.mark.gpu
# The burn script's name in a private folder of the run on the node, never a fixed path in /var/tmp.
TORCH_SCRIPT = "burn_torch.py"


@pytest.mark.check("GC-BURN-001")
def test_gpu_burn(node, burn_options, fabric):
    """Every GPU under a sustained matrix-product load MUST produce zero wrong results and reach the profile's TFLOP/s floor for each tested precision."""  # noqa: E501
    node.require_gpus()
    enabled, seconds = burn_options
    if not enabled:
        pytest.skip("burn switched off (--no-burn)")
    floors = node.profile.floors.burn_tflops
    remote = node.remote()
    # The node's GPUs are this check's alone while it burns (a peer's GPUDirect RDMA waits).
    with fabric.gpus_held([node.name]):
        xid_before = run_gpu_burn.xid_count(remote)
        rows: list[dict] = []
        problems: list[str] = []
        engines = []
        burn_dir = node.info.contract.gpu_burn_dir
        if node.run(f"test -x {quote([burn_dir + '/gpu_burn'])}").rc == 0:
            engines.append("gpu-burn")
            parsed, tel, _ = run_gpu_burn.run_gpu_burn(remote, seconds, burn_dir)
            r, p = gpu_burn_rows(parsed)
            rows += [dict(x, engine="gpu-burn") for x in r]
            problems += p
            node.figure("gpu_burn_max_temp_c", max(tel.max_temp_c.values(), default=None))
            problems += [f"GPU {i} throttled: {', '.join(t)}" for i, t in tel.throttle.items() if t]
        if node.run("python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)'").rc == 0:
            engines.append("burn_torch")
            src = Path(burn_torch.__file__).read_text(encoding="utf-8")
            with node_folder([remote]) as folder:
                script = quote([f"{folder}/{TORCH_SCRIPT}"])
                assert remote.run(f"cat > {script}", stdin=src, timeout=30).ok, f"cannot write {script}"
                res = remote.run(f"{run_gpu_burn.sampler_command(seconds * 3, folder)} python3 {script} "
                                 f"--seconds {seconds} --peak-seconds 5", timeout=seconds * 3 + 300)
                samples = remote.run(f"cat {quote([run_gpu_burn.samples_path(folder)])}").stdout
            last = res.stdout.strip().splitlines()[-1:] or ["{}"]
            try:
                out = json.loads(last[0])
            except json.JSONDecodeError:
                out = {"status": "unreadable", "results": []}
            if out.get("status") not in ("ok", "failed"):
                last_err = (res.stderr.strip().splitlines() or [""])[-1]
                problems.append(f"burn_torch: {out.get('status')} {out.get('reason', '')} {last_err}".rstrip())
            rows += [dict(x, engine="burn_torch") for x in out.get("results", [])]
            tel = run_gpu_burn.parse_samples(samples)
            node.figure("burn_torch_max_temp_c", max(tel.max_temp_c.values(), default=None))
            problems += [f"GPU {i} throttled: {', '.join(t)}" for i, t in tel.throttle.items() if t]
        if not engines:
            pytest.fail(f"no burn engine on the node: neither {burn_dir}/gpu_burn nor PyTorch "
                        "with CUDA")
        xid_after = run_gpu_burn.xid_count(remote)
    if xid_before is not None and xid_after is not None and xid_after > xid_before:
        problems.append(f"{xid_after - xid_before} Xid error(s) during the burn")
    node.figure("engines", ",".join(engines))
    for r in rows:
        if r.get("tflops") is not None:
            node.figure(f"tflops_{r['engine']}_{r['device']}_{r['precision']}", round(r["tflops"], 2))
        if r.get("matmul_peak_tflops") is not None:
            node.figure(f"matmul_peak_tflops_{r['device']}_{r['precision']}", round(r["matmul_peak_tflops"], 2))
    for precision in sorted({str(r["precision"]) for r in rows if floors.get(r["precision"]) is not None}):
        node.figure(f"burn_floor_tflops_{precision}", floors[precision])  # beside each figure in the reports
    problems += burn_problems(rows, floors, node.profile.gpu.burn_peak_tflops)
    assert rows, "the burn produced no per-GPU results"
    assert not problems, "; ".join(problems)
