"""Every exception class Magnetar defines is a MagnetarError (one tree, policy on the class), checked over every
module of every room, so a new one cannot slip in as a bare Exception."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from magnetar.errors import MagnetarError

ROOMS = ("magnetar", "config_store", "bookie", "broker", "replicator", "clusters", "observability", "proxy")


def modules_of(package_name: str) -> list[str]:
    package = importlib.import_module(package_name)
    names = [package_name]
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
        if info.name.rsplit(".", 1)[-1] != "__main__":  # running it is what importing it does
            names.append(info.name)
    return names


@pytest.mark.parametrize("room", ROOMS)
def test_every_exception_class_is_a_magnetar_error(room: str) -> None:
    outside, checked = [], 0
    for name in modules_of(room):
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                checked += 1
                if not issubclass(obj, MagnetarError):
                    outside.append(f"{name}.{attr}")
    assert outside == [], f"exception classes outside magnetar.errors.MagnetarError: {outside}"
    if room in ("magnetar", "config_store", "bookie", "broker", "replicator", "proxy"):
        assert checked > 0  # the walk found the room's errors (a broken walk must not pass vacuously)


def test_builtin_bases_kept_for_callers_that_catch_them() -> None:
    from broker.managed_ledger import api, errors as ml_errors
    from broker.service.topics.dispatch.key_ranges import SelectorError, StickySelector
    from config_store.errors import InvalidMetadataError
    from magnetar.topic_name import InvalidTopicNameError

    for cls in (SelectorError, InvalidMetadataError, InvalidTopicNameError, ml_errors.InvalidCursorPositionError):
        assert issubclass(cls, ValueError) and issubclass(cls, MagnetarError)
    assert api.ManagedLedgerError is ml_errors.ManagedLedgerError  # defined once
    with pytest.raises(ValueError):
        StickySelector().add(object(), [])


def test_bookie_internal_errors_carry_their_wire_status() -> None:
    from bookie import codec, errors
    from bookie.adds import TOO_LARGE, Refused
    from bookie.journal import JournalClosedError
    from magnetar.proto import bookie_pb2

    assert codec.CorruptRecord is errors.CorruptRecordError
    assert codec.CorruptRecord("torn", truncated=True).truncated
    closed = JournalClosedError("closing")
    assert isinstance(closed, errors.BookieUnavailableError) and closed.retriable
    assert closed.status == bookie_pb2.Status.UNAVAILABLE
    refused = Refused((TOO_LARGE, "too big", None))
    assert isinstance(refused, errors.BookieError) and refused.status == TOO_LARGE and str(refused) == "too big"
