"""Prometheus' text exposition for collectors with hundreds of thousands of series: they write the text
themselves, in pieces, and ``/metrics`` streams it.

prometheus_client builds one ``Sample`` object per series, validates each label name and formats each value
(``floatToGoString``) at every scrape. That is fine for a few hundred series; a broker with 10,000 topics
exports about half a million, and spent most of a scrape there (py-spy, 2,000 topics: ~85 % of the CPU in
``add_metric`` and ``generate_latest``). A :class:`TextCollector` writes its families straight into the text
format 0.0.4 instead: label sets formatted and escaped once per topic (callers cache them), one f-string per
sample, values as Python prints them (``1``, ``0.25``, ``nan``, ``inf``: Prometheus parses them all).

It writes them as a sequence of pieces (:meth:`TextCollector.exposition_pieces`: a family's text, or ``""``
where the work may pause), so the scrape never holds the event loop for long: :func:`exposition_chunks`
hands each piece to the HTTP response and lets the loop run between pieces. Streaming also spares the
broker three whole copies of a 70 MB answer (joined, encoded, joined again).

:class:`ExpositionRegistry` is a ``CollectorRegistry`` that knows which collectors write text; ordinary
collectors go through prometheus_client. A text collector still works in any registry (``collect()`` parses
its own text back into families), which is what tests and ``get_sample_value`` use.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from typing import AsyncIterator, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["ExpositionRegistry", "TextCollector", "collector_paused", "escape_label_value", "exposition_chunks",
           "family_text", "format_families", "label_set"]


def escape_label_value(value: str) -> str:
    """A label value as the text format quotes it (backslash, double quote and newline escaped)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return value


def label_set(names: Sequence[str], values: Sequence[str]) -> str:
    """``{a="x",b="y"}``: the label part of a sample line, values escaped."""
    return "{" + ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values)) + "}"


def family_text(name: str, kind: str, help_text: str, rows: Iterable[tuple[str, object]]) -> str:
    """One family: HELP and TYPE, then ``name<labels> value`` per ``(label set, value)`` row.

    A counter's samples (and HELP/TYPE lines, as prometheus_client writes them) are named ``<name>_total``.
    Values are ints or floats (a bool would print ``True``: callers convert).
    """
    sample = f"{name}_total" if kind == "counter" else name
    return f"# HELP {sample} {help_text}\n# TYPE {sample} {kind}\n" + "".join(
        [f"{sample}{labels} {value}\n" for labels, value in rows])


def format_families(families: Iterable) -> str:
    """A few prometheus_client families (``Metric`` objects) as exposition text, formatted by prometheus_client."""
    return generate_latest(_Collectors([_Families(families)])).decode()  # type: ignore[arg-type]


class TextCollector(Collector):
    """A collector that writes its families as exposition text, in pieces (:meth:`exposition_pieces`)."""

    def exposition_pieces(self) -> Iterator[str]:
        """The text as consecutive pieces; an empty piece only marks a point where the work may pause (a
        caller on an event loop lets other callbacks run there)."""
        raise NotImplementedError

    def exposition(self) -> str:
        """The whole text at once."""
        return "".join(self.exposition_pieces())

    def describe(self) -> list:
        return []  # names are fixed, but not described: no collision checks against other collectors

    def collect(self) -> Iterator:
        """The same families, parsed back (for registries other than :class:`ExpositionRegistry`, and tests)."""
        yield from text_string_to_metric_families(self.exposition())


class _Collectors:
    """What ``generate_latest`` needs of a registry: ``collect()`` over some collectors."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self._collectors = list(collectors)

    def collect(self) -> Iterator:
        for collector in self._collectors:
            yield from collector.collect()


class _Families:
    def __init__(self, families: Iterable) -> None:
        self._families = list(families)

    def collect(self) -> Iterator:
        return iter(self._families)


class ExpositionRegistry(CollectorRegistry):
    """A ``CollectorRegistry`` that knows which of its collectors write their own text (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._order: dict[Collector, None] = {}  # registration order, kept here (the base class's is private)
        self._order_lock = threading.Lock()

    def register(self, collector: Collector) -> None:
        super().register(collector)
        with self._order_lock:
            self._order[collector] = None

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        with self._order_lock:
            self._order.pop(collector, None)

    def split(self) -> tuple[list[Collector], list[TextCollector]]:
        """The ordinary collectors and the text collectors, each in registration order."""
        with self._order_lock:
            collectors = list(self._order)
        return ([c for c in collectors if not isinstance(c, TextCollector)],
                [c for c in collectors if isinstance(c, TextCollector)])

    def exposition(self) -> bytes:
        """Every family at once: prometheus_client's text for ordinary collectors, then each text collector's."""
        plain, text = self.split()
        with collector_paused():
            return generate_latest(_Collectors(plain)) + b"".join(  # type: ignore[arg-type]  (duck-typed)
                c.exposition().encode() for c in text)


async def exposition_chunks(registry: CollectorRegistry) -> AsyncIterator[bytes]:
    """``/metrics``' body in chunks, for an HTTP response to stream: with an :class:`ExpositionRegistry`,
    prometheus_client's text of the ordinary collectors and then each text collector's pieces, the event
    loop running other callbacks between pieces; any other registry in one chunk."""
    if not isinstance(registry, ExpositionRegistry):
        yield generate_latest(registry)
        return
    plain, text = registry.split()
    yield generate_latest(_Collectors(plain))  # type: ignore[arg-type]  (duck-typed: collect())
    for collector in text:
        pieces = collector.exposition_pieces()
        while True:
            with collector_paused():  # only while a piece is made: never across a slow client's write
                piece = next(pieces, None)
            if piece is None:
                break
            if piece:
                yield piece.encode()
            await asyncio.sleep(0)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a scrape runs (on again after, if it was on).

    A scrape of a large broker allocates about a million short-lived tuples and strings, all freed by
    reference counting when it ends; counted as allocations they would trigger young collections, and their
    survivors (held until the family is written) push full collections that walk the whole heap of a broker
    with thousands of topics. It is off only while a piece is made (synchronously, a few tens of
    milliseconds), never while the response waits for the client; nothing is lost by waiting, cyclic garbage
    is collected after.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
