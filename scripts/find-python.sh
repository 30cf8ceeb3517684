#!/usr/bin/env bash
# Print the path of a Python for the controller venv: ansible-core 2.20 and newer run on
# Python 3.12 or newer only (the controller; nodes need 3.9+). Order: $PYTHON when set, then
# python3.14/3.13/3.12 on PATH, then pyenv's installed versions, then python3. Exit 2 with
# one line when none is new enough.
set -euo pipefail
min_minor=${GPUCLUSTER_MIN_PYTHON_MINOR:-12}
ok() {
  "$1" -c "import sys, venv; sys.exit(0 if sys.version_info[:2] >= (3, $min_minor) else 1)" >/dev/null 2>&1
}
candidates=()
[ -n "${PYTHON:-}" ] && candidates+=("$PYTHON")
candidates+=(python3.14 python3.13 python3.12)
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
for v in $(ls -d "$root"/versions/3.1[2-9]* 2>/dev/null | sort -rV); do
  candidates+=("$v/bin/python3")
done
candidates+=(python3)
for c in "${candidates[@]}"; do
  path=$(command -v "$c" 2>/dev/null || true)
  if [ -n "$path" ] && ok "$path"; then
    "$path" -c 'import sys; print(sys.executable)'
    exit 0
  fi
done
echo "error: no Python 3.$min_minor or newer found (ansible-core on the controller needs it;" \
  "tried ${candidates[*]}): install python3.12 or newer (Ubuntu 24.04: apt install python3-venv)" \
  "or set PYTHON=/path/to/python3.12" >&2
exit 2
