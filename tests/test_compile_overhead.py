"""Compile-time shortcuts that must not change what they compute (issue 14): the trace's JSON for the disk cache
(exact-type fast paths), the coalescing model remembered per layout text, and the garbage collector paused during
the stages. Each is checked against the plain computation; nothing here is timed."""
from __future__ import annotations

import dataclasses
import gc
import json

import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler import layout_model as LM
from kernellab.compiler.backend import paused_gc
from kernellab.compiler.codegen.target import Target
from kernellab.compiler.trace import PassRecord, from_json, to_json


@kl.jit
def scaled_rows(x, y, n, s, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    m = (rows < n) & (cols < BLOCK_N)
    v = tl.load(x + rows * BLOCK_N + cols, mask=m, other=0.0)
    tl.store(y + rows * BLOCK_N + cols, v * s + tl.sum(v, axis=1)[:, None], mask=m)


def _generic(v):
    """The trace's JSON as the general rules make it (dataclass -> dict of its fields, list/tuple -> list)."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _generic(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_generic(x) for x in v]
    if isinstance(v, dict):
        return {k: _generic(x) for k, x in v.items()}
    return v


def _built(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))  # compile, do not load
    scaled_rows.cache.clear()
    x = torch.empty(64, 128)
    return scaled_rows.warmup(x, x, 64, 0.5, BLOCK_M=16, BLOCK_N=128, num_warps=4, grid=(4,)).build_gpu(Target(90))


def test_trace_json_is_the_general_rules(tmp_path, monkeypatch):
    """Every record of a real GPU build (snapshots with accesses, stats dicts, positions) gives the same JSON as
    the general rules, and comes back equal."""
    ck = _built(tmp_path, monkeypatch)
    assert ck.trace.snapshot("gpu").accesses
    for rec in ck.trace.passes:
        fast = to_json(rec)
        assert fast == _generic(rec)
        assert json.dumps(fast, default=str) == json.dumps(_generic(rec), default=str)
        assert from_json(PassRecord, json.loads(json.dumps(fast))) == rec


def test_coalescing_remembered_per_layout_text(tmp_path, monkeypatch):
    """The remembered model equals the model computed afresh, from the layout text and from the parsed layout."""
    ck = _built(tmp_path, monkeypatch)
    snap = ck.trace.snapshot("gpu")
    for a in snap.accesses:
        v = snap.value(a.value)
        fresh = LM._coalescing(LM.parse_layout(v.layout), v.shape, snap.num_warps, a.vec, a.elem_bytes)
        assert a.coalescing == fresh
        assert LM.coalescing(v.layout, v.shape, snap.num_warps, a.vec, a.elem_bytes) == fresh
        assert LM.coalescing(LM.parse_layout(v.layout), list(v.shape), snap.num_warps, a.vec, a.elem_bytes) == fresh


def test_gc_paused_during_the_stages_and_restored():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause does not turn it back on
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_build_leaves_gc_on(tmp_path, monkeypatch):
    from kernellab.compiler import backend

    seen = []
    stage = next(s for s in backend.STAGES if s.name == "llir")
    monkeypatch.setattr(backend, "STAGES", tuple(
        dataclasses.replace(s, run=lambda b, f=s.run: (seen.append(gc.isenabled()), f(b))) if s is stage else s
        for s in backend.STAGES))
    _built(tmp_path, monkeypatch)
    assert seen == [False] and gc.isenabled()
