"""bookie.journal.write_all: buffers reach the file in order, whatever ``writev`` accepts per call."""

from __future__ import annotations

import os

import pytest

from bookie import journal


def test_every_buffer_lands_in_order_beyond_one_writev(tmp_path) -> None:
    buffers = [bytes([i % 251]) * (i % 7) for i in range(3000)]  # more buffers than IOV_MAX, some empty
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert journal.write_all(fd, buffers) == sum(map(len, buffers))
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(buffers)


def test_short_writes_resume_mid_buffer(tmp_path, monkeypatch) -> None:
    real_writev = os.writev
    calls = []

    def at_most_five(fd, views):  # the kernel may take less than asked (a signal, a full pipe)
        calls.append(len(views))
        data = b"".join(bytes(v) for v in views)[:5]
        return real_writev(fd, [data])

    monkeypatch.setattr(journal.os, "writev", at_most_five)
    buffers = [b"abc", b"", b"defghij", b"k", b"lmnopqrstu"]
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert journal.write_all(fd, buffers) == 21
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abcdefghijklmnopqrstu"
    assert len(calls) == 5


def test_a_write_error_propagates(tmp_path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            journal.write_all(fd, [b"x"])
    finally:
        os.close(fd)
