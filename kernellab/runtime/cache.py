"""The on-disk compile cache: one directory per key holding the files (PTX, cubin, trace ...) and a manifest.

Layout: ``<root>/<key[:2]>/<key>/{<files>, manifest.json}``. The root is ``$KERNELLAB_CACHE_DIR`` or
``~/.cache/kernellab``. The manifest records each file's size and sha256.

Concurrency and crashes: :meth:`DiskCache.put` writes everything into a fresh temporary directory under the
root and then renames it onto the entry's path in one step, so a reader sees either no entry or a complete
one; when two writers race, the first rename wins and the other's copy is discarded (same key, same content).
:meth:`DiskCache.get` verifies every file against the manifest; an entry with a missing file, a bad hash or an
unreadable manifest is removed and reported as a miss.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import uuid
from pathlib import Path

ENV_VAR = "KERNELLAB_CACHE_DIR"
MANIFEST = "manifest.json"
FORMAT_VERSION = 2
ELF_MAGIC = b"\x7fELF"
MAX_FILE_BYTES = 256 << 20  # no PTX, cubin or trace of a kernel comes near this
MAX_MANIFEST_BYTES = 1 << 20
STALE_SECONDS = 3600.0  # a temporary directory untouched this long belongs to a writer that died

_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kernellab"


def cache_key(*parts) -> str:
    """A sha256 hex digest of ``parts``. bytes and str parts are hashed as they are; anything else by its
    ``repr``, which must therefore be deterministic across processes (no sets, no default object reprs)."""
    h = hashlib.sha256(f"kernellab-cache-v{FORMAT_VERSION}".encode())
    for part in parts:
        if isinstance(part, bytes):
            tag, data = b"b", part
        elif isinstance(part, str):
            tag, data = b"s", part.encode()
        else:
            tag, data = b"r", repr(part).encode()
        h.update(tag + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def compiler_hash() -> str:
    """A hash of the compiler's source (every .py file under kernellab/compiler): a cubin built by another
    version of the passes or of codegen is a miss, so an upgrade or an edit never runs stale code. Taken when
    this module is imported (with the compiler, see the end of the file), not at the first compile: a source
    edited while a process runs must not file that process's (older) code under the new hash."""
    if not _COMPILER_HASH:
        h = hashlib.sha256(b"compiler")
        root = Path(__file__).resolve().parent.parent / "compiler"
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            try:
                h.update(path.read_bytes())
            except OSError:
                pass
        _COMPILER_HASH.append(h.hexdigest()[:16])
    return _COMPILER_HASH[0]


def runtime_hash() -> str:
    """A hash of the runtime code that writes and reads cache entries (this file and jit.py, which
    defines the meta schema): an entry written by another version is a miss, never misread."""
    if not _RUNTIME_HASH:
        h = hashlib.sha256(f"schema-{FORMAT_VERSION}".encode())
        here = Path(__file__).resolve().parent
        for name in ("cache.py", "jit.py"):
            try:
                h.update((here / name).read_bytes())
            except OSError:
                h.update(name.encode())
        _RUNTIME_HASH.append(h.hexdigest()[:16])
    return _RUNTIME_HASH[0]


_COMPILER_HASH: list[str] = []
_RUNTIME_HASH: list = []
_SWEPT: set = set()


def read_regular_file(path: Path, size: int | None, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of `path` if it is a regular file (not a symlink, FIFO or device) of exactly `size` bytes
    (or at most `limit` when `size` is None). Opened non-blocking, without following links, checked again
    on the open descriptor; never reads past the expected size. ValueError when any check fails."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    want = size if size is not None else st.st_size
    if st.st_size != want or want > limit:
        raise ValueError(f"{path.name} has {st.st_size} bytes, expected {want} (at most {limit})")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_CLOEXEC", 0))
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or (st2.st_ino, st2.st_dev) != (st.st_ino, st.st_dev):
            raise ValueError(f"{path.name} changed while being opened")
        chunks, left = [], want + 1  # one byte more: a file that grew is caught
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) != want:
        raise ValueError(f"{path.name} has {len(data)} bytes, expected {want}")
    return data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class DiskCache:
    """A directory of verified, atomically written entries. See the module docstring."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.corrupt_entries_removed = 0  # how many bad entries get() found and removed (for tests, the lab)

    def path_for(self, key: str) -> Path:
        if not _KEY_RE.match(key):
            raise ValueError(f"cache keys are 1-200 characters of [A-Za-z0-9_.-] (use cache_key()), got {key!r}")
        return self.root / key[:2] / key

    def get(self, key: str) -> dict[str, bytes] | None:
        """The files stored under ``key``, or None on a miss (a corrupt entry is removed and counts as one).

        Nothing in the cache is trusted: every path is lstat'ed first, only regular files (no symlinks,
        FIFOs, devices) are opened, non-blocking and without following links, and never more bytes are
        read than the manifest's size for the file (a link to /dev/zero or a FIFO cannot hang or exhaust
        memory). What the files mean is the caller's to check (jit.py checks a cubin's ELF magic)."""
        entry = self.path_for(key)
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            return None
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):  # a symlink, file or FIFO where the entry should be
            self._discard(entry)
            return None
        try:
            manifest = self._read_manifest(entry)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._discard(entry)
            return None
        try:
            if manifest.get("format") != FORMAT_VERSION or manifest.get("key") != key:
                raise ValueError("manifest does not match")
            if manifest.get("runtime") != runtime_hash():
                raise ValueError("written by another version of kernellab's runtime")
            files = {}
            for name, info in manifest["files"].items():
                if not isinstance(name, str) or not _NAME_RE.match(name) or name == MANIFEST:
                    raise ValueError(f"bad file name {name!r}")
                size = info["size"]
                if not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
                    raise ValueError(f"{name}: bad size {size!r}")
                data = read_regular_file(entry / name, size)
                if _sha256(data) != info["sha256"]:
                    raise ValueError(f"{name} does not match its hash")
                files[name] = data
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._discard(entry)
            return None
        return files

    @staticmethod
    def _read_manifest(entry: Path) -> dict:
        """The entry's manifest; FileNotFoundError when there is no entry, ValueError when it is damaged."""
        for attempt in range(2):
            try:
                data = read_regular_file(entry / MANIFEST, None, limit=MAX_MANIFEST_BYTES)
            except FileNotFoundError:
                if not entry.exists():
                    raise
                # The directory exists but had no manifest a moment ago: either a writer's rename landed in
                # between (then the manifest is there now) or the entry is damaged.
                if attempt:
                    raise ValueError("entry without a manifest") from None
                continue
            manifest = json.loads(data.decode())
            if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
                raise ValueError("manifest is not an object with files")
            return manifest
        raise ValueError("entry without a manifest")

    def put(self, key: str, files: dict[str, bytes]) -> None:
        """Store ``files`` (name -> bytes) under ``key``. Names are plain file names (no directories, not
        ``manifest.json``). Atomic: readers never see a partial entry. An existing entry is kept."""
        entry = self.path_for(key)
        for name, data in files.items():
            if not _NAME_RE.match(name) or name == MANIFEST:
                raise ValueError(f"bad cache file name {name!r}")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"cache file {name!r} must be bytes, got {type(data).__name__}")
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep_stale()
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        try:
            manifest = {"format": FORMAT_VERSION, "key": key, "runtime": runtime_hash(), "files": {}}
            for name, data in files.items():
                data = bytes(data)
                (tmp / name).write_bytes(data)
                manifest["files"][name] = {"size": len(data), "sha256": _sha256(data)}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            entry.parent.mkdir(parents=True, exist_ok=True)
            for attempt in range(2):
                try:
                    os.rename(tmp, entry)  # atomic; fails if the entry already exists (non-empty directory)
                    return
                except OSError:
                    if not entry.exists():
                        raise
                    if attempt == 0 and self.get(key) is None:
                        continue  # it was corrupt: get() removed it, try again
                    return  # a complete entry is there (another writer won the race): keep it
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def sweep_stale(self, older_than: float = STALE_SECONDS) -> int:
        """Remove `.tmp-*` / `.trash-*` directories left by writers or removers that died (a crash, a full
        disk, a kill): only those untouched for `older_than` seconds, so a live writer's are kept. At most
        once per process per root, and cheap: one directory listing. Returns how many were removed."""
        if str(self.root) in _SWEPT:
            return 0
        _SWEPT.add(str(self.root))
        now, removed = time.time(), 0
        try:
            children = list(os.scandir(self.root))
        except OSError:
            return 0
        for child in children:
            if not child.name.startswith((".tmp-", ".trash-")):
                continue
            try:
                st = child.stat(follow_symlinks=False)
                if now - st.st_mtime < older_than:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(child.path, ignore_errors=True)
                else:
                    os.unlink(child.path)
                removed += 1
            except OSError:
                continue
        return removed

    def remove(self, key: str) -> None:
        entry = self.path_for(key)
        if entry.exists():
            self._discard(entry, count=False)

    def clear(self) -> None:
        """Remove every entry (and leftover temporary directories) under the root."""
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir():
                    self._discard(child, count=False)

    def _discard(self, path: Path, count: bool = True) -> None:
        """Remove a directory so no reader sees it half deleted: rename it aside first, then delete."""
        trash = self.root / f".trash-{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except OSError:
            return  # already gone (another process removed or replaced it)
        if count:
            self.corrupt_entries_removed += 1
        try:
            if stat.S_ISDIR(os.lstat(trash).st_mode):
                shutil.rmtree(trash, ignore_errors=True)
            else:  # a symlink or file planted where an entry should be: remove the link, not its target
                os.unlink(trash)
        except OSError:
            pass


compiler_hash()  # now, while the files on disk are the code this process has loaded
