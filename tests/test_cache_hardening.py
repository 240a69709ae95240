"""The disk cache trusts nothing it finds (issue 18): symlinks, FIFOs and devices are never opened or read, a
file's size is checked before a byte is read (a link to /dev/zero once ate 21.9 GB), a cached cubin must be
an ELF file, a broken meta is discarded so the next store repairs it, stale temporaries are swept, and an
entry written by another runtime version is a miss."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from kernellab.compiler.pipeline import CompileTrace
from kernellab.runtime import cache as C
from kernellab.runtime import jit as J
from kernellab.runtime.cache import DiskCache, cache_key

FILES = {"cubin": b"\x7fELF" + bytes(range(256)) * 4, "ptx": b".version 8.0\n", "meta.json": b"{}"}


@pytest.fixture()
def cache(tmp_path):
    C._SWEPT.discard(str(tmp_path))
    return DiskCache(tmp_path)


def _stored(cache, tag="k"):
    key = cache_key(tag)
    cache.put(key, FILES)
    assert cache.get(key) == FILES
    return key, cache.path_for(key)


def _gets_within(cache, key, seconds=5.0):
    """cache.get(key) run in a thread: it must return (a miss) within `seconds`, never block."""
    out = []
    t = threading.Thread(target=lambda: out.append(cache.get(key)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "cache.get blocked"
    return out[0]


def test_symlink_to_dev_zero_is_never_read(cache):
    key, entry = _stored(cache)
    (entry / "cubin").unlink()
    os.symlink("/dev/zero", entry / "cubin")
    assert _gets_within(cache, key) is None
    assert not os.path.lexists(entry)
    assert cache.corrupt_entries_removed == 1


def test_symlinked_manifest_is_refused(cache, tmp_path):
    key, entry = _stored(cache)
    real = tmp_path / "elsewhere.json"
    real.write_bytes((entry / "manifest.json").read_bytes())
    (entry / "manifest.json").unlink()
    os.symlink(real, entry / "manifest.json")
    assert cache.get(key) is None
    assert real.exists()  # the link's target is not touched


def test_fifo_is_never_opened(cache):
    key, entry = _stored(cache)
    (entry / "ptx").unlink()
    os.mkfifo(entry / "ptx")
    assert _gets_within(cache, key) is None


def test_fifo_manifest_is_never_opened(cache):
    key, entry = _stored(cache)
    (entry / "manifest.json").unlink()
    os.mkfifo(entry / "manifest.json")
    assert _gets_within(cache, key) is None


def test_entry_that_is_a_symlink_is_removed_without_touching_its_target(cache, tmp_path):
    key = cache_key("linked")
    target = tmp_path / "target_dir"
    target.mkdir()
    (target / "keep").write_bytes(b"x")
    entry = cache.path_for(key)
    entry.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, entry)
    assert cache.get(key) is None
    assert (target / "keep").exists() and not os.path.lexists(entry)


def test_size_is_checked_before_reading(cache, monkeypatch):
    key, entry = _stored(cache)
    with open(entry / "ptx", "ab") as f:  # grows past the manifest's size
        f.write(b"x" * 10)
    reads = []
    real_read = os.read
    monkeypatch.setattr(C.os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    assert cache.get(key) is None
    assert not [n for n in reads if n > len(FILES["cubin"]) + 1]


def test_huge_size_in_manifest_is_refused(cache):
    key, entry = _stored(cache)
    m = json.loads((entry / "manifest.json").read_text())
    m["files"]["ptx"]["size"] = 1 << 40
    (entry / "manifest.json").write_text(json.dumps(m))
    assert cache.get(key) is None


def test_manifest_of_the_wrong_shape_is_discarded(cache):
    key, entry = _stored(cache)
    (entry / "manifest.json").write_text("[1, 2, 3]")
    assert cache.get(key) is None and not entry.exists()


def test_entry_from_another_runtime_version_is_a_miss(cache):
    key, entry = _stored(cache)
    m = json.loads((entry / "manifest.json").read_text())
    m["runtime"] = "0" * 16
    (entry / "manifest.json").write_text(json.dumps(m))
    assert cache.get(key) is None
    assert len(C.runtime_hash()) == 16 and C.runtime_hash() == C.runtime_hash()


def test_stale_temporaries_are_swept_and_fresh_ones_kept(cache, tmp_path):
    old_tmp, old_trash, fresh = tmp_path / ".tmp-dead", tmp_path / ".trash-dead", tmp_path / ".tmp-live"
    for d in (old_tmp, old_trash, fresh):
        d.mkdir()
        (d / "f").write_bytes(b"x")
    past = time.time() - 2 * C.STALE_SECONDS
    os.utime(old_tmp, (past, past))
    os.utime(old_trash, (past, past))
    cache.put(cache_key("sweep"), {"a": b"1"})
    assert not old_tmp.exists() and not old_trash.exists()
    assert fresh.exists()


def _cached_gpu_entry(tmp_path, monkeypatch):
    """A cache entry shaped like jit.py's, without needing ptxas."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    C._SWEPT.discard(str(tmp_path))
    out = {"gpu": "gpu ir", "llir": "llvm ir", "ptx": ".version 8.0", "cubin": b"\x7fELF" + bytes(64),
           "arg_kinds": ["ptr"], "shared": 0, "shared_plan": [], "report": {"n_regs": 8}}
    key = cache_key("gpu-entry", str(tmp_path))
    J._store_cached(key, out, [])
    return key, out


def test_broken_meta_is_discarded_and_repaired(tmp_path, monkeypatch):
    key, out = _cached_gpu_entry(tmp_path, monkeypatch)
    assert J._load_cached(key, CompileTrace("k"))["cubin"] == out["cubin"]
    # a meta that is valid JSON but misses fields: the whole entry goes, so the next store repairs it
    entry = DiskCache().path_for(key)
    m = json.loads((entry / "manifest.json").read_text())
    bad = b'{"shared": 0}'
    (entry / "meta.json").write_bytes(bad)
    m["files"]["meta.json"] = {"size": len(bad), "sha256": C._sha256(bad)}
    (entry / "manifest.json").write_text(json.dumps(m))
    trace = CompileTrace("k")
    assert J._load_cached(key, trace) is None
    assert not entry.exists()
    assert not trace.passes and not any("disk cache" in n for n in trace.notes)
    J._store_cached(key, out, [])
    assert J._load_cached(key, CompileTrace("k"))["cubin"] == out["cubin"]


def test_cached_cubin_without_elf_magic_is_discarded(tmp_path, monkeypatch):
    key, out = _cached_gpu_entry(tmp_path, monkeypatch)
    entry = DiskCache().path_for(key)
    bad = b"MZ" + bytes(66)
    m = json.loads((entry / "manifest.json").read_text())
    (entry / "cubin").write_bytes(bad)
    m["files"]["cubin"] = {"size": len(bad), "sha256": C._sha256(bad)}
    (entry / "manifest.json").write_text(json.dumps(m))
    assert J._load_cached(key, CompileTrace("k")) is None
    assert not entry.exists()


def test_read_regular_file_refuses_devices_and_directories(tmp_path):
    with pytest.raises(ValueError):
        C.read_regular_file(tmp_path, 0)
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError):
            C.read_regular_file(type(tmp_path)("/dev/null"), 0)
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    assert C.read_regular_file(f, 3) == b"abc"
    with pytest.raises(ValueError):
        C.read_regular_file(f, 2)


def test_gpu_cache_key_changes_with_the_compiler_source(monkeypatch):
    """A cubin built by another version of the passes or codegen must be a miss (an upgrade or a local
    edit of the compiler never runs stale code): the key includes a hash of kernellab/compiler."""
    from kernellab.compiler.codegen.target import Target

    target = Target(90)
    before = J._gpu_cache_key("tile ir", {"num_warps": 4}, target)
    assert before == J._gpu_cache_key("tile ir", {"num_warps": 4}, target)
    monkeypatch.setattr(C, "_COMPILER_HASH", ["another-compiler"])
    assert J._gpu_cache_key("tile ir", {"num_warps": 4}, target) != before


def test_compiler_hash_reads_the_compiler_sources(monkeypatch):
    monkeypatch.setattr(C, "_COMPILER_HASH", [])
    first = C.compiler_hash()
    assert len(first) == 16 and C.compiler_hash() == first
