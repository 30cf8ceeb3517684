"""nccl-tests' all_reduce_perf: intra-node on one node's GPUs, inter-node under mpirun.

Output is parsed by :mod:`gpucluster.parsers` (``#wrong`` honoured); where the installed
nccl-tests offers ``-J`` (its JSON output, 2.18 and later) the JSON file is read instead of
the table.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucluster.conformance.allreduce_mpi import last_error_line, rsh_args
from gpucluster.conformance.bandwidth import AllReduceRun, from_nccl_result
from gpucluster.conformance.remote import Remote, node_folder, quote
from gpucluster.parsers import NotToolOutput, parse

# -J's file, in a private folder of the run on the node (remote.node_folder): never a fixed name in
# /var/tmp, which another local user could make a link first.
JSON_NAME = "nccl-tests.json"


# What a measurement sets in NCCL's environment. Everything else comes from the node's deployed
# /etc/nccl.conf (the one GC-NET-006 verifies), which NCCL reads only for keys its environment lacks
# (setenv without overwrite, initEnv in https://github.com/NVIDIA/nccl/blob/master/src/misc/param.cc):
# a key set here that nccl.conf sets otherwise would measure another configuration than the
# deployed one. tests/unit/roles/test_nccl_conf.py renders nccl.conf for every GPU node of every
# example stack and fails on such a key. What a figure must pin is named in its check's MUST line
# and recorded with the figure (``nccl_pinned``).
#
# The inter-node ring and the pairs (GC-AR-002, GC-AR-003): the algorithm the inter-node floor holds
# for, and NCCL's warnings in the log.
INTER_ENV: dict[str, str] = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "WARN"}
INTER_PINNED = ("NCCL_ALGO",)
# GC-EFA-002: intra-node traffic through the network plugin (no P2P, no shared memory), and NCCL's
# INFO lines that name the plugin and provider it chose. FI_PROVIDER comes from nccl.conf.
OFI_PROBE_ENV: dict[str, str] = {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
OFI_PROBE_PINNED = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE")
# Every measurement's environment, by the checks it serves (GC-AR-001 sets none).
MEASUREMENT_ENVS: dict[str, dict[str, str]] = {"GC-AR-001": {}, "GC-AR-002/GC-AR-003": INTER_ENV,
                                               "GC-EFA-002": OFI_PROBE_ENV}


def pinned_text(env: Mapping[str, str], keys: tuple[str, ...]) -> str:
    """The settings a figure was measured under beside nccl.conf, as recorded with it."""
    return ", ".join(f"{k}={env[k]}" for k in keys)


def env_conflicts(env: Mapping[str, str], conf: Mapping[str, str]) -> list[str]:
    """Each key ``env`` sets that the node's nccl.conf (``conf``) sets to another value."""
    return [f"{k}={v} where /etc/nccl.conf sets {k}={conf[k]}" for k, v in env.items()
            if k in conf and conf[k] != v]


def env_prefix(env: Mapping[str, str]) -> str:
    """``env`` as a shell command's prefix (``K=V K=V ``)."""
    return "".join(f"{k}={quote([v])} " for k, v in env.items())


def json_path(folder: str) -> str:
    return f"{folder}/{JSON_NAME}"


def binary(install_dir: str) -> str:
    """all_reduce_perf in ``install_dir``, the node's nccl-tests binaries (NodeContract.nccl_tests_bin_dir)."""
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


def supports_json(remote: Remote, install_dir: str) -> bool:
    res = remote.run(f"{quote([binary(install_dir)])} -h 2>&1", timeout=30)
    return "-J" in res.stdout or "--output_file" in res.stdout


def _parse(log: str, label: str, nodes: tuple[str, ...], json_text: str | None) -> AllReduceRun:
    try:
        parsed = parse("nccl-tests", json_text if json_text else log)
    except NotToolOutput as exc:
        return AllReduceRun("nccl-tests", label, nodes, 0, status="incomplete",
                            notes=[str(exc)])
    return from_nccl_result(parsed, "nccl-tests", label, nodes)


def run_intra(remote: Remote, gpus: int, max_bytes: int, install_dir: str,
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


def mpirun_argv(launch_ips: list[str], gpus_per_node: int, fabric_cidr: str,
                max_bytes: int, install_dir: str, json_out: str | None, min_bytes: int = 8,
                ssh_key: str | None = None) -> list[str]:
    """One rank per GPU; NCCL_ALGO=Ring so the figure qualifies the network, not NVLS/tree tricks.
    Every other NCCL setting (the socket interface, HCAs, QoS) is the node's /etc/nccl.conf.

    mpirun's ssh to the other nodes uses the run's key on the launcher (``ssh_key``) and checks
    their host keys; only the launcher logs in to the others (no tree spawn), never with an agent.
    """
    hosts = ",".join(f"{ip}:{gpus_per_node}" for ip in launch_ips)
    argv = [
        "mpirun", "--allow-run-as-root", "-np", str(len(launch_ips) * gpus_per_node), "--host", hosts,
        "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", fabric_cidr,
        "--mca", "oob_tcp_if_include", fabric_cidr,
        "--mca", "plm_rsh_args", rsh_args(ssh_key), "--mca", "plm_rsh_no_tree_spawn", "1",
    ]
    for key, value in INTER_ENV.items():
        argv += ["-x", f"{key}={value}"]
    return [*argv, binary(install_dir), *perf_args(max_bytes, 1, json_out, min_bytes)]


def run_inter(launcher: Remote, nodes: tuple[str, ...], launch_ips: list[str], gpus_per_node: int,
              fabric_cidr: str, max_bytes: int, label: str,
              install_dir: str, timeout_s: float = 600, min_bytes: int = 8,
              ssh_key: str | None = None, folder: str | None = None) -> tuple[AllReduceRun, str]:
    """``folder``: the measurement's private folder on its nodes, where -J writes (none: no JSON,
    the table is read)."""
    out = json_path(folder) if folder and supports_json(launcher, install_dir) else None
    argv = mpirun_argv(launch_ips, gpus_per_node, fabric_cidr, max_bytes, install_dir, out, min_bytes, ssh_key)
    cmd = quote(argv) + " 2>&1"
    res = launcher.run(cmd, timeout=timeout_s)
    json_text = launcher.run(f"cat {quote([out])}", timeout=30).stdout if out and res.ok else None
    run = _parse(res.stdout, label, nodes, json_text)
    if res.rc != 0:
        run.notes.append(f"mpirun exited {res.rc}: {last_error_line(res.stdout)}")
        run.status = "incomplete" if run.status == "ok" else run.status
    return run, f"$ {cmd}\n{res.stdout}"
