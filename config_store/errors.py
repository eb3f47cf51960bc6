"""Errors of the metadata store.

Every failure that leaves ``config_store`` is a :class:`MetadataError`; kazoo's exceptions are mapped at the
boundary (:func:`config_store.store.KazooMetadataStore`) and never escape. The class carries the policy a
caller needs: ``retriable`` says whether the same call may succeed later. A lost compare-and-set race
(:class:`BadVersionError`) is *not* retriable as such: the caller must re-read and decide again.
"""

from __future__ import annotations

from magnetar.errors import MagnetarError


class MetadataError(MagnetarError):
    """Root of every metadata-store error. Messages name the path (or the entity) concerned."""


class InvalidMetadataError(MetadataError, ValueError):
    """A value is malformed: corrupt or wrongly typed JSON, an unknown schema version, an invalid name or
    path, or a model that breaks its invariants (e.g. ack quorum > write quorum). Never retriable."""


class NotFoundError(MetadataError):
    """The node (or the entity stored at it) does not exist."""


class NodeExistsError(MetadataError):
    """A create hit an existing node: the name is taken."""


class BadVersionError(MetadataError):
    """A compare-and-set lost its race: the node's version is not the one expected. Re-read and retry."""


class NotEmptyError(MetadataError):
    """A non-recursive delete hit a node that still has children (or an entity that still owns others)."""


class SessionLostError(MetadataError):
    """The ZooKeeper session expired while the call was pending.

    Ephemeral nodes of the old session are gone. The store opens a new session by itself, so the call may
    be retried; ephemeral registrations made through ``register_ephemeral`` are re-created automatically.
    """

    retriable = True


class MetadataUnavailableError(MetadataError):
    """ZooKeeper could not be reached in time (connection loss, timeout, not yet connected).

    For a write the outcome is unknown: it may or may not have been applied.
    """

    retriable = True


class StoreClosedError(MetadataError):
    """The store was used before ``start()`` or after ``close()``."""
