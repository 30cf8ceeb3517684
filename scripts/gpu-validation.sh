#!/usr/bin/env bash
# Run on a machine with an NVIDIA GPU (and PyTorch with CUDA) to record the figures
# docs/validation/ needs: the GPU checks' raw inputs and the PyTorch burn per GPU, next to the
# plain matrix-product rate PyTorch reaches in the same run. Writes into OUT (default
# ./gpu-validation-<host>-<UTC time>); nothing is faked: a missing tool leaves its file saying so.
#   scripts/gpu-validation.sh [OUT] [SECONDS_PER_PRECISION]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-gpu-validation-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
secs=${2:-60}
py=${PYTHON:-$( [ -x "$here/.venv/bin/python" ] && echo "$here/.venv/bin/python" || echo python3 )}
mkdir -p "$out"
run() { local name=$1; shift; echo "== $name: $*" >&2
        if "$@" > "$out/$name" 2>&1; then :; else echo "exit $?" >> "$out/$name"; fi; }
if ! command -v nvidia-smi >/dev/null; then echo "error: nvidia-smi not found: not a GPU machine" >&2; exit 2; fi
run nvidia-smi-q.txt nvidia-smi -q
run nvidia-smi-nvlink.txt nvidia-smi nvlink -s
run nvidia-smi-topo.txt nvidia-smi topo -m
run driver-version.txt cat /proc/driver/nvidia/version
run xid.txt sh -c "journalctl -k -b --no-pager | grep -E 'NVRM: Xid|SXid' || echo 'no Xid or SXid lines'"
# The acceptance checks' raw inputs, each bounded: DCGM's diagnostic as JSON (GC-DCGM-001), host-device
# copies with the links sampled under them (GC-PCIE-001/003), the fabric state (GC-GPU-013).
if command -v dcgmi >/dev/null; then run dcgmi-diag-r2.json timeout 1800 dcgmi diag -r 2 -j; fi
if command -v nvbandwidth >/dev/null; then
  timeout 660 nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max \
    --format=csv -lms 250 > "$out/pcie-under-load.csv" 2>&1 & sampler=$!
  run nvbandwidth.txt timeout 600 nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
fi
run nvidia-smi-fabric.txt sh -c "nvidia-smi -q | sed -n '/Fabric/,/^ *[A-Z][a-z]* *$/p'"
hca=$(ls /sys/class/infiniband 2>/dev/null | head -1)
if command -v ib_write_bw >/dev/null && [ -n "$hca" ]; then
  run ibv-devinfo.txt ibv_devinfo
  # GPUDirect RDMA on one node (loopback through the HCA), GPU 0 memory, 10 s, both ends bounded;
  # the client starts once the server listens (CUDA's start-up takes seconds), at most 20 s later.
  (timeout 40 ib_write_bw -d "$hca" --use_cuda=0 -D 10 --report_gbits -p 18620 > "$out/ib_write_bw-gdr-server.txt" 2>&1 &)
  for _ in $(seq 80); do ss -Hltn 'sport = :18620' | grep -q . && break; sleep 0.25; done
  run ib_write_bw-gdr-client.txt timeout 30 ib_write_bw -d "$hca" --use_cuda=0 -D 10 --report_gbits -p 18620 localhost
fi
run torch.txt "$py" -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"
"$py" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
  echo "error: PyTorch sees no CUDA device (see $out/torch.txt)" >&2; exit 2; }
timeout $((secs * 3 + 120)) nvidia-smi --query-gpu=index,temperature.gpu,clocks_event_reasons.active,power.draw \
  --format=csv,noheader,nounits -l 1 > "$out/telemetry.csv" 2>&1 &
# The burn (checked products) and, per GPU and precision, the unchecked matmul rate (--peak-seconds).
run burn_torch.json "$py" "$here/gpucluster/conformance/burn_torch.py" --seconds "$secs" --peak-seconds 10
if [ -x /opt/gpu-burn/gpu_burn ]; then (cd /opt/gpu-burn && ./gpu_burn "$secs") > "$out/gpu-burn.txt" 2>&1; fi
if [ -x /opt/nccl-tests/build/all_reduce_perf ]; then
  n=$(nvidia-smi -L | wc -l)
  # Up to 16 GiB: the 8-GPU verdict size is 8 GiB (the bus is saturated there, not at 1-2 GiB).
  run nccl-allreduce.txt timeout 1200 /opt/nccl-tests/build/all_reduce_perf -b 8 -e 16G -f 2 -g "$n" -c 1
fi
wait
"$py" - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
lines = (out / "burn_torch.json").read_text().strip().splitlines()
data = json.loads(lines[-1]) if lines else {}
rows = ["| GPU | name | precision | burn TFLOP/s (products) | burn TFLOP/s (whole loop) | matmul TFLOP/s | errors | ok |",
        "|---|---|---|---|---|---|---|---|"]
for r in data.get("results", []):
    rows.append(f"| {r['device']} | {r['name']} | {r['precision']} | {r['tflops']:.1f} | "
                f"{r.get('wall_tflops') or float('nan'):.1f} | "
                f"{r.get('matmul_peak_tflops', float('nan')):.1f} | {r['errors']} | {r['ok']} |")
(out / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
echo "figures in $out: copy summary.md and the raw files into docs/validation/" >&2
