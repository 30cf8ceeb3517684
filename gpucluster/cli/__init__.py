"""The `gpucluster` command: a thin dispatcher over the library.

Each sub-command lives in its own module exposing ``register(subparsers)``; the
handler it sets as ``func`` takes the parsed arguments and returns an exit code.
Exit codes: 0 ok, 1 a check failed, 2 bad input or environment.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpucluster import __version__
from gpucluster.errors import EXIT_BAD_INPUT, InputError

# Sub-command modules, in the order `--help` lists them. A module that is
# missing (an optional command not installed) is simply not offered.
_COMMANDS = ("spec", "inventory", "paths", "lab", "converge", "verify", "up", "down", "parse", "plan",
             "preflight", "render", "twin")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's own usage errors must also be one line and exit 2.
        self.exit(EXIT_BAD_INPUT, f"error: {self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpucluster", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"gpucluster {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"gpucluster.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpucluster.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except InputError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # A reader such as `head` went away: not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code
