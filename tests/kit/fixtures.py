"""Pytest fixtures of the test kit beyond tests/conftest.py's core (import them there)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from .bookies import BookieProcess, start_bookies


@pytest.fixture
def bookie_factory(tmp_path, request) -> Callable[..., list[BookieProcess]]:
    """``bookie_factory(n=1, **config_overrides)`` starts ``n`` more bookie processes and returns them.

    They register in this test's ZooKeeper chroot (the ``zk_connect`` fixture, started on first use) unless
    ``zookeeper=""`` is passed, which runs them without ZooKeeper. Everything started is killed at the end
    of the test (and its logs are shown if the test failed).
    """
    started: list[BookieProcess] = []

    def factory(n: int = 1, **overrides: Any) -> list[BookieProcess]:
        zk = overrides.pop("zookeeper", None)
        if zk is None:
            zk = request.getfixturevalue("zk_connect")
        bookies = start_bookies(n, tmp_path, zk, first_index=len(started) + 1, **overrides)
        started.extend(bookies)
        return bookies

    yield factory
    for b in started:
        b.process.cleanup()
