"""The environment variables that change the code a kernel compiles to (CODEGEN_ENV), and the fingerprint of their
values that every compile cache keys on: the disk cache (jit._gpu_cache_key), the in-memory specializations
(JITFunction.cache) and the warm-launch fast path's entries. So a knob set after a kernel compiled in this process
reaches its next launch (a new specialization, or the one compiled earlier under the same values), as it reaches a
new process through the disk cache.

The warm-launch fast path reads no variable: a warm launch is about 1.4 µs of Python, and os.environ.get of an
unset variable raises and catches KeyError inside the mapping (most of a µs each, sixteen of them). Instead the
change is seen where it is made: the first compile swaps os.environ's class, once, for a subclass of os._Environ
whose __setitem__ / __delitem__, after changing one of CODEGEN_ENV, recompute the fingerprint (NOW) and, where it
changed, run the on_change callbacks (jit.py's switches every kernel's warm-launch entries to those made under
the new values, none at first: the next launch of each takes the slow path, which keys on the new values). Reads
and all other writes run as before; fingerprints are interned (equal values, one object).

Seen: every change made through os.environ (assignment, del, pop, update, clear, setdefault; pytest's
monkeypatch.setenv, unittest.mock.patch.dict). Not seen: os.putenv or C code's setenv (the knobs read os.environ,
which does not see those either). An os.environ replaced by another object is noticed by the next launch that
takes the slow path (`current()`; warm launches before it still run what the old one chose): an os._Environ is
watched in turn; any other mapping is read at every slow-path launch and turns the fast path off (correct,
slower).
"""
from __future__ import annotations

import os

# environment variables that change the code generated (switches kept to measure a choice against the other)
CODEGEN_ENV = ("KERNELLAB_LLVM_LSR", "KERNELLAB_LLVM_SLSR", "KERNELLAB_NVVM_REFLECT", "KERNELLAB_OCCUPANCY_CAP",
               "KERNELLAB_CONVERT_ADDRESSES", "KERNELLAB_PIPELINE_SIDE_LOADS", "KERNELLAB_FLATTEN",
               "KERNELLAB_WARP_SPECIALIZE", "KERNELLAB_STMATRIX", "KERNELLAB_DOT_POINTER_FORM",
               "KERNELLAB_MMA32_PAD", "KERNELLAB_CHAIN_COPIES", "KERNELLAB_FP8_A_REGS", "KERNELLAB_PERSISTENT",
               "KERNELLAB_ATTN_OVERLAP", "KERNELLAB_REGISTER_DOT_OPERAND", "KERNELLAB_ATTN_PINGPONG",
               "KERNELLAB_REDUCE_TREE", "KERNELLAB_CONVERSION_PITCH", "KERNELLAB_SPLIT_K_REDUCE",
               "KERNELLAB_CONVERSION_LDMATRIX", "KERNELLAB_TMA_POINTER_STORE", "KERNELLAB_STORE_RUN",
               "KERNELLAB_DIV_RUNS", "KERNELLAB_COALESCE_TIES", "KERNELLAB_BATCHED_SPLIT",
               "KERNELLAB_DOMINANT_WIDENED", "KERNELLAB_SIBLING_WGMMA", "KERNELLAB_REUSE_CONVERSIONS",
               "KERNELLAB_REDUCE_WARPS", "KERNELLAB_SHAPE_DOMINANT", "KERNELLAB_OFFSET_TILE",
               "KERNELLAB_RESHAPE_AXIS", "KERNELLAB_SMALL_STORE_RUN",
               "KERNELLAB_RELOAD_VEC", "KERNELLAB_MATH_TILE_WGMMA",
               "KERNELLAB_FUSED_SIDE_LOADS", "KERNELLAB_SINK_CONVERSIONS", "KERNELLAB_CARRY_IN_USE_LAYOUT",
               "KERNELLAB_STORE_SECTOR_VECTORS",
               "KERNELLAB_LOADS_PAST_DIVISION", "KERNELLAB_NARROW_CONVERSIONS", "KERNELLAB_L2_EVICT_HINT",
               "KERNELLAB_STORE_RUN_PEERS", "KERNELLAB_CARRY_MMA", "KERNELLAB_PIPELINE_INDEX_LOADS",
               "KERNELLAB_CARRY_AS_MADE", "KERNELLAB_SCAN_LEAN",
               "KERNELLAB_LONG_REMAT", "KERNELLAB_FEW_MASKS", "KERNELLAB_VECTOR_DOMINANT")
_KNOBS = frozenset(CODEGEN_ENV)

# NOW[0]: the current fingerprint while os.environ is watched (None before the first compile, and while it cannot
# be watched: the fast path then remembers nothing)
NOW: list = [None]
_INTERNED: dict = {}
_ON_CHANGE: list = []


def on_change(callback):
    """Run `callback(old, new)` whenever the fingerprint changes (a decorator; None: not watched)."""
    _ON_CHANGE.append(callback)
    return callback


def _set(fp):
    old = NOW[0]
    if fp is not old:
        NOW[0] = fp
        for callback in _ON_CHANGE:
            callback(old, fp)


def read(env=None) -> tuple:
    """The values of CODEGEN_ENV in `env` (os.environ), "" for an unset one, interned."""
    env = os.environ if env is None else env
    fp = tuple(env.get(k, "") for k in CODEGEN_ENV)
    return _INTERNED.setdefault(fp, fp)


class _Watched(os._Environ):
    """os.environ's class while watched: os._Environ, plus NOW kept current when one of CODEGEN_ENV changes."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key in _KNOBS:
            _set(read(self))

    def __delitem__(self, key):
        try:
            super().__delitem__(key)
        finally:
            if key in _KNOBS:
                _set(read(self))


def current() -> tuple:
    """The fingerprint now (the slow path's; it also watches os.environ from the first call on)."""
    env = os.environ
    if env.__class__ is not _Watched:
        if env.__class__ is not os._Environ:  # another mapping (or someone else's subclass): read it each time
            _set(None)
            return read(env)
        env.__class__ = _Watched
        _set(None)  # (a new os.environ: what was remembered under the old one goes)
    if NOW[0] is None:
        _set(read(env))
    return NOW[0]
