"""Topic names as Pulsar spells them.

Accepted forms (what pulsar-client and Pulsar's admin tools accept)::

    my-topic                               -> persistent://public/default/my-topic
    tenant/namespace/my-topic              -> persistent://tenant/namespace/my-topic
    persistent://tenant/namespace/my-topic
    non-persistent://tenant/namespace/my-topic

A partition of a partitioned topic is a topic of its own whose local name ends in ``-partition-<N>``
(``N`` a non-negative decimal without leading zeros); :attr:`TopicName.base` is the partitioned topic
it belongs to. Pulsar's legacy names with a cluster segment (``persistent://tenant/cluster/ns/topic``)
are refused, so a local name never contains ``/``.

Tenants and namespaces are restricted to letters, digits and ``-_=:.`` as Pulsar restricts them. Local
names may hold any other character; storage paths URL-encode them the way Pulsar does (Java's
``URLEncoder``: space as ``+``, only ``A-Za-z0-9.-*_`` kept), so a Magnetar metadata path is the same as
Pulsar's.
"""

from __future__ import annotations

import enum
import functools
import re
import urllib.parse
from dataclasses import dataclass

from magnetar.errors import MagnetarError

__all__ = ["InvalidTopicNameError", "TopicDomain", "TopicName", "decode_local_name", "encode_local_name"]

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
_PARTITION_INDEX_MAX = (1 << 31) - 1  # Pulsar keeps partition indexes in an int32

_NAME_PART = re.compile(r"[-=:.\w]+", re.ASCII)
_PARTITIONED = re.compile(r"(.+)-partition-(0|[1-9][0-9]*)", re.DOTALL)
_URL_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-*_")


class InvalidTopicNameError(MagnetarError, ValueError):
    """A string that is not a valid topic name; the message says what is wrong with it."""


class TopicDomain(enum.StrEnum):
    """Whether a topic's messages are stored (persistent) or only relayed to connected consumers."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


def encode_local_name(local_name: str) -> str:
    """URL-encodes a local name exactly as Java's ``URLEncoder.encode(name, UTF-8)`` does."""
    out = []
    for byte in local_name.encode("utf-8"):
        if byte in _URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def decode_local_name(encoded: str) -> str:
    """Reverses :func:`encode_local_name`."""
    return urllib.parse.unquote_plus(encoded, errors="strict")


def _check_part(kind: str, value: str, name: str) -> None:
    if not _NAME_PART.fullmatch(value):
        raise InvalidTopicNameError(
            f"invalid {kind} {value!r} in topic name {name!r}: use letters, digits and -_=:. only"
        )


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed, validated topic name. ``str(name)`` is the complete form.

    Build one with :meth:`parse`; the constructor does not validate.
    """

    domain: TopicDomain
    tenant: str
    namespace_portion: str
    local_name: str

    @staticmethod
    def parse(name: str) -> TopicName:
        """Parses any accepted form (see the module docstring); results are cached.

        Raises:
            InvalidTopicNameError: the name is malformed, or not a ``str`` (a proto2 string holding
                invalid UTF-8 reaches Python as ``bytes``).
        """
        if not isinstance(name, str):
            raise InvalidTopicNameError(f"a topic name must be a string, not {type(name).__name__}")
        return _parse(name)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace_portion}/{self.local_name}"

    @property
    def persistent(self) -> bool:
        """True for ``persistent://`` topics."""
        return self.domain is TopicDomain.PERSISTENT

    @property
    def namespace(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace_portion}"

    @property
    def partition_index(self) -> int:
        """The partition number when this names a partition, else -1."""
        match = _PARTITIONED.fullmatch(self.local_name)
        if match is None:
            return -1
        index = int(match.group(2))
        return index if index <= _PARTITION_INDEX_MAX else -1

    @property
    def is_partition(self) -> bool:
        """True when this names one partition of a partitioned topic."""
        return self.partition_index >= 0

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (``self`` when not a partition)."""
        if not self.is_partition:
            return self
        local = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return TopicName(self.domain, self.tenant, self.namespace_portion, local)

    def partition(self, index: int) -> TopicName:
        """Partition ``index`` of this topic's base topic."""
        if not 0 <= index <= _PARTITION_INDEX_MAX:
            raise InvalidTopicNameError(f"invalid partition index {index} for {self}")
        base = self.base
        local_name = f"{base.local_name}{PARTITION_SUFFIX}{index}"
        return TopicName(self.domain, self.tenant, self.namespace_portion, local_name)

    def partition_name(self, index: int) -> str:
        """The complete name of partition ``index`` (``str(self.partition(index))``)."""
        return str(self.partition(index))

    @property
    def encoded_local_name(self) -> str:
        """The local name URL-encoded as Pulsar encodes it in storage paths and REST URLs."""
        return encode_local_name(self.local_name)

    @property
    def path(self) -> str:
        """``tenant/namespace/domain/encoded-local-name``: the form in metadata-store paths (managed
        ledgers, partitioned-topic metadata), Pulsar's "persistence naming encoding"."""
        return f"{self.tenant}/{self.namespace_portion}/{self.domain}/{self.encoded_local_name}"

    @property
    def rest_path(self) -> str:
        """``domain/tenant/namespace/encoded-local-name``: the form in admin REST URLs."""
        return f"{self.domain}/{self.tenant}/{self.namespace_portion}/{self.encoded_local_name}"

    @classmethod
    def from_path(cls, path: str) -> TopicName:
        """Reverses :attr:`path`.

        Raises:
            InvalidTopicNameError: the path is not ``tenant/namespace/domain/encoded-local-name``.
        """
        parts = path.split("/")
        if len(parts) != 4:
            raise InvalidTopicNameError(f"invalid topic path {path!r}: expected tenant/namespace/domain/topic")
        tenant, namespace, domain, encoded = parts
        try:
            local_name = decode_local_name(encoded)
        except UnicodeDecodeError:
            raise InvalidTopicNameError(f"invalid topic path {path!r}: bad URL encoding") from None
        return cls.parse(f"{domain}://{tenant}/{namespace}/{local_name}")


@functools.lru_cache(maxsize=65536)
def _parse(name: str) -> TopicName:
    if "://" in name:
        scheme, rest = name.split("://", 1)
        try:
            domain = TopicDomain(scheme)
        except ValueError:
            raise InvalidTopicNameError(
                f"invalid topic domain {scheme!r} in {name!r}: expected persistent or non-persistent"
            ) from None
    else:
        domain, rest = TopicDomain.PERSISTENT, name
        if "/" not in rest:
            rest = f"{PUBLIC_TENANT}/{DEFAULT_NAMESPACE}/{rest}"
    parts = rest.split("/")
    if len(parts) != 3:
        hint = " (names with a cluster segment are not supported)" if len(parts) == 4 else ""
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: expected [domain://]tenant/namespace/topic{hint}"
        )
    tenant, namespace, local_name = parts
    _check_part("tenant", tenant, name)
    _check_part("namespace", namespace, name)
    if not local_name.strip():
        raise InvalidTopicNameError(f"invalid topic name {name!r}: the local name is empty")
    return TopicName(domain, tenant, namespace, local_name)
