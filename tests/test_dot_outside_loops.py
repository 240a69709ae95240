"""`tl.dot` of tiles loaded once, outside any pipelined loop, in the form Triton's test_dot checks in the PTX.

- the operands are loaded with vectorized global loads (ld.global.v4: 16 bytes a thread) and stored into shared
  memory (st.shared) once, not copied with cp.async (which stays the pipeliner's);
- tiles with fewer 16x8 blocks than warps (16x16 over 4 warps, 32x32 over 16) and tiles smaller than one block
  (2x4, 1x2) run on mma.sync, the extra warps, rows and columns holding copies;
- 64-bit elements are stored 16 bytes at a time as st.global.v2.b64.

CPU tests compile for sm_80 and sm_90a and assemble with ptxas (no GPU needed); `gpu` tests run test_dot's
epilogues against torch float64 with poisoned outputs; interpreter tests run the same kernel on the CPU.
"""
from __future__ import annotations

import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "int8": torch.int8,
         "float8e4nv": torch.float8_e4m3fn, "float8e5": torch.float8_e5m2, "float64": torch.float64,
         "int32": torch.int32}
OUT = {"float16": tl.float16, "float32": tl.float32, "int32": tl.int32}


@kl.jit
def dot_epilogue(X, Y, W, Z, O, som, son, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, EPI: tl.constexpr,
                 PREC: tl.constexpr, OUT_T: tl.constexpr):
    """One dot of two tiles loaded once, then one of test_dot's epilogues; the result goes to O through strides
    (som, son) (a transposed O for the "trans" case). Z holds the addends, W the second dot's operand."""
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(X + rm[:, None] * K + rk[None, :])
    y = tl.load(Y + rk[:, None] * N + rn[None, :])
    acc = tl.dot(x, y, input_precision=PREC, out_dtype=OUT_T)
    if EPI == "add-matrix":
        acc += tl.load(Z + rm[:, None] * N + rn[None, :])
    if EPI == "add-rows":
        acc += tl.load(Z + rm * N)[:, None]
    if EPI == "add-cols":
        acc += tl.load(Z + rn)[None, :]
    if EPI == "softmax":
        e = tl.exp((acc - tl.max(acc, 1)[:, None]).to(tl.float32))
        acc = e / tl.sum(e, 1)[:, None]
    if EPI == "chain-dot":
        w = tl.load(W + rn[:, None] * N + rn[None, :])
        acc = tl.dot(acc.to(w.dtype), w, input_precision=PREC, out_dtype=OUT_T)
    tl.store(O + rm[:, None] * som + rn[None, :] * son, acc)


def _compile(M, N, K, warps, in_t, out_t, prec, epi, arch, o_t=None, tmp_path=None):
    from kernellab.compiler.codegen.target import Target

    x = torch.zeros(M, K, dtype=TORCH[in_t])
    y = torch.zeros(K, N, dtype=TORCH[in_t])
    w = torch.zeros(N, N, dtype=TORCH[in_t])
    z = torch.zeros(M, N, dtype=TORCH[out_t])
    o = torch.zeros(M, N, dtype=TORCH[o_t or out_t])
    ck = dot_epilogue.warmup(x, y, w, z, o, N, 1, M=M, N=N, K=K, EPI=epi, PREC=prec, OUT_T=OUT[out_t],
                             num_warps=warps, grid=(1,))
    ck.build_gpu(Target(arch))
    return ck, ck.asm["ptx"]


def _mma(ptx):
    return sorted(set(re.findall(r"(?:wgmma\.mma_async|mma)\.sync\.aligned\.[\w.]+", ptx)))


# --------------------------------------------------------------------------- PTX forms (CPU, ptxas)

VECTORIZED = [  # (M, N, K, warps, in, out, prec): tiles loaded 16 bytes a thread
    (64, 64, 64, 4, "float16", "float32", "ieee"),
    (64, 64, 64, 4, "float16", "float16", "ieee"),
    (64, 64, 64, 4, "bfloat16", "float32", "ieee"),
    (32, 32, 32, 4, "float16", "float32", "ieee"),
    (128, 256, 32, 8, "float16", "float32", "ieee"),
    (128, 16, 32, 4, "float16", "float16", "ieee"),
    (32, 128, 64, 2, "float16", "float32", "ieee"),
    (64, 128, 128, 4, "float16", "float32", "ieee"),
]


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("M, N, K, warps, in_t, out_t, prec", VECTORIZED, ids=lambda v: str(v))
def test_operands_loaded_once_use_vector_loads_and_shared_stores(M, N, K, warps, in_t, out_t, prec, arch, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, ptx = _compile(M, N, K, warps, in_t, out_t, prec, "none", arch)
    assert "ld.global.v4" in ptx and "st.global.v4" in ptx and "st.shared.v4" in ptx
    assert "cp.async" not in ptx  # nothing to overlap: no asynchronous copies, no groups to wait for
    mma = _mma(ptx)
    assert mma and all(("wgmma" in f) == (arch == 90 and M % (16 * warps) == 0 and warps % 4 == 0) for f in mma)
    if any("wgmma" in f for f in mma):  # st.shared (generic proxy) before wgmma (async proxy) reads it
        assert ptx.index("fence.proxy.async") < ptx.index("wgmma.mma_async")
    assert ck.n_spills == 0
    plan = [b for b in ck.trace.shared_plan if b.op == "ttg.local_alloc"]
    assert len(plan) == 2 and {b.filled_by for b in plan} == {"st.shared"}


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
def test_one_barrier_orders_both_stores_before_the_dot(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, ptx = _compile(64, 64, 64, 4, "float16", "float32", "ieee", "none", arch)
    first_read = min(ptx.find(s) for s in ("wgmma.mma_async", "ldmatrix") if s in ptx)
    assert ptx[:first_read].count("bar.sync") == 1
    gpu = ck.asm["gpu"]
    assert gpu.count("ttg.local_store") == 2 and gpu.count('reason = "the dot operands stored above') == 1


@kl.jit
def q_times_keys(Q, Kp, O, n, M: tl.constexpr, D: tl.constexpr, BN: tl.constexpr):
    """Attention's shape: q loaded once, read by the dot of every iteration of a loop over key tiles."""
    rm, rd, rn = tl.arange(0, M), tl.arange(0, D), tl.arange(0, BN)
    q = tl.load(Q + rm[:, None] * D + rd[None, :])
    acc = tl.zeros((M, BN), dtype=tl.float32)
    for j in range(0, n, BN):
        k = tl.load(Kp + rd[:, None] * n + (j + rn)[None, :])
        acc += tl.dot(q, k)
    tl.store(O + rm[:, None] * BN + rn[None, :], acc)


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
def test_a_tile_read_by_a_loop_is_stored_once_and_the_loop_keeps_cp_async(arch, tmp_path, monkeypatch):
    from kernellab.compiler.codegen.target import Target

    from .ptx import loop_bodies

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    q = torch.zeros(128, 64, dtype=torch.float16)
    k = torch.zeros(64, 1024, dtype=torch.float16)
    ck = q_times_keys.warmup(q, k, torch.zeros(128, 64), 1024, M=128, D=64, BN=64, num_warps=4, num_stages=3,
                             grid=(1,))
    ptx = ck.build_gpu(Target(arch)).asm["ptx"]
    body = max(loop_bodies(ptx), key=len)
    assert "cp.async" in body and "ld.global" not in body and "st.shared" not in body
    assert "ld.global.v4" in ptx[:ptx.index(body)] and ck.n_spills == 0
    assert [b.filled_by for b in ck.trace.shared_plan if b.op == "ttg.local_alloc"] == ["st.shared", "cp.async"]


SMALL = [  # (M, N, K, warps, in, out, prec, the instruction test_dot expects)
    (16, 16, 16, 4, "float16", "float32", "ieee", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32"),
    (16, 16, 16, 4, "float16", "float16", "ieee", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f16\.f16\.f16\.f16"),
    (16, 16, 16, 4, "float32", "float32", "tf32", r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32"),
    (32, 32, 128, 16, "float16", "float32", "ieee", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16"),
    (32, 32, 128, 16, "int8", "int32", "ieee", r"mma\.sync\.aligned\.m16n8k32\.row\.col\.satfinite\.s32\.s8\.s8"),
    (2, 4, 32, 1, "float16", "float32", "ieee", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32"),
    (1, 2, 32, 1, "float8e5", "float32", "ieee", r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32"),
]


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("epi", ["none", "softmax", "chain-dot"])
@pytest.mark.parametrize("M, N, K, warps, in_t, out_t, prec, want", SMALL, ids=lambda v: str(v))
def test_small_tiles_run_on_tensor_cores(M, N, K, warps, in_t, out_t, prec, want, epi, arch, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    if epi != "none" and (in_t == "int8" or M < 16):
        pytest.skip("test_dot runs these tiles without an epilogue")
    ck, ptx = _compile(M, N, K, warps, in_t, out_t, prec, epi, arch)
    assert re.search(want, ptx), _mma(ptx)
    assert ck.n_spills == 0


@needs_ptxas
@pytest.mark.parametrize("arch", [80, 90])
def test_64_bit_elements_are_stored_two_at_a_time(arch, tmp_path, monkeypatch):
    """An fp32 result stored into a float64 tensor (test_dot's fp8 cases do) and a float64 one: st.global.v2.b64,
    with a mask too."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck, ptx = _compile(64, 64, 64, 4, "float16", "float32", "ieee", "none", arch, o_t="float64")
    assert "st.global.v2.b64" in ptx

    @kl.jit
    def widen(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < n).to(tl.float64), mask=offs < n)

    ck = widen.warmup(torch.zeros(1024), torch.zeros(1024, dtype=torch.float64), 2048, BLOCK=1024, grid=(1,))
    assert "st.global.v2.b64" in ck.build_gpu(Target(arch)).asm["ptx"]


# --------------------------------------------------------------------------- results

EPILOGUES = ["none", "trans", "add-matrix", "add-rows", "add-cols", "softmax", "chain-dot"]
RESULT_CASES = (
    [(64, 64, 64, 4, "float16", "float32", "ieee", e) for e in EPILOGUES]
    + [(32, 32, 32, 4, "float16", "float16", "ieee", e) for e in EPILOGUES]
    + [(16, 16, 16, 4, "float16", "float32", "ieee", e) for e in EPILOGUES]
    + [(16, 16, 16, 4, "float32", "float32", "tf32", e) for e in EPILOGUES]
    + [(16, 16, 16, 4, "float16", "float16", "ieee", e) for e in ("none", "add-rows", "chain-dot")]
    + [(64, 64, 64, 4, "bfloat16", "float32", "ieee", "chain-dot"),
       (128, 256, 32, 8, "float16", "float32", "ieee", "none"),
       (128, 16, 32, 4, "float16", "float16", "ieee", "none"),
       (32, 128, 64, 2, "float16", "float32", "ieee", "none"),
       (64, 128, 128, 4, "float16", "float32", "ieee", "none"),
       (128, 128, 64, 8, "float16", "float32", "ieee", "softmax"),
       (32, 32, 128, 16, "float16", "float32", "ieee", "none"),
       (32, 32, 128, 16, "float16", "float16", "ieee", "none"),
       (32, 32, 128, 16, "float32", "float32", "tf32", "none"),
       (32, 32, 128, 16, "int8", "int32", "ieee", "none"),
       (64, 64, 64, 4, "int8", "int32", "ieee", "none"),
       (2, 4, 32, 1, "float16", "float32", "ieee", "none"),
       (1, 2, 32, 1, "float8e5", "float32", "ieee", "none"),
       (128, 128, 64, 4, "float8e5", "float32", "ieee", "chain-dot"),
       (128, 128, 64, 4, "float8e4nv", "float32", "ieee", "chain-dot")]
)


def _inputs(M, N, K, in_t, out_t, prec, seed):
    g = torch.Generator().manual_seed(seed)
    if in_t == "int8":
        x, y, w = (torch.randint(-128, 128, s, generator=g, dtype=torch.int8) for s in ((M, K), (K, N), (N, N)))
        x[0, :] = -128  # the extremes of the type
        y[:, 0] = 127
        return x, y, w, torch.randint(-1000, 1000, (M, N), generator=g, dtype=torch.int32)
    if in_t.startswith("float8"):  # test_dot's fp8 data: bytes 20..39, small positive values
        x, y, w = (torch.randint(20, 40, s, generator=g, dtype=torch.int8).view(TORCH[in_t])
                   for s in ((M, K), (K, N), (N, N)))
        return x, y, w, 1 + torch.randn(M, N, generator=g) * 0.1
    x, y, w = (torch.randn(s, generator=g) * 0.1 for s in ((M, K), (K, N), (N, N)))
    x[0, 0], y[0, 0] = 3.0, -2.5  # a big product next to small ones
    if prec == "tf32":  # tf32-representable inputs (as test_dot masks them): the products are exact
        x, y, w = (t.view(torch.int32).bitwise_and(-8192).view(torch.float32) for t in (x, y, w))
    z = 1 + torch.randn(M, N, generator=g) * 0.1
    return x.to(TORCH[in_t]), y.to(TORCH[in_t]), w.to(TORCH[in_t]), z.to(TORCH[out_t])


def _reference(x, y, w, z, epi, in_t, out_t):
    r = x.double() @ y.double()
    if out_t == "float16":
        r = r.half().double()  # the dot's own result type
    if epi == "add-matrix":
        r = r + z.double()
    if epi == "add-rows":
        r = r + z.double()[:, :1]
    if epi == "add-cols":
        r = r + z.double()[:1, :]
    if epi == "softmax":
        e = torch.exp(r - r.max(1, keepdim=True).values)
        r = e / e.sum(1, keepdim=True)
    if epi == "chain-dot":  # the intermediate is rounded to the operands' type first, as the kernel does
        r = r.to(TORCH[in_t]).double() @ w.double()
    return r


def _run(case, device, seed=0):
    M, N, K, warps, in_t, out_t, prec, epi = case
    x, y, w, z = _inputs(M, N, K, in_t, out_t, prec, seed)
    o_t = "float64" if in_t.startswith("float8") else out_t  # test_dot's fp8 cases store into a float64 tensor
    fill = -7 if out_t == "int32" else float("nan")
    if epi == "trans":
        o = torch.full((N, M), fill, dtype=TORCH[o_t], device=device)
        som, son = 1, M
    else:
        o = torch.full((M, N), fill, dtype=TORCH[o_t], device=device)
        som, son = N, 1
    dot_epilogue[(1,)](x.to(device), y.to(device), w.to(device), z.to(device), o, som, son, M=M, N=N, K=K, EPI=epi,
                       PREC=prec, OUT_T=OUT[out_t], num_warps=warps)
    got = o.cpu()
    if epi == "trans":
        got = got.t()
    return got, _reference(x, y, w, z, epi, in_t, out_t)


def _check(got, ref, in_t, out_t):
    if out_t == "int32":
        assert torch.equal(got.long(), ref.long())
        return
    got = got.double()
    assert not torch.isnan(got).any(), "unwritten (poisoned) elements"
    atol = 1e-2 if out_t == "float16" or in_t == "bfloat16" else 1e-3  # test_dot's tolerances
    torch.testing.assert_close(got, ref, atol=atol, rtol=1e-2)


def _case_id(c):
    return "x".join(map(str, c[:4])) + f"-{c[4]}-{c[5]}-{c[6]}-{c[7]}"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("case", RESULT_CASES, ids=_case_id)
def test_gpu_dot_outside_loops_matches_float64(case):
    in_t = case[4]
    if in_t == "float8e4nv" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("float8e4nv needs sm_89+ (as in Triton's test_dot)")
    got, ref = _run(case, "cuda", seed=sum(case[:4]))
    _check(got, ref, in_t, case[5])


@pytest.mark.gpu
@needs_cuda
def test_gpu_64_bit_stores_write_every_element():
    @kl.jit
    def widen(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < n).to(tl.float64), mask=offs < n)

    for n in (4096, 1000, 1):
        x = torch.randn(n, device="cuda")
        y = torch.full((n + 8,), float("nan"), dtype=torch.float64, device="cuda")
        widen[(kl.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        assert torch.equal(y[:n], x.double()) and torch.isnan(y[n:]).all()


INTERPRETER_CASES = [c for c in RESULT_CASES if c[0] * c[1] * c[2] <= 64 * 64 * 64 and c[4] != "bfloat16"
                     and c[6] == "ieee"][:12]


@pytest.mark.parametrize("case", INTERPRETER_CASES, ids=_case_id)
def test_interpreter_dot_outside_loops_matches_float64(case):
    got, ref = _run(case, "cpu", seed=sum(case[:4]))
    _check(got, ref, case[4], case[5])
