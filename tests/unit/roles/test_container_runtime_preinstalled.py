"""container_runtime and the image's own containerd, run by Ansible on localhost against a stand-in
dpkg-query: the role's probe, decision, report and stop tasks as they are, and its remove and
install tasks with their `when` as they are and the package module swapped for a debug that says
what it would have been given. An image's moby-containerd or containerd.io at or above the bill of
materials' floor is adopted (nothing removed, nothing installed); below it, adopt_or_fail stops
naming the package, both versions and the two ways out, and adopt_or_replace removes the image's
runtime packages by name before installing the OS archive's containerd. The same probe and decision
hold the image's NVIDIA container toolkit to the pin from below: at or above it, adopted (the toolkit
install, repository and packages, does not run); below it, adopt_or_fail stops naming both versions,
the policy and the ways out, adopt_or_replace upgrades it to the pin (past the image's hold); none
installs the pin; the role's own (its repository exists) below a bumped pin is upgraded."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.render.os_packages import image_containerd

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles/container_runtime"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
RUN = ("Look for a containerd and an NVIDIA container toolkit the image ships",
       "Decide what to do with the image's containerd and NVIDIA container toolkit",
       "Report what happens to the image's containerd",
       "Stop where the image's containerd is below the floor and the pool's policy is adopt_or_fail",
       "Report what happens to the image's NVIDIA container toolkit",
       "Stop where the image's NVIDIA container toolkit is below the pin and the pool's policy is adopt_or_fail")
REMOVE = "Remove the image's container runtime packages below the floor"
INSTALL = "Install containerd from the distribution"
TOOLKIT = "Install the NVIDIA container toolkit"
BOM = yaml.safe_load((REPO / "gpucluster/data/bom.yaml").read_text())
FLOOR = BOM["containerd"]["floor"]
PIN = BOM["container_toolkit"]["version"]

# dpkg-query -W -f=FORMAT NAME...: FORMAT's fields filled from $DPKG_DB ("name status version" lines),
# "no packages found" and exit 1 for a name dpkg does not know, as the real one does.
STAND_IN = f"""#!{sys.executable}
import os, sys
db = {{}}
for line in open(os.environ["DPKG_DB"]).read().splitlines():
    name, status, version = line.split("|")
    db[name] = (status, version)
with open(os.environ["DPKG_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:3]) + "|" + " ".join(sys.argv[3:]) + "\\n")
assert sys.argv[1] == "-W" and sys.argv[2].startswith("-f="), sys.argv
fmt, rc = sys.argv[2][3:].replace("\\\\t", "\\t").replace("\\\\n", "\\n"), 0
for name in sys.argv[3:]:
    if name not in db:
        print("dpkg-query: no packages found matching " + name, file=sys.stderr)
        rc = 1
        continue
    status, version = db[name]
    sys.stdout.write(fmt.replace("${{Package}}", name).replace("${{db:Status-Abbrev}}", status)
                     .replace("${{Version}}", version))
sys.exit(rc)
"""


def _tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROLE / "tasks/install.yml").read_text())
    by_name = {t["name"]: t for t in tasks}
    chosen = [by_name[n] for n in RUN]
    for name, arg in ((REMOVE, "name"), (INSTALL, "name")):
        task = dict(by_name[name])
        args = task.pop("gpucluster.cluster.apt")
        assert "when" in task, name
        task["ansible.builtin.debug"] = {"msg": "{{ (" + args[arg].strip("{} ") + ") | join(',') }}"}
        chosen.append(task)
    # The toolkit's include, with its `when` as it is, in place of toolkit.yml's package task (its own
    # arguments as they are: what it installs and whether it may change the image's hold).
    include = dict(by_name[TOOLKIT])
    include.pop("ansible.builtin.include_tasks")
    assert "when" in include
    steps: list[dict[str, Any]] = yaml.safe_load((ROLE / "tasks/toolkit.yml").read_text())
    apt = next(t for t in steps if "gpucluster.cluster.apt" in t)["gpucluster.cluster.apt"]
    include["ansible.builtin.debug"] = {"msg": "{{ (" + apt["name"].strip("{} ") + ") | join(',') }} held="
                                               + apt["allow_change_held_packages"]}
    chosen.append(include)
    return chosen


def _run(tmp_path: Path, db: dict[str, tuple[str, str]], policy: str,
         **extra: Any) -> tuple[int, dict[str, dict[str, Any]], str]:
    """The tasks' results by name, as Ansible's json callback reports them, and dpkg-query's argv."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dpkg-query").write_text(STAND_IN)
    (fake / "dpkg-query").chmod(0o755)
    (tmp_path / "db").write_text("".join(f"{n}|{s}|{v}\n" for n, (s, v) in db.items()))
    role_vars = {**yaml.safe_load((ROLE / "defaults/main.yml").read_text()),
                 **yaml.safe_load((ROLE / "vars/main.yml").read_text())}
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {**role_vars, "gpucluster_os": "ubuntu-22.04", "gpucluster_preinstalled": policy,
                      "gpucluster_bom": yaml.safe_load((REPO / "gpucluster/data/bom.yaml").read_text()), **extra},
             "tasks": _tasks()}]
    playbook = tmp_path / "containerd.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    # The probe is `raw`: it runs in the connection's shell, which takes the local process's PATH.
    env.update(PATH=f"{fake}:{os.environ['PATH']}", DPKG_DB=str(tmp_path / "db"), DPKG_LOG=str(tmp_path / "log"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_DISPLAY_SKIPPED_HOSTS="true",
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    proc = subprocess.run([str(PLAYBOOK_BIN), str(playbook)], text=True, capture_output=True, timeout=180,
                          env=env, cwd=tmp_path)
    log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return proc.returncode, _results(proc.stdout), log


TOOLKIT_DB = {"nvidia-container-toolkit-base": ("ii ", "{v}"), "libnvidia-container-tools": ("ii ", "{v}"),
              "libnvidia-container1": ("ii ", "{v}")}


def _toolkit(version: str, status: str = "ii ") -> dict[str, tuple[str, str]]:
    """The toolkit's four packages at ``version`` (the toolkit itself with ``status``)."""
    return {"nvidia-container-toolkit": (status, version),
            **{name: (s, v.format(v=version)) for name, (s, v) in TOOLKIT_DB.items()}}


def _toolkit_run(tmp_path: Path, db: dict[str, tuple[str, str]], policy: str,
                 **extra: Any) -> tuple[int, dict[str, dict[str, Any]], str]:
    """A GPU node where the role installs the toolkit."""
    return _run(tmp_path, db, policy, container_runtime_nvidia_toolkit_install_enabled=True,
                __container_runtime_toolkit_repo_file=str(tmp_path / "gpucluster-nvidia-container-toolkit.sources"),
                **extra)


def _results(stdout: str) -> dict[str, dict[str, Any]]:
    """Each task's result on localhost from the default callback's output (results as JSON):
    {"skipped": True} for a skipped task, the result's JSON (with "failed") otherwise."""
    out: dict[str, dict[str, Any]] = {}
    for block in stdout.split("\nTASK [")[1:]:
        name, _, body = block.partition("]")
        status = re.search(r"^(ok|changed|skipping|fatal): \[localhost\]", body, re.MULTILINE)
        assert status, block
        result: dict[str, Any] = {}
        if "=> " in body[status.start():]:
            text = body[status.start():].split("=> ", 1)[1]
            result = json.JSONDecoder().raw_decode(text)[0]
        if status.group(1) == "skipping":
            result["skipped"] = True
        if status.group(1) == "fatal":
            result["failed"] = True
        out[name] = result
    return out


MOBY = {"moby-engine": ("ii ", "24.0.9-ubuntu22.04u1"), "moby-runc": ("ii ", "1.1.12-ubuntu22.04u1")}


def test_a_node_without_an_image_containerd_installs_the_archives(tmp_path: Path) -> None:
    rc, res, log = _run(tmp_path, {}, "adopt_or_fail")
    assert rc == 0, res
    assert res[RUN[2]]["msg"] == f"containerd: the image ships none of its own, installing the bill of materials' " \
                                 f"(floor {FLOOR})"
    assert res[REMOVE].get("skipped") and res[INSTALL]["msg"] == "containerd"
    # The probe asks dpkg for exactly the image-runtime and toolkit packages of the OS table, nothing else.
    fmt, names = log.strip().split("|")
    assert fmt == "-W -f=" + yaml.safe_load((ROLE / "vars/main.yml").read_text())["__container_runtime_dpkg_format"]
    assert names.split() == ["containerd.io", "docker-ce", "docker-ce-cli", "moby-cli", "moby-containerd",
                             "moby-engine", "moby-runc", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
                             "libnvidia-container-tools", "libnvidia-container1"]
    # Where the role does not install the toolkit (no GPU here), nothing is decided on it.
    assert res[RUN[4]].get("skipped") and res[RUN[5]].get("skipped") and res[TOOLKIT].get("skipped")


@pytest.mark.parametrize("policy", ["adopt_or_fail", "adopt_or_replace"])
def test_an_image_containerd_at_the_floor_or_above_is_adopted_not_replaced(tmp_path: Path, policy: str) -> None:
    rc, res, _ = _run(tmp_path, {**MOBY, "moby-containerd": ("ii ", "1.7.27-ubuntu22.04u1")}, policy)
    assert rc == 0, res
    assert res[RUN[2]]["msg"] == (f"containerd: the image's moby-containerd 1.7.27-ubuntu22.04u1 meets the floor "
                                  f"{FLOOR}, adopted: configured in place, not replaced")
    assert res[REMOVE].get("skipped") and res[INSTALL].get("skipped")


def test_an_image_containerd_below_the_floor_stops_under_adopt_or_fail(tmp_path: Path) -> None:
    rc, res, _ = _run(tmp_path, {**MOBY, "moby-containerd": ("ii ", "1.6.28-ubuntu22.04u1")}, "adopt_or_fail")
    assert rc != 0
    failed = res[RUN[3]]
    assert failed.get("failed")
    msg = " ".join(failed["msg"].split())
    assert msg.startswith(f"containerd: the image ships moby-containerd 1.6.28-ubuntu22.04u1, below the bill of "
                          f"materials' containerd floor {FLOOR}, and the pool's policy is preinstalled: adopt_or_fail")
    assert 'gpucluster:bom holding containerd: {floor: "1.6.28-ubuntu22.04u1"}' in msg
    assert "preinstalled: adopt_or_replace to remove moby-engine, moby-containerd, moby-runc" in msg
    assert REMOVE not in res and INSTALL not in res


def test_the_overlays_lower_floor_adopts_it(tmp_path: Path) -> None:
    rc, res, _ = _run(tmp_path, {**MOBY, "moby-containerd": ("ii ", "1.6.28-ubuntu22.04u1")}, "adopt_or_fail",
                      container_runtime_containerd_floor="1.6.28-ubuntu22.04u1")
    assert rc == 0, res
    assert "adopted" in res[RUN[2]]["msg"] and res[INSTALL].get("skipped")


@pytest.mark.parametrize(("db", "removed"), [
    ({**MOBY, "moby-containerd": ("ii ", "1.6.28-ubuntu22.04u1")}, "moby-engine,moby-containerd,moby-runc"),
    ({"docker-ce": ("ii ", "5:24.0.7-1~ubuntu.22.04~jammy"), "containerd.io": ("ii ", "1.6.33-1")},
     "docker-ce,containerd.io"),
])
def test_adopt_or_replace_removes_the_images_runtime_by_name_then_installs(tmp_path: Path,
                                                                            db: dict[str, tuple[str, str]],
                                                                            removed: str) -> None:
    rc, res, _ = _run(tmp_path, db, "adopt_or_replace")
    assert rc == 0, res
    assert res[RUN[2]]["msg"].startswith("containerd: the image's ") and f"removing {removed.replace(',', ', ')}" \
        in res[RUN[2]]["msg"]
    assert res[REMOVE]["msg"] == removed and res[INSTALL]["msg"] == "containerd"


def test_a_removed_package_dpkg_still_lists_is_not_the_images(tmp_path: Path) -> None:
    rc, res, _ = _run(tmp_path, {"containerd.io": ("rc ", "1.6.33-1")}, "adopt_or_fail")
    assert rc == 0, res
    assert res[REMOVE].get("skipped") and res[INSTALL]["msg"] == "containerd"


def test_the_probes_format_is_what_the_real_dpkg_query_prints() -> None:
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg-query on this host")
    fmt = yaml.safe_load((ROLE / "vars/main.yml").read_text())["__container_runtime_dpkg_format"]
    out = subprocess.run(["dpkg-query", "-W", "-f=" + fmt, "bash"], capture_output=True, text=True,
                         check=True).stdout
    name, status, version = out.rstrip("\n").split("\t")
    assert (name, status.strip()) == ("bash", "ii") and version[0].isdigit()
    # The reader takes the real line: bash stands in for an image-runtime package name.
    line = out.replace("bash\t", "moby-containerd\t", 1)
    assert image_containerd(line) == {"found": version, "present": True, "runfile": False,
                                      "package": "moby-containerd", "removes": ["moby-containerd"]}


# --- the NVIDIA container toolkit ---------------------------------------------------------------


@pytest.mark.parametrize("policy", ["adopt_or_fail", "adopt_or_replace"])
@pytest.mark.parametrize("status", ["ii ", "hi "])
def test_an_image_toolkit_at_or_above_the_pin_is_adopted_and_nothing_installs_over_it(
    tmp_path: Path, policy: str, status: str
) -> None:
    """Issue 24: the pin is older than the image's toolkit (held or not): no apt task touches it."""
    rc, res, _ = _toolkit_run(tmp_path, _toolkit("1.99.0-1", status), policy)
    assert rc == 0, res
    assert res[RUN[4]]["msg"] == (f"container-toolkit: the image's nvidia-container-toolkit 1.99.0-1 is at or above "
                                  f"the pin {PIN}, adopted: nothing installed over it, never downgraded")
    # The include of the repository and the pinned packages does not run: no downgrade, no removal.
    assert res[TOOLKIT].get("skipped"), res[TOOLKIT]
    assert res[RUN[5]].get("failed") is not True


def test_the_pin_itself_is_adopted(tmp_path: Path) -> None:
    rc, res, _ = _toolkit_run(tmp_path, _toolkit(f"{PIN}-1"), "adopt_or_fail")
    assert rc == 0, res
    assert "adopted" in res[RUN[4]]["msg"] and res[TOOLKIT].get("skipped")


def test_an_image_toolkit_below_the_pin_stops_under_adopt_or_fail(tmp_path: Path) -> None:
    rc, res, _ = _toolkit_run(tmp_path, _toolkit("1.17.8-1"), "adopt_or_fail")
    assert rc != 0
    failed = res[RUN[5]]
    assert failed.get("failed")
    msg = " ".join(failed["msg"].split())
    assert msg == (f"container-toolkit: the image ships nvidia-container-toolkit 1.17.8-1, below the bill of "
                   f"materials' pin {PIN}, and the pool's policy is preinstalled: adopt_or_fail "
                   "(container_runtime_preinstalled). Pin the image's version in a bill-of-materials overlay (the "
                   'stack\'s gpucluster:bom holding container_toolkit: {version: "1.17.8"}), boot an image that ships '
                   f"{PIN} or later, or set the pool's preinstalled: adopt_or_replace to upgrade it to the pin")
    # It stops before anything is installed, containerd included.
    assert REMOVE not in res and INSTALL not in res and TOOLKIT not in res


def test_an_image_toolkit_below_the_pin_is_upgraded_past_its_hold_under_adopt_or_replace(tmp_path: Path) -> None:
    rc, res, _ = _toolkit_run(tmp_path, _toolkit("1.17.8-1", "hi "), "adopt_or_replace")
    assert rc == 0, res
    assert res[RUN[4]]["msg"] == (f"container-toolkit: the image's nvidia-container-toolkit 1.17.8-1 is below the pin "
                                  f"{PIN}, upgrading it to the pin in place (preinstalled: adopt_or_replace)")
    assert res[TOOLKIT]["msg"] == (f"nvidia-container-toolkit={PIN}-*,nvidia-container-toolkit-base={PIN}-* "
                                   "held=True")


def test_a_node_without_a_toolkit_installs_the_pin(tmp_path: Path) -> None:
    # libnvidia-container alone is no toolkit.
    rc, res, _ = _toolkit_run(tmp_path, {"libnvidia-container1": ("ii ", "1.17.8-1")}, "adopt_or_fail")
    assert rc == 0, res
    assert res[RUN[4]]["msg"] == f"container-toolkit: none installed, installing {PIN}"
    assert res[TOOLKIT]["msg"] == (f"nvidia-container-toolkit={PIN}-*,nvidia-container-toolkit-base={PIN}-* "
                                   "held=False")


def test_the_roles_own_toolkit_below_a_bumped_pin_is_upgraded_not_refused(tmp_path: Path) -> None:
    """An earlier converge installed it from the role's repository: a newer pin upgrades it."""
    (tmp_path / "gpucluster-nvidia-container-toolkit.sources").write_text("Types: deb\n")
    rc, res, _ = _toolkit_run(tmp_path, _toolkit("1.17.8-1"), "adopt_or_fail")
    assert rc == 0, res
    assert res[RUN[4]]["msg"] == (f"container-toolkit: nvidia-container-toolkit 1.17.8-1 from the role's repository "
                                  f"is below the pin {PIN}, upgrading it to the pin")
    assert res[TOOLKIT]["msg"].endswith("held=False")
