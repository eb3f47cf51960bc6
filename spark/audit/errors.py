"""The audit's errors: one root, derived from Magnetar's."""

from __future__ import annotations

from magnetar.errors import MagnetarError

__all__ = ["AuditError", "AuditInputError"]


class AuditError(MagnetarError):
    """The audit could not run (its input, a region, Spark)."""


class AuditInputError(AuditError):
    """The input is not what the audit reads: a missing column, an unknown topic, a bad option."""
