from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Status]
    INVALID_ARGUMENT: _ClassVar[Status]
    FENCED: _ClassVar[Status]
    READ_ONLY: _ClassVar[Status]
    NO_SUCH_ENTRY: _ClassVar[Status]
    NO_SUCH_LEDGER: _ClassVar[Status]
    ENTRY_CONFLICT: _ClassVar[Status]
    TOO_LARGE: _ClassVar[Status]
    INTERNAL: _ClassVar[Status]
    UNAVAILABLE: _ClassVar[Status]
    PARTIAL: _ClassVar[Status]
OK: Status
INVALID_ARGUMENT: Status
FENCED: Status
READ_ONLY: Status
NO_SUCH_ENTRY: Status
NO_SUCH_LEDGER: Status
ENTRY_CONFLICT: Status
TOO_LARGE: Status
INTERNAL: Status
UNAVAILABLE: Status
PARTIAL: Status

class Entry(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "last_add_confirmed", "payload")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    payload: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., last_add_confirmed: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class AddRequest(_message.Message):
    __slots__ = ("request_id", "entries", "recovery")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    recovery: bool
    def __init__(self, request_id: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., recovery: _Optional[bool] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("request_id", "status", "message", "entry_status", "more")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_STATUS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    status: Status
    message: str
    entry_status: _containers.RepeatedScalarFieldContainer[Status]
    more: _containers.RepeatedCompositeFieldContainer[AddResponse]
    def __init__(self, request_id: _Optional[int] = ..., status: _Optional[_Union[Status, str]] = ..., message: _Optional[str] = ..., entry_status: _Optional[_Iterable[_Union[Status, str]]] = ..., more: _Optional[_Iterable[_Union[AddResponse, _Mapping]]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("ledger_id", "entry_ids", "first_entry_id", "last_entry_id", "fence")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_IDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_ids: _containers.RepeatedScalarFieldContainer[int]
    first_entry_id: int
    last_entry_id: int
    fence: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entry_ids: _Optional[_Iterable[int]] = ..., first_entry_id: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fence: _Optional[bool] = ...) -> None: ...

class ReadEntry(_message.Message):
    __slots__ = ("entry_id", "status", "last_add_confirmed", "payload")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    status: Status
    last_add_confirmed: int
    payload: bytes
    def __init__(self, entry_id: _Optional[int] = ..., status: _Optional[_Union[Status, str]] = ..., last_add_confirmed: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("ledger_id", "entries")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entries: _containers.RepeatedCompositeFieldContainer[ReadEntry]
    def __init__(self, ledger_id: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[ReadEntry, _Mapping]]] = ...) -> None: ...

class ReadLacRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class WriteLacRequest(_message.Message):
    __slots__ = ("ledger_id", "last_add_confirmed")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    last_add_confirmed: int
    def __init__(self, ledger_id: _Optional[int] = ..., last_add_confirmed: _Optional[int] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class ReadLacResponse(_message.Message):
    __slots__ = ("ledger_id", "last_add_confirmed", "last_entry_id", "fenced", "known")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_ADD_CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    last_add_confirmed: int
    last_entry_id: int
    fenced: bool
    known: bool
    def __init__(self, ledger_id: _Optional[int] = ..., last_add_confirmed: _Optional[int] = ..., last_entry_id: _Optional[int] = ..., fenced: _Optional[bool] = ..., known: _Optional[bool] = ...) -> None: ...

class DeleteLedgerRequest(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class DeleteLedgerResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class BookieInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BookieInfoResponse(_message.Message):
    __slots__ = ("bookie_id", "read_only", "free_disk_bytes", "total_disk_bytes", "ledger_count", "version", "entry_max_size_bytes")
    BOOKIE_ID_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    FREE_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEDGER_COUNT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENTRY_MAX_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    bookie_id: str
    read_only: bool
    free_disk_bytes: int
    total_disk_bytes: int
    ledger_count: int
    version: str
    entry_max_size_bytes: int
    def __init__(self, bookie_id: _Optional[str] = ..., read_only: _Optional[bool] = ..., free_disk_bytes: _Optional[int] = ..., total_disk_bytes: _Optional[int] = ..., ledger_count: _Optional[int] = ..., version: _Optional[str] = ..., entry_max_size_bytes: _Optional[int] = ...) -> None: ...
