#!/usr/bin/env python3
"""Run every benchmark in bench/ (files named bench_*.py) and write JSON to bench/results/.

Each module exposes ``run() -> dict``; the dict must hold ``target`` (what the figure is
held against) and ``met`` (bool). `python bench/run.py NAME...` runs only those.
Targets are reported, never asserted: a benchmark that misses its target still writes
its figures, and the runner exits 0.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def main(argv: list[str]) -> int:
    RESULTS.mkdir(exist_ok=True)
    wanted = set(argv)
    modules = sorted(HERE.glob("bench_*.py"))
    for path in modules:
        name = path.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"bench {name}: running", file=sys.stderr, flush=True)
        started = time.perf_counter()
        result = module.run()
        result["bench"] = name
        result["wall_s"] = round(time.perf_counter() - started, 3)
        result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
        result["host"] = {"cpus": __import__("os").cpu_count(), "python": platform.python_version()}
        out = RESULTS / f"{name}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        verdict = "met" if result.get("met") else "MISSED"
        print(f"bench {name}: {verdict} target ({result.get('target')}); wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
