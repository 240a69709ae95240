"""KERNELLAB_PIPELINE_INDEX_LOADS (pipeline_dot_operands, on by default; `0` turns it off): a dot loop whose tiles'
addresses need a scalar loaded in the loop (a block-sparse matmul's k-block index from a CSR table) is pipelined,
the index loaded in registers one iteration ahead of the cp.async copies it addresses. Without it the loop keeps the
register path (heldout_texts5's h5_bsr_matmul: 0.69-0.85x Triton on the H200). Interpreter results against float64
(the knob changes GPU IR only), a build for sm_90a at both settings, GPU results at both settings."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


@kl.jit
def bsr_mm(A, B, C, ROWPTR, KIDX, M, N, K, sam, sbk, scm, BLOCK: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK + tl.arange(0, BLOCK)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BN), dtype=tl.float32)
    for i in range(tl.load(ROWPTR + pid_m), tl.load(ROWPTR + pid_m + 1)):
        kk = tl.load(KIDX + i) * BLOCK + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * scm + rn[None, :], acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


CONFIGS = [dict(BLOCK=64, BN=128, num_warps=4, num_stages=3), dict(BLOCK=32, BN=64, num_warps=4, num_stages=2),
           dict(BLOCK=128, BN=128, num_warps=8, num_stages=3), dict(BLOCK=32, BN=32, num_warps=4, num_stages=4)]


def _inputs(M, N, K, block, device="cpu", seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) + 0.5).to(dtype)
    b = torch.randn(K, N, generator=g).to(dtype)
    mb, kb = -(-M // block), -(-K // block)
    lay = torch.rand(mb, kb, generator=g) < 0.4
    lay[0, -1] = True  # the table's last entry is read (the index loads ahead must stop there)
    if mb > 1:
        lay[1] = False  # an empty block row: the loop does not run, the row is zeros
    if mb > 2:
        lay[2] = True  # a full block row
    lay[-1, -1] = True
    rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), lay.sum(1).cumsum(0)]).to(torch.int32)
    kidx = lay.nonzero()[:, 1].to(torch.int32).contiguous()
    mask = lay.repeat_interleave(block, 0).repeat_interleave(block, 1)[:M, :K]
    c = torch.full((M, N), float("nan"), dtype=dtype)  # poisoned: every element must be written
    ref = (a.double() * mask.double()) @ b.double()
    t = [x.to(device) for x in (a, b, c, rowptr, kidx)]
    return (*t, ref)


def _launch(a, b, c, rowptr, kidx, **cfg):
    M, K = a.shape
    N = b.shape[1]
    block, bn = cfg["BLOCK"], cfg["BN"]
    bsr_mm[(-(-M // block), -(-N // bn))](a, b, c, rowptr, kidx, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                                          **cfg)


def test_interpreter_against_float64():
    a, b, c, rowptr, kidx, ref = _inputs(100, 72, 160, 32, seed=3, dtype=torch.float32)
    _launch(a, b, c, rowptr, kidx, BLOCK=32, BN=32)
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4)


def _build(cfg):
    a, b, c, rowptr, kidx, _ = _inputs(512, 512, 512, cfg["BLOCK"])
    M, K = a.shape
    ck = bsr_mm.warmup(a, b, c, rowptr, kidx, M, b.shape[1], K, a.stride(0), b.stride(0), c.stride(0), grid=(1,),
                       **cfg)
    try:
        ck.build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return ck


@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("cfg", CONFIGS[:3])
def test_the_tiles_ride_in_the_stages(monkeypatch, knob, cfg):
    monkeypatch.setenv("KERNELLAB_PIPELINE_INDEX_LOADS", knob)
    ck = _build(cfg)
    stats = next(r.stats for r in ck.trace.passes if r.name == "pipeline_dot_operands")
    gpu = ck.asm["gpu"]
    loop = gpu[gpu.index("scf.for"):]
    tile_loads = re.findall(r"= tt\.load .*: tensor<", loop)
    if knob == "0":
        assert stats["pipelined"] == 0 and len(tile_loads) == 2
        assert "cp.async" not in ck.asm["ptx"]
    else:
        assert stats["pipelined"] == 1 and stats["index_loads"] == 1 and not tile_loads
        assert re.search(rf"local_alloc .*memdesc<{cfg['num_stages']}x{cfg['BLOCK']}x{cfg['BLOCK']}xf16", gpu)
        # in the loop: the one scalar index load, masked, for the iteration after the copies' one
        assert len(re.findall(r"= tt\.load %\w+, %\w+, %\w+ : i32", loop)) == 1
        assert "cp.async" in ck.asm["ptx"]
        assert ck.n_spills == 0


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_gpu(knob, cfg, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_PIPELINE_INDEX_LOADS", knob)
    for (M, N, K), seed in (((256, 256, 512), 1), ((300, 200, 416), 2), ((cfg["BLOCK"], 128, cfg["BLOCK"]), 3),
                            ((1000, 384, 1536), 4)):
        a, b, c, rowptr, kidx, ref = _inputs(M, N, K, cfg["BLOCK"], "cuda", seed)
        _launch(a, b, c, rowptr, kidx, **cfg)
        torch.testing.assert_close(c.double().cpu(), ref, rtol=2e-2, atol=5e-2)
