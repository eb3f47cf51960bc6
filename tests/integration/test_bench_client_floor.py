"""``bench/client_floor.py`` as a user runs it: the real pulsar-client publishes through ``magnetar perf`` to the
answer-at-once server, which the script starts and stops itself. Nothing is timed: the row only has to be
there, every message acknowledged, at about the rate asked."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(200)


def test_the_client_floor_bench_publishes_against_its_answer_at_once_server(tmp_path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "client_floor.py"), "--clients", "pulsar",
                             "--rates", "400", "--seconds", "3", "--runs", "1"],
                            capture_output=True, text=True, timeout=180, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    row = re.search(r"^pulsar\s+400\s+([\d,]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", result.stdout, re.M)
    assert row is not None, result.stdout
    achieved, p50, p99, p999, top = (float(g.replace(",", "")) for g in row.groups())
    assert 300 <= achieved <= 500
    assert 0 < p50 <= p99 <= p999 <= top
