"""Errors of the Magnetar data source; Spark shows them (class name and message) in the exception it raises.

A bad option is refused when the DataFrame is defined (``load()``), before any connection is made, with the
option's name in the message. Errors while planning or reading name the region, topic and ledger involved.
"""

from __future__ import annotations

from magnetar.errors import ConfigError, MagnetarError


class SourceError(MagnetarError):
    """Root of the data source's errors."""


class SourceOptionError(SourceError, ConfigError):
    """An option of ``spark.read.format("magnetar")`` is missing, malformed or contradicts another.

    Attributes:
        option: the option's name as the user spells it (``startingOffsets``).
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"option {option!r}: {problem}")
        self.option = option
        self.problem = problem

    def __reduce__(self):
        return type(self), (self.option, self.problem)


class SourceUnavailableError(SourceError):
    """A region's admin API, ZooKeeper or bookies did not answer while planning or reading."""

    retriable = True


class SourceDataError(SourceError):
    """Stored data cannot be read as messages (a corrupt entry, a ledger deleted while being read)."""
