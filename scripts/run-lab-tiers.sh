#!/usr/bin/env bash
# The two lab tiers of `make test` side by side: `make integration` (one lab after another, much
# of its time spent waiting on Ceph, bounded measurements and SSH round trips) beside `make twins`
# (TWIN_WORKERS twins at once). Each lab's name and networks are its own (its stack file), so
# they share nothing but the host's rootfs and package caches, which take concurrent builds.
#
# Each tier's lines are printed as they come, prefixed with its name, and kept whole in
# runs/<tier>.log. The exit status is the first failing tier's (0 when both passed); both always
# run to their end, so one red tier still shows what the other says. Ctrl-C (or SIGTERM) is passed
# on to both as SIGINT, which pytest turns into its fixtures' teardown: their labs come down.
#
# Usage: scripts/run-lab-tiers.sh MAKE TIER...   (the Makefile's lab-tiers names the tiers)
set -u
[ $# -ge 2 ] || { echo "usage: run-lab-tiers.sh MAKE TIER..." >&2; exit 2; }
make_cmd=$1
shift
tiers=("$@")
mkdir -p runs
# Job control: each tier in a process group of its own, so a signal reaches all it started and
# a background job does not start with SIGINT ignored (as it would in a non-interactive shell).
set -m
pids=()
for tier in "${tiers[@]}"; do
  (
    set -o pipefail
    "$make_cmd" --no-print-directory "$tier" 2>&1 | tee "runs/$tier.log" | sed -u "s/^/[$tier] /"
  ) &
  pids+=("$!")
  echo "lab tiers: $tier started (pid $!, whole log runs/$tier.log)"
done

stop() {
  echo "lab tiers: interrupted; passing SIGINT to ${tiers[*]} so their labs come down" >&2
  for pid in "${pids[@]}"; do kill -INT -- "-$pid" 2>/dev/null; done
}
trap stop INT TERM

status=0
for i in "${!pids[@]}"; do
  # wait returns early (>128) when a trapped signal arrives; wait again for the tier's own end.
  while true; do
    wait "${pids[$i]}"
    rc=$?
    kill -0 "${pids[$i]}" 2>/dev/null || break
  done
  echo "lab tiers: ${tiers[$i]} exited $rc"
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
exit "$status"
