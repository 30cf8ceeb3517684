"""All-reduce over CPU buffers with MPI (Debian's Open MPI and python3-mpi4py) between nodes.

It runs the multi-node path, the pair search and the verdicts for real on machines without
GPUs (the lab in CI): the same bus-bandwidth arithmetic as nccl-tests, over the fabric
network. :data:`NODE_SCRIPT` is shipped to every participant and started by ``mpirun`` on
the first one, which starts the others over SSH to their management addresses (as the
firewall wants); ranks then reach each other by their fabric addresses only (Open MPI's TCP
BTL and out-of-band channel are both pinned to the fabric CIDR).

mpirun's ssh to the other nodes uses a key made for the run (``ssh_key``: the path on the
launcher), never the inventory's key and never a forwarded agent (the common role forbids
agent forwarding). Beside it lies ``<ssh_key>.known_hosts``, the host keys the controller has
recorded for the nodes: a node presenting another key is refused, one not yet recorded (the
lab's) is accepted for this run only. Only the launcher logs in to the others (no tree spawn),
so the key is needed on the launcher alone.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpucluster.conformance.bandwidth import AllReduceRun, point
from gpucluster.conformance.remote import Remote, make_folder_script, quote
from gpucluster.conformance.verdict import shorten

# The node script's name in the measurement's private folder on each node (remote.node_folder_path):
# never a fixed path in /var/tmp, which another local user could take first.
SCRIPT_NAME = "gpucluster-allreduce-mpi.py"

# Runs on the nodes with Debian's python3 and mpi4py: standard library only (no numpy).
# float32 sums of small integers are exact, so a correct result is known bit for bit.
NODE_SCRIPT = r'''
import array
import json
import sys

from mpi4py import MPI


def emit(obj):
    print("GCAR " + json.dumps(obj), flush=True)


def main(argv):
    sizes = [int(x) for x in argv[1].split(",")]
    iters, warmup, budget = int(argv[2]), int(argv[3]), float(argv[4])
    # Seconds from now the whole run must end by (0: none). Rank 0 decides and tells the others,
    # so every rank runs the same sizes and iterations.
    deadline = float(argv[5]) if len(argv) > 5 else 0.0
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    start = MPI.Wtime()
    hosts = comm.allgather(MPI.Get_processor_name())
    if rank == 0:
        emit({"event": "start", "ranks": n, "hosts": hosts})
    per_byte = 0.0  # seconds per byte of one all-reduce at the last size measured
    for i, size in enumerate(sizes):
        count = max(1, size // 4)
        left = deadline - (MPI.Wtime() - start) if deadline else 0.0
        if deadline:
            # The fewest iterations a size takes (warmup, the probe, one timed) at the last
            # size's rate: a size that cannot end in time is not started.
            need = (warmup + 2) * per_byte * count * 4
            go = comm.bcast(left > need if rank == 0 else None, root=0)
            if not go:
                if rank == 0:
                    emit({"event": "stopped", "size_bytes": count * 4, "left_s": round(left, 3),
                          "need_s": round(need, 3)})
                break
        send = array.array("f", [float(rank + 1)]) * count
        recv = array.array("f", [0.0]) * count
        expected = array.array("f", [float(n * (n + 1) // 2)]) * count
        for _ in range(warmup):
            comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        comm.Barrier()
        t0 = MPI.Wtime()
        comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        first = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
        # As many iterations as fit the time budget (the same number on every rank); under a
        # deadline, each size left gets an equal share of the time left.
        share = budget
        if deadline:
            share = min(budget, max(0.0, deadline - (MPI.Wtime() - start)) / (len(sizes) - i))
            share = comm.bcast(share if rank == 0 else None, root=0)
        k = max(1, min(iters, int(share / first) if first > 0 else iters))
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(k):
            comm.Allreduce([send, MPI.FLOAT], [recv, MPI.FLOAT], op=MPI.SUM)
        elapsed = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
        per_byte = elapsed / k / (count * 4)
        wrong = 0
        if recv.tobytes() != expected.tobytes():
            wrong = sum(1 for a, b in zip(recv, expected) if a != b)
        wrong = comm.allreduce(wrong, op=MPI.SUM)
        if rank == 0:
            emit({"size_bytes": count * 4, "count": count, "iters": k, "time_us": elapsed / k * 1e6,
                  "wrong": wrong})
    if rank == 0:
        emit({"event": "end"})


if __name__ == "__main__":
    main(sys.argv)
'''


# What mpirun takes to start its daemons over SSH and its ranks, not counted in a run's sizes.
LAUNCH_S = 5.0


@dataclass(frozen=True)
class MpiSettings:
    sizes: tuple[int, ...]
    iters: int = 10
    warmup: int = 2
    budget_s: float = 2.0  # per size: iterations stop when the next would pass it
    timeout_s: float = 240.0  # the whole run: mpirun is killed, on every node, when it passes
    python: str = "python3"
    mpirun: str = "mpirun"
    ssh_key: str | None = None  # on the launcher: the run's key mpirun's ssh uses to reach the others
    folder: str = ""  # the measurement's private folder, the same path on every node: the script is there


def script_path(folder: str) -> str:
    """Where :data:`NODE_SCRIPT` lies on every node of a measurement (``folder``: its private folder)."""
    return f"{folder}/{SCRIPT_NAME}"


def sizes_up_to(large_bytes: int, start: int = 1024, factor: int = 4) -> tuple[int, ...]:
    """Sizes from ``start`` by ``factor`` to 2 x large_bytes: two sizes count for the verdict."""
    out = []
    s = start
    while s < large_bytes:
        out.append(s)
        s *= factor
    return (*out, large_bytes, 2 * large_bytes)


def ramp_to(verdict_bytes: int, steps: int = 2, factor: int = 4) -> tuple[int, ...]:
    """The pair runs' sizes: ``steps`` smaller sizes leading up to the verdict's two, so that a
    link too slow to reach the verdict sizes in its budget is still measured where it stopped."""
    low = [verdict_bytes // factor ** i for i in range(steps, 0, -1) if verdict_bytes // factor ** i >= 1024]
    return (*low, verdict_bytes, 2 * verdict_bytes)


def deadline_s(settings: MpiSettings) -> float:
    """Seconds the node script has once started: the run's limit less mpirun's start."""
    return max(1.0, settings.timeout_s - min(LAUNCH_S, settings.timeout_s / 4))


def mpirun_argv(launch_ips: list[str], fabric_cidr: str, settings: MpiSettings,
                data_ports: str | None = None) -> list[str]:
    """mpirun's command line. Open MPI's own traffic (``oob``) goes over ``fabric_cidr``; the
    measured data (the TCP ``btl``) over ``data_ports`` where given (the compute rails' subnets,
    or the ports by name, comma-separated, as btl_tcp_if_include takes a list), else over the
    fabric too."""
    hosts = ",".join(f"{ip}:1" for ip in launch_ips)
    rsh = rsh_args(settings.ssh_key)
    return [
        settings.mpirun, "--allow-run-as-root", "-np", str(len(launch_ips)), "--host", hosts,
        # The launcher starts every daemon itself: past 64 nodes Open MPI would otherwise have
        # daemons start daemons, and they hold no key for that.
        "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
        "--mca", "btl_tcp_if_include", data_ports or fabric_cidr, "--mca", "oob_tcp_if_include", fabric_cidr,
        # A rank waiting for data yields its CPU instead of spinning: one rank per node never
        # looks oversubscribed to Open MPI, but where nodes share cores (the lab's containers,
        # VMs on a busy host) spinning ranks starve the ones with work. On the lab's 8 nodes
        # this cut a 1 KiB all-reduce from ~20 ms to ~3 ms and raised large-size busbw ~30 %.
        "--mca", "mpi_yield_when_idle", "1",
        "--mca", "plm_rsh_args", rsh,
        settings.python, script_path(settings.folder),
        ",".join(str(s) for s in settings.sizes), str(settings.iters), str(settings.warmup), str(settings.budget_s),
        f"{deadline_s(settings):.3f}",
    ]


def rsh_args(ssh_key: str | None) -> str:
    """``plm_rsh_args`` for mpirun's ssh from the launcher to the other nodes (nccl-tests' too):
    the run's key and the host keys beside it; no agent. Without a key, nothing is checked."""
    rsh = "-o BatchMode=yes -o LogLevel=ERROR -o ForwardAgent=no"
    if ssh_key:
        return (f"{rsh} -i {ssh_key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=accept-new"
                f" -o UserKnownHostsFile={launcher_known_hosts(ssh_key)} -o GlobalKnownHostsFile=/dev/null")
    return f"{rsh} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"


def launcher_known_hosts(ssh_key: str) -> str:
    """Where the run keeps, beside its key on the launcher, the host keys mpirun's ssh trusts."""
    return f"{ssh_key}.known_hosts"


def parse_output(text: str, label: str, nodes: tuple[str, ...], expected_sizes: tuple[int, ...]) -> AllReduceRun:
    """The script's ``GCAR`` lines (mpirun and ssh chatter around them ignored)."""
    run = AllReduceRun(engine="mpi-cpu", label=label, nodes=nodes, ranks=0)
    ended = False
    stopped: dict[str, object] | None = None
    for line in text.splitlines():
        idx = line.find("GCAR ")
        if idx < 0:
            continue
        try:
            obj = json.loads(line[idx + 5:])
        except json.JSONDecodeError:
            run.notes.append(f"unreadable line: {line[:80]}")
            continue
        if obj.get("event") == "start":
            run.ranks = int(obj["ranks"])
        elif obj.get("event") == "end":
            ended = True
        elif obj.get("event") == "stopped":
            stopped = obj
        elif "size_bytes" in obj and run.ranks:
            run.points.append(point(int(obj["size_bytes"]), float(obj["time_us"]), run.ranks, int(obj["wrong"])))
    if run.ranks and run.ranks != len(nodes):
        run.notes.append(f"{run.ranks} ranks ran, {len(nodes)} expected")
    if any(p.wrong for p in run.points):
        run.status = "failed"
        run.notes.append("wrong results")
    elif stopped is not None and run.ranks == len(nodes):
        run.status = "cut"
        run.notes.append(f"stopped before {stopped.get('size_bytes')} B: {stopped.get('left_s')} s left of its "
                         f"budget, the size needs {stopped.get('need_s')} s at the rate measured")
    elif not ended or len(run.points) != len(expected_sizes) or (run.ranks != len(nodes)):
        run.status = "incomplete"
        if not ended:
            run.notes.append("the run did not finish")
    else:
        run.status = "ok"
    return run


def ship_script(remotes: list[Remote], folder: str) -> list[str]:
    """Make the measurement's private ``folder`` on each node and copy the node script into it,
    nodes in parallel, one command each; returns problems (one line per node)."""
    path = script_path(folder)

    def one(r: Remote) -> str | None:
        res = r.run(f"{make_folder_script(folder)} && cat > {quote([path])}", stdin=NODE_SCRIPT, timeout=30)
        return None if res.ok else f"{r.name}: cannot write {path}: {res.stderr.strip()[:200]}"

    if not remotes:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(remotes))) as pool:
        return [p for p in pool.map(one, remotes) if p is not None]


def run_allreduce(launcher: Remote, node_names: tuple[str, ...], launch_ips: list[str], fabric_cidr: str,
                  settings: MpiSettings, label: str, data_ports: str | None = None) -> tuple[AllReduceRun, str]:
    """One all-reduce over ``node_names`` started from ``launcher``; returns the run and its raw log.
    ``data_ports``: the subnets or ports the data goes over (mpirun_argv), the fabric's when None."""
    cmd = quote(mpirun_argv(launch_ips, fabric_cidr, settings, data_ports)) + " 2>&1"
    res = launcher.run(cmd, timeout=settings.timeout_s)
    # Output cut by a kill may end mid-line: ssh's own words go on a line of their own.
    log = res.stdout + ("\n" if res.stdout and not res.stdout.endswith("\n") else "") + res.stderr
    run = parse_output(log, label, node_names, settings.sizes)
    run.budget_s = settings.timeout_s
    if res.rc == 124 and res.stderr.startswith("timed out after") and run.status != "failed":
        # Killed at its budget in the middle of a size: what it measured until then stands.
        run.status = "cut"
        run.notes.append(f"killed at its budget of {settings.timeout_s:.0f} s")
    elif res.rc != 0:
        run.notes.append(f"mpirun exited {res.rc}: {last_error_line(log)}")
        if run.status == "ok":
            run.status = "incomplete"
    return run, f"$ {cmd}\n{log}"


def _is_command_echo(line: str) -> bool:
    """mpirun and ssh repeat the command they could not run; that is no reason, and it is long."""
    return "--mca" in line or "--allow-run-as-root" in line or line.lstrip().startswith(("mpirun ", "+ "))


def last_error_line(text: str, limit: int = 200) -> str:
    """The last line of a failed run that says why (the parsed ``GCAR`` lines, rule lines and
    command echoes skipped), shortened between words; the whole output is in the run's log."""
    lines = [x.strip() for x in text.strip().splitlines()
             if x.strip("- \t*=") and "GCAR " not in x and not _is_command_echo(x)]
    return shorten(lines[-1], limit, "the run's log") if lines else "no output"
