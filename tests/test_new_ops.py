"""tl.flip / interleave / squeeze / unsqueeze / swizzle2d / reduce_or / sort / topk / bitonic_merge / gather /
histogram, in the shapes, dtypes and dims Triton 3.6's own tests use (test_standard.py, test_core.py) plus edge
values, against independent torch / NumPy references.

Every case is a `Case`: a kernel, its launch constants and a builder of (CPU) arguments; the same case runs
three ways:
  - on the CPU interpreter (always),
  - compiled for sm_90a through the whole GPU pipeline and ptxas (needs ptxas on PATH, no GPU),
  - compiled and run on a GPU (`gpu` mark; skipped without CUDA).
Outputs start poisoned (NaN / a sentinel) so unwritten elements show; inputs are random, never all zeros.
"""
from __future__ import annotations

import dataclasses
import shutil
from typing import Callable, NamedTuple

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import CompilationError

SENTINEL = -0x5A5A5A5A


def poisoned(shape, dtype):
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    if dtype == torch.uint8:
        return torch.full(shape, 0xA5, dtype=dtype)
    return torch.full(shape, SENTINEL & ((1 << (torch.iinfo(dtype).bits - 1)) - 1), dtype=dtype).neg()


FLOAT_EDGES = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), 65504.0, -65504.0, 1e-7, -3.5]


def rand(gen, shape, dtype, low=None, high=None, edges=True):
    """Random values of `dtype` with edge values (infinities, signed zeros, extremes) sprinkled in."""
    n = int(np.prod(shape))
    if dtype.is_floating_point:
        x = torch.randn(n, generator=gen, dtype=torch.float64) * 100
        if edges:
            e = torch.tensor(FLOAT_EDGES, dtype=torch.float64)
            pos = torch.randperm(n, generator=gen)[:min(n // 4, len(e))]
            x[pos] = e[:len(pos)]
        return x.to(dtype).reshape(shape)
    info = torch.iinfo(dtype)
    lo = info.min if low is None else low
    hi = info.max if high is None else high
    x = torch.randint(lo, hi, (n,), generator=gen, dtype=torch.int64)
    if edges and low is None and n >= 4:
        x[:2] = torch.tensor([info.min, info.max])
        x = x[torch.randperm(n, generator=gen)]
    return x.to(dtype).reshape(shape)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal as bit patterns (NaNs, signed zeros and all)."""
    if a.dtype.is_floating_point:
        it = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.shape == b.shape and bool((a.contiguous().view(it) == b.contiguous().view(it)).all())
    return a.shape == b.shape and bool((a == b).all())


class Case(NamedTuple):
    kernel: object
    make_args: Callable  # gen -> list of kernel arguments (CPU tensors and scalars)
    check: Callable  # (inputs as built, outputs after the run) -> None; asserts
    consts: dict
    grid: tuple = (1,)


def run_case(case: Case, device: str, seed=0):
    gen = torch.Generator().manual_seed(seed)
    args = case.make_args(gen)
    pristine = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    dev = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
    case.kernel[case.grid](*dev, **case.consts)
    case.check(pristine, [a.cpu() if isinstance(a, torch.Tensor) else a for a in dev])


def compile_case(case: Case):
    """Through the GPU passes, LLVM, and ptxas for sm_90a (no GPU needed)."""
    from kernellab.compiler.backend import compile_to_cubin
    from kernellab.compiler.codegen.target import Target
    from kernellab.compiler.gpu.options import GpuOptions
    from kernellab.compiler.parser import parse_module

    args = case.make_args(torch.Generator().manual_seed(0))
    ck = case.kernel.warmup(*args, grid=case.grid, **case.consts)
    trace = dataclasses.replace(ck.trace, passes=list(ck.trace.passes))  # the cached kernel's own trace stays tile-only
    out = compile_to_cubin(parse_module(ck.asm["tile"]), trace,
                           GpuOptions(num_warps=case.consts.get("num_warps", 4)), Target(90))
    assert out["cubin"][:4] == b"\x7fELF" and ".entry" in out["ptx"]
    return out


DT = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
      "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}

# ============================================================================================ kernels


@kl.jit
def flip3d_kernel(X, Z, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, dim: tl.constexpr, METHOD: tl.constexpr):
    offs = (tl.arange(0, M)[:, None, None] * (N * K) + tl.arange(0, N)[None, :, None] * K
            + tl.arange(0, K)[None, None, :])
    x = tl.load(X + offs)
    if METHOD:
        x = x.flip(dim)
    else:
        x = tl.flip(x, dim)
    tl.store(Z + offs, x)


@kl.jit
def flip_pairs_kernel(out_ptr, x_ptr, N: tl.constexpr):
    """Triton's test_flip_inf: flip the pairs of a reshaped row (an inf must survive the xor swap)."""
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid * N + tl.arange(0, N))
    shape: tl.constexpr = (N // 2, 2)
    y = tl.flip(x.reshape(shape), dim=1).reshape(x.shape)
    tl.store(out_ptr + pid * N + tl.arange(0, N), y)


@kl.jit
def sort_kernel(X, Z, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, OP: tl.constexpr, DESC: tl.constexpr,
                DIM: tl.constexpr):
    """OP 0: sort, 1: topk (K), 2: bitonic_merge; DIM 1 (the last) or 0 (moved last and back)."""
    x = tl.load(X + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    if OP == 0:
        z = tl.sort(x, dim=DIM, descending=DESC)
        tl.store(Z + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], z)
    elif OP == 1:
        z = tl.topk(x, K, dim=DIM)
        if DIM == 1:
            tl.store(Z + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :], z)
        else:
            tl.store(Z + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :], z)
    else:
        z = tl.bitonic_merge(x, DIM, DESC)
        tl.store(Z + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], z)


@kl.jit
def interleave_kernel(A, B, Z, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    z = tl.interleave(tl.load(A + offs), tl.load(B + offs))
    tl.store(Z + tl.arange(0, M)[:, None] * (2 * N) + tl.arange(0, 2 * N)[None, :], z)


@kl.jit
def interleave_scalars_kernel(X, Y, Z):
    z = tl.interleave(X, Y)
    tl.static_assert(z.shape == [tl.constexpr(2)])
    tl.store(Z + tl.arange(0, 2), z)


@kl.jit
def squeeze_kernel(X, Z, S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, DIM: tl.constexpr,
                   UNSQUEEZE: tl.constexpr):
    x = tl.load(X + tl.arange(0, S0 * S1 * S2))
    if UNSQUEEZE:
        y = tl.unsqueeze(tl.reshape(x, (S0, S1 * S2)), DIM)
        tl.static_assert(len(y.shape) == 3)
    else:
        y = tl.squeeze(tl.reshape(x, (S0, S1, S2)), DIM)
        tl.static_assert(len(y.shape) == 2)
    tl.store(Z + tl.arange(0, S0 * S1 * S2), tl.ravel(y) * 3)


@kl.jit
def swizzle2d_loop_kernel(output, size_i, size_j, size_g):
    """Triton's test_swizzle2d: runtime scalars."""
    for i in tl.range(0, size_i, 1):
        for j in tl.range(0, size_j, 1):
            new_i, new_j = tl.swizzle2d(i, j, size_i, size_j, size_g)
            tl.store(output + new_i * size_j + new_j, i * size_j + j)


@kl.jit
def swizzle2d_tile_kernel(I, J, size_i, size_j, size_g, BI: tl.constexpr, BJ: tl.constexpr):
    """The same on tiles: every (i, j) of a BI x BJ grid at once."""
    i = tl.arange(0, BI)[:, None] + tl.zeros((BI, BJ), tl.int32)
    j = tl.arange(0, BJ)[None, :] + tl.zeros((BI, BJ), tl.int32)
    ni, nj = tl.swizzle2d(i, j, size_i, size_j, size_g)
    offs = tl.arange(0, BI)[:, None] * BJ + tl.arange(0, BJ)[None, :]
    tl.store(I + offs, ni)
    tl.store(J + offs, nj)


@kl.jit
def reduce_or_kernel(X, Z0, Z1, M: tl.constexpr, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(Z0 + tl.arange(0, N)[None, :], tl.reduce_or(x, 0, keep_dims=True))
    tl.store(Z1 + tl.arange(0, M), x.reduce_or(1))


@kl.jit
def gather2d_kernel(S, I, Z, SM: tl.constexpr, SN: tl.constexpr, IM: tl.constexpr, IN: tl.constexpr,
                    AXIS: tl.constexpr):
    src = tl.load(S + tl.arange(0, SM)[:, None] * SN + tl.arange(0, SN)[None, :])
    idx = tl.load(I + tl.arange(0, IM)[:, None] * IN + tl.arange(0, IN)[None, :])
    out = tl.gather(src, idx, AXIS)
    tl.store(Z + tl.arange(0, IM)[:, None] * IN + tl.arange(0, IN)[None, :], out)


@kl.jit
def gather1d_kernel(S, I, Z, SN: tl.constexpr, IN: tl.constexpr):
    src = tl.load(S + tl.arange(0, SN))
    out = src.gather(tl.load(I + tl.arange(0, IN)), 0)
    tl.store(Z + tl.arange(0, IN), out * 1)


@kl.jit
def histogram_kernel(X, Z, n_valid, M: tl.constexpr, N: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.arange(0, M)
    x = tl.load(X + offs)
    if MASKED:
        z = tl.histogram(x, N, mask=offs < n_valid)
    else:
        z = x.histogram(N)
    tl.static_assert(z.dtype == tl.int32)
    biased = z[None, :] + tl.full([M, N], 1, dtype=tl.int32)  # the result broadcasts like any tensor
    tl.store(Z + tl.arange(0, N), tl.max(biased, 0) - 1)


# ============================================================================================ cases


def flip_case(M, N, K, dtype, dim, method=False, num_warps=8):
    dt = DT[dtype]

    def make(gen):
        x = rand(gen, (M, N, K), dt)
        if dt.is_floating_point and x.numel() > 2:  # NaN payloads must survive bit-exactly
            bits = x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).reshape(-1)
            bits[1] = {2: 0x7E01, 4: 0x7FC0_1234, 8: 0x7FF8_0000_0000_1234}[x.element_size()] if dtype != "bfloat16" \
                else 0x7FC1
        return [x, poisoned((M, N, K), dt)]

    def check(inp, out):
        assert same(out[1], torch.flip(inp[0], (dim,)))

    return Case(flip3d_kernel, make, check, dict(M=M, N=N, K=K, dim=dim, METHOD=method, num_warps=num_warps))


def flip_pairs_case():
    def make(gen):
        x = torch.arange(0, 32, dtype=torch.float32).reshape(2, 16)
        x[:, -1] = float("inf")
        return [poisoned((2, 16), torch.float32), x]

    def check(inp, out):
        assert same(out[0], inp[1].reshape(2, 8, 2).flip(-1).reshape(2, 16))

    return Case(flip_pairs_kernel, make, check, dict(N=16), grid=(2,))


def _sort_ref(x, op, k, desc, dim):
    if op == 0:
        return torch.sort(x.to(torch.float64) if x.dtype.is_floating_point else x, dim=dim, descending=desc)[0]
    if op == 1:
        return torch.topk(x.to(torch.float64) if x.dtype.is_floating_point else x, k, dim=dim).values
    return torch.sort(x.to(torch.float64) if x.dtype.is_floating_point else x, dim=dim, descending=desc)[0]


def sort_case(M, N, dtype, op=0, k=None, desc=False, dim=1, num_warps=8):
    dt = DT[dtype]
    out_shape = (M, N) if op != 1 else ((M, k) if dim == 1 else (k, N))

    def make(gen):
        x = rand(gen, (M, N), dt)
        if x.numel() >= 8:
            x.view(-1)[3] = x.view(-1)[5]  # duplicates
        if op == 2:  # bitonic rows (along dim): rising then falling
            s = torch.sort(x, dim=dim)[0]
            h = x.shape[dim] // 2
            lo, hi = s.narrow(dim, 0, h), s.narrow(dim, h, x.shape[dim] - h).flip(dim)
            x = torch.cat([lo, hi], dim=dim).contiguous()
        return [x, poisoned(out_shape, dt)]

    def check(inp, out):
        ref = _sort_ref(inp[0], op, k, desc, dim)
        assert bool((out[1].to(ref.dtype) == ref).all()), (out[1], ref)

    return Case(sort_kernel, make, check, dict(M=M, N=N, K=k or 1, OP=op, DESC=desc, DIM=dim, num_warps=num_warps))


def interleave_case(M, N, dtype):
    dt = DT[dtype]

    def make(gen):
        return [rand(gen, (M, N), dt), rand(gen, (M, N), dt), poisoned((M, 2 * N), dt)]

    def check(inp, out):
        assert same(out[2], torch.stack([inp[0], inp[1]], dim=-1).reshape(M, 2 * N))

    return Case(interleave_kernel, make, check, dict(M=M, N=N))


def interleave_scalars_case():
    def make(gen):
        return [10, 20, poisoned((2,), torch.float32)]

    def check(inp, out):
        assert out[2].tolist() == [10.0, 20.0]

    return Case(interleave_scalars_kernel, make, check, {})


def squeeze_case(shape, dim, unsqueeze):
    n = int(np.prod(shape))

    def make(gen):
        return [rand(gen, (n,), torch.int32, -1000, 1000), poisoned((n,), torch.int32)]

    def check(inp, out):
        assert same(out[1], inp[0] * 3)

    return Case(squeeze_kernel, make, check, dict(S0=shape[0], S1=shape[1], S2=shape[2], DIM=dim, UNSQUEEZE=unsqueeze))


def swizzle_ref(i, j, size_i, size_j, size_g):
    """Row-major (i, j) -> column-major inside groups of size_g rows (plain Python)."""
    group = (i * size_j + j) // (size_g * size_j)
    first = group * size_g
    rows = min(size_i - first, size_g)
    within = (i * size_j + j) % (size_g * size_j)
    return first + within % rows, within // rows


def swizzle_loop_case(size_i, size_j, size_g):
    def make(gen):
        return [poisoned((size_i, size_j), torch.float32), size_i, size_j, size_g]

    def check(inp, out):
        ref = torch.empty(size_i, size_j)
        for i in range(size_i):
            for j in range(size_j):
                ni, nj = swizzle_ref(i, j, size_i, size_j, size_g)
                ref[ni, nj] = i * size_j + j
        assert same(out[0], ref)
        if (size_i, size_j, size_g) == (5, 7, 3):  # Triton's expected matrix
            assert out[0][3].tolist() == [21, 23, 25, 27, 29, 31, 33]

    return Case(swizzle2d_loop_kernel, make, check, {})


def swizzle_tile_case(size_i, size_j, size_g):
    BI, BJ = 8, 16

    def make(gen):
        return [poisoned((BI, BJ), torch.int32), poisoned((BI, BJ), torch.int32), size_i, size_j, size_g]

    def check(inp, out):
        for i in range(BI):
            for j in range(BJ):
                if i < size_i and j < size_j:
                    assert (out[0][i, j].item(), out[1][i, j].item()) == swizzle_ref(i, j, size_i, size_j, size_g)

    return Case(swizzle2d_tile_kernel, make, check, dict(BI=BI, BJ=BJ))


def reduce_or_case(M, N, dtype):
    dt = DT[dtype]

    def make(gen):
        x = rand(gen, (M, N), dt)
        x = x & rand(gen, (M, N), dt)  # sparser bits, so the or is not all ones
        return [x, poisoned((N,), dt), poisoned((M,), dt)]

    def check(inp, out):
        x = inp[0].numpy()
        assert (out[1].numpy() == np.bitwise_or.reduce(x, axis=0)).all()
        assert (out[2].numpy() == np.bitwise_or.reduce(x, axis=1)).all()

    return Case(reduce_or_kernel, make, check, dict(M=M, N=N))


def gather_case(src_shape, idx_shape, axis, dtype="float32", idx_dtype="int64", wrap=False):
    dt, it = DT[dtype], DT[idx_dtype]
    n = src_shape[axis]

    def make(gen):
        src = rand(gen, src_shape, dt)
        if wrap:  # out-of-range indices wrap modulo the axis size (our definition; Triton's is undefined)
            idx = rand(gen, idx_shape, it, -3 * n if it.is_signed else 0, min(3 * n, torch.iinfo(it).max))
        else:
            idx = rand(gen, idx_shape, it, 0, n)
        return [src, idx, poisoned(idx_shape, dt)]

    def check(inp, out):
        src, idx = inp[0], inp[1].to(torch.int64) % n
        assert same(out[2], torch.gather(src, axis, idx))

    if len(src_shape) == 1:
        return Case(gather1d_kernel, make, check, dict(SN=src_shape[0], IN=idx_shape[0]))
    return Case(gather2d_kernel, make, check, dict(SM=src_shape[0], SN=src_shape[1], IM=idx_shape[0],
                                                   IN=idx_shape[1], AXIS=axis))


def histogram_case(M, N, dtype="int32", masked=False, outside=False, num_warps=4):
    dt = DT[dtype]

    def make(gen):
        if outside:  # negative and too-large values are not counted
            lo = -N if torch.iinfo(dt).min < 0 else 0
            x = rand(gen, (M,), dt, lo, min(2 * N, torch.iinfo(dt).max))
        else:
            x = rand(gen, (M,), dt, 0, N)
        return [x, poisoned((N,), torch.int32), M // 2 + 1 if masked else M]

    def check(inp, out):
        x = inp[0].to(torch.int64)[:inp[2]]
        x = x[(x >= 0) & (x < N)]
        ref = torch.bincount(x, minlength=N).to(torch.int32)
        assert same(out[1], ref), (out[1], ref)

    return Case(histogram_kernel, make, check, dict(M=M, N=N, MASKED=masked, num_warps=num_warps))


# Triton's parameters (test_standard.py / test_core.py), then ours.
FLIP = [(f"flip-{M}x{N}x{K}-{d}-dim{dim}", flip_case(M, N, K, d, dim))
        for M, N, K in [(1, 16, 64), (8, 2, 256), (32, 1, 2), (128, 8, 1)]
        for d in ["int32", "float16", "float32", "bfloat16"] for dim in [0, 1, 2, -2]]
FLIP += [(f"flip-more-{d}", flip_case(4, 8, 16, d, 2, method=True, num_warps=4))
         for d in ["int8", "uint8", "int64", "float64"]]
FLIP += [("flip-pairs-inf", flip_pairs_case())]

SORT = []
for M, N in [(1, 1), (1, 512), (8, 64), (256, 16), (512, 8)]:
    for k in [None, 8]:
        for desc in [False, True]:
            for d in ["int32", "float16", "float32", "bfloat16"]:
                if k is None or M * N < k:
                    SORT.append((f"sort-{M}x{N}-desc{int(desc)}-{d}", sort_case(M, N, d, 0, None, desc)))
                elif not desc:  # topk is always descending: one case per k
                    SORT.append((f"topk-{M}x{N}-k{k}-{d}", sort_case(M, N, d, 1, k)))
SORT += [("sort-dim0-int8", sort_case(16, 4, "int8", 0, None, True, dim=0, num_warps=4)),
         ("sort-uint8", sort_case(4, 32, "uint8", 0, None, False, num_warps=4)),
         ("sort-int64", sort_case(4, 32, "int64", 0, None, True, num_warps=4)),
         ("topk-dim0-float32", sort_case(16, 8, "float32", 1, 4, dim=0, num_warps=4)),
         ("topk-k-eq-n", sort_case(4, 16, "float32", 1, 16, num_warps=4)),
         ("topk-k1-int16", sort_case(4, 16, "int16", 1, 1, num_warps=4))]
SORT += [(f"bitonic-merge-{M}x{N}-desc{int(desc)}-{d}", sort_case(M, N, d, 2, None, desc, num_warps=4))
         for M, N in [(4, 32), (2, 2)] for desc in (False, True) for d in ("float32", "int32")]
SORT += [("bitonic-merge-dim0", sort_case(16, 4, "float16", 2, None, True, dim=0, num_warps=4))]

SHAPES = [(f"interleave-{M}x{N}-{d}", interleave_case(M, N, d)) for M, N in [(1, 128), (4, 16)]
          for d in ["int32", "float16", "int8"]]
SHAPES += [("interleave-scalars", interleave_scalars_case())]
SHAPES += [(f"squeeze-{s}-{dim}", squeeze_case(s, dim, False)) for s, dim in [((1, 2, 4), 0), ((2, 1, 4), 1),
                                                                             ((2, 4, 1), 2), ((2, 4, 1), -1)]]
SHAPES += [(f"unsqueeze-{dim}", squeeze_case((2, 1, 4), dim, True)) for dim in [0, 1, 2, -1]]
SHAPES += [("swizzle2d-loop-5x7x3", swizzle_loop_case(5, 7, 3)), ("swizzle2d-loop-4x4x2", swizzle_loop_case(4, 4, 2)),
           ("swizzle2d-tile-8x16x3", swizzle_tile_case(8, 16, 3)), ("swizzle2d-tile-7x9x4", swizzle_tile_case(7, 9, 4))]
SHAPES += [(f"reduce-or-{M}x{N}-{d}", reduce_or_case(M, N, d)) for M, N, d in [(8, 16, "int32"), (4, 64, "int8"),
                                                                               (32, 4, "uint8"), (2, 8, "int64")]]

GATHER = [(f"gather-{s}-{i}-ax{a}", gather_case(s, i, a)) for s, i, a in [([32], [64], 0), ([4, 4], [8, 4], 0),
                                                                          ([128, 64], [256, 64], 0),
                                                                          ([128, 64], [128, 128], 1)]]
GATHER += [("gather-f16-i32", gather_case([16, 32], [16, 8], 1, "float16", "int32")),
           ("gather-bf16-u8", gather_case([8, 16], [4, 16], 0, "bfloat16", "uint8")),
           ("gather-i8-i16", gather_case([64], [32], 0, "int8", "int16")),
           ("gather-f64-wrap", gather_case([8, 16], [8, 32], 1, "float64", "int32", wrap=True)),
           ("gather-i64-wrap-i8", gather_case([16, 4], [8, 4], 0, "int64", "int8", wrap=True))]
GATHER += [(f"histogram-{M}-{N}-mask{int(m)}", histogram_case(M, N, masked=m))
           for M, N in [(2048, 2), (1024, 8), (1024, 128), (256, 512), (32, 512), (8, 512), (8, 2)] for m in (False, True)]
GATHER += [("histogram-1", histogram_case(1, 1)),
           ("histogram-outside-int8", histogram_case(256, 64, "int8", outside=True)),
           ("histogram-outside-uint8", histogram_case(128, 512, "uint8", outside=True, masked=True)),
           ("histogram-outside-int64", histogram_case(512, 32, "int64", outside=True, num_warps=8)),
           ("histogram-outside-int16", histogram_case(64, 16, "int16", outside=True, masked=True))]

ALL = FLIP + SORT + SHAPES + GATHER
IDS = [name for name, _ in ALL]


# ============================================================================================ tests


@pytest.mark.parametrize("case", [c for _, c in ALL], ids=IDS)
def test_interpreter(case):
    run_case(case, "cpu")


# A representative set for ptxas (compiling every case would take minutes on a CPU).
COMPILED = ["flip-8x2x256-float32-dim1", "flip-1x16x64-bfloat16-dim2", "flip-more-int8", "flip-pairs-inf",
            "sort-8x64-desc0-float32", "sort-256x16-desc1-bfloat16", "topk-1x512-k8-float16", "topk-dim0-float32",
            "sort-dim0-int8", "sort-int64", "bitonic-merge-4x32-desc1-int32", "interleave-4x16-float16",
            "interleave-scalars", "squeeze-(2, 1, 4)-1", "unsqueeze-1", "swizzle2d-loop-5x7x3",
            "swizzle2d-tile-8x16x3", "reduce-or-8x16-int32", "reduce-or-4x64-int8", "gather-[32]-[64]-ax0",
            "gather-[128, 64]-[128, 128]-ax1", "gather-[128, 64]-[256, 64]-ax0", "gather-bf16-u8", "gather-f64-wrap",
            "histogram-1024-128-mask1", "histogram-8-512-mask0", "histogram-1", "histogram-outside-uint8",
            "histogram-outside-int64"]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("name", COMPILED)
def test_compiles_for_sm90(name):
    compile_case(dict(ALL)[name])


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_shared_memory_plan():
    """gather stages its source tile (and reads it in the index's layout, with no conversion of the index);
    histogram keeps one i32 counter per bin; both use shared-memory instructions, histogram atomics."""
    out = compile_case(dict(ALL)["gather-[128, 64]-[128, 128]-ax1"])
    plan = [b for b in out["shared_plan"] if b["op"] == "tt.gather"]
    assert len(plan) == 1 and plan[0]["size"] == 128 * 64 * 4
    assert "ld.shared" in out["ptx"] and "st.shared" in out["ptx"]
    out = compile_case(dict(ALL)["histogram-1024-128-mask1"])
    plan = [b for b in out["shared_plan"] if b["op"] == "tt.histogram"]
    assert len(plan) == 1 and plan[0]["size"] == 128 * 4
    assert "atom.shared.add.u32" in out["ptx"] or "red.shared.add.u32" in out["ptx"]


@pytest.mark.parametrize("name", ["sort-8x64-desc1-float16", "topk-1x512-k8-float32", "flip-8x2x256-bfloat16-dim2",
                                  "gather-bf16-u8", "histogram-outside-int16", "bitonic-merge-4x32-desc0-int32",
                                  "swizzle2d-tile-7x9x4", "interleave-4x16-int8"])
def test_each_pass_preserves_results(name, monkeypatch):
    """The interpreter runs the IR after the frontend and after every tile-level pass: all agree with the
    reference (so no pass changes what the new ops compute)."""
    from kernellab.compiler.parser import parse_module
    from kernellab.runtime.interpreter import Interpreter
    from kernellab.runtime.jit import CompiledKernel

    case = dict(ALL)[name]
    stages = []

    def run_every_stage(self, grid, args):
        for rec in self.trace.passes:
            cloned = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            Interpreter(parse_module(rec.ir), self.name, self.source_lines, arg_names=self.arg_names).run(grid, cloned)
            stages.append(rec.name)
            case.check([a.clone() if isinstance(a, torch.Tensor) else a for a in args], cloned)

    monkeypatch.setattr(CompiledKernel, "run", run_every_stage)
    run_case(case._replace(check=lambda inp, out: None), "cpu")
    assert len(stages) >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", [c for _, c in ALL], ids=IDS)
def test_gpu(case):
    run_case(case, "cuda")


# ============================================================================================ errors


@kl.jit
def bad_kernel(X, WHAT: tl.constexpr):
    x = tl.load(X + tl.arange(0, 8))
    if WHAT == 0:
        tl.store(X + tl.arange(0, 8), tl.gather(x, x, 0))
    elif WHAT == 1:
        tl.store(X + tl.arange(0, 4), tl.histogram(x.to(tl.int32), 3))
    elif WHAT == 2:
        tl.store(X + tl.arange(0, 8), tl.squeeze(x, 0))
    elif WHAT == 3:
        tl.store(X + tl.arange(0, 8), tl.topk(x, 16))
    else:
        tl.store(X + tl.arange(0, 8), tl.reduce_or(x, 0))


@pytest.mark.parametrize("what,message", [(0, "index must be an integer"), (1, "power of 2"),
                                          (2, "not 1"), (3, "no larger than"), (4, "needs integers")])
def test_errors_name_the_problem(what, message):
    with pytest.raises(CompilationError, match=message):
        bad_kernel.warmup(torch.zeros(8), WHAT=what, grid=(1,))


# --------------------------------------------------------------------------- Triton's loop hints


@kl.jit
def _hinted_loops(x_ptr, out_ptr, n, N: tl.constexpr):
    """A while loop under `tl.condition` and a `tl.range` with `disable_licm`: the hints leave results alone."""
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    acc = tl.zeros((N,), tl.float32)
    i = 0
    while tl.condition(i < n, disable_licm=True):
        acc += x * i
        i += 1
    for j in tl.range(0, n, 2, disable_licm=True, flatten=True):
        acc -= x / (j + 1)
    tl.store(out_ptr + o, acc)


def _hinted_reference(x, n):
    x = x.double().numpy()
    return x * sum(range(n)) - sum(x / (j + 1) for j in range(0, n, 2))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_condition_and_disable_licm_hints(n, device="cpu"):
    x = (torch.randn(64, generator=torch.Generator().manual_seed(n)) + 0.1).to(device)
    out = torch.full((64,), float("nan"), device=device)
    _hinted_loops[(1,)](x, out, n, N=64)
    np.testing.assert_allclose(out.cpu().double().numpy(), _hinted_reference(x.cpu(), n), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 7])
def test_gpu_condition_and_disable_licm_hints(n):
    test_condition_and_disable_licm_hints(n, device="cuda")
