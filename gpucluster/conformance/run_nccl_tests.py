"""nccl-tests' all_reduce_perf: intra-node on one node's GPUs, inter-node under mpirun.

Output is parsed by :mod:`gpucluster.parsers` (``#wrong`` honoured); where the installed
nccl-tests offers ``-J`` (its JSON output, 2.18 and later) the JSON file is read instead of
the table.
"""

from __future__ import annotations

from gpucluster.conformance.allreduce_mpi import last_error_line, rsh_args
from gpucluster.conformance.bandwidth import AllReduceRun, from_nccl_result
from gpucluster.conformance.remote import Remote, node_folder, quote
from gpucluster.parsers import NotToolOutput, parse

DEFAULT_DIR = "/opt/nccl-tests/build"
# -J's file, in a private folder of the run on the node (remote.node_folder): never a fixed name in
# /var/tmp, which another local user could make a link first.
JSON_NAME = "nccl-tests.json"


def json_path(folder: str) -> str:
    return f"{folder}/{JSON_NAME}"


def binary(install_dir: str = DEFAULT_DIR) -> str:
    return f"{install_dir}/all_reduce_perf"


def perf_args(max_bytes: int, gpus_per_rank: int, json_out: str | None, min_bytes: int = 8) -> list[str]:
    """all_reduce_perf's arguments; ``json_out``: where -J writes its JSON (None: no -J)."""
    # -c 1: check results (so #wrong is real); sizes 8 B..max by x2 as nccl-tests' docs run it
    # (the pair runs start at the verdict's large size: they are judged there only).
    args = ["-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", "-g", str(gpus_per_rank), "-c", "1", "-w", "5",
            "-n", "20"]
    if json_out:
        args += ["-J", json_out]
    return args


def supports_json(remote: Remote, install_dir: str = DEFAULT_DIR) -> bool:
    res = remote.run(f"{quote([binary(install_dir)])} -h 2>&1", timeout=30)
    return "-J" in res.stdout or "--output_file" in res.stdout


def _parse(log: str, label: str, nodes: tuple[str, ...], json_text: str | None) -> AllReduceRun:
    try:
        parsed = parse("nccl-tests", json_text if json_text else log)
    except NotToolOutput as exc:
        return AllReduceRun("nccl-tests", label, nodes, 0, status="incomplete",
                            notes=[str(exc)])
    return from_nccl_result(parsed, "nccl-tests", label, nodes)


def run_intra(remote: Remote, gpus: int, max_bytes: int, install_dir: str = DEFAULT_DIR,
              timeout_s: float = 600) -> tuple[AllReduceRun, str]:
    """All GPUs of one node in one process (``-g gpus``); its JSON in a private folder of the run."""
    use_json = supports_json(remote, install_dir)
    with node_folder([remote]) as folder:
        out = json_path(folder) if use_json else None
        cmd = quote([binary(install_dir), *perf_args(max_bytes, gpus, out)]) + " 2>&1"
        res = remote.run(cmd, timeout=timeout_s)
        json_text = remote.run(f"cat {quote([out])}", timeout=30).stdout if out and res.ok else None
    run = _parse(res.stdout, f"intra:{remote.name}", (remote.name,), json_text)
    if res.rc != 0:
        run.notes.append(f"all_reduce_perf exited {res.rc}: {last_error_line(res.stdout)}")
        run.status = "incomplete" if run.status == "ok" else run.status
    return run, f"$ {cmd}\n{res.stdout}"


def mpirun_argv(launch_ips: list[str], gpus_per_node: int, fabric_cidr: str, socket_ifname: str | None,
                max_bytes: int, install_dir: str, json_out: str | None, min_bytes: int = 8,
                ssh_key: str | None = None) -> list[str]:
    """One rank per GPU; NCCL_ALGO=Ring so the figure qualifies the network, not NVLS/tree tricks.

    mpirun's ssh to the other nodes uses the run's key on the launcher (``ssh_key``) and checks
    their host keys; only the launcher logs in to the others (no tree spawn), never with an agent.
    """
    hosts = ",".join(f"{ip}:{gpus_per_node}" for ip in launch_ips)
    argv = [
        "mpirun", "--allow-run-as-root", "-np", str(len(launch_ips) * gpus_per_node), "--host", hosts,
        "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", fabric_cidr,
        "--mca", "oob_tcp_if_include", fabric_cidr,
        "--mca", "plm_rsh_args", rsh_args(ssh_key), "--mca", "plm_rsh_no_tree_spawn", "1",
        "-x", "NCCL_ALGO=Ring", "-x", "NCCL_DEBUG=WARN",
    ]
    if socket_ifname:
        argv += ["-x", f"NCCL_SOCKET_IFNAME={socket_ifname}"]
    return [*argv, binary(install_dir), *perf_args(max_bytes, 1, json_out, min_bytes)]


def run_inter(launcher: Remote, nodes: tuple[str, ...], launch_ips: list[str], gpus_per_node: int,
              fabric_cidr: str, socket_ifname: str | None, max_bytes: int, label: str,
              install_dir: str = DEFAULT_DIR, timeout_s: float = 600, min_bytes: int = 8,
              ssh_key: str | None = None, folder: str | None = None) -> tuple[AllReduceRun, str]:
    """``folder``: the measurement's private folder on its nodes, where -J writes (none: no JSON,
    the table is read)."""
    out = json_path(folder) if folder and supports_json(launcher, install_dir) else None
    argv = mpirun_argv(launch_ips, gpus_per_node, fabric_cidr, socket_ifname, max_bytes, install_dir, out,
                       min_bytes, ssh_key)
    cmd = quote(argv) + " 2>&1"
    res = launcher.run(cmd, timeout=timeout_s)
    json_text = launcher.run(f"cat {quote([out])}", timeout=30).stdout if out and res.ok else None
    run = _parse(res.stdout, label, nodes, json_text)
    if res.rc != 0:
        run.notes.append(f"mpirun exited {res.rc}: {last_error_line(res.stdout)}")
        run.status = "incomplete" if run.status == "ok" else run.status
    return run, f"$ {cmd}\n{res.stdout}"
