"""The schema registry: per-topic schema versions, compatibility strategies and the rules Pulsar applies
when producers and consumers bring schemas.

* ``types`` (pure): :class:`SchemaData`, :class:`Strategy`, type names, the 8-byte version encoding;
* ``compatibility`` (pure): identity and compatibility decisions (Avro resolution by the ``avro`` package);
* ``registry``: :class:`SchemaRegistry` over :class:`config_store.SchemaStore`;
* ``errors``: :class:`SchemaError` and its kinds, with their protocol codes and HTTP statuses.

The binary protocol reaches it through ``broker/service/schemas.py``, the admin API through
``broker/admin/schemas.py``.
"""

from .errors import (IncompatibleSchemaError, InvalidSchemaDataError, SchemaError, SchemaHistoryFullError,
                     SchemaNotFoundError, SchemaStorageError, SchemaTooLargeError)
from .registry import SchemaDefaults, SchemaPolicy, SchemaRegistry, live_versions, schema_id, schema_key
from .types import (PROTO_TYPE_NAMES, TYPE_PROTO_NUMBERS, SchemaData, Strategy, decode_version, effective_strategy,
                    encode_version)

__all__ = [
    "SchemaRegistry", "SchemaDefaults", "SchemaPolicy", "SchemaData", "Strategy", "schema_id", "schema_key",
    "live_versions", "encode_version", "decode_version", "effective_strategy", "PROTO_TYPE_NAMES",
    "TYPE_PROTO_NUMBERS",
    "SchemaError", "IncompatibleSchemaError", "InvalidSchemaDataError", "SchemaNotFoundError", "SchemaTooLargeError",
    "SchemaHistoryFullError", "SchemaStorageError",
]
