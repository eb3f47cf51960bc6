"""The data source's ``__brokerPublishTime`` and ``__index`` columns, from entries' broker entry metadata."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import encode_entry, join_batch, pb
from spark.source.decode import RowBuilder
from spark.source.schema import ARROW_SCHEMA, COLUMNS

TOPIC = "persistent://t/ns/x"


def _ms(value: datetime.datetime) -> int:
    return round(value.timestamp() * 1000)


def _rows(builder: RowBuilder) -> list[dict]:
    batch = builder.flush()
    assert batch.schema.equals(ARROW_SCHEMA)
    return batch.to_pylist()


def _entry(n: int, bem: pb.BrokerEntryMetadata | None, *, compacted_out: tuple[int, ...] = ()) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_700_000_000_000)
    if n == 1:
        return encode_entry(md, b"one", broker_entry_metadata=bem)
    md.num_messages_in_batch = n
    items = [(pb.SingleMessageMetadata(payload_size=0, compacted_out=i in compacted_out), b"m%d" % i)
             for i in range(n)]
    return encode_entry(md, join_batch(items), broker_entry_metadata=bem)


def test_columns_are_last_and_nullable() -> None:
    assert COLUMNS[-2:] == ("__brokerPublishTime", "__index")
    assert ARROW_SCHEMA.field("__brokerPublishTime").nullable and ARROW_SCHEMA.field("__index").nullable


def test_broker_time_and_index_of_single_and_batched_entries() -> None:
    b = RowBuilder(TOPIC, "r", -1)
    b.add_entry(1, 0, _entry(1, pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_500, index=0)))
    b.add_entry(1, 1, _entry(4, pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_700, index=4)))
    b.add_entry(1, 2, _entry(1, None))  # stored before brokers added the metadata
    b.add_entry(1, 3, _entry(3, pb.BrokerEntryMetadata(broker_timestamp=1_700_000_000_900)))  # timestamp only
    rows = _rows(b)
    assert [r["__index"] for r in rows] == [0, 1, 2, 3, 4, None, None, None, None]
    assert [None if r["__brokerPublishTime"] is None else _ms(r["__brokerPublishTime"]) for r in rows] == \
        [1_700_000_000_500] + [1_700_000_000_700] * 4 + [None] + [1_700_000_000_900] * 3


@given(st.integers(1, 40), st.integers(0, 10**12), st.data())
def test_a_members_index_is_counted_back_from_the_entrys(n: int, last: int, data) -> None:
    last = max(last, n - 1)
    out = tuple(data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1))) if n > 1 else ()
    b = RowBuilder(TOPIC, "r", -1)
    b.add_entry(2, 0, _entry(n, pb.BrokerEntryMetadata(index=last), compacted_out=out))
    rows = _rows(b)
    expected = [last - n + 1 + i for i in range(n) if i not in out] if n > 1 else [last]
    assert [r["__index"] for r in rows] == expected
