"""A bookie's disk made slow: a passthrough FUSE file system whose fsyncs (and writes) wait as told (root only).

Theory of operation. :class:`SlowDisk` starts this module as its own process (``python -m tests.kit.slow_disk
serve``), which mounts ``mount`` as a FUSE file system passing every call through to ``backing`` (a plain
folder beside it), and serves a control socket. What the test changes at run time, through that socket:

* ``slow(fsync_ms=200)``: every fsync / fdatasync (and directory fsync) that *starts* from now on first waits
  that long, then syncs for real; ``write_ms`` does the same for each write request (the kernel cuts a write
  into requests of at most 128 KiB).
* ``stall()``: fsyncs that start from now on block until ``release()`` (and are counted as blocked meanwhile,
  so a test can wait until one is); ``normal()`` releases and sets both delays back to 0.
* ``stats()``: counters (fsyncs, fsyncs delayed or blocked, fsyncs blocked now, writes...), so a test can tell
  the fault was really met, not merely set.

Delays are per call and calls run in parallel (libfuse's worker threads, ``time.sleep`` releases the GIL):
two fsyncs that start together both return after the delay, as on a device with a deep queue whose every
flush takes that long, not one whose flushes queue behind each other. The bookie's journal forces one group
at a time, so for it the difference does not show.

The files are the backing folder's: what the bookie wrote is there after the mount is gone. ``O_DIRECT`` asked
of the mount is honoured by the kernel's FUSE client (page-cache bypass) and dropped for the backing file
(this process writes Python buffers, not aligned ones). The process dies with its parent (``PR_SET_PDEATHSIG``
through :mod:`tests.kit.process`); :meth:`SlowDisk.stop` kills its process group and unmounts lazily
(``fusermount3 -u -z``, else ``umount -l``), so a process still holding a file cannot keep it mounted, and is
safe to call twice. A FUSE server that dies with requests pending fails them (ENOTCONN): nothing hangs.

Needs ``/dev/fuse``, root (or ``fusermount3``), Debian's ``fuse3`` (libfuse3, installed by
``scripts/ensure-fuse``) and ``mfusepy`` (ctypes bindings, the ``test`` extra).
"""

from __future__ import annotations

import argparse
import ctypes.util
import errno
import importlib.util
import json
import os
import pathlib
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional

from clusters.runtime import start_ticks

from . import leftovers
from .leftovers import listed_as_mounted
from .process import ManagedProcess

# -- the FUSE process ----------------------------------------------------------------------------------------


class Faults:
    """What the control socket sets and the file system obeys; thread-safe (libfuse runs many workers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.fsync_delay_s = 0.0
        self.write_delay_s = 0.0
        self._released = threading.Event()
        self._released.set()
        self.counts = {"fsyncs": 0, "fsyncs_delayed": 0, "fsyncs_blocked": 0, "fsyncs_blocked_now": 0,
                       "writes": 0, "writes_delayed": 0, "write_bytes": 0}

    def set_delays(self, *, fsync_ms: float, write_ms: float) -> None:
        with self._lock:
            self.fsync_delay_s = fsync_ms / 1000.0
            self.write_delay_s = write_ms / 1000.0

    def stall(self) -> None:
        with self._lock:
            self._released = threading.Event()

    def release(self) -> None:
        with self._lock:
            self._released.set()

    def before_fsync(self) -> None:
        with self._lock:
            self.counts["fsyncs"] += 1
            delay_s, released = self.fsync_delay_s, self._released
            blocked = not released.is_set()
            if blocked:
                self.counts["fsyncs_blocked"] += 1
                self.counts["fsyncs_blocked_now"] += 1
            elif delay_s > 0:
                self.counts["fsyncs_delayed"] += 1
        if blocked:
            try:
                released.wait()
            finally:
                with self._lock:
                    self.counts["fsyncs_blocked_now"] -= 1
        elif delay_s > 0:
            time.sleep(delay_s)

    def before_write(self, nbytes: int) -> None:
        with self._lock:
            self.counts["writes"] += 1
            self.counts["write_bytes"] += nbytes
            delay_s = self.write_delay_s
            if delay_s > 0:
                self.counts["writes_delayed"] += 1
        if delay_s > 0:
            time.sleep(delay_s)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self.counts, "fsync_delay_ms": self.fsync_delay_s * 1000.0,
                    "write_delay_ms": self.write_delay_s * 1000.0, "stalled": not self._released.is_set()}


def _control_server(path: str, faults: Faults) -> socketserver.UnixStreamServer:
    """One JSON object per line in, one per line out; a bad command is answered ``ok: false`` and changes
    nothing."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                try:
                    answer = _apply(json.loads(line), faults)
                except (ValueError, TypeError, KeyError) as err:
                    answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                self.wfile.write(json.dumps(answer).encode() + b"\n")

    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    server.daemon_threads = True
    return server


def _apply(command: dict[str, Any], faults: Faults) -> dict[str, Any]:
    cmd = command["cmd"]
    if cmd == "set":
        fsync_ms, write_ms = float(command.get("fsync_ms", 0)), float(command.get("write_ms", 0))
        if not (0 <= fsync_ms <= 600_000 and 0 <= write_ms <= 600_000):
            raise ValueError("delays must be between 0 and 600000 ms")
        faults.set_delays(fsync_ms=fsync_ms, write_ms=write_ms)
    elif cmd == "stall":
        faults.stall()
    elif cmd == "release":
        faults.release()
    elif cmd == "normal":
        faults.set_delays(fsync_ms=0, write_ms=0)
        faults.release()
    elif cmd != "stats":
        raise ValueError(f"unknown command {cmd!r}")
    return {"ok": True, **faults.stats()}


def _operations(backing: pathlib.Path, faults: Faults):
    """The passthrough: every path is the backing folder's, every file handle a descriptor of it."""
    import mfusepy

    root = str(backing)

    def real(path: str) -> str:
        return root + path  # FUSE paths are absolute ("/journal/1.txn")

    class Passthrough(mfusepy.Operations):
        use_ns = True

        def getattr(self, path: str, fh: Optional[int] = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(real(path))
            return {key: getattr(st, key) for key in (
                "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev", "st_blocks",
                "st_blksize")} | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                                  "st_ctime": st.st_ctime_ns}

        def access(self, path: str, amode: int) -> int:
            if not os.access(real(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def readdir(self, path: str, fh: int):
            return [".", "..", *os.listdir(real(path))]

        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        def mknod(self, path: str, mode: int, dev: int) -> int:
            os.mknod(real(path), mode, dev)
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            os.rmdir(real(path))
            return 0

        def unlink(self, path: str) -> int:
            os.unlink(real(path))
            return 0

        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, real(target))
            return 0

        def link(self, target: str, source: str) -> int:
            os.link(real(source), real(target))
            return 0

        def rename(self, old: str, new: str) -> int:
            os.rename(real(old), real(new))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(real(path), uid, gid)
            return 0

        def truncate(self, path: str, length: int, fh: Optional[int] = None) -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(real(path), length)
            return 0

        def utimens(self, path: str, times: Optional[tuple[int, int]] = None) -> int:
            if times is None:
                os.utime(real(path))
            else:
                os.utime(real(path), ns=times)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(real(path))
            return {key: getattr(st, key) for key in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                "f_flag", "f_namemax")}

        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags & ~os.O_DIRECT)

        def create(self, path: str, mode: int, flags: int) -> int:
            return os.open(real(path), (flags & ~os.O_DIRECT) | os.O_CREAT, mode)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            faults.before_write(len(data))
            return os.pwrite(fh, data, offset)

        def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
            if mode != 0:
                raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
            os.posix_fallocate(fh, offset, size)
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            faults.before_fsync()
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            faults.before_fsync()
            fd = os.open(real(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

    return Passthrough()


def serve(backing: pathlib.Path, mount: pathlib.Path, control: str) -> None:
    """Mounts and serves until unmounted or signalled (SIGTERM/SIGINT unmount cleanly)."""
    # libfuse3 is what scripts/ensure-fuse installs; never pick up a libfuse2 that happens to be there too.
    os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    import mfusepy

    faults = Faults()
    server = _control_server(control, faults)
    thread = threading.Thread(target=server.serve_forever, name="slow-disk-control", daemon=True)
    thread.start()
    try:
        # Threads on (calls run in parallel, a stalled fsync holds up nothing else); no allow_other: the
        # bookie runs as the same user (root) as this process.
        mfusepy.FUSE(_operations(backing, faults), str(mount), foreground=True, nothreads=False,
                     fsname="magnetar-slow-disk", subtype="slowdisk")
    finally:
        server.shutdown()
        server.server_close()


# -- the test's side -----------------------------------------------------------------------------------------


class SlowDiskError(RuntimeError):
    """The FUSE process refused a command or cannot be reached."""


def fuse_available() -> Optional[str]:
    """None if a FUSE mount can be made here, else why not (for an assertion message)."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 (Debian's fuse3; scripts/ensure-fuse installs it)"
    # Looked up, not loaded: the FUSE process loads them (this one runs tests, not file systems).
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (Debian's fuse3; scripts/ensure-fuse installs it)"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (the test extra: pip install -e '.[test]')"
    return None


class SlowDisk:
    """A slow-disk mount under test control.

    Args:
        mount: the folder to mount on (created); give it to a bookie as its ``data_dir``.
        backing: where the files really go (created); default: ``<mount>.backing`` beside it.
        log_path: the FUSE process's log; default: ``<mount>.log`` beside it.

    ``with SlowDisk(path) as disk:`` mounts (and waits until the mount and the control socket answer), and
    unmounts on leaving; ``disk.slow(fsync_ms=200)``, ``disk.stall()``, ``disk.release()``, ``disk.normal()``,
    ``disk.stats()`` act on the running mount.
    """

    def __init__(self, mount: pathlib.Path, *, backing: Optional[pathlib.Path] = None,
                 log_path: Optional[pathlib.Path] = None) -> None:
        self.mount = pathlib.Path(mount)
        self.backing = pathlib.Path(backing) if backing else self.mount.with_name(self.mount.name + ".backing")
        self.log_path = pathlib.Path(log_path) if log_path else self.mount.with_name(self.mount.name + ".log")
        self._control_dir: Optional[str] = None
        self.process: Optional[ManagedProcess] = None
        self._record: Optional[pathlib.Path] = None  # tests.kit.leftovers: removed by the next run if we are killed

    @property
    def control_path(self) -> str:
        if self._control_dir is None:
            raise SlowDiskError("not started")
        return os.path.join(self._control_dir, "control.sock")

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 30.0) -> "SlowDisk":
        if self.process is not None and self.process.alive:
            return self
        why_not = fuse_available()
        if why_not:
            raise SlowDiskError(why_not)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.backing.mkdir(parents=True, exist_ok=True)
        # A socket path is limited to 108 bytes, and test folders are deep: the socket gets a short folder.
        self._control_dir = tempfile.mkdtemp(prefix="mg-slowdisk-")
        repo_root = pathlib.Path(__file__).resolve().parents[2]
        self.process = ManagedProcess(
            f"slow-disk-{self.mount.name}",
            [sys.executable, "-m", "tests.kit.slow_disk", "serve", "--backing", str(self.backing),
             "--mount", str(self.mount), "--control", self.control_path],
            log_path=self.log_path, cwd=repo_root, health=self._serving,
        )
        try:
            self.process.start(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise
        pid = self.process.pid
        self._record = leftovers.record("fuse", mount=os.path.abspath(self.mount), server=pid,
                                        server_started=start_ticks(pid))
        return self

    def _serving(self) -> bool:
        return os.path.ismount(self.mount) and self.stats()["ok"]

    def stop(self) -> None:
        """Kills the FUSE process (its group) and unmounts lazily; idempotent, also after a failed start."""
        if self.process is not None:
            self.process.cleanup()
        if os.path.ismount(self.mount) or listed_as_mounted(self.mount):
            self._umount()
        if self._control_dir is not None:
            shutil.rmtree(self._control_dir, ignore_errors=True)
            self._control_dir = None
        leftovers.forget(self._record)
        self._record = None

    def _umount(self) -> None:
        for argv in (["fusermount3", "-u", "-z", str(self.mount)], ["umount", "-l", str(self.mount)]):
            if shutil.which(argv[0]) is None:
                continue
            if subprocess.run(argv, capture_output=True).returncode == 0:
                return

    def __enter__(self) -> "SlowDisk":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------------------------------------------

    def slow(self, *, fsync_ms: float = 0.0, write_ms: float = 0.0) -> dict[str, Any]:
        """Every fsync (and write request) that starts from now on waits that long first."""
        return self._command({"cmd": "set", "fsync_ms": fsync_ms, "write_ms": write_ms})

    def stall(self) -> dict[str, Any]:
        """Every fsync that starts from now on blocks until :meth:`release` (or :meth:`normal`)."""
        return self._command({"cmd": "stall"})

    def release(self) -> dict[str, Any]:
        return self._command({"cmd": "release"})

    def normal(self) -> dict[str, Any]:
        """No delay, nothing stalled (blocked fsyncs go on)."""
        return self._command({"cmd": "normal"})

    def stats(self) -> dict[str, Any]:
        return self._command({"cmd": "stats"})

    def unblock(self) -> None:
        """:meth:`normal` if the mount still serves, else nothing: for teardown, before killing a process that
        may be blocked in an fsync (the kernel waits for the answer to a FUSE request it already handed over,
        even for SIGKILL)."""
        if self.process is not None and self.process.alive:
            try:
                self.normal()
            except SlowDiskError:
                pass

    def _command(self, command: dict[str, Any]) -> dict[str, Any]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(10.0)
                sock.connect(self.control_path)
                sock.sendall(json.dumps(command).encode() + b"\n")
                answer = json.loads(sock.makefile("rb").readline())
        except (OSError, ValueError) as err:
            raise SlowDiskError(f"slow disk at {self.mount}: {command['cmd']} failed: {err}") from err
        if not answer.get("ok"):
            raise SlowDiskError(f"slow disk at {self.mount} refused {command}: {answer.get('error')}")
        return answer

    def __repr__(self) -> str:
        return f"SlowDisk({self.mount} over {self.backing})"


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="mount and serve (foreground)")
    s.add_argument("--backing", type=pathlib.Path, required=True)
    s.add_argument("--mount", type=pathlib.Path, required=True)
    s.add_argument("--control", required=True, help="the control socket's path")
    args = parser.parse_args(argv)
    serve(args.backing, args.mount, args.control)


if __name__ == "__main__":
    main()
