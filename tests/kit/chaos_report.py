"""What a chaos run found, from what producers saw acknowledged and what each region holds (pure; no I/O).

Payloads are ``<producer>:<seq>``. ``check_region`` counts, for one region's contents in log order: acknowledged
messages missing (lost), payloads stored more than once (duplicated), and per-producer order violations (a
sequence number not above the previous one of the same producer). ``replication_delays_ms`` takes a
consumer's ``payload publish_ms receive_ms`` records in a region and keeps, for messages that came from
elsewhere, the first receipt's delay.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class RegionCheck:
    region: str
    messages: int
    lost: int
    duplicated: int
    out_of_order: int


def parse(payload: str) -> tuple[str, int]:
    producer, _, seq = payload.rpartition(":")
    return producer, int(seq)


def check_region(region: str, contents: Sequence[str], acked: Mapping[str, Iterable[int]]) -> RegionCheck:
    counts = Counter(contents)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    lost = sum(1 for producer, seqs in acked.items() for s in seqs if f"{producer}:{s}" not in counts)
    last: dict[str, int] = {}
    out_of_order = 0
    for payload in contents:
        producer, seq = parse(payload)
        if producer in last and seq <= last[producer]:
            out_of_order += 1
        last[producer] = max(seq, last.get(producer, -1))
    return RegionCheck(region, len(contents), lost, duplicated, out_of_order)


def replication_delays_ms(records: Iterable[str], local_producers: Iterable[str]) -> list[int]:
    local = set(local_producers)
    seen: set[str] = set()
    delays = []
    for line in records:
        parts = line.split()
        if len(parts) != 3:
            continue  # a line cut by the consumer's end
        payload, publish_ms, receive_ms = parts[0], int(parts[1]), int(parts[2])
        if payload in seen or parse(payload)[0] in local:
            continue
        seen.add(payload)
        delays.append(receive_ms - publish_ms)
    return delays


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]


HEADER = ("fault", "duration_s", "messages", "lost", "duplicated", "out_of_order", "max_repl_delay_ms", "drain_s")


def table(rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width table with :data:`HEADER`."""
    cells = [list(map(str, HEADER))] + [[f"{v:.1f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)
