"""Errors of the schema registry. :class:`SchemaError` is the root.

Each class names the protocol's ``ServerError`` code a client receives (``server_error``) and the HTTP status
the admin REST API answers (``http_status``), as Pulsar does: an incompatible schema is IncompatibleSchema
on the wire and 409 over REST; a malformed definition is IncompatibleSchema too on the wire (Pulsar keeps it
so for old clients) and 422 over REST. The broker maps them at its boundaries by these attributes
(``broker.service.errors.map_error``, ``broker.admin.errors.status_of``).
"""

from __future__ import annotations

from magnetar.errors import MagnetarError
from magnetar.protocol import pb

ServerError = pb.ServerError


class SchemaError(MagnetarError):
    server_error: int = ServerError.UnknownError
    http_status: int = 500


class IncompatibleSchemaError(SchemaError):
    """The schema breaks the topic's compatibility strategy, or auto update / validation refuse it."""

    server_error = ServerError.IncompatibleSchema
    http_status = 409


class InvalidSchemaDataError(SchemaError):
    """The definition is malformed for its type (not an Avro schema, data for a primitive type, ...)."""

    server_error = ServerError.IncompatibleSchema
    http_status = 422


class SchemaTooLargeError(InvalidSchemaDataError):
    """The definition is over the registry's size limit (schemas live in ZooKeeper nodes)."""

    http_status = 413


class SchemaNotFoundError(SchemaError):
    """No such schema (or version) for the topic, or it was deleted."""

    server_error = ServerError.TopicNotFound
    http_status = 404


class SchemaHistoryFullError(SchemaError):
    """The topic already holds the maximum number of versions."""

    server_error = ServerError.NotAllowedError
    http_status = 412


class SchemaStorageError(SchemaError):
    """The metadata store failed or lost too many races; the same call may succeed later."""

    server_error = ServerError.MetadataError
    http_status = 503
    retriable = True
