"""The managed-ledger metadata codec (``config_store.managed_ledgers``) and its store, in memory."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_store import BadVersionError, InvalidMetadataError, MemoryMetadataStore
from config_store.managed_ledgers import (LedgerInfo, ManagedCursorInfo, ManagedLedgerInfo, ManagedLedgerMetaState,
                                          ManagedLedgerStore, cursor_path, decode_cursor_name, encode_cursor_name,
                                          managed_ledger_path)

ints = st.integers(min_value=0, max_value=2**62)


@st.composite
def ledger_infos(draw) -> ManagedLedgerInfo:
    ids = sorted(set(draw(st.lists(ints, max_size=8))))
    ledgers = [LedgerInfo(i, draw(ints), draw(ints), draw(ints)) for i in ids]
    props = draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3))
    return ManagedLedgerInfo(ledgers, draw(st.sampled_from(list(ManagedLedgerMetaState))), props)


@st.composite
def cursor_infos(draw) -> ManagedCursorInfo:
    points = sorted(set(draw(st.lists(st.tuples(st.integers(0, 50), st.integers(-1, 50)), min_size=1, max_size=11))))
    md, rest = points[0], points[1:]
    ranges = [(*rest[i], *rest[i + 1]) for i in range(0, len(rest) - 1, 2)]
    props = draw(st.dictionaries(st.text(max_size=8), st.integers(-2**63, 2**63 - 1), max_size=3))
    return ManagedCursorInfo(md, ranges, props, draw(ints))


@settings(max_examples=200)
@given(info=ledger_infos())
def test_ledger_info_round_trip(info: ManagedLedgerInfo) -> None:
    data = info.to_json()
    assert json.loads(data)["version"] == 1
    assert ManagedLedgerInfo.from_json(data) == info


@settings(max_examples=200)
@given(info=cursor_infos())
def test_cursor_info_round_trip(info: ManagedCursorInfo) -> None:
    assert ManagedCursorInfo.from_json(info.to_json()) == info


def test_field_names_are_the_documented_ones() -> None:
    info = ManagedLedgerInfo([LedgerInfo(7, 10, 1000, 123)], properties={"a": "b"})
    assert json.loads(info.to_json()) == {"version": 1, "state": "OPEN", "properties": {"a": "b"},
                                          "ledgers": [{"ledgerId": 7, "entries": 10, "size": 1000, "timestamp": 123}]}
    cursor = ManagedCursorInfo((7, 3), [(7, 4, 7, 6)], {"x": 1}, 99)
    assert json.loads(cursor.to_json()) == {"version": 1, "markDelete": {"ledgerId": 7, "entryId": 3},
                                            "individuallyDeleted": [[7, 4, 7, 6]], "properties": {"x": 1},
                                            "lastActive": 99}


@pytest.mark.parametrize("data", [
    b"", b"not json", b"[]", b'{"ledgers": []}', b'{"version": 2, "ledgers": []}',
    b'{"version": 1}', b'{"version": 1, "ledgers": {}}', b'{"version": 1, "ledgers": [1]}',
    b'{"version": 1, "ledgers": [{"entries": 1}]}', b'{"version": 1, "ledgers": [{"ledgerId": "1"}]}',
    b'{"version": 1, "ledgers": [{"ledgerId": true}]}', b'{"version": 1, "ledgers": [{"ledgerId": -1}]}',
    b'{"version": 1, "ledgers": [{"ledgerId": 2}, {"ledgerId": 1}]}',
    b'{"version": 1, "ledgers": [], "state": "WEIRD"}', b'{"version": 1, "ledgers": [], "properties": {"a": 1}}',
    b'\xff\xfe',
])
def test_corrupt_ledger_info_rejected(data: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        ManagedLedgerInfo.from_json(data)


@pytest.mark.parametrize("data", [
    b'{"version": 1}', b'{"version": 1, "markDelete": {"ledgerId": 1}}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": -2}}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 0}, "individuallyDeleted": [[1, 2, 3]]}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 0}, "individuallyDeleted": [[1, 5, 1, 3]]}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 9}, "individuallyDeleted": [[1, 5, 1, 7]]}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 0}, '
    b'"individuallyDeleted": [[1, 5, 1, 7], [1, 6, 1, 9]]}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 0}, "properties": {"a": "x"}}',
    b'{"version": 1, "markDelete": {"ledgerId": 1, "entryId": 0}, "lastActive": 1.5}',
])
def test_corrupt_cursor_info_rejected(data: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        ManagedCursorInfo.from_json(data)


@pytest.mark.parametrize("name", ["sub", "a b", "../x", ".", "..", "__cursors", "ünï/cödé", "%2E"])
def test_cursor_names_encode_to_one_safe_segment(name: str) -> None:
    encoded = encode_cursor_name(name)
    assert "/" not in encoded and encoded not in (".", "..")
    assert decode_cursor_name(encoded) == name


def test_paths_and_bad_names() -> None:
    assert managed_ledger_path("t/ns/persistent/x") == "/managed-ledgers/t/ns/persistent/x"
    assert cursor_path("t/ns/persistent/x", "my sub") == "/managed-ledgers/t/ns/persistent/x/__cursors/my+sub"
    for bad in ["", "a//b", "a/./b", "a/__cursors", "/a"]:
        with pytest.raises(InvalidMetadataError):
            managed_ledger_path(bad)


async def test_store_compare_and_set_and_listing() -> None:
    async with MemoryMetadataStore() as raw:
        store = ManagedLedgerStore(raw)
        assert await store.get("t/ns/persistent/a") is None
        v0 = await store.create("t/ns/persistent/a", ManagedLedgerInfo([LedgerInfo(1)]))
        await store.create("t/ns/persistent/b", ManagedLedgerInfo())
        v1 = await store.write("t/ns/persistent/a", ManagedLedgerInfo([LedgerInfo(1, 5, 50, 1), LedgerInfo(2)]),
                               expected_version=v0)
        with pytest.raises(BadVersionError):
            await store.write("t/ns/persistent/a", ManagedLedgerInfo(), expected_version=v0)
        got = await store.get("t/ns/persistent/a")
        assert got.version == v1 and [i.ledger_id for i in got.value.ledgers] == [1, 2]
        await store.create_cursor("t/ns/persistent/a", "s 1", ManagedCursorInfo((1, 4)))
        assert await store.list("t/ns/persistent") == ["t/ns/persistent/a", "t/ns/persistent/b"]
        assert list(await store.cursors("t/ns/persistent/a")) == ["s 1"]
        await store.delete("t/ns/persistent/a")
        assert await store.get("t/ns/persistent/a") is None
        assert await store.list("t/ns/persistent") == ["t/ns/persistent/b"]


async def test_deleting_a_ledger_keeps_ledgers_nested_below_it() -> None:
    async with MemoryMetadataStore() as raw:
        store = ManagedLedgerStore(raw)
        await store.create("a/b", ManagedLedgerInfo())
        await store.create_cursor("a/b", "s", ManagedCursorInfo((1, 0)))
        await store.create("a/b/c", ManagedLedgerInfo([LedgerInfo(3)]))
        await store.delete("a/b")
        assert await store.get("a/b") is None and await store.cursors("a/b") == {}
        assert (await store.get("a/b/c")).value.ledgers == [LedgerInfo(3)]
        assert await store.create("a/b", ManagedLedgerInfo()) >= 0  # the empty node is filled in again
