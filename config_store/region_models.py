"""What a region's metadata store holds about its storage: bookie registrations and ledger metadata.

The same strict, versioned JSON codec as :mod:`config_store.models` (whose helpers it uses); the values of the
global configuration store live there.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from .errors import InvalidMetadataError
from .models import _dumps, _field, _loads, _str_dict, _str_list


@dataclass(frozen=True)
class BookieRegistration:
    """What a live bookie publishes about itself: ``address`` is its gRPC ``host:port``, ``add_address`` the
    ``host:port`` of its add port (AddEntries over plain TCP; JSON ``"addAddress"``), "" when it has none.

    ``addAddress`` is optional both ways: a registration without it (an older bookie) parses with "", and a
    reader that does not know the field ignores it (the codec ignores unknown keys)."""

    bookie_id: str
    address: str
    http_address: str = ""
    version: str = ""  # the bookie's software version (JSON "softwareVersion": "version" is the schema's)
    add_address: str = ""

    def to_json(self) -> bytes:
        fields = {"bookieId": self.bookie_id, "address": self.address, "httpAddress": self.http_address,
                  "softwareVersion": self.version}
        if self.add_address:
            fields["addAddress"] = self.add_address
        return _dumps("BookieRegistration", fields)

    @classmethod
    def from_json(cls, data: bytes) -> "BookieRegistration":
        k, o = "BookieRegistration", _loads("BookieRegistration", data)
        return cls(bookie_id=_field(k, o, "bookieId", str), address=_field(k, o, "address", str),
                   http_address=_field(k, o, "httpAddress", str, ""), version=_field(k, o, "softwareVersion", str, ""),
                   add_address=_field(k, o, "addAddress", str, ""))


class LedgerState(enum.Enum):
    """A ledger is OPEN while its one writer appends, IN_RECOVERY while a reader fences and closes it, and
    CLOSED (immutable, with a final ``last_entry_id``) afterwards."""

    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True)
class LedgerMetadata:
    """A ledger's metadata: quorums, ensembles over time, state.

    Invariants (checked on construction, so a decoded or derived value is always valid):
    ``1 <= ack_quorum_size <= write_quorum_size <= ensemble_size``; ``ensembles`` is a non-empty list of
    ``(first_entry_id, bookies)`` whose first starts at 0, whose first entry ids strictly ascend, each with
    exactly ``ensemble_size`` distinct bookie ids; ``last_entry_id >= -1`` and ``length >= 0``.

    Entry ``e`` is stored on its write set: ``ensemble[(e + i) % E] for i in range(Qw)`` of the ensemble
    covering ``e`` (BookKeeper's round-robin striping).
    """

    ledger_id: int
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: list[tuple[int, list[str]]]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime_ms: int = 0
    custom_metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Normalise to fresh lists (callers' lists are not aliased) and check invariants.
        try:
            ensembles = [(first, list(bookies)) for first, bookies in self.ensembles]
            if any(isinstance(bookies, str) for _, bookies in self.ensembles):
                raise TypeError
        except (TypeError, ValueError):
            raise InvalidMetadataError(
                f"ledger {self.ledger_id}: ensembles must be (first_entry_id, bookies) pairs") from None
        object.__setattr__(self, "ensembles", ensembles)
        object.__setattr__(self, "custom_metadata", dict(self.custom_metadata))
        if isinstance(self.state, str):
            object.__setattr__(self, "state", LedgerState(self.state))
        self._validate()

    def _validate(self) -> None:
        lid = self.ledger_id
        for name in ("ledger_id", "ensemble_size", "write_quorum_size", "ack_quorum_size", "last_entry_id",
                     "length", "ctime_ms"):
            if type(getattr(self, name)) is not int:
                raise InvalidMetadataError(f"ledger {lid}: {name} must be an integer")
        if lid < 0:
            raise InvalidMetadataError(f"ledger id must be >= 0, got {lid}")
        e, qw, qa = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        if not 1 <= qa <= qw <= e:
            raise InvalidMetadataError(f"ledger {lid}: need 1 <= Qa <= Qw <= E, got E={e} Qw={qw} Qa={qa}")
        if not self.ensembles:
            raise InvalidMetadataError(f"ledger {lid}: no ensemble")
        previous = None
        for first, bookies in self.ensembles:
            if type(first) is not int:
                raise InvalidMetadataError(f"ledger {lid}: ensemble first entry id must be an integer")
            if previous is None and first != 0:
                raise InvalidMetadataError(f"ledger {lid}: first ensemble must start at entry 0, starts at {first}")
            if previous is not None and first <= previous:
                raise InvalidMetadataError(
                    f"ledger {lid}: ensemble first entry ids must ascend ({previous} then {first})")
            if len(bookies) != e or not all(isinstance(b, str) and b for b in bookies):
                raise InvalidMetadataError(f"ledger {lid}: ensemble at {first} must list {e} bookie ids, got {bookies}")
            if len(set(bookies)) != e:
                raise InvalidMetadataError(f"ledger {lid}: ensemble at {first} repeats a bookie: {bookies}")
            previous = first
        if not isinstance(self.state, LedgerState):
            raise InvalidMetadataError(f"ledger {lid}: state must be a LedgerState")
        if self.last_entry_id < -1:
            raise InvalidMetadataError(f"ledger {lid}: last_entry_id must be >= -1, got {self.last_entry_id}")
        if self.length < 0:
            raise InvalidMetadataError(f"ledger {lid}: length must be >= 0, got {self.length}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.custom_metadata.items()):
            raise InvalidMetadataError(f"ledger {lid}: custom_metadata must map strings to strings")

    # ---------------------------------------------------------------------------------------------- math

    def ensemble_at(self, entry_id: int) -> list[str]:
        """The ensemble that covers ``entry_id`` (the last one starting at or before it)."""
        if entry_id < 0:
            raise ValueError(f"entry id must be >= 0, got {entry_id}")
        chosen = self.ensembles[0][1]
        for first, bookies in self.ensembles:
            if first > entry_id:
                break
            chosen = bookies
        return list(chosen)

    def write_set(self, entry_id: int) -> list[str]:
        """The Qw bookies that store ``entry_id``, in striping order."""
        ensemble = self.ensemble_at(entry_id)
        e = self.ensemble_size
        return [ensemble[(entry_id + i) % e] for i in range(self.write_quorum_size)]

    @property
    def current_ensemble(self) -> list[str]:
        """The ensemble new entries go to (the last one)."""
        return list(self.ensembles[-1][1])

    # ---------------------------------------------------------------------------------------------- changes

    def with_ensemble(self, first_entry_id: int, bookies: list[str]) -> "LedgerMetadata":
        """A copy where ``bookies`` serve entries from ``first_entry_id`` on.

        Ensembles starting at or after ``first_entry_id`` are dropped first (a repeated ensemble change at the
        same entry replaces the earlier one).
        """
        kept = [(f, b) for f, b in self.ensembles if f < first_entry_id]
        return dataclasses.replace(self, ensembles=kept + [(first_entry_id, list(bookies))])

    def closed(self, last_entry_id: int, length: int) -> "LedgerMetadata":
        """A copy in state CLOSED with the final last entry id and length."""
        return dataclasses.replace(self, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)

    def in_recovery(self) -> "LedgerMetadata":
        """A copy in state IN_RECOVERY (a reader is fencing and closing it)."""
        return dataclasses.replace(self, state=LedgerState.IN_RECOVERY)

    # ---------------------------------------------------------------------------------------------- codec

    def to_json(self) -> bytes:
        return _dumps("LedgerMetadata", {
            "ledgerId": self.ledger_id,
            "ensembleSize": self.ensemble_size,
            "writeQuorumSize": self.write_quorum_size,
            "ackQuorumSize": self.ack_quorum_size,
            "ensembles": [{"firstEntryId": f, "bookies": list(b)} for f, b in self.ensembles],
            "state": self.state.value,
            "lastEntryId": self.last_entry_id,
            "length": self.length,
            "ctime": self.ctime_ms,
            "customMetadata": dict(self.custom_metadata),
        })

    @classmethod
    def from_json(cls, data: bytes) -> "LedgerMetadata":
        k, o = "LedgerMetadata", _loads("LedgerMetadata", data)
        ensembles = []
        for item in _field(k, o, "ensembles", list):
            if not isinstance(item, dict):
                raise InvalidMetadataError(f"{k}: each ensemble must be an object")
            ensembles.append((_field(k + ".ensembles", item, "firstEntryId", int),
                              _str_list(k + ".ensembles", item, "bookies")))
        state = _field(k, o, "state", str, "OPEN")
        try:
            state_enum = LedgerState(state)
        except ValueError:
            raise InvalidMetadataError(f"{k}: unknown ledger state {state!r}") from None
        return cls(
            ledger_id=_field(k, o, "ledgerId", int),
            ensemble_size=_field(k, o, "ensembleSize", int),
            write_quorum_size=_field(k, o, "writeQuorumSize", int),
            ack_quorum_size=_field(k, o, "ackQuorumSize", int),
            ensembles=ensembles,
            state=state_enum,
            last_entry_id=_field(k, o, "lastEntryId", int, -1),
            length=_field(k, o, "length", int, 0),
            ctime_ms=_field(k, o, "ctime", int, 0),
            custom_metadata=_str_dict(k, o, "customMetadata"),
        )
