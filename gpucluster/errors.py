"""Errors every command turns into exit code 2 with one line per problem."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Bad input or environment: a file, a field, a host prerequisite.

    ``problems`` holds one line per problem; each line names the file or field.
    Raised before anything is applied, so nothing is left half done.
    """

    def __init__(self, problems: list[str] | str, *, source: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        super().__init__("; ".join(self.problems))

    def lines(self) -> list[str]:
        prefix = f"{self.source}: " if self.source else ""
        return [f"error: {prefix}{p}" for p in self.problems]
