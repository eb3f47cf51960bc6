"""Produce, Fetch, ListOffsets: filled in once entries carry their offsets (broker entry metadata)."""

HANDLERS: dict = {}
