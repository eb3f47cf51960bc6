"""Where the publish tail goes: per-stage latency of the publishes of one ``magnetar perf`` run.

``magnetar perf produce ... --stages-from http://broker:8080 --stages-from http://bookie:8000`` scrapes every
given ``/metrics`` before and after the run and prints, from the difference of the histograms (so only this
run's observations count, summed over every process given), the count, p50, p99 and p99.9 of each stage:

=====================  =======================================================================================
stage                  series
=====================  =======================================================================================
broker: SEND→receipt   ``magnetar_broker_publish_latency_seconds`` (SEND arrival to the receipt going out)
broker: ledger add     ``magnetar_broker_storage_write_latency_seconds`` (managed-ledger add to Qa acks)
bookie: add            ``magnetar_bookie_add_latency_seconds`` (add request receipt to its answer)
journal: queue         ``magnetar_bookie_journal_stage_seconds{stage="queue"}`` (waiting for the writer)
journal: write         ``…{stage="write"}`` (the group's ``write``)
journal: force wait    ``…{stage="force_wait"}`` (written, waiting for the forcer: a slow previous fsync)
journal: fsync         ``…{stage="fsync"}``
event-loop lag         ``magnetar_event_loop_lag_seconds`` (lateness of a 50 ms timer: loop busy or GIL held)
gc pause               ``magnetar_gc_pause_seconds`` (every generation)
=====================  =======================================================================================

The client's own send-to-receipt figures are printed by ``magnetar perf`` beside them. Quantiles from buckets
are upper bounds of the bucket holding them (as ``histogram_quantile`` without interpolation), so read them
as "at most". Parsing is pure (:func:`parse_histograms`); only :func:`scrape` does I/O.
"""

from __future__ import annotations

import math
import urllib.request
from typing import Iterable, Mapping, Optional, Sequence

STAGES: tuple[tuple[str, str, Optional[tuple[str, str]]], ...] = (
    ("broker: SEND->receipt", "magnetar_broker_publish_latency_seconds", None),
    ("broker: ledger add", "magnetar_broker_storage_write_latency_seconds", None),
    ("bookie: add", "magnetar_bookie_add_latency_seconds", None),
    ("journal: queue", "magnetar_bookie_journal_stage_seconds", ("stage", "queue")),
    ("journal: write", "magnetar_bookie_journal_stage_seconds", ("stage", "write")),
    ("journal: force wait", "magnetar_bookie_journal_stage_seconds", ("stage", "force_wait")),
    ("journal: fsync", "magnetar_bookie_journal_stage_seconds", ("stage", "fsync")),
    # The runtime's own stalls, per process scraped (observability/runtime.py): how late the event loop ran
    # a 50 ms timer (every callback and GIL wait in front of it), and garbage-collector pauses.
    ("event-loop lag", "magnetar_event_loop_lag_seconds", None),
    ("gc pause", "magnetar_gc_pause_seconds", None),
)

# (family, (label, value) or None) -> {upper bound: cumulative count}
Histograms = dict[tuple[str, Optional[tuple[str, str]]], dict[float, float]]


def _labels(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip():
            out[key.strip()] = value.strip().strip('"')
    return out


def parse_histograms(exposition: str) -> Histograms:
    """The ``_bucket`` samples of the families in :data:`STAGES`, summed over other labels (bookie...)."""
    wanted = {family for _, family, _ in STAGES}
    out: Histograms = {}
    for line in exposition.splitlines():
        if not line or line[0] == "#" or "_bucket{" not in line:
            continue
        name, _, rest = line.partition("{")
        family = name[: -len("_bucket")]
        if family not in wanted:
            continue
        labels_text, _, value_text = rest.rpartition("}")
        labels = _labels(labels_text)
        try:
            bound = float(labels.pop("le"))
            value = float(value_text.split()[0])
        except (KeyError, ValueError, IndexError):
            continue
        keys = [(family, None)] + [(family, (k, v)) for k, v in labels.items() if k == "stage"]
        for key in keys:
            if key[1] is None and "stage" in labels:
                continue
            buckets = out.setdefault(key, {})
            buckets[bound] = buckets.get(bound, 0.0) + value
    return out


def merge(many: Iterable[Histograms]) -> Histograms:
    out: Histograms = {}
    for hist in many:
        for key, buckets in hist.items():
            target = out.setdefault(key, {})
            for bound, value in buckets.items():
                target[bound] = target.get(bound, 0.0) + value
    return out


def quantile(buckets: Mapping[float, float], q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` of cumulative ``buckets`` (NaN when empty)."""
    bounds = sorted(buckets)
    if not bounds:
        return math.nan
    total = buckets[bounds[-1]]
    if total <= 0:
        return math.nan
    rank = q * total
    for bound in bounds:
        if buckets[bound] >= rank:
            return bound
    return bounds[-1]


def stage_rows(before: Histograms, after: Histograms) -> list[tuple[str, float, float, float, float]]:
    """(stage, count, p50 ms, p99 ms, p99.9 ms) of the observations between the two scrapes."""
    rows = []
    for label, family, selector in STAGES:
        a = after.get((family, selector), {})
        b = before.get((family, selector), {})
        delta = {bound: a[bound] - b.get(bound, 0.0) for bound in a}
        count = max(delta.values(), default=0.0)
        if count <= 0:
            continue
        rows.append((label, count, *(quantile(delta, q) * 1000.0 for q in (0.5, 0.99, 0.999))))
    return rows


def format_rows(rows: Sequence[tuple[str, float, float, float, float]]) -> list[str]:
    if not rows:
        return ["== stages: no observations in the given /metrics (brokers and bookies of this run?)"]
    width = max(20, *(len(r[0]) for r in rows))
    lines = [f"== stages (ms, upper bucket bounds):  {'stage':<{width}}   count       p50       p99     p99.9"]
    for label, count, p50, p99, p999 in rows:
        lines.append(f"==                                    {label:<{width}} {count:>7,.0f} "
                     f"{_ms(p50)} {_ms(p99)} {_ms(p999)}")
    return lines


def _ms(value: float) -> str:
    return f"{value:>9.1f}"  # inf: beyond the largest bucket


def metrics_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/metrics") else url + "/metrics"


def scrape(urls: Sequence[str], *, timeout_s: float = 5.0) -> Histograms:
    """Every URL's stage histograms, summed; a URL that fails is skipped (the run goes on)."""
    found = []
    for url in urls:
        try:
            with urllib.request.urlopen(metrics_url(url), timeout=timeout_s) as response:
                found.append(parse_histograms(response.read().decode(errors="replace")))
        except (OSError, ValueError):
            continue
    return merge(found)
