"""``bench/proxy.py --quick`` as a user runs it: it starts its own deployment (ZooKeeper, three bookies, a broker,
a TLS proxy with token authentication), measures the four parts with tiny numbers, prints every figure and stops
what it started. Nothing here is timed: the figures only have to be there and be plausible."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

NUMBER = r"[\d,]+(?:\.\d+)?"


def test_the_proxy_bench_prints_every_figure(tmp_path) -> None:
    out = tmp_path / "figures.json"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "proxy.py"), "--quick", "--json", str(out)],
                            capture_output=True, text=True, timeout=360, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr[-6000:]
    table = result.stdout
    rows = {
        "published msg/s, max rate": rf"{NUMBER}\s+{NUMBER}\s+{NUMBER} %",
        "achieved msg/s, fixed rate": rf"{NUMBER}\s+{NUMBER}",
        "publish latency p50 ms": rf"{NUMBER}\s+{NUMBER}\s+[+-]{NUMBER} ms",
        "publish latency p99 ms": rf"{NUMBER}\s+{NUMBER}\s+[+-]{NUMBER} ms",
        r"TLS connections/s accepted \(4 workers\)": NUMBER,
        "TLS \\+ CONNECT p50 / p99 ms": rf"{NUMBER} / {NUMBER}",
        "proxy RSS before": rf"{NUMBER} MiB",
        "proxy RSS with 100 idle TLS connections": rf"{NUMBER} MiB",
        "per idle connection": rf"-?{NUMBER} KiB",
        "proxy RSS after closing them": rf"{NUMBER} MiB",
    }
    for label, cells in rows.items():
        assert re.search(rf"^\s*{label}\s+{cells}\s*$", table, re.MULTILINE), (label, table)
    assert re.search(r"load average [\d. ]+ -> [\d. ]+", table), table

    figures = json.loads(out.read_text())
    for part in ("throughput", "latency"):
        assert set(figures[part]) == {"direct", "proxy TLS"}
        for route, summary in figures[part].items():
            assert summary["messages"] > 0 and summary["errors"] == 0, (part, route, summary)
            assert summary["latency_ms"]["p99"] >= summary["latency_ms"]["p50"] > 0, (part, route, summary)
    assert figures["throughput"]["proxy TLS"]["proxy_cpu_us_per_msg"] > 0  # the bytes did go through the proxy
    connect = figures["connect_rate"]
    assert connect["connections"] > 0 and connect["errors"] == 0, connect
    memory = figures["memory"]
    assert memory["connections"] == memory["still_open"] == 100, memory
    assert memory["proxy_active_connections"] >= 100, memory
    assert memory["rss_idle_bytes"] > 0 and memory["rss_before_bytes"] > 0
