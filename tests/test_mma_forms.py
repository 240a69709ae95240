"""`tl.dot` in the tensor-core form Triton picks for each dtype pair, on sm_80 (mma.sync) and sm_90a (wgmma).

- fp16 accumulators (`out_dtype=tl.float16` or an fp16 `acc`): mma.sync ...f16.f16.f16.f16 / wgmma .f16 acc;
- fp32 operands: "tf32" (the default) and "tf32x3" on tf32 tensor cores, "ieee" on CUDA cores;
- int8: s8 x s8 -> s32 with .satfinite;
- fp8 e4m3/e5m2: wgmma .e4m3/.e5m2 (k32) on sm_90a, upcast to fp16 mma.sync on sm_80.

CPU tests compile to PTX and assemble with ptxas (form, no spills); interpreter tests check Triton's
interpreter semantics (fp16 accumulation rounding, tf32x3 accuracy); `gpu` tests compare with torch float64
on random ragged shapes with poisoned outputs, through wgmma and through mma.sync (enable_wgmma=False), with
test_dot's tolerances.
"""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8,
         "float8e4nv": torch.float8_e4m3fn, "float8e5": torch.float8_e5m2}
OUT = {"float16": tl.float16, "float32": tl.float32, "int32": tl.int32}


@kl.jit
def one_dot(X, Y, Z, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr, OUT_T: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(X + rm[:, None] * K + rk[None, :])
    y = tl.load(Y + rk[:, None] * N + rn[None, :])
    tl.store(Z + rm[:, None] * N + rn[None, :], tl.dot(x, y, input_precision=PREC, out_dtype=OUT_T))


@kl.jit
def matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           PREC: tl.constexpr, ACC_T: tl.constexpr):
    """The K loop as users write it, with masks on every edge (ragged M, N, K) and an `acc` of ACC_T."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=ACC_T)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        acc = tl.dot(a, b, acc, input_precision=PREC, out_dtype=ACC_T)
    tl.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _build(ck, arch):
    from kernellab.compiler.codegen.target import Target

    ck.build_gpu(Target(arch))
    return ck.asm["ptx"]


# (in dtype, out dtype, input_precision) -> the PTX Triton's test_dot expects, per architecture
FORMS = [
    ("float16", "float16", "ieee", {80: r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f16\.f16\.f16\.f16",
                                    90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f16\.f16\.f16"}),
    ("float16", "float32", "ieee", {80: r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
                                    90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16"}),
    ("float32", "float32", "tf32", {80: r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32",
                                    90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k8\.f32\.tf32\.tf32"}),
    ("float32", "float32", "tf32x3", {80: r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32",
                                      90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k8\.f32\.tf32\.tf32"}),
    ("int8", "int32", "ieee", {80: r"mma\.sync\.aligned\.m16n8k32\.row\.col\.satfinite\.s32\.s8\.s8\.s32",
                               90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.satfinite\.s32\.s8\.s8"}),
    ("float8e5", "float32", "ieee", {80: r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
                                     90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f32\.e5m2\.e5m2"}),
    ("float8e4nv", "float32", "ieee", {80: r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
                                       90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f32\.e4m3\.e4m3"}),
    ("float8e4nv", "float16", "ieee", {80: r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f16\.f16\.f16\.f16",
                                       90: r"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f16\.e4m3\.e4m3"}),
]


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("in_t, out_t, prec, want", FORMS, ids=lambda v: v if isinstance(v, str) else None)
def test_dot_form_per_dtype_pair(in_t, out_t, prec, want, arch, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x = torch.zeros(64, 64).to(TORCH[in_t])
    z = torch.zeros(64, 64, dtype=torch.int32 if in_t == "int8" else torch.float32)
    ck = one_dot.warmup(x, x, z, M=64, N=64, K=64, PREC=prec, OUT_T=OUT.get(out_t, tl.float32), num_warps=4,
                        grid=(1,))
    ptx = _build(ck, arch)
    assert re.search(want[arch], ptx), sorted(set(re.findall(r"(?:wgmma\.mma_async|mma)\.sync\.aligned\.[\w.]+", ptx)))
    # tf32x3 on mma.sync holds four fp32 operand tiles (both parts of A and B) in registers at once: a few
    # bytes spill at 64x64x64 over 4 warps (wgmma reads them from shared memory and does not)
    assert ck.n_spills == 0 or (prec == "tf32x3" and arch == 80 and ck.n_spills <= 64)


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
def test_ieee_fp32_stays_on_cuda_cores(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    x = torch.zeros(64, 64)
    ck = one_dot.warmup(x, x, x, M=64, N=64, K=64, PREC="ieee", OUT_T=tl.float32, num_warps=4, grid=(1,))
    ptx = _build(ck, arch)
    # (not a bare "mma": the PTX's .file line names this test file)
    assert not re.search(r"\b(?:wgmma|mma)\.", ptx) and "fma.rn.f32" in ptx


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("config", [(128, 128, 64, 4), (128, 128, 64, 8), (128, 256, 64, 8)],
                         ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("in_t, acc_t", [("float16", "float16"), ("float8e4nv", "float32"), ("float8e5", "float32")])
def test_matmul_loop_assembles_without_spills(in_t, acc_t, config, arch, tmp_path, monkeypatch):
    """The fp16-accumulator and fp8 paths in a K loop at the configs people launch: no spills, and wgmma is
    never serialized (C7514). (128x256 over 4 warps holds 256 fp32 accumulators a thread: it spills for any
    compiler, so only the fp16 accumulator is asked to fit it, on sm_90a.)"""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    bm, bn, bk, warps = config
    a = torch.zeros(512, 512).to(TORCH[in_t])
    c = torch.zeros(512, 512, dtype=torch.float16 if acc_t == "float16" else torch.float32)
    ck = matmul.warmup(a, a, c, 512, 512, 512, 512, 1, 512, 1, BM=bm, BN=bn, BK=bk, PREC="ieee", ACC_T=OUT[acc_t],
                       num_warps=warps, num_stages=3, grid=(1,))
    ptx = _build(ck, arch)
    assert ("wgmma.mma_async" in ptx) == (arch == 90)
    # mma.sync over 4 warps with an fp16 accumulator sits at ptxas's 255-register edge on sm_80 (about 250
    # registers): a few bytes may spill there. Over 8 warps, with the exact block size (.reqntid 256) and 32-bit
    # shared addresses, ptxas trades 56 bytes of spills for 80 registers (3 blocks an SM by registers; the 3
    # stages' shared memory allows 1): its own occupancy heuristic, the same under .maxntid
    edge = arch == 80 and in_t == acc_t == "float16" and bn == 128
    assert (ck.n_spills == 0 or (edge and ck.n_spills <= 64)) and "C7514" not in ck.report.get("log", "")


@needs_ptxas
def test_fp16_accumulator_fits_128x256_on_four_warps(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a = torch.zeros(512, 512, dtype=torch.float16)
    ck = matmul.warmup(a, a, a, 512, 512, 512, 512, 1, 512, 1, BM=128, BN=256, BK=64, PREC="ieee",
                       ACC_T=tl.float16, num_warps=4, num_stages=3, grid=(1,))
    ptx = _build(ck, 90)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f16.f16.f16" in ptx and ck.n_spills == 0


@needs_ptxas
def test_fp8_on_sm80_upcasts_without_sm89_cvt(tmp_path, monkeypatch):
    """sm_80 has no fp8 cvt: the upcast is done by bits and the dot runs as fp16 (as Triton's does)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    for t in (torch.float8_e4m3fn, torch.float8_e5m2):
        x = torch.zeros(64, 64).to(t)
        ck = one_dot.warmup(x, x, torch.zeros(64, 64), M=64, N=64, K=64, PREC="ieee", OUT_T=tl.float32, grid=(1,))
        ptx = _build(ck, 80)
        assert "e4m3x2" not in ptx and "e5m2x2" not in ptx and "mma.sync.aligned.m16n8k16" in ptx


def test_fp8_upcast_by_bits_matches_torch():
    """The sm_80 e4m3 decoding (7 value bits at f16 bits 13..7, times 256; 0x7f is NaN), checked on all bytes."""
    x = np.arange(256, dtype=np.uint16)
    mag = x & 0x7F
    bits = ((mag << 7) | ((x & 0x80) << 8)).astype(np.uint16)
    got = (bits.view(np.float16) * np.float16(256)).astype(np.float32)
    got = np.where(mag == 0x7F, np.nan, got)
    ref = torch.tensor(x.astype(np.uint8)).view(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(got, ref)


# --------------------------------------------------------------------------- the interpreter


def _operands(in_t, M, N, K, seed):
    g = torch.Generator().manual_seed(seed)
    if in_t == "int8":
        a = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (K, N), generator=g, dtype=torch.int8)
        a[0, :] = -128  # edge values: the extremes of the type
        b[:, 0] = 127
        return a, b
    scale = {"float16": 0.5, "bfloat16": 0.5, "float32": 0.5, "float8e4nv": 2.0, "float8e5": 2.0}[in_t]
    a = torch.randn(M, K, generator=g) * scale
    b = torch.randn(K, N, generator=g) * scale
    if in_t.startswith("float8"):  # edge values: the largest finite magnitudes and subnormals
        big = 448.0 if in_t == "float8e4nv" else 57344.0
        a[0, 0], a[1, 1] = big / 64, -2.0 ** -9
        b[0, 0], b[1, 1] = 8.0, 2.0 ** -7
    else:
        a[0, 0], b[0, 0] = 60.0, -60.0  # big products next to small ones
        a[1, :] = 2.0 ** -14  # fp16 subnormal boundary
    return a.to(TORCH[in_t]), b.to(TORCH[in_t])


def _reference(a, b):
    return a.double() @ b.double()


def _check(acc_t, prec, got, a, b, truncated=False):
    """Against float64, within the error the arithmetic allows, elementwise: test_dot's absolute tolerance
    (1e-2 for fp16 outputs, 1e-3 otherwise) plus a bound proportional to |a| @ |b| (the size of the sum's
    terms): an fp16 accumulator is rounded (2^-11 relative) once per k-step of the instruction (16 or 32 of
    K) and at the end; tf32 rounds each operand (2^-11 each; truncates, 2^-10, where wgmma reads a pipelined
    fp32 stage); fp32 sums of exact products (fp16, bf16, tf32x3) are near fp32's own error; fp8 on wgmma
    accumulates in fewer bits. int8 is exact."""
    if acc_t == "int32":
        assert torch.equal(got.long(), _reference(a, b).long())
        return
    got = got.double()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    ref = _reference(a, b)
    terms = a.double().abs() @ b.double().abs()
    K = a.shape[1]
    if acc_t == "float16":
        rel = (K / 16 + 2) * 2.0 ** -11
    elif prec == "tf32" and a.dtype == torch.float32:
        # `truncated`: wgmma reads a pipelined fp32 stage as it is, truncating each operand to tf32 (2^-10 each, as
        # Triton's Hopper dots do) where the register path rounds (2^-11 each)
        rel = (2.0 ** -9 if truncated else 2.0 ** -10) + K * 2.0 ** -24
    elif a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # Hopper's fp8 wgmma does not accumulate in full fp32 (DeepSeek-V3 measured about 14 bits on the H800).
        # On the H200, 1-3 elements of 25,000 on ragged shapes came out ~1e-3 of |a|@|b| off with a k32-step
        # bound of 2^-13 each; Triton's test_dot allows rtol 1e-2 here. 2^-8 of the terms: still tighter.
        rel = 2.0 ** -8
    else:
        rel = 2.0 ** -18 + K * 2.0 ** -24
    atol = 1e-2 if acc_t == "float16" else 1e-3
    err = (got - ref).abs() - (atol + rel * terms)
    assert (err <= 0).all(), f"{int((err > 0).sum())} elements out of tolerance, worst by {err.max().item():.3g}"


def run_matmul(in_t, acc_t, prec, M, N, K, config, device, wgmma=True, seed=0):
    bm, bn, bk, warps = config
    a, b = _operands(in_t, M, N, K, seed)
    out_t = {"float16": torch.float16, "float32": torch.float32, "int32": torch.int32}[acc_t]
    c = torch.full((M, N), -12345 if acc_t == "int32" else float("nan"), dtype=out_t, device=device)
    grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
    kw = {"enable_wgmma": wgmma} if device != "cpu" else {}
    matmul[grid](a.to(device), b.to(device), c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 BM=bm, BN=bn, BK=bk, PREC=prec, ACC_T=OUT[acc_t], num_warps=warps, num_stages=3, **kw)
    return c.cpu(), a, b


PAIRS = [("float16", "float16", "ieee"), ("float16", "float32", "ieee"), ("float32", "float32", "tf32"),
         ("float32", "float32", "tf32x3"), ("float32", "float32", "ieee"), ("int8", "int32", "ieee"),
         ("float8e4nv", "float32", "ieee"), ("float8e5", "float32", "ieee"), ("float8e4nv", "float16", "ieee")]


def _ids(v):
    return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)


@pytest.mark.parametrize("in_t, acc_t, prec", PAIRS, ids=_ids)
def test_interpreter_matmul(in_t, acc_t, prec):
    got, a, b = run_matmul(in_t, acc_t, prec, 70, 50, 90, (32, 32, 32, 4), "cpu", seed=1)
    _check(acc_t, prec, got, a, b)


def test_interpreter_fp16_accumulation_rounds_as_triton():
    """Triton's interpreter: the product (summed in fp32) rounded to fp16, then added to the fp16 acc in fp16."""
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(64, 64, generator=g).half() for _ in range(2))
    acc = torch.randn(64, 64, generator=g).half()

    @kl.jit
    def k(A, B, C, O):
        r = tl.arange(0, 64)
        x = tl.load(A + r[:, None] * 64 + r[None, :])
        y = tl.load(B + r[:, None] * 64 + r[None, :])
        c = tl.load(C + r[:, None] * 64 + r[None, :])
        tl.store(O + r[:, None] * 64 + r[None, :], tl.dot(x, y, c, out_dtype=tl.float16))

    out = torch.full((64, 64), float("nan"), dtype=torch.float16)
    k[(1,)](a, b, acc, out)
    want = (a.float().numpy() @ b.float().numpy()).astype(np.float16) + acc.numpy()
    np.testing.assert_array_equal(out.numpy(), want)


def test_interpreter_tf32x3_is_near_fp32():
    """tf32x3 splits each operand in a tf32 part and the rest: the sum of the three products is within fp32's
    error of the float64 product (plain tf32 would be ~1e-3 off), and an infinite operand stays infinite."""
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    a[5, 3] = float("inf")
    z = torch.full((64, 64), float("nan"))
    one_dot[(1,)](a, b, z, M=64, N=64, K=64, PREC="tf32x3", OUT_T=tl.float32)
    ref = a.double() @ b.double()
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isinf(z), torch.isinf(ref)) and (torch.sign(z[~fin]) == torch.sign(ref[~fin])).all()
    assert ((z.double() - ref)[fin].abs() / (ref[fin].abs() + 1)).max() < 1e-5


def test_tf32x3_is_three_tf32_dots():
    ck = one_dot.warmup(torch.zeros(64, 64), torch.zeros(64, 64), torch.zeros(64, 64), M=64, N=64, K=64,
                        PREC="tf32x3", OUT_T=tl.float32, grid=(1,))
    assert ck.asm["tile"].count("tt.dot") == 3 and 'input_precision = "tf32"' in ck.asm["tile"]


# --------------------------------------------------------------------------- on the GPU

GPU_SHAPES = [(256, 256, 256), (70, 50, 90), (193, 130, 200)]
GPU_CONFIGS = [(64, 64, 64, 4), (128, 128, 64, 4), (128, 128, 64, 8), (128, 256, 64, 8),
               (64, 128, 64, 8), (64, 256, 32, 8)]  # 64 rows over 8 warps: two warpgroups side by side along N


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma_sync"])
@pytest.mark.parametrize("config", GPU_CONFIGS, ids=_ids)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=_ids)
@pytest.mark.parametrize("in_t, acc_t, prec", PAIRS, ids=_ids)
def test_gpu_matmul_per_dtype_pair(in_t, acc_t, prec, shape, config, wgmma):
    if in_t == "float8e4nv" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("float8e4nv needs sm_89+ (as in Triton's test_dot)")
    M, N, K = shape
    got, a, b = run_matmul(in_t, acc_t, prec, M, N, K, config, "cuda", wgmma=wgmma, seed=M + K)
    _check(acc_t, prec, got, a, b, truncated=wgmma and torch.cuda.get_device_capability()[0] >= 9)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma_sync"])
@pytest.mark.parametrize("in_t, out_t, prec", [p for p in PAIRS if p[2] != "ieee" or p[0] != "float32"], ids=_ids)
def test_gpu_single_dot_matches_the_interpreter(in_t, out_t, prec, wgmma):
    """One 64x64x64 dot on the GPU against float64, and the interpreter on the same inputs within the same bound
    (both are the same arithmetic up to rounding order)."""
    if in_t == "float8e4nv" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("float8e4nv needs sm_89+")
    a, b = _operands(in_t, 64, 64, 64, 11)
    out_dt = {"float16": torch.float16, "float32": torch.float32, "int32": torch.int32}[out_t]
    outs = []
    for dev in ("cuda", "cpu"):
        z = torch.full((64, 64), -7 if out_t == "int32" else float("nan"), dtype=out_dt, device=dev)
        kw = {"enable_wgmma": wgmma} if dev == "cuda" else {}
        one_dot[(1,)](a.to(dev), b.to(dev), z, M=64, N=64, K=64, PREC=prec, OUT_T=OUT[out_t], **kw)
        outs.append(z.cpu())
    _check(out_t, prec, outs[0], a, b)
    _check(out_t, prec, outs[1], a, b)
    if out_t == "int32":
        assert torch.equal(outs[0], outs[1])


# ------------------------------------------------- 64-row tiles over 8 warps: two warpgroups side by side along N
@needs_ptxas
@pytest.mark.parametrize("in_t, acc_t, bn, form", [
    ("float16", "float32", 128, "m64n64k16.f32.f16"), ("bfloat16", "float32", 256, "m64n128k16.f32.bf16"),
    ("float32", "float32", 64, "m64n32k8.f32.tf32"), ("float32", "float32", 128, "m64n64k8.f32.tf32"),
    ("float8e4nv", "float32", 256, "m64n128k32.f32.e4m3"), ("int8", "int32", 256, "m64n128k32.satfinite.s32.s8")])
def test_64_row_tile_over_8_warps_splits_n_between_warpgroups(in_t, acc_t, bn, form, tmp_path, monkeypatch):
    """BLOCK_M = 64 with num_warps = 8 (a config Liger's and others' autotune lists carry) was mma.sync, about 250
    registers and 1.5-2.7x slower than Triton on the H100: now each warpgroup takes half the columns with its own
    wgmma, as Triton's [4, 2] warps do. A split that would start a warpgroup inside a swizzle atom stays mma.sync."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    a = torch.zeros(512, 512).to(TORCH[in_t])
    c = torch.zeros(512, 512, dtype=torch.int32 if acc_t == "int32" else torch.float32)
    prec = "tf32" if in_t == "float32" else "ieee"
    ck = matmul.warmup(a, a, c, 512, 512, 512, 512, 1, 512, 1, BM=64, BN=bn, BK=64, PREC=prec, ACC_T=OUT[acc_t],
                       num_warps=8, num_stages=3, grid=(1,))
    ptx = _build(ck, 90)
    assert f"wgmma.mma_async.sync.aligned.{form}" in ptx and "mma.sync" not in ptx
    assert ck.n_spills == 0 and ck.n_regs <= 128 and "C7514" not in ck.report.get("log", "")
    ck = matmul.warmup(a, a, c, 512, 512, 512, 512, 1, 512, 1, BM=64, BN=64, BK=64, PREC=prec, ACC_T=OUT[acc_t],
                       num_warps=8, num_stages=3, grid=(1,))
    ptx = _build(ck, 90)  # 32 columns a warpgroup: 64 bytes of fp16, half a swizzle atom
    assert ("wgmma.mma_async" in ptx) == (in_t == "float32")


def test_wgmma_warps_plan():
    from kernellab.compiler.gpu.scratch import WgmmaKind
    from kernellab.compiler.passes.accelerate_matmul import wgmma_warps

    f16, tf32 = WgmmaKind("f16", 16, "f32"), WgmmaKind("tf32", 8, "f32")
    assert wgmma_warps(128, 128, 8, f16) == [8, 1] and wgmma_warps(64, 128, 4, f16) == [4, 1]
    assert wgmma_warps(64, 128, 8, f16) == [4, 2] and wgmma_warps(64, 256, 16, f16) == [4, 4]
    assert wgmma_warps(128, 256, 16, f16) == [8, 2] and wgmma_warps(64, 64, 8, tf32) == [4, 2]
    assert wgmma_warps(64, 64, 8, f16) is None and wgmma_warps(32, 128, 4, f16) is None
    assert wgmma_warps(64, 128, 6, f16) is None


@kl.jit
def desc_matmul_bt(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Liger mlp's shape of loop: host descriptors, B read as [BN, BK] rows and transposed into the dot."""
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([m0, k]), tl.trans(b_desc.load([n0, k])), acc)
    c_desc.store([m0, n0], acc.to(c_desc.dtype))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("bn, bk, stages", [(128, 64, 2), (128, 32, 3), (256, 64, 3)], ids=_ids)
def test_gpu_64_row_tile_over_8_warps_with_descriptors(dtype, bn, bk, stages):
    """Warpgroups side by side along N with B K-major (transposed rows) through TMA stages, ragged M, N, K."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("host descriptors need sm_90")
    M, N, K = 200, 328, 264  # ragged against every tile; rows 16-byte aligned, as TMA needs
    g = torch.Generator().manual_seed(5)
    a = (torch.randn(M, K, generator=g) * 0.5).to(TORCH[dtype])
    bt = (torch.randn(N, K, generator=g) * 0.5).to(TORCH[dtype])
    a[0, 0], bt[0, 0] = 30.0, -30.0
    out_t = torch.float32 if dtype == "float32" else TORCH[dtype]
    c = torch.full((M, N), float("nan"), dtype=out_t, device="cuda")
    D = kl.TensorDescriptor
    bm = 64
    desc_matmul_bt[(kl.cdiv(M, bm), kl.cdiv(N, bn))](
        D.from_tensor(a.cuda(), [bm, bk]), D.from_tensor(bt.cuda(), [bn, bk]), D.from_tensor(c, [bm, bn]), K,
        BM=bm, BN=bn, BK=bk, num_warps=8, num_stages=stages)
    ref = a.double() @ bt.double().T
    terms = a.double().abs() @ bt.double().abs().T
    rel = 2.0 ** -9 if dtype == "float32" else 2.0 ** -8  # tf32 operands truncated; 16-bit output rounding
    got = c.double().cpu()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    assert ((got - ref).abs() <= 1e-3 + rel * terms).all()
