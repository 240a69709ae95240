"""The flash-attention forward kernel of `benchmarks/attention.py`: the CPU interpreter against a
float64 reference, the GPU backend down to a cubin (ptxas, no GPU) with the fp16 dots on tensor
cores, and (marked gpu) the compiled kernel on CUDA against torch SDPA."""
from __future__ import annotations

import math
import re
import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from benchmarks.attention import CONFIGS
from benchmarks.attention_kernel import LOG2E, attention, make_attention_kernel
from tests.ptx import loop_bodies

KERNEL = make_attention_kernel(kl, tl)


def reference(q, k, v, causal, sm_scale):
    """softmax(q k^T * sm_scale) v in float64 on the CPU, keys after the query masked when causal."""
    q, k, v = (t.detach().cpu().double() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _inputs(Z, H, S, D, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(Z, H, S, D, generator=g).half().to(device) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S,D,BM,BN", [(128, 32, 64, 32), (192, 64, 64, 32), (128, 64, 32, 32), (128, 32, 64, 64)])
def test_attention_interpreter(S, D, BM, BN, causal):
    """Several query blocks, several key blocks per query block (and, causal, a diagonal block that
    spans several key blocks when BLOCK_M > BLOCK_N), 2 heads: against float64."""
    q, k, v = _inputs(1, 2, S, D, seed=S + D + BM + BN)
    out = torch.full_like(q, float("nan"))
    sm_scale = 1.0 / math.sqrt(D)
    attention(q, k, v, causal, sm_scale, kl, KERNEL, BLOCK_M=BM, BLOCK_N=BN, num_warps=4, num_stages=3, out=out)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    torch.testing.assert_close(out.double(), reference(q, k, v, causal, sm_scale), atol=4e-3, rtol=1e-2)


def test_attention_batch_strides_interpreter():
    """Batch > 1 and non-contiguous q/k/v/out (a [Z, S, H, D] buffer viewed as [Z, H, S, D]): every stride is used."""
    Z, H, S, D = 2, 3, 64, 32
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(Z, S, H, D, generator=g).half().transpose(1, 2) for _ in range(3))
    out = torch.full((Z, S, H, D), float("nan"), dtype=torch.float16).transpose(1, 2)
    attention(q, k, v, True, 0.3, kl, KERNEL, BLOCK_M=32, BLOCK_N=16, out=out)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), reference(q, k, v, True, 0.3), atol=4e-3, rtol=1e-2)


CODEGEN_CASES = [(64, False, 4), (64, True, 4), (128, False, 8), (128, True, 8)]


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("D,causal,num_warps", CODEGEN_CASES,
                         ids=[f"hd{d}-{'causal' if c else 'full'}" for d, c, _ in CODEGEN_CASES])
def test_attention_assembles_with_tensor_cores(D, causal, num_warps, tmp_path, monkeypatch):
    """The benchmark's configs go through the GPU backend to a cubin for sm_90a (no GPU needed): both fp16 dots
    run on wgmma (two m64 instructions per warpgroup and k-step with 4 warps), q·kT reads q and kT from
    swizzled shared memory, p·v takes p straight from the registers q·kT wrote, and ptxas keeps the wgmmas
    asynchronous (no C7514), with p·v in flight into the next iteration."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))  # compile, do not reuse a cached cubin
    q = torch.empty(4, 16, 1024, D, dtype=torch.float16)
    cfg = CONFIGS[D]
    assert cfg["num_warps"] == num_warps
    bn = cfg["BLOCK_N"]
    ck = KERNEL.warmup(q, q, q, q, LOG2E / math.sqrt(D), *q.stride(), *q.stride(), *q.stride(), *q.stride(), 16, 1024,
                       HEAD_DIM=D, CAUSAL=causal, grid=(8, 64), **cfg)
    ck.build_gpu(Target(90))
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    assert ck.n_regs and ck.n_regs > 0
    ptx = ck.asm["ptx"]
    assert ".entry attention_fwd_kernel" in ptx and "llvm.nvvm" not in ptx
    wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16 \{[^}]*\}, (\{?)", ptx)
    blocks = 128 // (16 * num_warps)  # m64 instructions per warpgroup and k-step
    loops = 2 if causal else 1
    # q·kT: HEAD_DIM / 16 k-steps with descriptors; p·v: BLOCK_N / 16 k-steps with A in four registers
    assert sorted(wgmmas) == sorted([(str(bn), "")] * (D // 16 * blocks * loops) +
                                    [(str(D), "{")] * (bn // 16 * blocks * loops))
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx and "ex2.approx" in ptx
    assert "C7514" not in ck.report.get("log", "") and not any("Performance Loss" in n for n in ck.trace.notes)
    # p·v is not waited for where it is issued: the loop's dot_wait and one after each loop come on top; with one
    # warpgroup the loop's dot_wait follows the scores' own wait_group 0 and is only a tie (no second wait)
    in_loop = loops if num_warps == 8 else 0
    assert ptx.count("wgmma.wait_group") == ptx.count("wgmma.commit_group") + in_loop
    assert "#mma" in ck.asm["gpu"]
    if D == 128 and not causal:
        # the warp index comes through a shuffle, so ptxas keeps the descriptors in uniform registers
        # (at 128x64 tiles: 223 registers and 16 R2UR moves per iteration before, 169 after)
        assert "shfl.sync.idx.b32" in ptx and ck.n_regs <= 240 and not ck.n_spills, ck.n_regs
    loops_ptx = loop_bodies(ptx)  # the causal diagonal loop has one iteration when BLOCK_N = BLOCK_M: no loop
    assert 1 <= len(loops_ptx) <= loops
    for body in loops_ptx:
        if num_warps == 8:  # two warpgroups: mbarriers and turns, no CTA-wide barrier in the loop
            assert "bar.sync \t0;" not in body and "cp.async.wait_group" not in body
            assert body.count("bar.arrive") == 1 and "cp.async.mbarrier.arrive.noinc" in body
            assert "mbarrier.try_wait.parity" in body and "@p mbarrier.arrive.shared" in body
        else:
            assert "bar.sync \t0;" in body and "mbarrier" not in body


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,num_warps", [(64, 4), (128, 8)])
def test_attention_gpu_vs_sdpa(D, num_warps, causal):
    """The compiled kernel on CUDA with the benchmark's block sizes, against torch SDPA in float32."""
    Z, H, S = 2, 3, 512
    q, k, v = _inputs(Z, H, S, D, seed=D + int(causal), device="cuda")
    out = torch.full_like(q, float("nan"))
    sm_scale = 1.0 / math.sqrt(D)
    assert CONFIGS[D]["num_warps"] == num_warps
    attention(q, k, v, causal, sm_scale, kl, KERNEL, out=out, **CONFIGS[D])
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                           scale=sm_scale)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)


TURN_CASES = [(d, bn, st, n, c) for d in (64, 128) for bn in (64, 128) for st in (2, 3) for n in (128, 384)
              for c in (False, True) if not (d == 128 and bn == 128 and st == 3 and n == 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("D,BN,stages,S,causal", TURN_CASES,
                         ids=[f"hd{d}-bn{bn}-s{st}-n{n}-{'causal' if c else 'full'}" for d, bn, st, n, c in TURN_CASES])
def test_attention_two_warpgroups_taking_turns(D, BN, stages, S, causal):
    """8 warps (mbarrier stages, warpgroups taking turns on named barriers) with 2 and 3 stages, one and three
    key blocks, and the causal diagonal loop: every trip count of the protocol finishes and matches SDPA."""
    q, k, v = _inputs(2, 3, S, D, seed=S + D + BN + stages, device="cuda")
    out = torch.full_like(q, float("nan"))
    sm_scale = 1.0 / math.sqrt(D)
    attention(q, k, v, causal, sm_scale, kl, KERNEL, BLOCK_M=128, BLOCK_N=BN, num_warps=8, num_stages=stages,
              out=out)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                           scale=sm_scale)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)


def test_benchmark_row_on_cpu():
    """benchmarks/attention.py's row logic (check against SDPA, poisoned output, TFLOP/s, ratios, table)
    with the interpreter and a dummy timer, so the GPU script does not rot."""
    from benchmarks.attention import _fmt, attention_flops, run_row

    row = run_row({"kernellab": (kl, KERNEL)}, 1, 2, 64, 32, True, device="cpu", timer=lambda fn: (fn(), 1e-3)[1],
                  cfg=dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=3))
    assert row["kernellab"]["ok"], row
    assert row["flops"] == attention_flops(1, 2, 64, 32, True) == 2 * 2 * 64 * 64 * 32
    assert row["kernellab"]["tflops"] == pytest.approx(row["flops"] / 1e-3 / 1e12)
    line = _fmt(row)
    assert line.startswith("hd32 s64 causal") and "1.00" in line


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("D,BN", [(64, 64), (128, 64), (64, 32)])
def test_attention_64_query_rows_over_8_warps(D, BN, causal):
    """BLOCK_M = 64 over 8 warps: the scores' and the output's wgmma split their columns between two warpgroups
    ([4, 2]), so the softmax's row max and sum cross warpgroups and p goes through shared memory."""
    q, k, v = _inputs(2, 3, 320, D, seed=D + BN, device="cuda")
    out = torch.full_like(q, float("nan"))
    sm_scale = 1.0 / math.sqrt(D)
    attention(q, k, v, causal, sm_scale, kl, KERNEL, BLOCK_M=64, BLOCK_N=BN, num_warps=8, num_stages=2, out=out)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                           scale=sm_scale)
    assert not torch.isnan(out).any(), "output has unwritten (NaN-poisoned) elements"
    torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)
