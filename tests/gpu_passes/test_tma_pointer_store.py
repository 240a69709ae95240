"""tma_pointer_store (sm_90, KERNELLAB_TMA_POINTER_STORE=1): a pointer tile store whose addresses are a box of a
strided tensor and whose mask is exactly that box's bounds becomes a block-pointer store (tma_store then writes it
by TMA); every other store is left alone with the reason in the stats. IR text in, IR text out, then the forms
users write (tests/pointer_store_kernels.py) through the frontend's tile IR."""
from __future__ import annotations

import pytest
import torch

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import tma_pointer_store, tma_store
from tests import pointer_store_kernels as psk

SM90 = GpuOptions(num_warps=4, arch=90)


@pytest.fixture(autouse=True)
def knob_on(monkeypatch):
    monkeypatch.setenv(tma_pointer_store.KNOB, "1")


HEAD = """tt.func @copy_tile(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %c_ptr: !ptr<f16> {tt.divisibility = 16}, %M: i32 {tt.divisibility = 16}, %N: i32 {tt.divisibility = 16}, %stride_cm: i32 {tt.divisibility = 16}) {
  %0 = tt.get_program_id {axis = 0} : i32
  %1 = arith.constant {value = 32} : i32
  %2 = arith.muli %0, %1 : i32
  %3 = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %4 = tt.splat %2 : tensor<32xi32>
  %rm = arith.addi %4, %3 : tensor<32xi32>
  %5 = tt.get_program_id {axis = 1} : i32
  %6 = arith.constant {value = 64} : i32
  %7 = arith.muli %5, %6 : i32
  %8 = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %9 = tt.splat %7 : tensor<64xi32>
  %rn = arith.addi %9, %8 : tensor<64xi32>
  %10 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32>
  %11 = arith.constant {value = 64} : tensor<32x1xi32>
  %12 = arith.muli %10, %11 : tensor<32x1xi32>
  %13 = tt.splat %x_ptr : tensor<32x1x!ptr<f16>>
  %14 = tt.addptr %13, %12 : tensor<32x1x!ptr<f16>>
  %15 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32>
  %16 = arith.constant {value = 64} : tensor<1x64xi32>
  %17 = arith.remsi %15, %16 : tensor<1x64xi32>
  %18 = tt.broadcast %14 : tensor<32x64x!ptr<f16>>
  %19 = tt.broadcast %17 : tensor<32x64xi32>
  %20 = tt.addptr %18, %19 : tensor<32x64x!ptr<f16>>
  %x = tt.load %20 : tensor<32x64xf16>
"""

STORE = HEAD + """  %21 = tt.splat %stride_cm : tensor<32x1xi32>
  %22 = arith.muli %10, %21 : tensor<32x1xi32>
  %23 = tt.splat %c_ptr : tensor<32x1x!ptr<f16>>
  %24 = tt.addptr %23, %22 : tensor<32x1x!ptr<f16>>
  %25 = tt.broadcast %24 : tensor<32x64x!ptr<f16>>
  %26 = tt.broadcast %15 : tensor<32x64xi32>
  %27 = tt.addptr %25, %26 : tensor<32x64x!ptr<f16>>
  %28 = tt.splat %M : tensor<32x1xi32>
  %29 = arith.cmpi %10, %28 {predicate = "slt"} : tensor<32x1xi1>
  %30 = tt.splat %N : tensor<1x64xi32>
  %31 = arith.cmpi %15, %30 {predicate = "slt"} : tensor<1x64xi1>
  %32 = tt.broadcast %29 : tensor<32x64xi1>
  %33 = tt.broadcast %31 : tensor<32x64xi1>
  %34 = arith.andi %32, %33 : tensor<32x64xi1>
  tt.store %27, %x, %34
  tt.return
}
"""


def test_a_box_store_becomes_a_block_pointer_store(check):
    """Shape (M, N) and row stride from the mask's bounds and the addresses, offsets the scalars added to the
    aranges, order [1, 0] (the columns' stride is 1); the pointer and mask tensors go. Both offsets are program ids
    times constants (>= 0): no run-time check."""
    _, stats = check(tma_pointer_store, STORE, HEAD + """  %21 = arith.extsi %M : i64
  %22 = arith.extsi %N : i64
  %23 = arith.constant {value = 1} : i64
  %24 = arith.extsi %stride_cm : i64
  %c_block_ptr = tt.make_block_ptr %c_ptr, %21, %22, %24, %23, %2, %7 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
  tt.store %c_block_ptr, %x {boundary_check = [0, 1]}
  tt.return
}
""", SM90)
    assert stats == {"tma_pointer_store": 1}


def test_knob_off_and_sm80_leave_the_store(run_pass, monkeypatch):
    m, stats = run_pass(tma_pointer_store, STORE, GpuOptions(num_warps=4, arch=80))
    assert stats == {"tma_pointer_store": 0} and not any(o.name == "tt.make_block_ptr" for o in m.kernel.walk())
    m, stats = run_pass(tma_pointer_store, STORE, GpuOptions(num_warps=4, arch=90, tma=False))
    assert stats == {"tma_pointer_store": 0}
    monkeypatch.setenv(tma_pointer_store.KNOB, "0")
    m, stats = run_pass(tma_pointer_store, STORE, SM90)
    assert stats == {} and not any(o.name == "tt.make_block_ptr" for o in m.kernel.walk())


def test_then_tma_store_writes_it_by_tma(run_passes):
    """The rewritten store is one tma_store takes (its own checks: alignment, shape and row stride from arguments)."""
    m, (s1, s2) = run_passes([tma_pointer_store, tma_store], STORE, SM90)
    assert s1 == {"tma_pointer_store": 1} and s2["tma_store"] == 1
    names = [o.name for o in m.kernel.walk()]
    assert "ttg.tma_store" in names and "tt.store" not in names


@pytest.mark.parametrize("old,new,why", [
    ('%29 = arith.cmpi %10, %28 {predicate = "slt"}', '%29 = arith.cmpi %10, %28 {predicate = "sle"}', "mask"),
    ("%34 = arith.andi %32, %33", "%34 = arith.ori %32, %33", "mask"),
    ("%26 = tt.broadcast %15 : tensor<32x64xi32>", "%26 = tt.broadcast %17 : tensor<32x64xi32>", "wrap-around"),
    ("%stride_cm: i32 {tt.divisibility = 16}", "%stride_cm: i32", "16 bytes"),
    ("%c_ptr: !ptr<f16> {tt.divisibility = 16}", "%c_ptr: !ptr<f16>", "16-byte aligned"),
    ("tt.store %27, %x, %34", "tt.store %27, %x", "no mask"),
    ("%28 = tt.splat %M : tensor<32x1xi32>", "%28 = tt.splat %stride_cm : tensor<32x1xi32>\n  %99 = tt.load %27 : tensor<32x64xf16>", "also reads"),
])
def test_forms_that_keep_st_global(run_pass, old, new, why):
    """A mask that is not exactly the bounds (`<=`, `|`), a wrap-around column index, a row stride or base not
    known 16-byte aligned, no mask, a kernel that also reads the tensor."""
    src = STORE.replace(old, new)
    assert src != STORE
    m, stats = run_pass(tma_pointer_store, src, SM90)
    assert stats["tma_pointer_store"] == 0, stats
    assert why in " ".join(stats["not_lifted"]), stats
    assert not any(o.name == "tt.make_block_ptr" for o in m.kernel.walk())


def test_a_constant_row_stride_and_offsets_moved_into_the_base(run_pass):
    """`rm[:, None] * 64` (a constant row stride: a constant in the block pointer) and the column offset added to the
    base pointer instead of the index (`c_ptr + pid_n * 64`, then bare aranges): the same box."""
    src = STORE.replace("%21 = tt.splat %stride_cm : tensor<32x1xi32>",
                        "%21 = arith.constant {value = 64} : tensor<32x1xi32>")
    m, stats = run_pass(tma_pointer_store, src, SM90)
    assert stats == {"tma_pointer_store": 1}
    bp = next(o for o in m.kernel.walk() if o.name == "tt.make_block_ptr")
    assert bp.operands[3].defining_op.attrs["value"] == 64  # the row stride
    src = STORE.replace("%23 = tt.splat %c_ptr : tensor<32x1x!ptr<f16>>", """%cb = tt.addptr %c_ptr, %7 : !ptr<f16>
  %23 = tt.splat %cb : tensor<32x1x!ptr<f16>>""").replace("%26 = tt.broadcast %15 : tensor<32x64xi32>", """%r64 = tt.expand_dims %8 {axis = 0} : tensor<1x64xi32>
  %26 = tt.broadcast %r64 : tensor<32x64xi32>""")
    m, stats = run_pass(tma_pointer_store, src, SM90)
    assert stats == {"tma_pointer_store": 1}
    bp = next(o for o in m.kernel.walk() if o.name == "tt.make_block_ptr")
    col = bp.operands[6].defining_op  # %7 = program_id(1) * 64, moved from the base into the coordinate
    assert bp.operands[0].hint == "c_ptr" and col.name == "arith.muli"
    assert col.operands[0].defining_op.attrs == {"axis": 1}


# ---------------------------------------------------------------------------------- forms users write
def _tile_ir(kernel, M=64, N=128, K=32, bm=32, bn=64, bk=32, c=None, dtype=torch.float16):
    a, b = torch.randn(M, K).to(dtype), torch.randn(K, N).to(dtype)
    c = torch.empty(M, N, dtype=dtype) if c is None else c
    ck = kernel.warmup(*psk.args(a, b, c), **psk.meta(kernel, bm, bn, bk), grid=psk.grid(kernel, M, N, bm, bn))
    return parse_module(ck.asm["tile"])


@pytest.mark.parametrize("name", list(psk.FORMS))
def test_forms(name):
    kernel, lifted, why = psk.FORMS[name]
    m = _tile_ir(kernel)
    stats = tma_pointer_store.run(m, SM90)
    assert stats["tma_pointer_store"] == (1 if lifted else 0), stats
    if lifted:
        st = [o for o in m.kernel.walk() if o.name == "tt.store"]
        assert len(st) == 1 and st[0].operands[0].type.is_block_ptr() and st[0].attrs["boundary_check"] == [0, 1]
    else:
        assert why in " ".join(stats["not_lifted"]), stats


def test_offsets_proven_non_negative_or_checked():
    """Program ids times constants need no check; the tutorial's grouped order proves pid_m >= 0 (cdiv of the
    map's extent N, remainders of non-negative values) but not pid_n (divided by min(num_pid_m - first_pid_m,
    GROUP_M)): one run-time check, after the store; `2` (unchecked, for timing the check) none."""
    m = _tile_ir(psk.grid2d)
    assert tma_pointer_store.run(m, SM90) == {"tma_pointer_store": 1}
    m = _tile_ir(psk.grouped_1d)
    stats = tma_pointer_store.run(m, SM90)
    assert stats == {"tma_pointer_store": 1, "offsets_checked_at_run_time": 1}
    ops = [o.name for o in m.kernel.walk()]
    assert ops.index("tt.assert") > ops.index("tt.store")


def test_unchecked_mode(monkeypatch):
    monkeypatch.setenv(tma_pointer_store.KNOB, "2")
    m = _tile_ir(psk.grouped_1d)
    assert tma_pointer_store.run(m, SM90) == {"tma_pointer_store": 1}
    assert not any(o.name == "tt.assert" for o in m.kernel.walk())


def test_column_major_output_is_order_0_1():
    """C stored transposed (stride_cm == 1, stride_cn an argument): the rows are the contiguous dim."""
    c = torch.empty(128, 64, dtype=torch.float16).t()
    m = _tile_ir(psk.grid2d, c=c)
    assert tma_pointer_store.run(m, SM90)["tma_pointer_store"] == 1
    bp = next(o for o in m.kernel.walk() if o.name == "tt.make_block_ptr")
    assert bp.attrs["order"] == [0, 1]


def test_unaligned_row_stride_keeps_st_global():
    """N = 50 halves: the row stride is not a multiple of 16 bytes (no divisibility from the specialization)."""
    m = _tile_ir(psk.grid2d, N=50)
    stats = tma_pointer_store.run(m, SM90)
    assert stats["tma_pointer_store"] == 0 and "16 bytes" in stats["not_lifted"][0]


def test_fp32_output():
    m = _tile_ir(psk.grid2d, dtype=torch.float32)
    assert tma_pointer_store.run(m, SM90)["tma_pointer_store"] == 1
