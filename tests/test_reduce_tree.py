"""A thread's registers combined pairwise in a reduction (codegen/lower_reduce.py, KERNELLAB_REDUCE_TREE=1, default
off; issue 15: attention's row max, the softmax's critical path under the other warpgroup's matrix products).

Only combines whose result does not depend on the order (float max/min, NaN-ignoring or NaN-propagating, integer
max/min, add, mul, and, or, xor) are reordered, so the result is the same bit for bit. Without a GPU: the sm_90 PTX of
a row reduction over 64 values a thread holds has a `max.f32` chain log2 deep instead of 63; a float sum keeps its
chain (its rounding depends on the order). On the GPU (`-m gpu`): rows with NaN, +-0, +-inf and random values, knob on
against the interpreter and torch, and against the knob off (equal values, integers bit for bit)."""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

from .test_gpu_features import _load2, _store1, agree, gpu, ints, poison, run_both, wrap_tensor

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


@kl.jit
def row_reductions(X, I, MX, MN, MXN, MNN, FS, IS, IX, IMX, IMN, M: tl.constexpr, N: tl.constexpr):
    x = _load2(X, M, N)
    i = _load2(I, M, N)
    _store1(MX, tl.max(x, 1))
    _store1(MN, tl.min(x, 1))
    _store1(MXN, tl.reduce(x, 1, _max_nan))
    _store1(MNN, tl.reduce(x, 1, _min_nan))
    _store1(FS, tl.sum(x, 1))
    _store1(IS, tl.sum(i, 1))
    _store1(IX, tl.xor_sum(i, 1))
    _store1(IMX, tl.max(i, 1))
    _store1(IMN, tl.min(i, 1))


@kl.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@kl.jit
def _min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


def _args(M, N):
    def make(gen):
        x = torch.randn((M, N), generator=gen, dtype=torch.float32) * 100
        special = torch.tensor([float("nan"), 0.0, -0.0, float("inf"), -float("inf")])
        pick = torch.randint(0, 6 * N, (M, N), generator=gen)
        x = torch.where(pick < 5, special[pick.clamp(max=4)], x)
        x[0] = -0.0  # a row of negative zeros; +-0 ties; all NaN; all -inf (as many as there are rows)
        x[1, ::2] = 0.0
        x[1, 1::2] = -0.0
        if M > 2:
            x[2] = float("nan")
        if M > 3:
            x[3] = -float("inf")
        i = ints(gen, (M, N), torch.int32)
        return [x, i] + [poison(M, torch.float32) for _ in range(5)] + [poison(M, torch.int32) for _ in range(4)]
    return make


def _build(monkeypatch, tmp_path, on: bool, M=8, N=512, warps=4):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELLAB_REDUCE_TREE", "1" if on else "0")
    row_reductions.device_caches.clear()
    try:
        args = _args(M, N)(torch.Generator().manual_seed(0))
        ck = row_reductions.warmup(*args, M=M, N=N, num_warps=warps, grid=(1,))
        ck = getattr(ck, "_kl", ck)
        ck.build_gpu(Target(90))
    finally:
        row_reductions.device_caches.clear()
    return ck


def chain_depth(ptx: str, op: str) -> int:
    """The longest chain of dependent `op` instructions (e.g. `max.f32`, `add.f32`) in the PTX."""
    depth, best = {}, 0
    pat = re.compile(rf"\b{re.escape(op)}\s+(%\w+), (%\w+), (%\w+);")
    for ln in ptx.splitlines():
        m = pat.search(ln)
        if m:
            d = 1 + max(depth.get(m.group(2), 0), depth.get(m.group(3), 0))
            depth[m.group(1)] = d
            best = max(best, d)
    return best


@needs_ptxas
def test_ptx_depth(monkeypatch, tmp_path):
    """8 rows x 512 over 4 warps: a thread holds 64 values of a row (or more) in registers: the max chain is about
    log2 of that with the knob, a float sum's chain stays as long."""
    off = _build(monkeypatch, tmp_path, False)
    on = _build(monkeypatch, tmp_path, True)
    for ck in (off, on):
        assert ck.n_spills == 0
    d_off, d_on = chain_depth(off.asm["ptx"], "max.f32"), chain_depth(on.asm["ptx"], "max.f32")
    assert d_off >= 15 and d_on <= 10, (d_off, d_on)
    assert chain_depth(on.asm["ptx"], "add.f32") == chain_depth(off.asm["ptx"], "add.f32")
    assert chain_depth(on.asm["ptx"], "min.NaN.f32") <= 10 < chain_depth(off.asm["ptx"], "min.NaN.f32")


def test_knob_in_the_cache_key():
    from kernellab.runtime.jit import CODEGEN_ENV

    assert "KERNELLAB_REDUCE_TREE" in CODEGEN_ENV and "KERNELLAB_ATTN_PINGPONG" in CODEGEN_ENV


@gpu
@pytest.mark.parametrize("M, N, warps", [(8, 512, 4), (4, 256, 8), (16, 64, 4), (2, 1024, 1)])
def test_gpu_tree_equals_chain(M, N, warps, monkeypatch):
    """Knob off and on: the GPU's results against the interpreter and torch; on against off."""
    got = {}
    for on in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_REDUCE_TREE", on)
        row_reductions.device_caches.clear()
        both = run_both(row_reductions, (1,), _args(M, N), tuple(range(2, 11)), M=M, N=N, num_warps=warps)
        row_reductions.device_caches.clear()
        for k, (g, c) in enumerate(zip(both.gpu, both.cpu)):
            if k == 4:  # the float sum: the interpreter's order is not the GPU's
                agree(g, c, 1e-4, what=f"output {k}")
            else:
                _same(g, c, f"GPU vs interpreter, output {k}")
        x, i = both.args[0], both.args[1]
        torch.testing.assert_close(both.gpu[0], torch.where(torch.isnan(x), -float("inf"), x).amax(1)
                                   .where(~torch.isnan(x).all(1), torch.tensor(float("nan"))), equal_nan=True)
        torch.testing.assert_close(both.gpu[2], x.amax(1), equal_nan=True)
        torch.testing.assert_close(both.gpu[3], x.amin(1), equal_nan=True)
        assert torch.equal(both.gpu[5], wrap_tensor(i.to(torch.int64).sum(1), torch.int32))
        assert torch.equal(both.gpu[7], i.amax(1)) and torch.equal(both.gpu[8], i.amin(1))
        got[on] = both.gpu
    for k, (a, b) in enumerate(zip(got["0"], got["1"])):
        _same(b, a, f"on vs off, output {k}")


def _same(a, b, what):
    """Equal values (NaN matches NaN; the sign of a zero max or min where +0 and -0 tie is left to the hardware's
    instruction: LLVM's maxnum allows either), integers bit for bit."""
    if a.is_floating_point():
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")
    else:
        agree(a, b, what=what)
