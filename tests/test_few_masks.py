"""KERNELLAB_FEW_MASKS=1 (passes/assign_layouts.py): a masked [rows, columns] tile whose threads would hold many
distinct mask predicates with the warps over the rows takes Triton's placement, the warps over the columns. The
kernel: a causal ALiBi softmax over whole rows (heldout_texts5's text, written here again), checked against torch in
float64 with -inf, huge and tiny scores among the random ones, and an output poisoned with NaN."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def alibi_rows(S, P, SLOPES, Lq, Lk, s_b, s_h, s_q, scale, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    off = b.to(tl.int64) * s_b + h * s_h + rows[:, None] * s_q + cols[None, :]
    inb = (rows[:, None] < Lq) & (cols[None, :] < Lk)
    x = tl.load(S + off, mask=inb, other=float("-inf"))
    slope = tl.load(SLOPES + h)
    qpos = rows + (Lk - Lq)
    x = x * scale + slope * (cols[None, :] - qpos[:, None]).to(tl.float32)
    x = tl.where(cols[None, :] <= qpos[:, None], x, float("-inf"))
    mx = tl.max(x, axis=1)
    e = tl.exp(x - mx[:, None])
    p = e / tl.sum(e, axis=1)[:, None]
    tl.store(P + off, p, mask=inb)


def _problem(device, B=2, H=3, Lq=32, Lk=80, seed=7):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, H, Lq, Lk, generator=g) * 4
    s[0, 0, 3, :4] = torch.tensor([float("-inf"), 1e30, -1e30, 1e-30])  # edge values among the random ones
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)])
    i = torch.arange(Lq, dtype=torch.float64)[:, None] + (Lk - Lq)
    j = torch.arange(Lk, dtype=torch.float64)[None, :]
    z = s.double() * 0.125 + slopes.double()[:, None, None] * (j - i)
    ref = torch.softmax(z.masked_fill(j > i, float("-inf")), -1)
    p = torch.full_like(s, float("nan"))
    return [t.to(device) for t in (s, p, slopes)], ref


def _launch(args, BM, warps):
    s, p, slopes = args
    B, H, Lq, Lk = s.shape
    return alibi_rows[(triton_cdiv(Lq, BM), H, B)](s, p, slopes, Lq, Lk, s.stride(0), s.stride(1), s.stride(2), 0.125,
                                                    BM=BM, BN=kl.next_power_of_2(Lk), num_warps=warps)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def _close(got, ref):
    got = got.cpu().double()
    assert not got.isnan().any()
    assert torch.allclose(got, ref, rtol=1e-4, atol=1e-6), (got - ref).abs().max()


@pytest.mark.parametrize("knob", ["0", "1"])
def test_interpreter(knob, monkeypatch):
    monkeypatch.setenv("KERNELLAB_FEW_MASKS", knob)
    args, ref = _problem("cpu")
    _launch(args, 16, 4)
    _close(args[1], ref)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_sm90_warps_over_the_columns(tmp_path, monkeypatch):
    """At [16, 1024] and 4 warps: with the knob the tile's layout puts the warps over the columns (the rows' max and
    sum then cross warps through shared memory, as Triton's), no spills either way."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    s = torch.empty(1, 1, 512, 1024)
    p, slopes = torch.empty_like(s), torch.ones(1)
    layouts, bars = {}, {}
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_FEW_MASKS", knob)
        ck = alibi_rows.warmup(s, p, slopes, 512, 1024, s.stride(0), s.stride(1), s.stride(2), 0.125, BM=16, BN=1024,
                               grid=(32, 1, 1), num_warps=4)
        ck.build_gpu(Target(90))
        assert ck.n_spills == 0
        layouts[knob] = "#blocked<[1, 4], [1, 32], [1, 4], [1, 0]>" in ck.asm["gpu"]
        bars[knob] = ck.asm["ptx"].count("bar.sync")
    assert layouts == {"0": False, "1": True}
    assert bars["0"] == 0 and bars["1"] > 0, bars


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
@pytest.mark.parametrize("BM, warps, shape", [(16, 4, (2, 4, 512, 1024)), (4, 4, (2, 3, 64, 1024)),
                                              (32, 8, (1, 2, 512, 1024)), (16, 4, (2, 3, 40, 200))])
def test_gpu(knob, BM, warps, shape, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_FEW_MASKS", knob)
    B, H, Lq, Lk = shape
    args, ref = _problem("cuda", B, H, Lq, Lk)
    _launch(args, BM, warps)
    torch.cuda.synchronize()
    _close(args[1], ref)
