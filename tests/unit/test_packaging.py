"""The package works outside its checkout: a wheel, installed into a fresh virtual environment
that cannot see the checkout, plans a stack and runs the conformance suite from another folder.

The new environment gets its dependencies from the project's own environment (a ``.pth`` line
naming that site-packages folder: a plain folder line, so the editable install's finder there is
never loaded) and gpucluster itself only from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from setuptools import find_namespace_packages

from gpucluster.inventory import parse_inventory_text

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
# What the wheel is built from: the package and the folders it maps into it (pyproject.toml).
SOURCES = ("pyproject.toml", "gpucluster", *PYPROJECT["package-dir"].values())


def _package_folders() -> set[str]:
    """Every folder holding Python modules that would become part of the wheel."""
    found = {p for p in find_namespace_packages(str(REPO), include=["gpucluster", "gpucluster.*"])
             if any((REPO / p.replace(".", "/")).glob("*.py"))}
    for name, folder in PYPROJECT["package-dir"].items():
        base = REPO / folder
        for sub in [base, *(d for d in base.rglob("*") if d.is_dir())]:
            if any(sub.glob("*.py")) and "__pycache__" not in sub.parts:
                rel = sub.relative_to(base)
                found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(PYPROJECT["packages"])
    # The Kubernetes add-ons are a Pulumi program of their own, run from a checkout (stacks/kubernetes).
    missing = _package_folders() - listed - {"gpucluster.stacks.kubernetes"}
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    gone = [p for p in listed if p not in _package_folders() and p != "gpucluster.templates"]
    assert not gone, f"listed in pyproject.toml but no such folder: {gone}"


def _build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    out = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("gpucluster-*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "project-deps.pth").write_text("".join(f"{p}\n" for p in deps))
    return venv


def _unreachable_inventory(path: Path) -> Path:
    """The lab inventory with every node at an address nothing answers (TEST-NET-1, RFC 5737)."""
    data = parse_inventory_text((REPO / "tests" / "golden" / "inventory" / "lab.yml").read_text())
    for i, host in enumerate(data["all"]["hosts"].values()):
        host["ansible_host"] = f"192.0.2.{10 + i}"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.slow
def test_the_wheel_plans_and_verifies_from_another_folder(tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path, _build_wheel(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GPUCLUSTER_KUBECONFIG", "GPUCLUSTER_INVENTORY", "GPUCLUSTER_RUN_DIR")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def gc(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "gpucluster"), *args], cwd=elsewhere, env=env, text=True,
                              capture_output=True, timeout=timeout, check=False)

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import gpucluster, gpucluster.verify as v;"
                            "print(gpucluster.__file__); print(v.suite_dir())"],
                           cwd=elsewhere, env=env, text=True, capture_output=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where), where

    stack = elsewhere / "Pulumi.aws-h100.yaml"
    shutil.copy2(REPO / "Pulumi.aws-h100.yaml", stack)
    plan = gc("plan", str(stack), "--json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    doc = json.loads(plan.stdout)
    assert doc["stack"] == "aws-h100" and doc["resources"] and not [p for p in doc["policy"] if p["status"] == "fail"]
    # cloud-init rendered from the templates shipped in the wheel
    assert any("#cloud-config" in str(r["properties"].get("userData", "")) for r in doc["resources"])

    inventory = _unreachable_inventory(elsewhere / "inventory.yml")
    run_dir = elsewhere / "run"
    verify = gc("verify", "--inventory", str(inventory), "--run-dir", str(run_dir), "--no-burn", "--json")
    assert verify.returncode == 1, verify.stderr[-3000:]
    out = json.loads(verify.stdout)
    verdicts = {v["node"]: v["verdict"] for v in out["verdicts"]}
    assert verdicts and {verdicts[n] for n in verdicts if not n.startswith("(")} == {"unreachable"}, verdicts
    results = json.loads((run_dir / "results.json").read_text())
    assert len(results["results"]) > 20  # the suite was found and every check ran (and erred at once)
    assert (run_dir / "junit.xml").is_file() and (run_dir / "summary.md").is_file()
