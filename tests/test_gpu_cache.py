"""The GPU compile cache on disk: a second compile of the same tile IR is served from the cache,
keys change with what changes the cubin, and a corrupt entry is rebuilt."""
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.backend import compile_to_cubin
from kernellab.compiler.codegen.target import Target
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.pipeline import CompileTrace
from kernellab.runtime import jit as J
from kernellab.runtime.cache import DiskCache

pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


@kl.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def _tile_ir():
    x = torch.randn(100)
    return scale.warmup(x, 100, BLOCK=128, grid=(1,)).asm["tile"]


def test_round_trip_and_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    tile = _tile_ir()
    opts, target = GpuOptions(num_warps=4), Target(90)
    key = J._gpu_cache_key(tile, opts, target)
    assert key != J._gpu_cache_key(tile, GpuOptions(num_warps=8), target)
    assert key != J._gpu_cache_key(tile, opts, Target(80))
    assert key != J._gpu_cache_key(tile.replace("128", "256"), opts, target)
    assert J._load_cached(key, CompileTrace("scale")) is None
    trace = CompileTrace("scale")
    out = compile_to_cubin(parse_module(tile), trace, opts, target)
    J._store_cached(key, out, trace.passes)
    again = CompileTrace("scale")
    cached = J._load_cached(key, again)
    assert cached["cubin"] == out["cubin"] and cached["ptx"] == out["ptx"]
    assert cached["arg_kinds"] == out["arg_kinds"] and cached["shared"] == out["shared"]
    assert [p.name for p in again.passes] == [p.name for p in trace.passes]
    assert any("disk cache" in n for n in again.notes)


def test_corrupt_entry_is_a_miss_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    tile = _tile_ir()
    opts, target = GpuOptions(num_warps=4), Target(90)
    key = J._gpu_cache_key(tile, opts, target)
    trace = CompileTrace("scale")
    out = compile_to_cubin(parse_module(tile), trace, opts, target)
    J._store_cached(key, out, trace.passes)
    entry = DiskCache().path_for(key)
    (entry / "cubin").write_bytes(b"garbage")
    assert J._load_cached(key, CompileTrace("scale")) is None
    assert not entry.exists()
    J._store_cached(key, out, trace.passes)
    assert J._load_cached(key, CompileTrace("scale"))["cubin"] == out["cubin"]
