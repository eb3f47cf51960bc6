"""Prometheus' own checker, ``promtool``, on what the tests produce (Debian's package, as `make` installs it)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from dataclasses import dataclass

# promtool's exit code when the input parsed but its lint found problems (1 is a parse or validation error).
LINT_PROBLEMS = 3


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool not found: run scripts/ensure-prometheus (Debian's prometheus package)"
    return found


@dataclass(frozen=True)
class MetricsCheck:
    """``promtool check metrics``: ``returncode`` 0 clean, 3 parsed with lint problems, else not parsable."""

    returncode: int
    problems: list[tuple[str, str]]  # (metric name, problem) per lint line
    output: str

    @property
    def parsed(self) -> bool:
        return self.returncode in (0, LINT_PROBLEMS)


def check_metrics(exposition: bytes | str) -> MetricsCheck:
    data = exposition.encode() if isinstance(exposition, str) else exposition
    done = subprocess.run([promtool(), "check", "metrics"], input=data, capture_output=True, timeout=60)
    output = (done.stdout + done.stderr).decode(errors="replace")
    problems = [tuple(line.split(" ", 1)) for line in output.splitlines() if " " in line.strip()]
    return MetricsCheck(done.returncode, [(p[0], p[1]) for p in problems], output)


def check_config(path: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), "check", "config", str(path)], capture_output=True, text=True, timeout=60)
