"""The root of every Magnetar error.

Each room defines its own root under :class:`MagnetarError` (``config_store.errors.MetadataError``,
``bookie.errors.BookieError``, ...) and maps foreign errors (kazoo, gRPC) to it at its boundary, so a caller
sees a typed error carrying policy (``retriable``) and a message a person can act on.
"""

from __future__ import annotations


class MagnetarError(Exception):
    """Base of all Magnetar errors.

    Attributes:
        retriable: True when the same operation may succeed if tried again later (a transient fault);
            False when retrying cannot help (bad input, a fenced ledger, a lost race that must be re-read).
    """

    retriable: bool = False


class ConfigError(MagnetarError):
    """A configuration file or option is missing, malformed or inconsistent."""


class InstallError(MagnetarError):
    """Something Magnetar runs (ZooKeeper, Java) is not installed; the message names the install command."""
