"""Reading a live process's ``/metrics`` as Prometheus does, and checking it with the real ``promtool``.

``scrape(url)`` fetches the classic text format (what ``promtool check metrics`` reads), ``scrape(url,
openmetrics=True)`` what Prometheus itself negotiates (OpenMetrics). ``promtool_check_metrics(text)`` runs
Debian's ``/usr/bin/promtool`` (installed by ``scripts/ensure-prometheus``) and returns its exit code and what
it printed: 0 and nothing printed means no error and no lint problem. ``samples(text)`` parses the text format
into ``{(name, frozenset(labels)): value}``.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def scrape(url: str, *, openmetrics: bool = False, timeout_s: float = 10.0) -> str:
    headers = {"Accept": _OPENMETRICS} if openmetrics else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as response:
        return response.read().decode()


def promtool_check_metrics(text: str) -> tuple[int, str]:
    """``promtool check metrics`` on ``text``: (exit code, stdout + stderr)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/ensure-prometheus (Debian's prometheus package)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return done.returncode, (done.stdout + done.stderr).strip()


Samples = dict[tuple[str, frozenset], float]


def samples(text: str) -> Samples:
    """Every sample of a text-format exposition, keyed by (sample name, frozenset of label pairs)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError naming it when absent)."""
    key = (name, frozenset(labels.items()))
    if key not in parsed:
        raise KeyError(f"no sample {name}{labels or ''}")
    return parsed[key]
