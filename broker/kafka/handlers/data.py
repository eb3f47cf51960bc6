"""Produce, InitProducerId, Fetch, ListOffsets: the API keys that move records."""

from . import fetch, offsets, produce

HANDLERS = {**produce.HANDLERS, **fetch.HANDLERS, **offsets.HANDLERS}
