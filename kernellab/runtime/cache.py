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
import tempfile
import uuid
from pathlib import Path

ENV_VAR = "KERNELLAB_CACHE_DIR"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1

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
        """The files stored under ``key``, or None on a miss (a corrupt entry is removed and counts as one)."""
        entry = self.path_for(key)
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
            files = {}
            for name, info in manifest["files"].items():
                data = (entry / name).read_bytes()
                if len(data) != info["size"] or _sha256(data) != info["sha256"]:
                    raise ValueError(f"{name} does not match its hash")
                files[name] = data
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._discard(entry)
            return None
        return files

    @staticmethod
    def _read_manifest(entry: Path) -> dict:
        """The entry's manifest; FileNotFoundError when there is no entry, ValueError when it is damaged."""
        try:
            return json.loads((entry / MANIFEST).read_text())
        except FileNotFoundError:
            if not entry.exists():
                raise
        # The directory exists but had no manifest a moment ago: either a writer's rename landed in between
        # (then the manifest is there now) or the entry is damaged.
        try:
            return json.loads((entry / MANIFEST).read_text())
        except FileNotFoundError:
            if not entry.exists():
                raise
            raise ValueError("entry without a manifest") from None

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
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        try:
            manifest = {"format": FORMAT_VERSION, "key": key, "files": {}}
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
        shutil.rmtree(trash, ignore_errors=True)
