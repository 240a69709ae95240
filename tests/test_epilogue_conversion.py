"""The matmul epilogue's conversion of the mma/wgmma accumulator to the store layout (ttg.convert_layout through
shared memory, codegen/lower_shape.py) moves wide vectors without bank conflicts: a 16-bit accumulator goes in by
stmatrix on sm_90 (8 elements a thread an instruction) and comes out by ld.shared.v4; a 32-bit one goes in by
st.shared.v2 into rows padded by 32 bytes (gpu/scratch.py conversion_pitch: the 4 rows of each 16-lane phase of
an 8-byte access on distinct banks; 16 bytes gave 2 wavefronts a phase) and comes out by ld.shared.v4.
KERNELLAB_MMA32_PAD=16 restores the 16-byte pad (kept to time the two). The kernel is benchmarks/matmul.py's
tutorial text (tests/corpus.py); CPU checks read the PTX and ptxas' report, GPU runs (marked gpu) compare with
torch float64 on ragged shapes with NaN-poisoned outputs."""
from __future__ import annotations

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.gpu.layouts import Blocked, Mma  # noqa: E402
from kernellab.compiler.gpu.scratch import conversion_pitch  # noqa: E402
from kernellab.viz.data import bank_conflicts  # noqa: E402

from .corpus import make_kernels  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")

matmul_kernel = make_kernels(kl, tl)["matmul_kernel"]

# (BM, BN, BK, warps, stages): benchmarks/matmul.py's config, the idioms' 128x128 ones, a small tile
TILES = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (64, 64, 32, 4, 2)]
TILE_IDS = [f"{m}x{n}x{k}-w{w}" for m, n, k, w, _ in TILES]
OUT = {"f16": (torch.float16, torch.float16), "bf16": (torch.bfloat16, torch.bfloat16),
       "f16-f32out": (torch.float16, torch.float32)}


def _fresh(kernel):
    """Forget the in-memory compiles (they do not key on the environment; the disk cache does): the next launch
    builds with the switches as they are now."""
    kernel.device_caches.clear()


def _launch(a, b, c, bm, bn, bk, warps, stages, warmup=False):
    M, K = a.shape
    N = b.shape[1]
    grid = (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    if warmup:
        return matmul_kernel.warmup(*args, grid=grid, **meta)
    return matmul_kernel[grid](*args, **meta)


# ---------------------------------------------------------------------------------------------- the pad
def test_pitch_pads_32bit_mma_rows_by_32_bytes(monkeypatch):
    blocked = Blocked((1, 4), (1, 32), (8, 1), (1, 0))
    assert conversion_pitch((128, 256), 4, (Mma((8, 1)), blocked)) == 256 + 8
    assert conversion_pitch((128, 256), 4, (blocked, Mma((8, 1)))) == 256 + 8  # into the accumulator layout
    assert conversion_pitch((128, 256), 4, (blocked, blocked)) == 256 + 4  # no mma side: 16 bytes
    assert conversion_pitch((128, 256), 4) == 256 + 4
    assert conversion_pitch((128, 256), 2, (Mma((8, 1)), blocked)) == 256 + 8  # 16-bit: 16 bytes (stmatrix rows)
    assert conversion_pitch((128, 24), 4, (Mma((4, 1)), blocked)) == 24  # rows not a multiple of 128 bytes
    monkeypatch.setenv("KERNELLAB_MMA32_PAD", "16")
    assert conversion_pitch((128, 256), 4, (Mma((8, 1)), blocked)) == 256 + 4


@pytest.mark.parametrize("shape, warps", [((128, 256), (8, 1)), ((128, 128), (4, 1)), ((128, 128), (4, 2)),
                                          ((64, 64), (4, 1)), ((256, 128), (8, 1))])
def test_bank_model_32bit_accumulator_writes_are_conflict_free(shape, warps, monkeypatch):
    """The lab's bank model (128-byte phases): the accumulator's 8-byte pair stores take one wavefront a phase
    at the new pad, two at the old one; 16-bit pairs (the path without stmatrix) one at 16 bytes."""
    lay = Mma(warps)
    nw = warps[0] * warps[1]
    pitch = conversion_pitch(shape, 4, (lay,))
    assert bank_conflicts(lay, shape, nw, 4, 0, pitch, 2)["ways"] == 1
    assert bank_conflicts(lay, shape, nw, 4, 0, shape[1] + 4, 2)["ways"] == 2
    assert bank_conflicts(lay, shape, nw, 2, 0, conversion_pitch(shape, 2, (lay,)), 2)["ways"] == 1


# ---------------------------------------------------------------------------------------------- PTX
def _ptx(tmp_path, monkeypatch, out, tile, pad=None, stmatrix=None):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    for var, val in (("KERNELLAB_MMA32_PAD", pad), ("KERNELLAB_STMATRIX", stmatrix)):
        if val is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, val)
    _fresh(matmul_kernel)
    ab, cd = OUT[out]
    M = N = 1024
    K = 512
    a, b, c = torch.empty(M, K, dtype=ab), torch.empty(K, N, dtype=ab), torch.empty(M, N, dtype=cd)
    ck = _launch(a, b, c, *tile, warmup=True)
    ck.build_gpu(Target(90))
    assert ck.asm["cubin"][:4] == b"\x7fELF" and ck.n_spills == 0
    return ck.asm["ptx"]


def _epilogue(ptx: str) -> str:
    """The PTX after the dot loop's backward branch."""
    last = list(re.finditer(r"@%p\d+ bra\s+\$L__BB\d+_\d+;", ptx))
    return ptx[last[-1].end():] if last else ptx


@needs_ptxas
@pytest.mark.parametrize("out", ["f16", "bf16"])
@pytest.mark.parametrize("tile", TILES[:2], ids=TILE_IDS[:2])
def test_sm90_16bit_epilogue_is_stmatrix_and_v4(out, tile, tmp_path, monkeypatch):
    """Per thread: BM*BN/(32*warps) elements in by stmatrix .x4 (8 a time), out by ld.shared.v4 (8 a time) and to
    global memory by st.global.v4; one barrier between; no scalar st.shared left."""
    bm, bn, _, warps, _ = tile
    epi = _epilogue(_ptx(tmp_path, monkeypatch, out, tile))
    per_thread = bm * bn // (32 * warps)
    assert epi.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == per_thread // 8
    assert len(re.findall(r"ld\.shared\.v4\.b32", epi)) == per_thread // 8
    assert len(re.findall(r"st\.global\.v4\.b32", epi)) == per_thread // 8
    assert "st.shared" not in epi


@needs_ptxas
@pytest.mark.parametrize("tile", TILES[:2], ids=TILE_IDS[:2])
def test_sm90_32bit_epilogue_rows_are_32_bytes_padded(tile, tmp_path, monkeypatch):
    """fp32 output: st.shared.v2 in (pairs), ld.shared.v4 out; row pitch (BN + 8) * 4 bytes, so the store 8 rows
    further (the pair's second half-row block) is 8 * pitch bytes from the first; 16-byte pad with the switch."""
    bm, bn, _, warps, _ = tile
    per_thread = bm * bn // (32 * warps)
    for pad, row in ((None, (bn + 8) * 4), ("16", (bn + 4) * 4)):
        epi = _epilogue(_ptx(tmp_path / str(pad), monkeypatch, "f16-f32out", tile, pad=pad))
        st = re.findall(r"st\.shared\.v2\.b32\s+\[%r\d+(?:\+(\d+))?\]", epi)
        assert len(st) == per_thread // 2
        assert len(re.findall(r"ld\.shared\.v4\.b32", epi)) == per_thread // 4
        assert len(re.findall(r"st\.global\.v4\.b32", epi)) == per_thread // 4
        assert str(8 * row) in {o for o in st}, (pad, sorted({o for o in st})[:8])


@needs_ptxas
def test_switches_are_part_of_the_cache_key(tmp_path, monkeypatch):
    """Both forms build in one process and one cache directory (what benchmarks/matmul.py --also-env relies on)."""
    tile = TILES[1]
    new = _ptx(tmp_path, monkeypatch, "f16-f32out", tile)
    old = _ptx(tmp_path, monkeypatch, "f16-f32out", tile, pad="16")
    assert new != old
    assert "stmatrix" in _ptx(tmp_path, monkeypatch, "f16", tile)
    assert "stmatrix" not in _ptx(tmp_path, monkeypatch, "f16", tile, stmatrix="0")


def test_benchmark_env_setting_restores(monkeypatch):
    from benchmarks.matmul import also_env_implementations, env_setting

    monkeypatch.delenv("KERNELLAB_MMA32_PAD", raising=False)
    with env_setting("KERNELLAB_MMA32_PAD=16"):
        assert conversion_pitch((128, 256), 4, (Mma((8, 1)),)) == 260
    assert conversion_pitch((128, 256), 4, (Mma((8, 1)),)) == 264
    impls = also_env_implementations(["KERNELLAB_STMATRIX=0"])
    (k, setting), = impls.values()
    assert setting == "KERNELLAB_STMATRIX=0" and k is not matmul_kernel


def test_benchmark_env_setting_sets_several(monkeypatch):
    """`A=1,B=2`: one --also-env column with knobs combined; each restored after (unset ones unset)."""
    import os

    from benchmarks.matmul import env_setting

    monkeypatch.setenv("KERNELLAB_MMA32_PAD", "8")
    monkeypatch.delenv("KERNELLAB_STMATRIX", raising=False)
    with env_setting("KERNELLAB_MMA32_PAD=16,KERNELLAB_STMATRIX=0"):
        assert os.environ["KERNELLAB_MMA32_PAD"] == "16" and os.environ["KERNELLAB_STMATRIX"] == "0"
    assert os.environ["KERNELLAB_MMA32_PAD"] == "8" and "KERNELLAB_STMATRIX" not in os.environ


# ---------------------------------------------------------------------------------------------- GPU
@kl.jit
def dot_plus_tile(A, B, D, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C = A @ B + D with D an fp32 tile loaded in a blocked layout: a conversion between the accumulator layout
    and a blocked one that is not the store's (whichever side the compiler converts)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(B + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    d = tl.load(D + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(C + rm[:, None] * N + rn[None, :], acc + d, mask=mask)


PLUS_TILES = [(128, 128, 32, 8), (64, 64, 32, 4), (128, 64, 32, 4)]


@needs_ptxas
@pytest.mark.parametrize("bm, bn, bk, warps", PLUS_TILES)
def test_sm90_accumulator_plus_blocked_tile_converts_both_ways(bm, bn, bk, warps, tmp_path, monkeypatch):
    """D goes into the accumulator's layout (ld.shared.v2 pairs at the 32-byte pad) and the sum out to the store
    layout (st.shared.v2 pairs); Triton 3.6 converts the same two ways."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KERNELLAB_MMA32_PAD", raising=False)
    _fresh(dot_plus_tile)
    M, N, K = 300, 328, 136
    a, b = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
    d, c = torch.empty(M, N), torch.empty(M, N)
    ck = dot_plus_tile.warmup(a, b, d, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=2, grid=(1,))
    ck.build_gpu(Target(90))
    assert ck.asm["cubin"][:4] == b"\x7fELF" and ck.n_spills == 0
    per_thread = bm * bn // (32 * warps)
    ptx = ck.asm["ptx"]
    assert len(re.findall(r"ld\.shared\.v2\.b32", ptx)) == per_thread // 2
    assert len(re.findall(r"st\.shared\.v2\.b32", ptx)) == per_thread // 2
    assert f"+{8 * (bn + 8) * 4}]" in ptx  # 8 rows of the 32-byte-padded scratch


def _operands(M, N, K, ab, cd, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) + 0.25).to(ab).cuda()
    b = (torch.randn(K, N, generator=g) * 0.1).to(ab).cuda()
    return a, b, torch.full((M, N), float("nan"), dtype=cd, device="cuda")


def _check(c, ref, tol):
    torch.cuda.synchronize()
    assert not torch.isnan(c).any()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < tol, err


# the old pad (KERNELLAB_MMA32_PAD=16) only for the fp32 output: the switch acts on 32-bit conversions only
OUT_PADS = [(out, None) for out in OUT] + [("f16-f32out", "16")]


@pytest.mark.gpu
@pytest.mark.parametrize("out, pad", OUT_PADS, ids=[f"{o}-{'pad16' if p else 'pad-new'}" for o, p in OUT_PADS])
@pytest.mark.parametrize("tile", TILES, ids=TILE_IDS)
@pytest.mark.parametrize("shape", [(512, 512, 256), (328, 200, 136), (8, 264, 72)], ids=["even", "ragged", "thin"])
def test_gpu_matmul_epilogue(pad, out, tile, shape, monkeypatch):
    if pad is None:
        monkeypatch.delenv("KERNELLAB_MMA32_PAD", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_MMA32_PAD", pad)
    _fresh(matmul_kernel)
    ab, cd = OUT[out]
    a, b, c = _operands(*shape, ab, cd)
    _launch(a, b, c, *tile)
    _check(c, a.double() @ b.double(), 1e-2 if cd != torch.float32 else 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("stmatrix", ["1", "0"])
@pytest.mark.parametrize("tile", TILES[:2], ids=TILE_IDS[:2])
def test_gpu_16bit_both_forms(stmatrix, tile, monkeypatch):
    monkeypatch.setenv("KERNELLAB_STMATRIX", stmatrix)
    _fresh(matmul_kernel)
    a, b, c = _operands(328, 520, 200, torch.bfloat16, torch.bfloat16, seed=3)
    _launch(a, b, c, *tile)
    _check(c, a.double() @ b.double(), 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("bm, bn, bk, warps", PLUS_TILES)
@pytest.mark.parametrize("pad", [None, "16"], ids=["pad-new", "pad16"])
def test_gpu_accumulator_plus_blocked_tile(bm, bn, bk, warps, pad, monkeypatch):
    if pad is None:
        monkeypatch.delenv("KERNELLAB_MMA32_PAD", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_MMA32_PAD", pad)
    _fresh(dot_plus_tile)
    M, N, K = 300, 328, 136
    a, b, c = _operands(M, N, K, torch.float16, torch.float32, seed=5)
    d = (torch.randn(M, N, generator=torch.Generator().manual_seed(6)) * 3).cuda()
    dot_plus_tile[(kl.cdiv(M, bm), kl.cdiv(N, bn))](a, b, d, c, M, N, K, BM=bm, BN=bn, BK=bk, num_warps=warps,
                                                    num_stages=2)
    _check(c, a.double() @ b.double() + d.double(), 1e-5)
