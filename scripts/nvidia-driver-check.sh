#!/usr/bin/env bash
# Run the nvidia_driver role in check mode against the machine this runs on (a GPU machine
# with a driver already installed) and write what docs/validation/ records: the driver found,
# its comparison with the bill of materials' pin, and the recap (changed must be 0 when they
# match). The inventory is built by the project's own hand-off code from a one-node bare-metal
# spec; the node is this machine, reached with ansible_connection=local.
#   scripts/nvidia-driver-check.sh [OUT] [PROFILE] [-- EXTRA gpucluster converge ARGS...]
# PROFILE: a hardware profile in gpucluster/data/profiles (default h100-sxm-8).
# Exit codes: those of `gpucluster converge` (0 no host failed, 1 a host failed, 2 bad input).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-nvidia-driver-check-$(hostname)-$(date -u +%Y%m%dT%H%M%SZ)}
profile=${2:-h100-sxm-8}
shift $(( $# < 2 ? $# : 2 ))
[ "${1:-}" = "--" ] && shift
py=${PYTHON:-$( [ -x "$here/.venv/bin/python" ] && echo "$here/.venv/bin/python" || echo python3 )}
[ -f "$here/gpucluster/data/profiles/$profile.yaml" ] || {
  echo "error: profile $profile: no such file gpucluster/data/profiles/$profile.yaml" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
cat > "$out/Pulumi.gpu-host.yaml" <<YAML
# One bare-metal node: this machine (its BMC and MAC are placeholders; nothing contacts them).
config:
  gpucluster:name: gpu-host
  gpucluster:target:
    kind: baremetal
    nodes:
      - {name: gpu-host, pool: gpu, bmc_address: 192.0.2.1, management_mac: "02:00:00:00:00:01"}
  gpucluster:node_pools:
    - {name: gpu, count: 1, roles: [gpu], profile: $profile}
  gpucluster:fabric: {type: ethernet, mtu: 1500, management_cidr: 192.0.2.0/24, fabric_cidr: 198.51.100.0/24}
YAML
"$py" - "$out" <<'PY'
import sys
from pathlib import Path

from gpucluster.inventory import build_inventory, write_inventory
from gpucluster.outputs import StackOutputs, build_outputs
from gpucluster.spec import load_spec

out = Path(sys.argv[1])
cluster = load_spec(out / "Pulumi.gpu-host.yaml")
outputs = StackOutputs.model_validate(build_outputs(cluster, ssh_user="root"))
inventory = build_inventory(cluster, outputs, source=str(out / "Pulumi.gpu-host.yaml"))
# The system's Python, as on any node (its apt and dnf bindings live there), not this venv's.
system_python = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
inventory["all"]["hosts"]["gpu-host"].update(ansible_connection="local", ansible_python_interpreter=system_python)
write_inventory(inventory, out / "inventory.yml")
PY
"$py" -m gpucluster converge --inventory "$out/inventory.yml" --playbook "$here/playbooks/check-nvidia-driver.yml" \
  --check --json "$@" > "$out/converge.json" 2> "$out/progress.txt" && rc=0 || rc=$?
grep -E "Report the driver found|Report the kernel-module|skipped:|FAILED|failed" "$out/progress.txt" > "$out/findings.txt" || true
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version --format=csv || echo "no nvidia-smi"; } \
  > "$out/nvidia-smi.csv" 2>&1
cat "$out/findings.txt" >&2
echo "check-mode run: exit $rc; files in $out (converge.json, progress.txt, findings.txt, nvidia-smi.csv)" >&2
exit $rc
