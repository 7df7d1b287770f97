"""A FUSE filesystem that loses what was not fsynced when its "power" goes, as Jepsen's LazyFS does.

Why: a broker's promise under power loss is about what it fsynced, and tmpfs (or any file system the test
cannot switch off) keeps every write. This one sits over a backing directory — "the disk" — and keeps every
write in its own memory — "the page cache" — until the file is fsynced (or written back after
`WRITEBACK_S`, as the kernel writes dirty pages back after about 30 s). Power loss is this process dying:
SIGKILL it, unmount, mount a fresh one over the same backing directory, and whatever was only in its memory
is gone. A process crash (the broker's SIGKILL) loses nothing: the cache belongs to this process, not the
broker's, as the page cache belongs to the kernel.

The model (ext4 with data=writeback, roughly): namespace operations — create, rename, link, unlink, mkdir —
reach the disk at once; file data and sizes only at fsync or writeback. So a file renamed into place without
an fsync of its data is empty after a power loss, as on a real disk without `auto_da_alloc`. A write that
would grow the files past the backing file system's free space fails with ENOSPC at write time, as ext4's
delayed allocation reserves blocks then.

Errors on demand: `{"op": "fail", "errno": "EIO", "prefix": "metadata/", "ops": ["write", "fsync", ...],
"seconds": 5}` on stdin makes those operations on paths under the prefix fail with that errno (the metadata
store faults); `{"op": "heal"}` ends them; `{"op": "stats"}` answers with the cache's size. Every answer is a
JSON line on stdout (`{"event": ...}`), the first `{"event": "mounted"}`.

Run: `python -m tests.chaos.lazyfs --backing DIR --mount DIR` (root, /dev/fuse, libfuse 3, `mfusepy`).
It must never touch anything outside its backing directory.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import threading
import time
from typing import Any

from mfusepy import FUSE, FuseOSError, Operations

__all__ = ["LazyFS", "PAGE", "WRITEBACK_S"]

PAGE = 4096
WRITEBACK_S = 30.0  # dirty data older than this is written back (without fsync: the disk has it, as after writeback)
WRITEBACK_EVERY_S = 5.0


class _Dirty:
    """One file's data not yet on the disk.

    The file's content at x < `size` is `pages[x // PAGE][x % PAGE]` where that page is held, else the disk's
    byte at x when x < `floor`, else 0 — `floor` being the disk's size when the file was first written here,
    lowered by every truncation since (what lies on the disk past it is no longer the file's). Held pages are
    zero past `size`."""

    __slots__ = ("pages", "size", "floor", "fd", "since", "reserved")

    def __init__(self, fd: int, size: int) -> None:
        self.pages: dict[int, bytearray] = {}
        self.size = size
        self.floor = size
        self.fd = fd  # the backing file opened read-write (whatever the caller's mode), for pages and write-back
        self.since = time.monotonic()
        self.reserved = 0  # bytes of the backing's free space this file's growth holds


class LazyFS(Operations):
    use_ns = True

    def __init__(self, backing: str) -> None:
        self.root = os.path.realpath(backing)
        self._mutex = threading.RLock()
        self.dirty: dict[tuple[int, int], _Dirty] = {}  # (st_dev, st_ino) -> what the disk does not have yet
        self.faults: list[dict[str, Any]] = []
        self.growth = 0  # bytes the dirty sizes add over the disk's: reserved against the backing's free space

    # -- paths, faults ------------------------------------------------------------------------
    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _check(self, op: str, path: str) -> None:
        if not self.faults:
            return
        now = time.monotonic()
        rel = path.lstrip("/")
        for f in list(self.faults):
            if f["until"] < now:
                self.faults.remove(f)
                continue
            if rel.startswith(f["prefix"]) and (not f["ops"] or op in f["ops"]):
                raise FuseOSError(f["errno"])

    # -- the cache ----------------------------------------------------------------------------
    @staticmethod
    def _key(fh: int) -> tuple[int, int]:
        """The file an fd is open on (never cached by fd number: numbers are reused for other files)."""
        st = os.fstat(fh)
        return st.st_dev, st.st_ino

    def _entry(self, fh: int) -> _Dirty:
        key = self._key(fh)
        d = self.dirty.get(key)
        if d is None:
            d = self.dirty[key] = _Dirty(os.open(f"/proc/self/fd/{fh}", os.O_RDWR), os.fstat(fh).st_size)
        return d

    @staticmethod
    def _disk(d: _Dirty, start: int, length: int) -> bytes:
        """The file's bytes [start, start + length) as far as the disk has them (below `floor`), zeros after."""
        take = max(0, min(length, d.floor - start))
        raw = os.pread(d.fd, take, start) if take else b""
        return raw.ljust(length, b"\0")

    def _page(self, d: _Dirty, n: int) -> bytearray:
        page = d.pages.get(n)
        if page is None:
            page = d.pages[n] = bytearray(self._disk(d, n * PAGE, PAGE))
            keep = max(0, d.size - n * PAGE)
            if keep < PAGE:
                page[keep:] = bytes(PAGE - keep)
        return page

    def _flush(self, key: tuple[int, int], d: _Dirty, *, sync: bool) -> None:
        """Make the disk hold the file as it is here: what lies past `floor` dropped, the held pages written, the
        size set; fsynced with `sync`. The entry goes: the disk has it all."""
        if os.fstat(d.fd).st_size > d.floor:
            os.ftruncate(d.fd, d.floor)
        for n in sorted(d.pages):
            start = n * PAGE
            if start < d.size:
                os.pwrite(d.fd, bytes(d.pages[n][: min(PAGE, d.size - start)]), start)
        if os.fstat(d.fd).st_size != d.size:
            os.ftruncate(d.fd, d.size)
        if sync:
            os.fsync(d.fd)
        self.growth -= d.reserved
        os.close(d.fd)
        del self.dirty[key]

    def writeback(self, older_than_s: float = WRITEBACK_S) -> int:
        """Write back (no fsync) what has been dirty longer than `older_than_s`; returns how many files."""
        with self._mutex:
            due = [(k, d) for k, d in self.dirty.items() if time.monotonic() - d.since >= older_than_s]
            for k, d in due:
                try:
                    self._flush(k, d, sync=False)
                except OSError:
                    pass  # the disk refused (full): kept dirty, tried again later
            return len(due)

    def _reserve(self, d: _Dirty, new_size: int) -> None:
        grow = new_size - max(d.size, os.fstat(d.fd).st_size)
        if grow <= 0:
            return
        st = os.statvfs(self.root)
        if st.f_bavail * st.f_frsize - self.growth < grow + PAGE:
            raise FuseOSError(errno.ENOSPC)
        self.growth += grow
        d.reserved += grow

    # -- files --------------------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        """The file's attributes, its size as this cache has it. The disk is read under the mutex: a size read
        before a flush and answered after it (the entry gone) would be the disk's older, shorter size, and the
        kernel, taking it, puts the next O_APPEND write inside the file's data."""
        self._check("getattr", path)
        with self._mutex:
            st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
            d = self.dirty.get((st.st_dev, st.st_ino))
            size = d.size if d is not None else st.st_size
        out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_atime_ns",
                                            "st_mtime_ns", "st_ctime_ns", "st_ino")}
        out["st_size"] = size
        out["st_atime"], out["st_mtime"], out["st_ctime"] = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
        return out

    def open(self, path: str, flags: int) -> int:
        self._check("open", path)
        fh = os.open(self._p(path), flags & ~(os.O_TRUNC | os.O_APPEND))
        if flags & os.O_TRUNC:  # a truncation is data: cached like a write
            with self._mutex:
                d = self._entry(fh)
                d.size, d.floor, d.pages = 0, 0, {}
        return fh

    def create(self, path: str, mode: int, flags: Any = None) -> int:
        self._check("create", path)
        extra = flags if isinstance(flags, int) else os.O_RDWR
        return os.open(self._p(path), (extra | os.O_CREAT) & ~(os.O_TRUNC | os.O_APPEND), mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._check("read", path)
        with self._mutex:
            d = self.dirty.get(self._key(fh))
            if d is None:
                return os.pread(fh, size, offset)
            end = min(offset + size, d.size)
            out = bytearray()
            pos = offset
            while pos < end:
                n, within = divmod(pos, PAGE)
                take = min(PAGE - within, end - pos)
                page = d.pages.get(n)
                out += page[within:within + take] if page is not None else self._disk(d, pos, take)
                pos += take
            return bytes(out)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._check("write", path)
        with self._mutex:
            d = self._entry(fh)
            self._reserve(d, offset + len(data))
            pos, i = offset, 0
            while i < len(data):
                n, within = divmod(pos, PAGE)
                take = min(PAGE - within, len(data) - i)
                self._page(d, n)[within:within + take] = data[i:i + take]
                pos += take
                i += take
            d.size = max(d.size, offset + len(data))
            return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self._check("truncate", path)
        opened = fh is None
        f = os.open(self._p(path), os.O_RDWR) if fh is None else fh
        try:
            with self._mutex:
                d = self._entry(f)
                self._reserve(d, length)
                if length < d.size:
                    for n in [n for n in d.pages if n * PAGE >= length]:
                        del d.pages[n]
                    last = d.pages.get(length // PAGE)
                    if last is not None:
                        last[length % PAGE:] = bytes(PAGE - length % PAGE)
                    d.floor = min(d.floor, length)
                d.size = length
        finally:
            if opened:
                os.close(f)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, length: int, fh: int) -> int:
        raise FuseOSError(errno.EOPNOTSUPP)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._check("fsync", path)
        with self._mutex:
            key = self._key(fh)
            d = self.dirty.get(key)
            if d is not None:
                self._flush(key, d, sync=True)
            else:
                os.fsync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() is not fsync(): the data stays in the cache

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # -- the namespace: on the disk at once ---------------------------------------------------
    def unlink(self, path: str) -> int:
        self._check("unlink", path)
        os.unlink(self._p(path))
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        self._check("rename", new)
        if flags:
            raise FuseOSError(errno.EINVAL)
        os.rename(self._p(old), self._p(new))
        return 0

    def link(self, target: str, source: str) -> int:
        self._check("link", target)
        os.link(self._p(source), self._p(target))
        return 0

    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._p(target))
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self._p(path))

    def mkdir(self, path: str, mode: int) -> int:
        self._check("mkdir", path)
        os.mkdir(self._p(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._p(path))
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        self._check("readdir", path)
        return [".", "..", *os.listdir(self._p(path))]

    def opendir(self, path: str) -> int:
        self._check("opendir", path)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self._check("fsyncdir", path)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._p(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._p(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._p(path))
        else:
            os.utime(self._p(path), ns=times)
        return 0

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._p(path), amode):
            raise FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._p(path))
        out = {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                            "f_ffree", "f_favail", "f_flag", "f_namemax")}
        taken = self.growth // max(1, st.f_frsize)
        out["f_bfree"] = max(0, st.f_bfree - taken)
        out["f_bavail"] = max(0, st.f_bavail - taken)
        return out

    # -- control ------------------------------------------------------------------------------
    def command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd.get("op")
        if op == "fail":
            code = getattr(errno, str(cmd["errno"]))
            self.faults.append({"errno": code, "prefix": str(cmd.get("prefix", "")),
                                "ops": set(cmd.get("ops") or ()), "until": time.monotonic() + float(cmd["seconds"])})
            return {"event": "fail", "errno": cmd["errno"], "prefix": cmd.get("prefix", "")}
        if op == "heal":
            self.faults.clear()
            return {"event": "heal"}
        if op == "stats":
            with self._mutex:
                return {"event": "stats", "dirty_files": len(self.dirty),
                        "dirty_bytes": sum(len(d.pages) * PAGE for d in self.dirty.values())}
        return {"event": "error", "why": f"unknown op {op!r}"}


def _control(fs: LazyFS) -> None:
    for line in sys.stdin:
        try:
            answer = fs.command(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            answer = {"event": "error", "why": str(exc)}
        print(json.dumps(answer), flush=True)
    os._exit(0)  # the runner went away (stdin closed): die with it; the mount is cleaned up by the runner


def _writeback(fs: LazyFS) -> None:
    while True:
        time.sleep(WRITEBACK_EVERY_S)
        fs.writeback()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.lazyfs", description=__doc__.split("\n")[0])
    p.add_argument("--backing", required=True)
    p.add_argument("--mount", required=True)
    p.add_argument("--fsname", default="kelplazyfs", help="the mount's source name in /proc/mounts")
    args = p.parse_args(argv)
    fs = LazyFS(args.backing)
    threading.Thread(target=_control, args=(fs,), daemon=True).start()
    threading.Thread(target=_writeback, args=(fs,), daemon=True).start()

    def mounted() -> None:  # FUSE() blocks: say "mounted" once the mount point answers
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if os.path.ismount(args.mount):
                print(json.dumps({"event": "mounted", "pid": os.getpid()}), flush=True)
                return
            time.sleep(0.02)
        print(json.dumps({"event": "error", "why": "not mounted within 20 s"}), flush=True)

    threading.Thread(target=mounted, daemon=True).start()
    FUSE(fs, args.mount, foreground=True, nothreads=False, fsname=args.fsname, allow_other=True,
         default_permissions=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
