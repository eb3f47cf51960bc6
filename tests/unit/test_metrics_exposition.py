"""The broker's own text exposition (``broker/service/exposition.py``): what it writes parses as Prometheus'
text format (label values escaped, counters named ``_total``), the registry serves ordinary and text
collectors together, streamed in pieces or at once alike, and the collector is paused only while a piece is
made."""

from __future__ import annotations

import gc
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from broker.service.exposition import (ExpositionRegistry, TextCollector, collector_paused, exposition_chunks,
                                       family_text, label_set)

ODD = 'sub "quoted" \\ back\nslash'


class Pieces(TextCollector):
    def __init__(self) -> None:
        self.gc_enabled_while_making: list[bool] = []

    def exposition_pieces(self) -> Iterator[str]:
        self.gc_enabled_while_making.append(gc.isenabled())
        yield family_text("demo_events", "counter", "Events", [(label_set(("subscription",), (ODD,)), 3)])
        yield ""  # a pause point
        yield family_text("demo_depth", "gauge", "Depth", [(label_set(("topic",), ("t1",)), 0.25),
                                                            (label_set(("topic",), ("t2",)), float("nan"))])


def parse(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_family_text_parses_back_with_escaped_labels() -> None:
    samples = parse(Pieces().exposition())
    assert samples[("demo_events_total", (("subscription", ODD),))] == 3
    assert samples[("demo_depth", (("topic", "t1"),))] == 0.25
    assert samples[("demo_depth", (("topic", "t2"),))] != samples[("demo_depth", (("topic", "t2"),))]  # NaN
    assert "# TYPE demo_events_total counter" in Pieces().exposition()


def test_a_text_collector_works_in_any_registry() -> None:
    registry = CollectorRegistry()
    registry.register(Pieces())
    assert registry.get_sample_value("demo_events_total", {"subscription": ODD}) == 3


async def test_streamed_and_whole_expositions_are_the_same() -> None:
    registry = ExpositionRegistry()
    Counter("demo_plain", "An ordinary collector", registry=registry).inc(2)
    text = Pieces()
    registry.register(text)
    whole = registry.exposition()
    chunks = [chunk async for chunk in exposition_chunks(registry)]
    assert b"".join(chunks) == whole and len(chunks) == 3  # prometheus_client's part, then two families
    samples = parse(whole.decode())
    assert samples[("demo_plain_total", ())] == 2 and samples[("demo_events_total", (("subscription", ODD),))] == 3
    registry.unregister(text)
    assert b"demo_events" not in registry.exposition()


async def test_the_collector_is_paused_only_while_a_piece_is_made() -> None:
    registry = ExpositionRegistry()
    text = Pieces()
    registry.register(text)
    assert gc.isenabled()
    async for _ in exposition_chunks(registry):
        assert gc.isenabled()  # between pieces (a slow client's write) it runs
    assert text.gc_enabled_while_making == [False] and gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
