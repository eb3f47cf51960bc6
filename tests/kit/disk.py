"""A small disk for a bookie, to fill on purpose: a tmpfs of a fixed size mounted by the test (root only).

``with SmallDisk(path, size_bytes=128 << 20) as disk:`` mounts it; ``disk.fill()`` writes a filler file until
the file system answers ENOSPC (every later write of the bookie fails the same way), ``disk.free()`` removes
it; leaving the ``with`` unmounts (lazily, so a process still holding a file cannot keep it mounted).
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess

_CHUNK = b"\0" * (1 << 20)


class SmallDisk:
    def __init__(self, path: pathlib.Path, *, size_bytes: int) -> None:
        self.path = pathlib.Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    @property
    def filler(self) -> pathlib.Path:
        return self.path / "filler"

    def mount(self) -> "SmallDisk":
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path)],
                       check=True, capture_output=True)
        self.mounted = True
        return self

    def fill(self) -> int:
        """Writes until ENOSPC; returns the bytes written."""
        written = 0
        with open(self.filler, "ab", buffering=0) as f:
            while True:
                try:
                    written += f.write(_CHUNK)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
        return written

    def free(self) -> None:
        try:
            os.unlink(self.filler)
        except FileNotFoundError:
            pass

    def umount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False

    def __enter__(self) -> "SmallDisk":
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.umount()
