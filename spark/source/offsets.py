"""Positions in a topic and the offsets Spark keeps for the source (pure).

A position ``(ledgerId, entryId)`` names an entry of a topic's managed ledger; positions order as tuples.
Ranges are half-open: a start position is the first entry read, an end position the first entry *not*
read. ``EARLIEST`` (0, 0) precedes every entry. So the offset of a topic after reading up to entry ``e`` of
ledger ``L`` is ``(L, e + 1)``, and "nothing read yet" is ``EARLIEST``.

Streaming offsets are JSON objects ``{"<region>": {"<topic>": {"ledgerId": L, "entryId": E}}}``; a topic
missing from a start offset starts at ``EARLIEST`` (a topic that appeared since, e.g. through
``topicsPattern``). The user's ``startingOffsets``/``endingOffsets`` JSON is ``{"<topic>": {...}}`` for one
region and ``{"<region>": {"<topic>": {...}}}`` when several are read.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple, Union

from .errors import SourceOptionError

__all__ = ["EARLIEST", "Position", "OffsetSpec", "RegionOffsets", "parse_offsets", "offsets_to_json",
           "offsets_from_json"]


class Position(NamedTuple):
    ledger_id: int
    entry_id: int

    def to_json(self) -> dict[str, int]:
        return {"ledgerId": self.ledger_id, "entryId": self.entry_id}


EARLIEST = Position(0, 0)

# topic -> position
TopicOffsets = dict[str, Position]
# region -> topic -> position
RegionOffsets = dict[str, TopicOffsets]
# "earliest" | "latest" | explicit positions by region (key "" when the user gave the one-region form)
OffsetSpec = Union[str, RegionOffsets]


def _position(option: str, where: str, value: Any) -> Position:
    if not isinstance(value, dict) or set(value) != {"ledgerId", "entryId"}:
        raise SourceOptionError(option, f"{where}: expected {{\"ledgerId\": L, \"entryId\": E}}, got {value!r}")
    ledger_id, entry_id = value["ledgerId"], value["entryId"]
    for name, number in (("ledgerId", ledger_id), ("entryId", entry_id)):
        if type(number) is not int or number < 0:
            raise SourceOptionError(option, f"{where}: {name} must be a non-negative integer, got {number!r}")
    return Position(ledger_id, entry_id)


def parse_offsets(option: str, text: str, *, default: str) -> OffsetSpec:
    """``earliest``, ``latest`` or the JSON forms of the module docstring.

    Topic-keyed JSON comes back under the region key ``""`` (it applies to the one region read); topics are
    checked as names by the caller, which knows which topics are read.
    """
    text = (text or "").strip()
    if not text:
        return default
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise SourceOptionError(option, f"expected earliest, latest or a JSON object, got {text!r} ({e})") from None
    if not isinstance(doc, dict) or not doc:
        raise SourceOptionError(option, f"expected a non-empty JSON object of topics, got {text!r}")
    if all("://" in key for key in doc):
        return {"": {topic: _position(option, topic, value) for topic, value in doc.items()}}
    out: RegionOffsets = {}
    for region, topics in doc.items():
        if "://" in region:
            raise SourceOptionError(option, "mixes topic keys and region keys")
        if not isinstance(topics, dict) or not all("://" in t for t in topics):
            raise SourceOptionError(option, f"region {region!r}: expected an object of full topic names "
                                            f"(persistent://tenant/namespace/topic) to positions")
        out[region] = {topic: _position(option, f"{region} {topic}", value) for topic, value in topics.items()}
    return out


def offsets_to_json(offsets: RegionOffsets) -> dict[str, Any]:
    """Spark's offset form (a dict of primitives)."""
    return {region: {topic: pos.to_json() for topic, pos in sorted(topics.items())}
            for region, topics in sorted(offsets.items())}


def offsets_from_json(doc: Mapping[str, Any]) -> RegionOffsets:
    """Reads what :func:`offsets_to_json` wrote (Spark hands offsets back from its checkpoint)."""
    return {region: {topic: Position(int(p["ledgerId"]), int(p["entryId"])) for topic, p in topics.items()}
            for region, topics in doc.items()}
