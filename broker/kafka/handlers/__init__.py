"""Kafka request handlers, one module per API family. ``HANDLERS``: api key -> (min version, max version,
``async handler(server, request, ctx) -> response or None``)."""

from . import admin, api_versions, data, metadata, sasl

HANDLERS = {**api_versions.HANDLERS, **metadata.HANDLERS, **data.HANDLERS, **admin.HANDLERS,
            **sasl.HANDLERS}
