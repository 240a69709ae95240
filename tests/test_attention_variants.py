"""The block-pointer attention text of `benchmarks/attention_kernel.py` (`make_attention_bp_kernel`): grouped-query
heads and e4m3 inputs with V stored transposed. The interpreter against float64, the sm_90a build (both dots on
wgmma, fp8 ones included; no spills), and (marked gpu) the compiled kernel on CUDA against float32 SDPA and the
benchmark's variant rows."""
from __future__ import annotations

import math
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from benchmarks.attention import CONFIGS, FP8_TOL, TOL, _fmt, run_variant_row
from benchmarks.attention_kernel import attention_bp, make_attention_bp_kernel

KERNEL = make_attention_bp_kernel(kl, tl)
E4M3 = torch.float8_e4m3fn


def reference(q, k, v, causal, sm_scale):
    """float64 softmax(q k^T * sm_scale) v, each key/value head shared by heads / kv_heads query heads."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (t.detach().cpu().double() for t in (q, k, v))
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _inputs(Z, H, H_KV, S, D, seed, dtype=torch.float16, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(Z, H, S, D, generator=g)
    k, v = (torch.randn(Z, H_KV, S, D, generator=g) for _ in range(2))
    q[0, 0, 0, :4] = torch.tensor([3.5, -3.5, 1e-3, -1e-3])  # a few edge magnitudes
    return [t.to(dtype).to(device) for t in (q, k, v)]


CASES = [(4, 1, 64, 32, 32, 16), (4, 2, 96, 64, 32, 32), (2, 2, 64, 32, 64, 32)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("H,H_KV,S,D,BM,BN", CASES, ids=[f"h{c[0]}kv{c[1]}-s{c[2]}-d{c[3]}" for c in CASES])
def test_gqa_interpreter(H, H_KV, S, D, BM, BN, causal):
    """Query heads sharing key/value heads (group 4, 2 and 1), several key blocks, the causal diagonal spanning
    several of them: against float64, output poisoned."""
    q, k, v = _inputs(2, H, H_KV, S, D, seed=H + H_KV + S + D + BM + BN)
    out = torch.full_like(q, float("nan"))
    sm = 1.0 / math.sqrt(D)
    attention_bp(q, k, v, causal, sm, kl, KERNEL, BLOCK_M=BM, BLOCK_N=BN, out=out)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    torch.testing.assert_close(out.double(), reference(q, k, v, causal, sm), atol=4e-3, rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fp8_transposed_v_interpreter(causal):
    """e4m3 q, k, v (v stored [.., head_dim, seq]): p is rounded to e4m3 before the second dot, so the output is
    within FP8_TOL of float64 attention over the same e4m3 values."""
    q, k, v = _inputs(1, 2, 2, 64, 32, seed=7 + int(causal), dtype=E4M3)
    out = torch.full(q.shape, float("nan"), dtype=torch.float16)
    sm = 1.0 / math.sqrt(32)
    attention_bp(q, k, v.transpose(-1, -2).contiguous(), causal, sm, kl, KERNEL, BLOCK_M=32, BLOCK_N=32, out=out,
                 v_transposed=True)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    err = (out.double() - reference(q.float(), k.float(), v.float(), causal, sm)).abs().max().item()
    assert err <= FP8_TOL, err


def test_variant_rows_on_cpu():
    """benchmarks/attention.py's variant rows (check, poisoned output, TFLOP/s, the table line) with the interpreter
    and a dummy timer, so the GPU script does not rot."""
    cfg = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=3)  # (fp8 dots need K >= 32)
    for variant in ("gqa", "fp8"):
        row = run_variant_row({"kernellab": (kl, KERNEL)}, variant, 1, 4, 64, 32, True, device="cpu",
                              timer=lambda fn: (fn(), 1e-3)[1], cfg=cfg)
        assert row["kernellab"]["ok"], row
        assert row["kv_heads"] == (1 if variant == "gqa" else 4)
        assert _fmt(row).startswith(f"{variant} hd32 s64 causal")


BUILD_CASES = [(64, "gqa", False), (128, "gqa", True), (128, "fp8", False), (64, "fp8", True)]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("D,variant,causal", BUILD_CASES, ids=[f"hd{d}-{v}-{'causal' if c else 'full'}"
                                                               for d, v, c in BUILD_CASES])
def test_builds_on_wgmma_without_spills(D, variant, causal, tmp_path, monkeypatch):
    """The benchmark's configs build for sm_90a (no GPU needed) with both dots on wgmma (e4m3 ones for fp8, V read
    K-major from its transposed storage) and no spills."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    dt = E4M3 if variant == "fp8" else torch.float16
    q = torch.empty(4, 16, 1024, D, dtype=dt)
    kv = torch.empty(4, 4 if variant == "gqa" else 16, 1024, D, dtype=dt)
    v = kv.transpose(-1, -2).contiguous() if variant == "fp8" else kv
    out = torch.empty(q.shape, dtype=torch.float16)
    cfg = CONFIGS[D]
    ck = KERNEL.warmup(q, kv, v, out, 0.1, *q.stride(), *kv.stride(), *v.stride(), *out.stride(), 16, 1024,
                       GROUP=16 // kv.shape[1], HEAD_DIM=D, CAUSAL=causal, V_T=variant == "fp8", grid=(8, 64),
                       **cfg)
    ck.build_gpu(Target(90))
    ptx = ck.asm["ptx"]
    kind = "e4m3.e4m3" if variant == "fp8" else "f16.f16"
    widths = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k\d+\.f32\." + re.escape(kind), ptx))
    assert widths == {str(cfg["BLOCK_N"]), str(D)}, f"both dots on wgmma ({kind}): {widths}"
    assert "mma.sync" not in ptx
    assert ck.n_spills == 0, f"{ck.n_spills} bytes spilled ({ck.n_regs} registers)"


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["gqa", "fp8"])
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_vs_sdpa(D, variant, causal):
    """The compiled kernel with the benchmark's config on CUDA against float32 SDPA of the same (dequantized)
    inputs; 2 batches, 8 query heads over 2 key/value heads (gqa) or 3 heads (fp8), 512 keys."""
    H, H_KV = (8, 2) if variant == "gqa" else (3, 3)
    dt = E4M3 if variant == "fp8" else torch.float16
    q, k, v = _inputs(2, H, H_KV, 512, D, seed=D + int(causal), dtype=dt, device="cuda")
    out = torch.full(q.shape, float("nan"), dtype=torch.float16, device="cuda")
    sm = 1.0 / math.sqrt(D)
    vv = v.transpose(-1, -2).contiguous() if variant == "fp8" else v
    attention_bp(q, k, vv, causal, sm, kl, KERNEL, out=out, v_transposed=variant == "fp8", **CONFIGS[D])
    torch.cuda.synchronize()
    kf, vf = (t.float().repeat_interleave(H // H_KV, dim=1) for t in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), kf, vf, is_causal=causal, scale=sm)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    err = (out.float() - ref).abs().max().item()
    assert err <= (FP8_TOL if variant == "fp8" else TOL), err


@pytest.mark.gpu
def test_variant_rows_on_gpu():
    """The benchmark's own rows at a small size on CUDA (kernellab only): correct, timed, torch beside."""
    for variant in ("gqa", "fp8"):
        row = run_variant_row({"kernellab": (kl, KERNEL)}, variant, 1, 8, 1024, 128, False,
                              timer=lambda fn: (fn(), 1e-3)[1])
        assert row["kernellab"]["ok"], row
        assert "torch" in row
