"""Tiles over the per-thread register budget (issue 14/13): Liger's multi-token-attention masks launch a 1024x1024
tile on 4 warps (8192 elements a thread), which Triton compiles for minutes with heavy spills. The GPU pass
strip_mine_tiles computes such a tile, when every op on it works element by element, in chunks of rows; a tile
it cannot split (a reduction) is still refused by the budget check, with the reason. ptxas tests build for
sm_90a on the CPU; the results are checked on the interpreter and (`gpu`) on the device, outputs poisoned."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

ROOT = Path(__file__).resolve().parents[1]
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
needs_liger = pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                                 reason="liger_kernel is not installed")
gpu = pytest.mark.gpu

# compat.install() must come before liger imports triton: one child process per check.
_CHILD = r"""
import json, sys, time
import torch
import kernellab.compat
kernellab.compat.install()
import triton
import liger_kernel.ops.multi_token_attention as m
from liger_kernel.ops.utils import calculate_settings

what = sys.argv[1]
if what == "build":
    x = torch.empty(2, 1024, 1024)
    out = {}
    for name, k, kw in [("fwd", m._mask_fwd_kernel, {"mask_val": -1e9}), ("bwd", m._mask_bwd_kernel, {})]:
        ck = k.warmup(x, x, 1024 * 1024, 1024, 1, 1024, BLOCK=1024, num_warps=4, grid=(1,), **kw)
        ck = getattr(ck, "_kl", ck)
        t0 = time.perf_counter()
        ck.build_gpu()
        stats = [p.stats for p in ck.trace.passes if p.name == "strip_mine_tiles"][0]
        out[name] = {"seconds": time.perf_counter() - t0, "regs": ck.n_regs, "spills": ck.n_spills, "stats": stats}
else:
    dev, L = what, int(sys.argv[2])
    torch.manual_seed(0)
    N = 3
    BLOCK, num_warps = calculate_settings(L)
    grid = (triton.cdiv(L, BLOCK), triton.cdiv(L, BLOCK), N)
    s = torch.randn(N, L, L, device=dev)
    future = torch.arange(L, device=dev)[None, :] > torch.arange(L, device=dev)[:, None]
    out = {"BLOCK": BLOCK, "num_warps": num_warps}
    for name, mask_val in [("fwd_inf", -1e9), ("fwd_zero", 0.0)]:
        o = torch.full_like(s, float("nan"))
        m._mask_fwd_kernel[grid](s, o, s.stride(0), s.stride(1), s.stride(2), L, mask_val=mask_val, BLOCK=BLOCK,
                                 num_warps=num_warps)
        out[name] = bool(torch.equal(o, torch.where(future, torch.full_like(s, mask_val), s)))
    o = torch.full_like(s, float("nan"))
    m._mask_bwd_kernel[grid](s, o, s.stride(0), s.stride(1), s.stride(2), L, BLOCK=BLOCK, num_warps=num_warps)
    out["bwd"] = bool(torch.equal(o, torch.where(future, torch.zeros_like(s), s)))
print("@@strip " + json.dumps(out))
"""


def _child(*args, cache_dir=None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if cache_dir is not None:  # a fresh disk cache: the build is timed, not read back
        env["KERNELLAB_CACHE_DIR"] = str(cache_dir)
    p = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, env=env,
                       cwd=str(ROOT), timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@strip ")]
    assert lines, p.stderr[-3000:]
    return json.loads(lines[0].split(" ", 1)[1])


@needs_ptxas
@needs_liger
def test_liger_mask_kernels_build_in_seconds_without_spills(tmp_path):
    """BLOCK=1024, 4 warps: loops of 512 chunks of 2 rows (16 elements a thread); Triton spills for minutes."""
    r = _child("build", cache_dir=tmp_path)
    for name in ("fwd", "bwd"):
        b = r[name]
        assert b["spills"] == 0 and b["regs"] <= 64 and b["seconds"] < 30, (name, b)
        assert b["stats"]["rows_per_chunk"] == 2 and b["stats"]["chunks"] == 512, (name, b)


@needs_liger
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("L", [1000, 1024])
def test_liger_mask_kernels_match_torch(device, L):
    """The causal masks (inf and zero forward, backward) bit for bit, every element written; L=1000 masks the
    last 24 rows and columns of the 1024 tile."""
    r = _child(device, str(L))
    assert (r["BLOCK"], r["num_warps"]) == (1024, 4)
    assert r["fwd_inf"] and r["fwd_zero"] and r["bwd"], r


@kl.jit
def twice(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(o_ptr + offs, x * 2 + 1, mask=offs < n)


@kl.jit
def total(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + offs, x * 2)
    tl.store(o_ptr, tl.sum(x, axis=0))


def test_a_reduction_over_an_oversized_tile_is_still_refused_with_the_reason():
    x = torch.zeros(2**20)
    ck = total.warmup(x, x, BLOCK=2**20, grid=(1,))
    with pytest.raises(kl.CompilationError) as ei:
        ck.build_gpu()
    reason = ei.value.reason
    assert ei.value.kernel == "total" and "budget" in reason and "tt.reduce" in reason, reason
    assert "smaller BLOCK" in reason and "tl.sum" in (ei.value.source_line or str(ei.value))


@needs_ptxas
def test_a_1d_tile_of_a_million_elements_builds_vectorized():
    x = torch.zeros(2**20)
    ck = twice.warmup(x, x, 2**20, BLOCK=2**20, grid=(1,))
    t0 = time.perf_counter()
    ck.build_gpu()
    assert time.perf_counter() - t0 < 30 and ck.n_spills == 0 and ck.n_regs <= 64
    assert "ld.global.v4" in ck.asm["ptx"] and "st.global.v4" in ck.asm["ptx"]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_a_1d_tile_of_a_million_elements_matches_torch(device):
    n = 2**20 + 2**19 - 3  # the second program's tile is partly masked
    x = torch.randn(n, device=device)
    o = torch.full_like(x, float("nan"))
    twice[(2,)](x, o, n, BLOCK=2**20)
    assert torch.equal(o, x * 2 + 1)
