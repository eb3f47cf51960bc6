"""Produce, InitProducerId, Fetch, ListOffsets, DeleteRecords: the API keys that move records."""

from . import delete_records, fetch, offsets, produce

HANDLERS = {**produce.HANDLERS, **fetch.HANDLERS, **offsets.HANDLERS, **delete_records.HANDLERS}
