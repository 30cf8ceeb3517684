"""Publishing each node's Prometheus textfile onto that node, for node_exporter's textfile collector.

The folder is the one the monitoring role configured node_exporter with: the host's (or the
inventory's) ``monitoring_textfile_dir``, else the inventory's node contract (``gpucluster_contract``,
gpucluster.spec.contract), which the role's default reads too (:attr:`NodeInfo.contract
<gpucluster.conformance.nodes.NodeInfo.contract>` holds the node's, overrides applied). The package
never reads its checkout: installed from a wheel, it has none.

node_exporter may read the folder while a file is being written, so the file goes to a hidden
temporary name in the same folder (same file system: the rename is atomic; the collector reads
``*.prom`` only) and is renamed over the old one. A node that cannot be reached, or lacks the
folder, gets a message in the run's report; it never changes the node's verdict.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster.conformance.nodes import ClusterInventory, NodeInfo
from gpucluster.conformance.remote import Remote
from gpucluster.conformance.reports import PROM_DIR, PROM_FILE
from gpucluster.spec.contract import ROLE_VARS

TEXTFILE_DIR_VAR = ROLE_VARS["textfile_dir"]
# The publish script's exit status for "no such folder" (ssh itself uses 255, timeouts 124).
_NO_DIR = 3


@dataclass(frozen=True)
class PublishResult:
    node: str
    ok: bool
    path: str  # destination on the node ("" when none could be resolved)
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "path": self.path, "message": self.message}


def publish_command(directory: str, user: str) -> str:
    """Shell command line that writes stdin to DIR/gpucluster_conformance.prom atomically."""
    d = shlex.quote(directory)
    final = shlex.quote(f"{directory.rstrip('/')}/{PROM_FILE}")
    script = (
        f"[ -d {d} ] || exit {_NO_DIR}; "
        f"t=$(mktemp {d}/.{PROM_FILE}.XXXXXX) || exit 1; "
        "trap 'rm -f \"$t\"' EXIT; "
        # node_exporter runs as its own user on Debian: mktemp's 0600 would hide the file from it.
        f"cat > \"$t\" && chmod 0644 \"$t\" && mv -f \"$t\" {final} && trap - EXIT"
    )
    command = f"sh -c {shlex.quote(script)}"
    return command if user == "root" else f"sudo -n {command}"


def _explain(rc: int, stderr: str, directory: str) -> str:
    last = (stderr.strip().splitlines() or [""])[-1][:300]
    if rc == _NO_DIR:
        return (f"no textfile folder {directory} on the node (is the monitoring role applied? "
                f"it creates {TEXTFILE_DIR_VAR})")
    if rc == 255:
        return f"node not reachable over SSH: {last or 'ssh exit 255'}"
    if rc == 124:
        return f"timed out writing to {directory}"
    return f"could not write to {directory} (exit {rc}): {last}"


def publish_node(node: NodeInfo, directory: str | None, text: str, remote: Remote,
                 timeout: float = 30.0) -> PublishResult:
    if not directory or not directory.startswith("/"):
        return PublishResult(node.name, False, "",
                             f"no textfile folder known: set {TEXTFILE_DIR_VAR} to an absolute path in the inventory "
                             f"(got {directory!r})")
    dest = f"{directory.rstrip('/')}/{PROM_FILE}"
    res = remote.run(publish_command(directory, node.user), stdin=text, timeout=timeout)
    if res.ok:
        return PublishResult(node.name, True, dest, f"published to {node.name}:{dest}")
    return PublishResult(node.name, False, dest, _explain(res.rc, res.stderr, directory))


def publish(inv: ClusterInventory, nodes: list[str], run_dir: Path, remote_for: Callable[[str], Remote],
            workers: int = 8) -> list[PublishResult]:
    """Copy each node's textfile from the run folder onto the node, into its contract's textfile
    folder, nodes in parallel."""

    def one(name: str) -> PublishResult:
        try:
            info = inv.node(name)
        except KeyError:
            return PublishResult(name, False, "", "not in the inventory")
        src = run_dir / PROM_DIR / name / PROM_FILE
        try:
            text = src.read_text(encoding="utf-8")
        except OSError as exc:
            return PublishResult(name, False, "", f"no textfile in the run folder ({src}): {exc.strerror or exc}")
        try:
            return publish_node(info, info.contract.textfile_dir, text, remote_for(name))
        except OSError as exc:  # no ssh client, say: a message in the report, never a crash
            return PublishResult(name, False, "", f"could not run ssh: {exc}")

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
        return list(pool.map(one, nodes))
