"""The lab's apt proxy never runs as root (issue 27, low): it parses what the mirror and the nodes
send, so it starts as Debian's apt-cacher-ng account; its configuration stays root's, its cache,
log and pid folders are the account's. (tests/integration/lab/test_lab.py shows it on a real lab.)"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from gpucluster.lab import proxy
from gpucluster.lab.layout import layout_lab
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
ACCOUNT = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="handing folders to another account (chown) needs root")
def test_the_proxy_starts_as_its_account_and_cannot_change_its_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = dataclasses.replace(layout_lab(load_spec(REPO / "Pulumi.lab.yaml")), state_root=str(tmp_path))
    started: dict[str, Any] = {}

    def spawn(argv: list[str], log: Path, env: Any = None, user: tuple[int, int] | None = None) -> int:
        started.update(argv=argv, user=user)
        return 4242

    monkeypatch.setattr(proxy, "proxy_user", lambda: (ACCOUNT, ACCOUNT))
    monkeypatch.setattr(proxy, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(proxy, "pids", lambda plan: [])
    monkeypatch.setattr(proxy, "_listening", lambda plan: "argv" in started)
    monkeypatch.setattr(proxy.process, "spawn", spawn)
    assert proxy.ensure_proxy(plan) is True
    assert started["user"] == (ACCOUNT, ACCOUNT), "the proxy was started as root"
    for path in (proxy.conf_dir(plan), *(proxy.conf_dir(plan) / name for name in proxy.render_config(plan))):
        st = path.lstat()
        assert st.st_uid == 0 and not st.st_mode & 0o022, f"{path}: {st.st_uid} {stat.filemode(st.st_mode)}"
    for folder in (proxy.log_dir(plan), proxy.conf_dir(plan) / "run", plan.apt_cache_dir):
        assert folder.lstat().st_uid == ACCOUNT, folder
