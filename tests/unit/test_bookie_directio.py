"""bookie.directio: ``write_all`` lands buffers in order whatever ``writev`` accepts per call; block-aligned
``O_DIRECT`` appends land every byte in order, padded to a block, and fall back to buffered writes."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie import directio


def test_every_buffer_lands_in_order_beyond_one_writev(tmp_path) -> None:
    buffers = [bytes([i % 251]) * (i % 7) for i in range(3000)]  # more buffers than IOV_MAX, some empty
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert directio.write_all(fd, buffers) == sum(map(len, buffers))
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

    monkeypatch.setattr(directio.os, "writev", at_most_five)
    buffers = [b"abc", b"", b"defghij", b"k", b"lmnopqrstu"]
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        assert directio.write_all(fd, buffers) == 21
    finally:
        os.close(fd)
    assert path.read_bytes() == b"abcdefghijklmnopqrstu"
    assert len(calls) == 5


def test_a_write_error_propagates(tmp_path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError):
            directio.write_all(fd, [b"x"])
    finally:
        os.close(fd)


# -- block-aligned appends ----------------------------------------------------------------------------------


def test_padding_reaches_the_next_boundary_and_is_never_shorter_than_a_record() -> None:
    assert directio.padding_size(0, 9) == 0
    assert directio.padding_size(4096 * 3, 9) == 0
    assert directio.padding_size(100, 9) == 4096 - 100
    assert directio.padding_size(4090, 9) == 6 + 4096  # a 6-byte gap cannot hold a 9-byte record head
    assert directio.padding_size(4087, 9) == 9


def _is_direct(fd: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(min_value=0, max_value=20_000), max_size=30), direct=st.booleans())
def test_appends_reach_the_file_in_order_across_staging_buffers(tmp_path_factory, sizes, direct) -> None:
    path = tmp_path_factory.mktemp("d") / "f"
    fd, is_direct = directio.open_for_append(path, direct=direct)
    out = directio.BlockAppender(fd, 0, direct=is_direct, capacity=8192)  # small: parts cross buffers
    parts = [os.urandom(n) for n in sizes]
    try:
        if direct:
            assert is_direct == _is_direct(fd)
        assert out.append(parts) == sum(sizes)
        assert out.offset == sum(sizes)
        pad = out.padding_needed(9)
        out.append_zeros(pad)
        out.write_out()
    finally:
        out.close()
        os.close(fd)
    data = path.read_bytes()
    assert data == b"".join(parts) + bytes(pad)
    if is_direct:
        assert len(data) % directio.BLOCK == 0
    else:
        assert pad == 0


def test_direct_write_out_refuses_an_unaligned_end(tmp_path) -> None:
    fd, is_direct = directio.open_for_append(tmp_path / "f", direct=True)
    out = directio.BlockAppender(fd, 0, direct=True)
    try:
        out.append([b"x" * 100])
        with pytest.raises(ValueError, match="block boundary"):
            out.write_out()
    finally:
        out.close()
        os.close(fd)


def test_a_file_system_refusing_o_direct_gets_buffered_writes(tmp_path, monkeypatch) -> None:
    real_open = os.open

    def no_direct(path, flags, mode=0o777):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(directio.os, "open", no_direct)
    fd, is_direct = directio.open_for_append(tmp_path / "f", direct=True)
    try:
        assert not is_direct
        out = directio.BlockAppender(fd, 0, direct=is_direct)
        out.append([b"abc"])
        assert out.padding_needed(9) == 0
        out.write_out()
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"abc"


def test_before_write_runs_before_each_direct_write(tmp_path) -> None:
    fd, _is_direct = directio.open_for_append(tmp_path / "f", direct=True)  # staged either way
    sizes: list[int] = []
    out = directio.BlockAppender(fd, 0, direct=True, capacity=8192,
                                 before_write=lambda: sizes.append(os.fstat(fd).st_size))
    try:
        out.append([b"a" * 20_000])  # two full buffers written, 3,616 bytes staged
        assert sizes == [0, 8192], "each write waits at the hook with the previous one done"
        out.append_zeros(out.padding_needed(9))
        out.write_out()
        assert sizes == [0, 8192, 16384]
    finally:
        out.close()
        os.close(fd)
    assert (tmp_path / "f").stat().st_size == 20_480


def test_remove_in_steps_shrinks_the_file_step_by_step_then_unlinks_it(tmp_path) -> None:
    path = tmp_path / "old.journal"
    size = 10 * 4096 + 123
    path.write_bytes(os.urandom(size))
    seen = []  # the file's size each time the removal is about to take its next step

    def pace() -> None:
        seen.append(path.stat().st_size if path.exists() else None)

    assert directio.remove_in_steps(path, 4 * 4096, pace) == size
    assert not path.exists()
    assert seen == [size, size - 4 * 4096, size - 8 * 4096], "one pace before each truncation and the unlink"


def test_remove_in_steps_without_steps_and_of_a_missing_file(tmp_path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 5000)
    paces = []
    assert directio.remove_in_steps(path, 0, lambda: paces.append(1)) == 5000
    assert not path.exists() and paces == [1]
    assert directio.remove_in_steps(path, 4096) == 0, "a file already gone is not an error"
    assert directio.remove_in_steps_now(tmp_path / "never") == 0
