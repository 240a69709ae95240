"""KERNELLAB_SIBLING_WGMMA (pipeline_dot_operands' `_overlappable_siblings`): a loop of independent wgmma
accumulations that read the same stages (Liger's fused MoE up-projection: `acc_g = dot(x, wg.T, acc_g);
acc_u = dot(x, wu.T, acc_u)`, then SwiGLU) keeps all of them in flight: both issued, one wait_group 2 retires the
previous iteration's pair, a barrier, the copies. Off (the default), the pair is taken for attention's chain and
the first dot waits at once (wait_group 0 in the loop). Pass tests (IR in, IR out), the lowering's waits in the
PTX and the SASS of an sm_90a build (no GPU needed), the interpreter, and on a GPU (`gpu`) the kernel against
float64 and the knob's build against the default's, bit for bit."""
from __future__ import annotations

import re

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import pipeline_dot_operands
from kernellab.errors import ToolchainError
from tests.gpu_passes.conftest import run_check, run_gpu_pass

KNOB = "KERNELLAB_SIBLING_WGMMA"

SIBLINGS = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[4, 1]>
tt.func @k(%a_ptrs: tensor<64x32x!ptr<f16>, #L0>, %g_ptrs: tensor<32x32x!ptr<f16>, #L0>, %u_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step_a = arith.constant {value = 32} : tensor<64x32xi32, #L0>
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %gate, %up, %pa, %pg, %pu = scf.for %c0, %n, %c1, %zero, %zero, %a_ptrs, %g_ptrs, %u_ptrs : tensor<64x32xf32, #L1>, tensor<64x32xf32, #L1>, tensor<64x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0> {
  ^bb(%i: i32, %g0: tensor<64x32xf32, #L1>, %u0: tensor<64x32xf32, #L1>, %pa0: tensor<64x32x!ptr<f16>, #L0>, %pg0: tensor<32x32x!ptr<f16>, #L0>, %pu0: tensor<32x32x!ptr<f16>, #L0>):
    %a = tt.load %pa0 {vec = 8} : tensor<64x32xf16, #L0>
    %wg = tt.load %pg0 {vec = 8} : tensor<32x32xf16, #L0>
    %g1 = tt.dot %a, %wg, %g0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L1>
    %wu = tt.load %pu0 {vec = 8} : tensor<32x32xf16, #L0>
    %u1 = tt.dot %a, %wu, %u0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1]} : tensor<64x32xf32, #L1>
    %pa1 = tt.addptr %pa0, %step_a : tensor<64x32x!ptr<f16>, #L0>
    %pg1 = tt.addptr %pg0, %step : tensor<32x32x!ptr<f16>, #L0>
    %pu1 = tt.addptr %pu0, %step : tensor<32x32x!ptr<f16>, #L0>
    scf.yield %g1, %u1, %pa1, %pg1, %pu1
  }
  %h = arith.mulf %gate, %up : tensor<64x32xf32, #L1>
  tt.store %c_ptrs, %h
  tt.return
}
"""

SIBLINGS_PIPELINED = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[4, 1]>

tt.func @k(%a_ptrs: tensor<64x32x!ptr<f16>, #L0>, %g_ptrs: tensor<32x32x!ptr<f16>, #L0>, %u_ptrs: tensor<32x32x!ptr<f16>, #L0>, %c_ptrs: tensor<64x32x!ptr<f32>, #L1>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %step_a = arith.constant {value = 32} : tensor<64x32xi32, #L0>
  %step = arith.constant {value = 32} : tensor<32x32xi32, #L0>
  %zero = arith.constant {value = 0.0} : tensor<64x32xf32, #L1>
  %a_stages = ttg.local_alloc {operand = "a", stages = 2} : !memdesc<2x64x32xf16, order=1,0, pad=0, swizzle=64>
  %b_stages = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x32x32xf16, order=1,0, pad=0, swizzle=64>
  %b_stages_1 = ttg.local_alloc {operand = "b", stages = 2} : !memdesc<2x32x32xf16, order=1,0, pad=0, swizzle=64>
  %0 = arith.constant {value = 0} : i32
  %1 = arith.cmpi %c0, %n {predicate = "slt"} : i1
  %2 = ttg.memdesc_index %a_stages, %0 : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
  ttg.async_copy %a_ptrs, %2, %1 {vec = 8}
  %3 = ttg.memdesc_index %b_stages, %0 : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
  ttg.async_copy %g_ptrs, %3, %1 {vec = 8}
  %4 = ttg.memdesc_index %b_stages_1, %0 : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
  ttg.async_copy %u_ptrs, %4, %1 {vec = 8}
  ttg.async_commit
  %pa1 = tt.addptr %a_ptrs, %step_a : tensor<64x32x!ptr<f16>, #L0>
  %pg1 = tt.addptr %g_ptrs, %step : tensor<32x32x!ptr<f16>, #L0>
  %pu1 = tt.addptr %u_ptrs, %step : tensor<32x32x!ptr<f16>, #L0>
  %5 = arith.constant {value = 0} : i32
  %6 = arith.constant {value = 1} : i32
  %gate, %up, %7, %8, %9, %10, %11 = scf.for %c0, %n, %c1, %zero, %zero, %pa1, %pg1, %pu1, %5, %6 {pipelined_stages = 2} : tensor<64x32xf32, #L1>, tensor<64x32xf32, #L1>, tensor<64x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0>, tensor<32x32x!ptr<f16>, #L0>, i32, i32 {
  ^bb(%i: i32, %g0: tensor<64x32xf32, #L1>, %u0: tensor<64x32xf32, #L1>, %pa0_ahead: tensor<64x32x!ptr<f16>, #L0>, %pg0_ahead: tensor<32x32x!ptr<f16>, #L0>, %pu0_ahead: tensor<32x32x!ptr<f16>, #L0>, %read_stage: i32, %write_stage: i32):
    ttg.async_wait %a_stages, %b_stages, %b_stages_1 {pending = 0}
    %12 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %13 = ttg.memdesc_index %b_stages, %read_stage : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
    %g1 = tt.dot %12, %13, %g0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1], wgmma_async = true} : tensor<64x32xf32, #L1>
    %14 = ttg.memdesc_index %a_stages, %read_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    %15 = ttg.memdesc_index %b_stages_1, %read_stage : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
    %u1 = tt.dot %14, %15, %u0 {input_precision = "ieee", instr = "wgmma.m64n32k16.f16", mma = [4, 1], wgmma_async = true} : tensor<64x32xf32, #L1>
    %g1_1 = ttg.dot_wait %g1 {pending = 2} : tensor<64x32xf32, #L1>
    %u1_1 = ttg.dot_wait %u1 {pending = 2} : tensor<64x32xf32, #L1>
    ttg.barrier {reason = "every warpgroup's previous wgmmas have read the stages refilled next"}
    %16 = arith.constant {value = 1} : i32
    %17 = arith.addi %i, %16 : i32
    %18 = arith.cmpi %17, %n {predicate = "slt"} : i1
    %19 = ttg.memdesc_index %a_stages, %write_stage : !memdesc<64x32xf16, order=1,0, pad=0, swizzle=64>
    ttg.async_copy %pa0_ahead, %19, %18 {vec = 8}
    %20 = ttg.memdesc_index %b_stages, %write_stage : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
    ttg.async_copy %pg0_ahead, %20, %18 {vec = 8}
    %21 = ttg.memdesc_index %b_stages_1, %write_stage : !memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>
    ttg.async_copy %pu0_ahead, %21, %18 {vec = 8}
    ttg.async_commit
    %pa1_1 = tt.addptr %pa0_ahead, %step_a : tensor<64x32x!ptr<f16>, #L0>
    %pg1_1 = tt.addptr %pg0_ahead, %step : tensor<32x32x!ptr<f16>, #L0>
    %pu1_1 = tt.addptr %pu0_ahead, %step : tensor<32x32x!ptr<f16>, #L0>
    %22 = arith.constant {value = 1} : i32
    %23 = arith.constant {value = 1} : i32
    %24 = arith.cmpi %read_stage, %23 {predicate = "eq"} : i1
    %25 = arith.constant {value = 0} : i32
    %26 = arith.addi %read_stage, %22 : i32
    %27 = arith.select %24, %25, %26 : i32
    %28 = arith.cmpi %write_stage, %23 {predicate = "eq"} : i1
    %29 = arith.constant {value = 0} : i32
    %30 = arith.addi %write_stage, %22 : i32
    %31 = arith.select %28, %29, %30 : i32
    scf.yield %g1_1, %u1_1, %pa1_1, %pg1_1, %pu1_1, %27, %31
  }
  %gate_1 = ttg.dot_wait %gate {pending = 0} : tensor<64x32xf32, #L1>
  %up_1 = ttg.dot_wait %up {pending = 0} : tensor<64x32xf32, #L1>
  ttg.async_wait %a_stages, %b_stages, %b_stages_1 {pending = 0}
  %h = arith.mulf %gate_1, %up_1 : tensor<64x32xf32, #L1>
  tt.store %c_ptrs, %h
  tt.return
}
"""


@pytest.fixture
def check():
    return run_check


@pytest.fixture
def run_pass():
    return run_gpu_pass


def _loop_body(m):
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    return loop, loop.regions[0].ops


# ------------------------------------------------------------------------------------------- the pass
def test_siblings_stay_in_flight_with_one_wait(check, monkeypatch):
    """Knob on, two stages: both dots async, one dot_wait 2 per accumulator after the second (the yield reads
    them), a barrier, then the copies; after the loop a wait 0 per accumulator, then the copies' drain."""
    monkeypatch.setenv(KNOB, "1")
    _, stats = check(pipeline_dot_operands, SIBLINGS, SIBLINGS_PIPELINED, GpuOptions(num_warps=4, num_stages=2))
    assert stats == {"pipelined": 1, "buffers": 3, "skipped": [], "overlapped_wgmma": 1, "sibling_wgmma": 2}


@pytest.mark.parametrize("stages", [3, 4])
def test_siblings_with_more_stages(run_pass, monkeypatch, stages):
    monkeypatch.setenv(KNOB, "1")
    m, stats = run_pass(pipeline_dot_operands, SIBLINGS, GpuOptions(num_warps=4, num_stages=stages))
    assert stats["sibling_wgmma"] == 2
    loop, body = _loop_body(m)
    kinds = [op.name for op in body]
    assert body[0].name == "ttg.async_wait" and body[0].attrs["pending"] == stages - 2
    dots = [op for op in body if op.name == "tt.dot"]
    waits = [op for op in body if op.name == "ttg.dot_wait"]
    assert all(d.attrs.get("wgmma_async") for d in dots) and [w.attrs["pending"] for w in waits] == [2, 2]
    assert body.index(dots[1]) < body.index(waits[0]) and body.index(waits[0]) + 1 == body.index(waits[1])
    assert body.index(waits[1]) + 1 == kinds.index("ttg.barrier") < kinds.index("ttg.async_copy")
    assert [w.operands[0] for w in waits] == [d.result for d in dots]
    assert body[-1].operands[:2] == [w.result for w in waits]
    top = m.kernel.body.ops
    i = top.index(loop)
    assert [op.name for op in top[i + 1:i + 4]] == ["ttg.dot_wait", "ttg.dot_wait", "ttg.async_wait"]
    assert [top[i + 1].operands[0], top[i + 2].operands[0]] == list(loop.results[:2])


def test_knob_off_keeps_the_chain(run_pass, monkeypatch):
    """The default: the first dot is issued without async and its wait (wait 0) retires the second's previous
    group before the barrier and the copies (attention's chain); only the second stays in flight."""
    monkeypatch.delenv(KNOB, raising=False)
    m, stats = run_pass(pipeline_dot_operands, SIBLINGS, GpuOptions(num_warps=4, num_stages=2))
    assert "sibling_wgmma" not in stats and stats["overlapped_wgmma"] == 1
    _, body = _loop_body(m)
    first, second = [op for op in body if op.name == "tt.dot"]
    assert not first.attrs.get("wgmma_async") and second.attrs["wgmma_async"]
    waits = [op for op in body if op.name == "ttg.dot_wait"]
    assert [w.attrs["pending"] for w in waits] == [0] and body.index(waits[0]) == body.index(first) + 1


def _variant(old: str, new: str) -> str:
    assert old in SIBLINGS
    return SIBLINGS.replace(old, new)


# the gate's accumulation read in the body (a dot whose result something besides the yield reads)
READ_IN_BODY = _variant("    %pa1 = tt.addptr", "    %x = arith.mulf %g1, %g1 : tensor<64x32xf32, #L1>\n    %pa1 = tt.addptr")
# the gate's product not accumulated (its acc a constant zero): the chain's first dot (attention's scores)
NOT_ACCUMULATED = _variant("%g1 = tt.dot %a, %wg, %g0", "%g1 = tt.dot %a, %wg, %zero")
# two dots into one accumulator
SAME_ACC = _variant("%u1 = tt.dot %a, %wu, %u0", "%u1 = tt.dot %a, %wu, %g1")


@pytest.mark.parametrize("text", [READ_IN_BODY, NOT_ACCUMULATED, SAME_ACC],
                         ids=["read-in-body", "not-accumulated", "same-acc"])
def test_not_siblings(run_pass, monkeypatch, text):
    """Knob on, but a dot is not a plain accumulation of its own: no sibling overlap (what was done before)."""
    monkeypatch.delenv(KNOB, raising=False)
    before, stats_off = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    monkeypatch.setenv(KNOB, "1")
    after, stats_on = run_pass(pipeline_dot_operands, text, GpuOptions(num_warps=4, num_stages=3))
    assert "sibling_wgmma" not in stats_on and stats_on == stats_off
    from kernellab.compiler.printer import print_module

    assert print_module(after, with_locs=False) == print_module(before, with_locs=False)


def test_one_dot_is_unchanged_by_the_knob(run_pass, monkeypatch):
    from kernellab.compiler.printer import print_module

    from .gpu_passes.test_pipeline_dot_operands import WGMMA_LOOP

    monkeypatch.delenv(KNOB, raising=False)
    before, s0 = run_pass(pipeline_dot_operands, WGMMA_LOOP, GpuOptions(num_warps=4, num_stages=3))
    monkeypatch.setenv(KNOB, "1")
    after, s1 = run_pass(pipeline_dot_operands, WGMMA_LOOP, GpuOptions(num_warps=4, num_stages=3))
    assert s0 == s1 and print_module(after, with_locs=False) == print_module(before, with_locs=False)


# ------------------------------------------------------------------------------------------- a kernel
@kl.jit
def gated_gather(x_ptr, idx_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K, sxm, swn, som, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[m, n] = silu(x[idx[m]] . wg[n]) * (x[idx[m]] . wu[n]): rows of x gathered through an index table (as
    Liger's fused MoE up-projection loads them), two accumulations per K step that share the x tile."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows = tl.load(idx_ptr + rm, mask=rm < M, other=0).to(tl.int64)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K):
        kk = k + rk
        x = tl.load(x_ptr + rows[:, None] * sxm + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        wmask = (rn[:, None] < N) & (kk[None, :] < K)
        wg = tl.load(wg_ptr + rn[:, None] * swn + kk[None, :], mask=wmask, other=0.0)
        acc_g = tl.dot(x, tl.trans(wg), acc=acc_g)
        wu = tl.load(wu_ptr + rn[:, None] * swn + kk[None, :], mask=wmask, other=0.0)
        acc_u = tl.dot(x, tl.trans(wu), acc=acc_u)
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(out_ptr + rm[:, None] * som + rn[None, :], h.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def gated_block_ptr(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K, sxm, swn, som, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The same SwiGLU pair with block-pointer tiles (their stages filled by TMA on sm_90, as Liger's mlp loads
    through tensor descriptors); rows of x not gathered."""
    pm, pn = tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N
    xb = tl.make_block_ptr(x_ptr, (M, K), (sxm, 1), (pm, 0), (BLOCK_M, BLOCK_K), (1, 0))
    gb = tl.make_block_ptr(wg_ptr, (N, K), (swn, 1), (pn, 0), (BLOCK_N, BLOCK_K), (1, 0))
    ub = tl.make_block_ptr(wu_ptr, (N, K), (swn, 1), (pn, 0), (BLOCK_N, BLOCK_K), (1, 0))
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        x = tl.load(xb, boundary_check=(0, 1), padding_option="zero")
        acc_g = tl.dot(x, tl.trans(tl.load(gb, boundary_check=(0, 1), padding_option="zero")), acc_g)
        acc_u = tl.dot(x, tl.trans(tl.load(ub, boundary_check=(0, 1), padding_option="zero")), acc_u)
        xb = tl.advance(xb, (0, BLOCK_K))
        gb = tl.advance(gb, (0, BLOCK_K))
        ub = tl.advance(ub, (0, BLOCK_K))
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    rm, rn = pm + tl.arange(0, BLOCK_M), pn + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + rm[:, None] * som + rn[None, :], h.to(out_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _operands(M, N, K, T, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, K, generator=g) * 0.5).to(dtype)
    x[0, :3] = torch.tensor([3.0, -2.5, 1e-3]).to(dtype)  # a few edge values, never zeros
    idx = torch.randint(0, T, (M,), generator=g, dtype=torch.int32)
    wg = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype)
    wu = (torch.randn(N, K, generator=g) * K ** -0.5).to(dtype)
    return [t.to(device) for t in (x, idx, wg, wu)]


def _reference(x, idx, wg, wu):
    xr = x.double()[idx.long()]
    g, u = xr @ wg.double().T, xr @ wu.double().T
    return g * torch.sigmoid(g) * u


def _launch_block_ptr(x, wg, wu, out, cfg):
    M, N, K = x.shape[0], wg.shape[0], x.shape[1]
    bm, bn, bk, nw, ns = cfg
    return gated_block_ptr[(kl.cdiv(M, bm), kl.cdiv(N, bn))](x, wg, wu, out, M, N, K, x.stride(0), wg.stride(0),
                                                            out.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                            num_warps=nw, num_stages=ns)


def _launch(x, idx, wg, wu, out, cfg, **kw):
    M, N, K = idx.shape[0], wg.shape[0], x.shape[1]
    bm, bn, bk, nw, ns = cfg
    grid = (kl.cdiv(M, bm), kl.cdiv(N, bn))
    return gated_gather[grid](x, idx, wg, wu, out, M, N, K, x.stride(0), wg.stride(0), out.stride(0),
                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns, **kw)


def test_interpreter_runs_the_gated_kernel():
    """The tile IR the knob's pass sees, on the CPU interpreter, against float64 (ragged M, N, K)."""
    x, idx, wg, wu = _operands(70, 40, 50, 33, torch.float32, "cpu", seed=1)
    out = torch.full((70, 40), float("nan"))
    _launch(x, idx, wg, wu, out, (64, 32, 16, 4, 2))
    torch.testing.assert_close(out.double(), _reference(x, idx, wg, wu), rtol=1e-5, atol=1e-5)


CONFIGS = [(64, 64, 32, 4, 2), (64, 128, 64, 8, 3), (64, 64, 64, 4, 4)]


def _build(monkeypatch, tmp_path, knob, dtype, cfg):
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / f"cache{knob}"))
    if knob:
        monkeypatch.setenv(KNOB, "1")
    else:
        monkeypatch.delenv(KNOB, raising=False)
    M, N, K, T = 8192, 1024, 2048, 4096
    x, idx, wg, wu = (torch.empty(T, K, dtype=dtype), torch.empty(M, dtype=torch.int32),
                      torch.empty(N, K, dtype=dtype), torch.empty(N, K, dtype=dtype))
    out = torch.empty(M, N, dtype=dtype)
    bm, bn, bk, nw, ns = cfg
    ck = gated_gather.warmup(x, idx, wg, wu, out, M, N, K, x.stride(0), wg.stride(0), out.stride(0),
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns, grid=(1,))
    try:
        ck.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    return ck


def _loop_ptx(ptx: str) -> tuple[str, str]:
    """The PTX of the loop that issues the wgmmas (the label before the first wgmma up to its branch back), and
    the PTX after it."""
    lines = ptx.splitlines()
    first = next(i for i, ln in enumerate(lines) if "wgmma.mma_async" in ln)
    start = max(i for i in range(first) if re.match(r"\$L__\w+:", lines[i]))
    label = lines[start].split(":")[0]
    end = next(i for i in range(first, len(lines)) if re.search(rf"bra(\.uni)?\s+{re.escape(label)};", lines[i]))
    return "\n".join(lines[start:end + 1]), "\n".join(lines[end + 1:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["tf32", "f16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "x".join(map(str, c[:3])) + f"-{c[3]}w{c[4]}s")
def test_sm90_build_keeps_both_groups_in_flight(monkeypatch, tmp_path, dtype, cfg):
    """The fused-MoE shape (8192 gathered rows, N 1024, K 2048) for sm_90a: with the knob the loop's only wgmma
    wait is wait_group 2 (the second accumulator's dot_wait only ties its registers), none with 0; without it the
    loop waits with 0 (the chain). After the loop a wait_group 0 per accumulator (the second one redundant, once
    per program). No spills either way; in the SASS the loop's one WARPGROUP.DEPBAR is gsb0, 0x2."""
    on = _build(monkeypatch, tmp_path, True, dtype, cfg)
    off = _build(monkeypatch, tmp_path, False, dtype, cfg)
    stats = {r.name: r.stats for r in on.trace.passes}["pipeline_dot_operands"]
    assert stats.get("sibling_wgmma") == 2, stats
    loop_on, after_on = _loop_ptx(on.asm["ptx"])
    loop_off, _ = _loop_ptx(off.asm["ptx"])
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", loop_on) == ["2"]
    assert "wgmma.wait_group.sync.aligned 0;" in loop_off
    assert after_on.count("wgmma.wait_group.sync.aligned 0;") == 2
    assert on.n_spills == 0 and off.n_spills == 0, (on.n_regs, on.n_spills, off.n_regs, off.n_spills)
    from kernellab.viz.data import find_nvdisasm

    dis = find_nvdisasm()
    if dis and on.asm.get("cubin"):
        import subprocess

        cubin = tmp_path / "on.cubin"
        cubin.write_bytes(on.asm["cubin"])
        sass = subprocess.run([dis, "-c", str(cubin)], capture_output=True, text=True).stdout
        waits = re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x(\d+)", sass)
        assert waits[0] == "2" and set(waits[1:]) == {"0"}, waits


def test_interpreter_runs_the_block_pointer_kernel():
    x, idx, wg, wu = _operands(70, 40, 50, 70, torch.float32, "cpu", seed=2)
    out = torch.full((70, 40), float("nan"))
    _launch_block_ptr(x, wg, wu, out, (64, 32, 16, 4, 2))
    torch.testing.assert_close(out.double(), _reference(x, torch.arange(70), wg, wu), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knob", [False, True], ids=["default", "knob"])
def test_sm90_block_pointer_siblings_keep_tma(monkeypatch, tmp_path, knob):
    """Block-pointer tiles at the MLP's shape (tf32, 128x128x64, 8 warps, 3 stages): the stages are filled by TMA
    either way; with the knob the loop's wgmma wait is wait_group 2 (the default's 0), no spills."""
    from kernellab.compiler.codegen.target import Target

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    if knob:
        monkeypatch.setenv(KNOB, "1")
    else:
        monkeypatch.delenv(KNOB, raising=False)
    M, N, K = 4096, 14336, 4096
    x, wg, out = torch.empty(M, K), torch.empty(N, K), torch.empty(M, N)
    ck = gated_block_ptr.warmup(x, wg, wg, out, M, N, K, x.stride(0), wg.stride(0), out.stride(0), BLOCK_M=128,
                                BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, grid=(1,))
    try:
        ck.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    stats = {r.name: r.stats for r in ck.trace.passes}
    assert stats["fill_stages_with_tma"]["tma"] == 3
    assert stats["pipeline_dot_operands"].get("sibling_wgmma") == (2 if knob else None)
    loop, _ = _loop_ptx(ck.asm["ptx"])
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", loop) == (["2"] if knob else ["0"])
    assert ck.n_spills == 0, (ck.n_regs, ck.n_spills)


# ------------------------------------------------------------------------------------------- on a GPU
GPU_CASES = [(torch.float32, CONFIGS[0]), (torch.float32, CONFIGS[1]), (torch.float16, CONFIGS[2]),
             (torch.bfloat16, CONFIGS[1])]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cfg", GPU_CASES, ids=[f"{str(d)[6:]}-" + "x".join(map(str, c[:3])) + f"-{c[3]}w{c[4]}s"
                                                      for d, c in GPU_CASES])
def test_gpu_siblings_match_the_default_bit_for_bit(monkeypatch, dtype, cfg):
    """Gathered rows, ragged M, N, K, NaN-poisoned outputs: the knob's kernel gives the default's bits (the same
    wgmmas in the same order per accumulator, only the waits move) and is close to float64."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    for M, N, K, T in [(8192, 1024, 2048, 4096), (1000, 300, 1000, 777), (70, 40, 50, 33)]:
        x, idx, wg, wu = _operands(M, N, K, T, dtype, "cuda", seed=M + N + K)
        outs = []
        for knob in ("0", "1"):
            monkeypatch.setenv(KNOB, knob)
            out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
            _launch(x, idx, wg, wu, out, cfg)
            torch.cuda.synchronize()
            assert not out.isnan().any(), (knob, M, N, K)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (M, N, K)
        tol = 2e-2 if dtype != torch.float32 else 1e-2  # tf32 operands
        torch.testing.assert_close(outs[1].double(), _reference(x, idx, wg, wu), rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["tf32", "bf16"])
def test_gpu_block_pointer_siblings_match_the_default_bit_for_bit(monkeypatch, dtype):
    """The TMA-filled stages with both groups in flight: the knob's bits are the default's, close to float64."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    for M, N, K in [(4096, 2048, 2048), (1000, 300, 1000)]:
        x, _, wg, wu = _operands(M, N, K, M, dtype, "cuda", seed=M + K)
        outs = []
        for knob in ("0", "1"):
            monkeypatch.setenv(KNOB, knob)
            out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
            _launch_block_ptr(x, wg, wu, out, (128, 128, 64, 8, 3))
            torch.cuda.synchronize()
            assert not out.isnan().any(), (knob, M, N, K)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (M, N, K)
        tol = 2e-2 if dtype != torch.float32 else 1e-2
        torch.testing.assert_close(outs[1].double(), _reference(x, torch.arange(M, device="cuda"), wg, wu),
                                   rtol=tol, atol=tol)
