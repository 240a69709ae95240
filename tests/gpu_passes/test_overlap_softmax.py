"""overlap_softmax (KERNELLAB_ATTN_OVERLAP=1): attention's consumer loop as warp_specialize leaves it becomes a loop
peeled at both ends whose body issues the next scores' wgmma and the previous p·v back to back in one tensor-core
turn, waits for the scores with p·v still in flight (pending = 1) and for p·v only after the softmax (the wait pinned
after the carried row max and sum), then releases the stage p·v read. The prologue runs the first scores and
softmax, the epilogue the last p·v, both under `lb < ub`. Off by default; loops that do not qualify say why."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import overlap_softmax
from tests.gpu_passes.conftest import normalize, printed, run_gpu_pass

SM90_8 = GpuOptions(num_warps=8, arch=90)

# the consumers' key loop of attention (two warpgroups taking turns), 128x64 tiles, 2 stages
CONSUMER_LOOP = """#L0 = #mma<[8, 1]>
#L1 = #slice<1, #mma<[8, 1]>>

tt.func @k(%N: i32 {tt.divisibility = 16}, %scale: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c2 = arith.constant {value = 2} : i32
  %c64 = arith.constant {value = 64} : i32
  %zero = arith.constant {value = 0.0} : tensor<128x64xf32, #L0>
  %l0 = arith.constant {value = 0.0} : tensor<128xf32, #L1>
  %m0 = arith.constant {value = -inf} : tensor<128xf32, #L1>
  %q_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x128x64xf16, order=1,0, pad=0, swizzle=128>
  %q = ttg.memdesc_index %q_tile, %c0 : !memdesc<128x64xf16, order=1,0, pad=0, swizzle=128>
  %k_stages = ttg.local_alloc {fill = "tma", operand = "b", stages = 2} : !memdesc<2x64x64xf16, order=1,0, pad=0, swizzle=128>
  %v_stages = ttg.local_alloc {fill = "tma", operand = "b", stages = 2} : !memdesc<2x64x64xf16, order=1,0, pad=0, swizzle=128>
  %full = ttg.mbarrier_alloc {stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  %empty = ttg.mbarrier_alloc {count = 8, purpose = "empty", stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  ttg.warp_specialize {producer_warps = 4} {
  }
  ttg.warpgroup_turn {kind = "start"}
  %l, %acc, %m, %rs, %ws, %ph = scf.for %c0, %N, %c64, %l0, %zero, %m0, %c0, %c1, %c0 {pipelined_stages = 2} : tensor<128xf32, #L1>, tensor<128x64xf32, #L0>, tensor<128xf32, #L1>, i32, i32, i32 {
  ^bb(%n: i32, %l_i: tensor<128xf32, #L1>, %acc_i: tensor<128x64xf32, #L0>, %m_i: tensor<128xf32, #L1>, %read: i32, %write: i32, %phase: i32):
    %fb = ttg.memdesc_index %full, %read : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %fb, %phase
    %kv = ttg.memdesc_index %k_stages, %read : !memdesc<64x64xf16, order=0,1, pad=0, swizzle=128>
    %s = tt.dot %q, %kv, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    ttg.warpgroup_turn {kind = "pass"}
    %s_1 = ttg.dot_wait %s {pending = 0} : tensor<128x64xf32, #L0>
    %acc_1 = ttg.dot_wait %acc_i {pending = 0} : tensor<128x64xf32, #L0>
    %eb = ttg.memdesc_index %empty, %write : !memdesc<1x1xi64, order=1,0, pad=0>
    %not_first = arith.cmpi %n, %c0 {predicate = "ne"} : i1
    ttg.mbarrier_arrive %eb, %not_first
    %mx = tt.reduce %s_1 {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%x: f32, %y: f32):
      %xy = arith.maxnumf %x, %y : f32
      tt.reduce.return %xy
    }
    %m_new = arith.maxnumf %m_i, %mx : tensor<128xf32, #L1>
    %m_b = tt.expand_dims %m_new {axis = 1} : tensor<128x1xf32, #L0>
    %m_bb = tt.broadcast %m_b : tensor<128x64xf32, #L0>
    %d = arith.subf %s_1, %m_bb : tensor<128x64xf32, #L0>
    %p = math.exp2 %d : tensor<128x64xf32, #L0>
    %dm = arith.subf %m_i, %m_new : tensor<128xf32, #L1>
    %alpha = math.exp2 %dm : tensor<128xf32, #L1>
    %la = arith.mulf %l_i, %alpha : tensor<128xf32, #L1>
    %ps = tt.reduce %p {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%u: f32, %w: f32):
      %uw = arith.addf %u, %w : f32
      tt.reduce.return %uw
    }
    %l_new = arith.addf %la, %ps : tensor<128xf32, #L1>
    %a_b = tt.expand_dims %alpha {axis = 1} : tensor<128x1xf32, #L0>
    %a_bb = tt.broadcast %a_b : tensor<128x64xf32, #L0>
    %acc_2 = arith.mulf %acc_1, %a_bb : tensor<128x64xf32, #L0>
    %p16 = arith.truncf %p : tensor<128x64xf16, #L0>
    ttg.warpgroup_turn {kind = "wait"}
    %vv = ttg.memdesc_index %v_stages, %read : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %acc_3 = tt.dot %p16, %vv, %acc_2 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    %last_r = arith.cmpi %read, %c1 {predicate = "eq"} : i1
    %r1 = arith.addi %read, %c1 : i32
    %r2 = arith.select %last_r, %c0, %r1 : i32
    %ph1 = arith.xori %phase, %c1 : i32
    %ph2 = arith.select %last_r, %ph1, %phase : i32
    %last_w = arith.cmpi %write, %c1 {predicate = "eq"} : i1
    %w1 = arith.addi %write, %c1 : i32
    %w2 = arith.select %last_w, %c0, %w1 : i32
    scf.yield %l_new, %acc_3, %m_new, %r2, %w2, %ph2
  }
  ttg.warpgroup_turn {kind = "finish"}
  %acc_f = ttg.dot_wait %acc {pending = 0} : tensor<128x64xf32, #L0>
  %eb_last = ttg.memdesc_index %empty, %ws : !memdesc<1x1xi64, order=1,0, pad=0>
  %ran = arith.cmpi %c0, %N {predicate = "slt"} : i1
  ttg.mbarrier_arrive %eb_last, %ran
  ttg.async_wait %k_stages, %v_stages {pending = 0}
  ttg.mbarrier_inval %full
  ttg.mbarrier_inval %empty
  %out = arith.divf %acc_f, %acc_f : tensor<128x64xf32, #L0>
  tt.return
}
"""

OVERLAPPED = """#L0 = #mma<[8, 1]>
#L1 = #slice<1, #mma<[8, 1]>>

tt.func @k(%N: i32 {tt.divisibility = 16}, %scale: f32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c2 = arith.constant {value = 2} : i32
  %c64 = arith.constant {value = 64} : i32
  %zero = arith.constant {value = 0.0} : tensor<128x64xf32, #L0>
  %l0 = arith.constant {value = 0.0} : tensor<128xf32, #L1>
  %m0 = arith.constant {value = -inf} : tensor<128xf32, #L1>
  %q_tile = ttg.local_alloc {fill = "registers", operand = "a", stages = 1} : !memdesc<1x128x64xf16, order=1,0, pad=0, swizzle=128>
  %q = ttg.memdesc_index %q_tile, %c0 : !memdesc<128x64xf16, order=1,0, pad=0, swizzle=128>
  %k_stages = ttg.local_alloc {fill = "tma", operand = "b", stages = 2} : !memdesc<2x64x64xf16, order=1,0, pad=0, swizzle=128>
  %v_stages = ttg.local_alloc {fill = "tma", operand = "b", stages = 2} : !memdesc<2x64x64xf16, order=1,0, pad=0, swizzle=128>
  %full = ttg.mbarrier_alloc {stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  %empty = ttg.mbarrier_alloc {count = 8, purpose = "empty", stages = 2} : !memdesc<2x1x1xi64, order=1,0, pad=0>
  ttg.warp_specialize {producer_warps = 4} {
  }
  ttg.warpgroup_turn {kind = "start"}
  %0 = arith.cmpi %c0, %N {predicate = "slt"} : i1
  %l, %acc, %m, %rs, %ws, %ph, %p_first, %first_stage = scf.if %0 : tensor<128xf32, #L1>, tensor<128x64xf32, #L0>, tensor<128xf32, #L1>, i32, i32, i32, tensor<128x64xf16, #L0>, i32 {
    %fb = ttg.memdesc_index %full, %c0 : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %fb, %c0
    %kv = ttg.memdesc_index %k_stages, %c0 : !memdesc<64x64xf16, order=0,1, pad=0, swizzle=128>
    %s = tt.dot %q, %kv, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    ttg.warpgroup_turn {kind = "pass"}
    %s_1 = ttg.dot_wait %s {pending = 0} : tensor<128x64xf32, #L0>
    %mx = tt.reduce %s_1 {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%x: f32, %y: f32):
      %xy = arith.maxnumf %x, %y : f32
      tt.reduce.return %xy
    }
    %m_new = arith.maxnumf %m0, %mx : tensor<128xf32, #L1>
    %m_b = tt.expand_dims %m_new {axis = 1} : tensor<128x1xf32, #L0>
    %m_bb = tt.broadcast %m_b : tensor<128x64xf32, #L0>
    %d = arith.subf %s_1, %m_bb : tensor<128x64xf32, #L0>
    %p = math.exp2 %d : tensor<128x64xf32, #L0>
    %dm = arith.subf %m0, %m_new : tensor<128xf32, #L1>
    %alpha = math.exp2 %dm : tensor<128xf32, #L1>
    %la = arith.mulf %l0, %alpha : tensor<128xf32, #L1>
    %ps = tt.reduce %p {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%u: f32, %w: f32):
      %uw = arith.addf %u, %w : f32
      tt.reduce.return %uw
    }
    %l_new = arith.addf %la, %ps : tensor<128xf32, #L1>
    %a_b = tt.expand_dims %alpha {axis = 1} : tensor<128x1xf32, #L0>
    %a_bb = tt.broadcast %a_b : tensor<128x64xf32, #L0>
    %acc_2 = arith.mulf %zero, %a_bb : tensor<128x64xf32, #L0>
    %p16 = arith.truncf %p : tensor<128x64xf16, #L0>
    %last_r = arith.cmpi %c0, %c1 {predicate = "eq"} : i1
    %r1 = arith.addi %c0, %c1 : i32
    %r2 = arith.select %last_r, %c0, %r1 : i32
    %ph1 = arith.xori %c0, %c1 : i32
    %ph2 = arith.select %last_r, %ph1, %c0 : i32
    %last_w = arith.cmpi %c1, %c1 {predicate = "eq"} : i1
    %w1 = arith.addi %c1, %c1 : i32
    %w2 = arith.select %last_w, %c0, %w1 : i32
    scf.yield %l_new, %acc_2, %m_new, %r2, %w2, %ph2, %p16, %c0
  } {
    %1 = arith.constant {value = 0.0} : tensor<128x64xf16, #L0>
    scf.yield %l0, %zero, %m0, %c0, %c1, %c0, %1, %c0
  }
  %2 = arith.addi %c0, %c64 : i32
  %l_1, %acc_1, %m_1, %rs_1, %ws_1, %ph_1, %3, %4 = scf.for %2, %N, %c64, %l, %acc, %m, %rs, %ws, %ph, %p_first, %first_stage {pipelined_stages = 2} : tensor<128xf32, #L1>, tensor<128x64xf32, #L0>, tensor<128xf32, #L1>, i32, i32, i32, tensor<128x64xf16, #L0>, i32 {
  ^bb(%n: i32, %l_i: tensor<128xf32, #L1>, %acc_i: tensor<128x64xf32, #L0>, %m_i: tensor<128xf32, #L1>, %read: i32, %write: i32, %phase: i32, %p_prev: tensor<128x64xf16, #L0>, %stage_prev: i32):
    %fb_1 = ttg.memdesc_index %full, %read : !memdesc<1x1xi64, order=1,0, pad=0>
    ttg.mbarrier_wait %fb_1, %phase
    %kv_1 = ttg.memdesc_index %k_stages, %read : !memdesc<64x64xf16, order=0,1, pad=0, swizzle=128>
    ttg.warpgroup_turn {kind = "wait"}
    %s_2 = tt.dot %q, %kv_1, %zero {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    %vv = ttg.memdesc_index %v_stages, %stage_prev : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %acc_3 = tt.dot %p_prev, %vv, %acc_i {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    ttg.warpgroup_turn {kind = "pass"}
    %s_1_1 = ttg.dot_wait %s_2 {pending = 1} : tensor<128x64xf32, #L0>
    %mx_1 = tt.reduce %s_1_1 {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%x_1: f32, %y_1: f32):
      %xy_1 = arith.maxnumf %x_1, %y_1 : f32
      tt.reduce.return %xy_1
    }
    %m_new_1 = arith.maxnumf %m_i, %mx_1 : tensor<128xf32, #L1>
    %m_b_1 = tt.expand_dims %m_new_1 {axis = 1} : tensor<128x1xf32, #L0>
    %m_bb_1 = tt.broadcast %m_b_1 : tensor<128x64xf32, #L0>
    %d_1 = arith.subf %s_1_1, %m_bb_1 : tensor<128x64xf32, #L0>
    %p_1 = math.exp2 %d_1 : tensor<128x64xf32, #L0>
    %dm_1 = arith.subf %m_i, %m_new_1 : tensor<128xf32, #L1>
    %alpha_1 = math.exp2 %dm_1 : tensor<128xf32, #L1>
    %la_1 = arith.mulf %l_i, %alpha_1 : tensor<128xf32, #L1>
    %ps_1 = tt.reduce %p_1 {axis = 1} : tensor<128xf32, #L1> {
    ^bb(%u_1: f32, %w_1: f32):
      %uw_1 = arith.addf %u_1, %w_1 : f32
      tt.reduce.return %uw_1
    }
    %l_new_1 = arith.addf %la_1, %ps_1 : tensor<128xf32, #L1>
    %a_b_1 = tt.expand_dims %alpha_1 {axis = 1} : tensor<128x1xf32, #L0>
    %a_bb_1 = tt.broadcast %a_b_1 : tensor<128x64xf32, #L0>
    %acc_1_1 = ttg.dot_wait %acc_3, %l_new_1, %m_new_1 {pending = 0} : tensor<128x64xf32, #L0>
    %acc_2_1 = arith.mulf %acc_1_1, %a_bb_1 : tensor<128x64xf32, #L0>
    %p16_1 = arith.truncf %p_1 : tensor<128x64xf16, #L0>
    %last_r_1 = arith.cmpi %read, %c1 {predicate = "eq"} : i1
    %r1_1 = arith.addi %read, %c1 : i32
    %r2_1 = arith.select %last_r_1, %c0, %r1_1 : i32
    %ph1_1 = arith.xori %phase, %c1 : i32
    %ph2_1 = arith.select %last_r_1, %ph1_1, %phase : i32
    %last_w_1 = arith.cmpi %write, %c1 {predicate = "eq"} : i1
    %w1_1 = arith.addi %write, %c1 : i32
    %w2_1 = arith.select %last_w_1, %c0, %w1_1 : i32
    %5 = ttg.memdesc_index %empty, %stage_prev : !memdesc<1x1xi64, order=1,0, pad=0>
    %6 = arith.constant {value = 1} : i1
    ttg.mbarrier_arrive %5, %6
    scf.yield %l_new_1, %acc_2_1, %m_new_1, %r2_1, %w2_1, %ph2_1, %p16_1, %read
  }
  %acc_3_1 = scf.if %0 : tensor<128x64xf32, #L0> {
    ttg.warpgroup_turn {kind = "wait"}
    %7 = ttg.memdesc_index %v_stages, %4 : !memdesc<64x64xf16, order=1,0, pad=0, swizzle=128>
    %acc_3_2 = tt.dot %3, %7, %acc_1 {input_precision = "ieee", instr = "wgmma.m64n64k16.f16", mma = [8, 1], wgmma_async = true} : tensor<128x64xf32, #L0>
    %acc_3_3 = ttg.dot_wait %acc_3_2 {pending = 0} : tensor<128x64xf32, #L0>
    %8 = ttg.memdesc_index %empty, %4 : !memdesc<1x1xi64, order=1,0, pad=0>
    %9 = arith.constant {value = 1} : i1
    ttg.mbarrier_arrive %8, %9
    scf.yield %acc_3_3
  } {
    scf.yield %acc_1
  }
  ttg.warpgroup_turn {kind = "finish"}
  %acc_f = ttg.dot_wait %acc_3_1 {pending = 0} : tensor<128x64xf32, #L0>
  ttg.async_wait %k_stages, %v_stages {pending = 0}
  ttg.mbarrier_inval %full
  ttg.mbarrier_inval %empty
  %out = arith.divf %acc_f, %acc_f : tensor<128x64xf32, #L0>
  tt.return
}
"""


@pytest.fixture
def overlap_on(monkeypatch):
    monkeypatch.setenv("KERNELLAB_ATTN_OVERLAP", "1")


def test_overlap(overlap_on):
    m, stats = run_gpu_pass(overlap_softmax, CONSUMER_LOOP, SM90_8)
    assert stats == {"overlapped": 1}
    assert normalize(printed(m)) == normalize(OVERLAPPED)


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("KERNELLAB_ATTN_OVERLAP", raising=False)
    m, stats = run_gpu_pass(overlap_softmax, CONSUMER_LOOP, SM90_8)
    assert stats == {"overlapped": 0}
    assert normalize(printed(m)) == normalize(CONSUMER_LOOP)
    monkeypatch.setenv("KERNELLAB_ATTN_OVERLAP", "0")
    assert run_gpu_pass(overlap_softmax, CONSUMER_LOOP, SM90_8)[1] == {"overlapped": 0}


def test_no_sm80(overlap_on):
    m, stats = run_gpu_pass(overlap_softmax, CONSUMER_LOOP, GpuOptions(num_warps=8, arch=80))
    assert stats == {"overlapped": 0} and normalize(printed(m)) == normalize(CONSUMER_LOOP)


def _one_warpgroup(text: str) -> str:
    """The loop as warp_specialize leaves it with one consumer warpgroup: no turns, the scores waited for by
    their own wgmma (not asynchronous)."""
    lines = [ln for ln in text.splitlines() if "ttg.warpgroup_turn" not in ln and "%s_1 = ttg.dot_wait" not in ln]
    out = "\n".join(lines).replace("%s_1", "%s").replace("mma = [8, 1]", "mma = [4, 1]").replace("#mma<[8, 1]>",
                                                                                                   "#mma<[4, 1]>")
    first = next(ln for ln in out.splitlines() if "%s = tt.dot" in ln)
    return out.replace(first, first.replace(", wgmma_async = true", ""))


def test_one_warpgroup(overlap_on):
    """No turns, the scores' wgmma synchronous: the pass issues it asynchronously, waited for behind p·v."""
    m, stats = run_gpu_pass(overlap_softmax, _one_warpgroup(CONSUMER_LOOP), GpuOptions(num_warps=4, arch=90))
    assert stats == {"overlapped": 1}
    text = printed(m)
    assert "warpgroup_turn" not in text
    loop = next(op for op in m.kernel.walk() if op.name == "scf.for")
    names = [op.name for op in loop.regions[0].ops]
    i_s, i_pv = [i for i, n in enumerate(names) if n == "tt.dot"]
    body = loop.regions[0].ops
    assert body[i_s].attrs.get("wgmma_async") and body[i_pv].attrs.get("wgmma_async") and i_pv == i_s + 2
    waits = [op for op in body if op.name == "ttg.dot_wait"]
    assert [w.attrs["pending"] for w in waits] == [1, 0]
    assert waits[0].operands == [body[i_s].result] and body.index(waits[0]) == i_pv + 1
    assert waits[1].operands[0] is body[i_pv].result and len(waits[1].operands) == 3  # the p·v wait, pinned
    exp = max(i for i, op in enumerate(body) if op.name == "math.exp2")
    assert body.index(waits[1]) > exp
    # the prologue keeps the scores' wgmma synchronous, the epilogue waits for the last p·v
    ifs = [op for op in m.kernel.body.ops if op.name == "scf.if"]
    assert len(ifs) == 2
    assert [op.attrs.get("wgmma_async") for op in ifs[0].walk() if op.name == "tt.dot"] == [None]
    assert [op.name for op in ifs[1].regions[0].ops][:3] == ["ttg.memdesc_index", "tt.dot", "ttg.dot_wait"]


def test_register_budget(overlap_on):
    """One warpgroup computing 128 rows of a 128-wide accumulator has no room for p·v in flight under the softmax
    (hd128 at 4 warps: ptxas already serializes the wgmma there): left alone, the stats say why."""
    text = _one_warpgroup(CONSUMER_LOOP).replace("128x64xf32", "128x128xf32").replace("128x64xf16", "128x128xf16")
    text = text.replace("64x64xf16", "64x128xf16").replace("m64n64k16", "m64n128k16")
    m, stats = run_gpu_pass(overlap_softmax, text, GpuOptions(num_warps=4, arch=90))
    assert stats["overlapped"] == 0 and "registers per thread" in stats["not_overlapped"][0]


@pytest.mark.parametrize("edit, why", [
    (("    %p16 = arith.truncf %p : tensor<128x64xf16, #L0>",
      "    %p16 = arith.truncf %p : tensor<128x64xf16, #L0>\n    tt.print %p16 {hex = false, prefix = \"\"}"),
     "has effects"),
    (("    %last_r = arith.cmpi", "    %twice = arith.addf %acc_3, %acc_3 : tensor<128x64xf32, #L0>\n"
      "    %last_r = arith.cmpi"), "p·v's result is read in the loop"),
    (("    ttg.mbarrier_arrive %eb, %not_first\n", ""), "does not release one stage"),
])
def test_left_alone(overlap_on, edit, why):
    assert edit[0] in CONSUMER_LOOP
    text = CONSUMER_LOOP.replace(*edit)
    m, stats = run_gpu_pass(overlap_softmax, text, SM90_8)
    assert stats["overlapped"] == 0 and why in stats["not_overlapped"][0], stats
    assert normalize(printed(m)) == normalize(text)
