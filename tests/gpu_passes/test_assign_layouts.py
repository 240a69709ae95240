"""assign_layouts: coalesced, vectorized layouts for memory ops; everything else inherits them."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.layouts import Blocked, Slice
from kernellab.compiler.passes import assign_layouts
from kernellab.compiler.types import TensorType


def tensor_values(module):
    fn = module.kernel
    vals = [a for a in fn.args]
    for op in fn.walk():
        vals += op.results
        for reg in op.regions:
            vals += reg.args
    return [v for v in vals if isinstance(v.type, TensorType)]


def assert_all_laid_out(module, num_warps=4):
    for v in tensor_values(module):
        lay = v.type.layout
        assert lay is not None, f"{v} has no layout"
        assert lay.rank == len(v.type.shape), v
        assert lay.num_warps == num_warps, v


def vecadd(elem="f32", ptr_attr=" {tt.divisibility = 16}", n_attr=" {tt.divisibility = 16}", size=1024, lay="",
           pred="slt"):
    """The tile IR of z = x + x over BLOCK = size with a mask; with `lay`, every tensor has that layout
    (printed through the alias #L0)."""
    t = ", #L0>" if lay else ">"
    return f"""{f"#L0 = {lay}" if lay else ""}
tt.func @add(%x_ptr: !ptr<{elem}>{ptr_attr}, %z_ptr: !ptr<{elem}>{ptr_attr}, %n: i32{n_attr}) {{
  %pid = tt.get_program_id {{axis = 0}} : i32
  %c = arith.constant {{value = {size}}} : i32
  %start = arith.muli %pid, %c : i32
  %range = tt.make_range {{end = {size}, start = 0}} : tensor<{size}xi32{t}
  %base = tt.splat %start : tensor<{size}xi32{t}
  %offs = arith.addi %base, %range : tensor<{size}xi32{t}
  %ns = tt.splat %n : tensor<{size}xi32{t}
  %mask = arith.cmpi %offs, %ns {{predicate = "{pred}"}} : tensor<{size}xi1{t}
  %xs = tt.splat %x_ptr : tensor<{size}x!ptr<{elem}>{t}
  %xp = tt.addptr %xs, %offs : tensor<{size}x!ptr<{elem}>{t}
  %x = tt.load %xp, %mask{{VEC}} : tensor<{size}x{elem}{t}
  %y = arith.addf %x, %x : tensor<{size}x{elem}{t}
  %zs = tt.splat %z_ptr : tensor<{size}x!ptr<{elem}>{t}
  %zp = tt.addptr %zs, %offs : tensor<{size}x!ptr<{elem}>{t}
  tt.store %zp, %y, %mask{{VEC}}
  tt.return
}}
"""


def test_vector_add_f32(check):
    src = vecadd().replace("{VEC}", "")
    m, stats = check(assign_layouts, src, """
#L0 = #blocked<[4], [32], [4], [0]>

tt.func @add(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %z_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c : i32
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %base = tt.splat %start : tensor<1024xi32, #L0>
  %offs = arith.addi %base, %range : tensor<1024xi32, #L0>
  %ns = tt.splat %n : tensor<1024xi32, #L0>
  %mask = arith.cmpi %offs, %ns {predicate = "slt"} : tensor<1024xi1, #L0>
  %xs = tt.splat %x_ptr : tensor<1024x!ptr<f32>, #L0>
  %xp = tt.addptr %xs, %offs : tensor<1024x!ptr<f32>, #L0>
  %x = tt.load %xp, %mask {vec = 4} : tensor<1024xf32, #L0>
  %y = arith.addf %x, %x : tensor<1024xf32, #L0>
  %zs = tt.splat %z_ptr : tensor<1024x!ptr<f32>, #L0>
  %zp = tt.addptr %zs, %offs : tensor<1024x!ptr<f32>, #L0>
  tt.store %zp, %y, %mask {vec = 4}
  tt.return
}
""")
    assert stats == {"anchors": 2, "converts_inserted": 0}
    assert_all_laid_out(m)


@pytest.mark.parametrize("kw, layout, vec", [
    ({"elem": "f16"}, "#blocked<[8], [32], [4], [0]>", 8),                        # 16 bytes = 8 halves
    ({"n_attr": ""}, "#blocked<[1], [32], [4], [0]>", 1),                         # mask may flip anywhere
    ({"n_attr": " {tt.divisibility = 2}"}, "#blocked<[2], [32], [4], [0]>", 2),   # mask constant in pairs
    ({"ptr_attr": ""}, "#blocked<[1], [32], [4], [0]>", 1),                       # unaligned base pointer
    ({"size": 256}, "#blocked<[2], [32], [4], [0]>", 2),                          # 2 elements per thread
    ({"size": 16}, "#blocked<[1], [32], [4], [0]>", 1),                           # replicated tile
    ({"pred": "sle"}, "#blocked<[1], [32], [4], [0]>", 1),                        # offs <= n flips at n + 1
    ({"pred": "sge"}, "#blocked<[4], [32], [4], [0]>", 4),                        # offs >= n flips at n
])
def test_vector_add_variants(check, kw, layout, vec):
    src = vecadd(**kw).replace("{VEC}", "")
    expected = vecadd(**kw, lay=layout).replace("{VEC}", f" {{vec = {vec}}}")
    m, _ = check(assign_layouts, src, expected)
    assert_all_laid_out(m)


def test_vector_add_eight_warps(check):
    src = vecadd(size=2048).replace("{VEC}", "")
    expected = vecadd(size=2048, lay="#blocked<[4], [32], [8], [0]>").replace("{VEC}", " {vec = 4}")
    from kernellab.compiler.gpu.options import GpuOptions

    m, _ = check(assign_layouts, src, expected, GpuOptions(num_warps=8))
    assert_all_laid_out(m, num_warps=8)


TRANSPOSE = """
tt.func @trans_kernel(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32>
  %1 = arith.constant {value = 64} : tensor<32x1xi32>
  %2 = arith.muli %0, %1 : tensor<32x1xi32>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>>
  %7 = tt.broadcast %5 : tensor<32x64xi32>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>>
  %x = tt.load %8 : tensor<32x64xf32>
  %9 = tt.splat %y_ptr : tensor<32x1x!ptr<f32>>
  %10 = tt.addptr %9, %0 : tensor<32x1x!ptr<f32>>
  %11 = arith.constant {value = 32} : tensor<1x64xi32>
  %12 = arith.muli %5, %11 : tensor<1x64xi32>
  %13 = tt.broadcast %10 : tensor<32x64x!ptr<f32>>
  %14 = tt.broadcast %12 : tensor<32x64xi32>
  %15 = tt.addptr %13, %14 : tensor<32x64x!ptr<f32>>
  tt.store %15, %x
  tt.return
}
"""


def test_transposed_store_gets_its_own_order(check):
    """y[n, m] = x[m, n]: the load is contiguous along dim 1, the store along dim 0, so the loaded
    value (and the index math shared with the load) is converted into the store's layout."""
    m, stats = check(assign_layouts, TRANSPOSE, """
#L0 = #slice<1, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>
#L3 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>

tt.func @trans_kernel(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L0>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32, #L2>
  %1 = arith.constant {value = 64} : tensor<32x1xi32, #L2>
  %2 = arith.muli %0, %1 : tensor<32x1xi32, #L2>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>, #L2>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>, #L2>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32, #L2>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>, #L2>
  %7 = tt.broadcast %5 : tensor<32x64xi32, #L2>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>, #L2>
  %x = tt.load %8 {vec = 4} : tensor<32x64xf32, #L2>
  %9 = tt.splat %y_ptr : tensor<32x1x!ptr<f32>, #L3>
  %10 = ttg.convert_layout %0 : tensor<32x1xi32, #L3>
  %11 = tt.addptr %9, %10 : tensor<32x1x!ptr<f32>, #L3>
  %12 = arith.constant {value = 32} : tensor<1x64xi32, #L3>
  %13 = ttg.convert_layout %12 : tensor<1x64xi32, #L2>
  %14 = arith.muli %5, %13 : tensor<1x64xi32, #L2>
  %15 = tt.broadcast %11 : tensor<32x64x!ptr<f32>, #L3>
  %16 = tt.broadcast %14 : tensor<32x64xi32, #L2>
  %17 = ttg.convert_layout %16 : tensor<32x64xi32, #L3>
  %18 = tt.addptr %15, %17 : tensor<32x64x!ptr<f32>, #L3>
  %19 = ttg.convert_layout %x : tensor<32x64xf32, #L3>
  tt.store %18, %19 {vec = 4}
  tt.return
}
""")
    assert stats == {"anchors": 2, "converts_inserted": 4}
    assert_all_laid_out(m)
    load = next(op for op in m.kernel.walk() if op.name == "tt.load")
    store = next(op for op in m.kernel.walk() if op.name == "tt.store")
    assert load.result.type.layout.order == (1, 0)
    assert store.operands[1].type.layout.order == (0, 1)
    assert store.operands[1].defining_op.name == "ttg.convert_layout"


def test_reduction_result_gets_slice_layout(check):
    m, stats = check(assign_layouts, """
tt.func @rowsum(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32>
  %1 = arith.constant {value = 64} : tensor<32x1xi32>
  %2 = arith.muli %0, %1 : tensor<32x1xi32>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>>
  %7 = tt.broadcast %5 : tensor<32x64xi32>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>>
  %x = tt.load %8 : tensor<32x64xf32>
  %s = tt.reduce %x {axis = 1} : tensor<32xf32> {
  ^bb(%a: f32, %b: f32):
    %c = arith.addf %a, %b : f32
    tt.reduce.return %c
  }
  %ys = tt.splat %y_ptr : tensor<32x!ptr<f32>>
  %yp = tt.addptr %ys, %rm : tensor<32x!ptr<f32>>
  tt.store %yp, %s
  tt.return
}
""", """
#L0 = #slice<1, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 4], [2, 16], [4, 1], [1, 0]>
#L3 = #blocked<[1], [32], [4], [0]>

tt.func @rowsum(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 32, start = 0} : tensor<32xi32, #L0>
  %rn = tt.make_range {end = 64, start = 0} : tensor<64xi32, #L1>
  %0 = tt.expand_dims %rm {axis = 1} : tensor<32x1xi32, #L2>
  %1 = arith.constant {value = 64} : tensor<32x1xi32, #L2>
  %2 = arith.muli %0, %1 : tensor<32x1xi32, #L2>
  %3 = tt.splat %x_ptr : tensor<32x1x!ptr<f32>, #L2>
  %4 = tt.addptr %3, %2 : tensor<32x1x!ptr<f32>, #L2>
  %5 = tt.expand_dims %rn {axis = 0} : tensor<1x64xi32, #L2>
  %6 = tt.broadcast %4 : tensor<32x64x!ptr<f32>, #L2>
  %7 = tt.broadcast %5 : tensor<32x64xi32, #L2>
  %8 = tt.addptr %6, %7 : tensor<32x64x!ptr<f32>, #L2>
  %x = tt.load %8 {vec = 4} : tensor<32x64xf32, #L2>
  %s = tt.reduce %x {axis = 1} : tensor<32xf32, #L0> {
  ^bb(%a: f32, %b: f32):
    %c = arith.addf %a, %b : f32
    tt.reduce.return %c
  }
  %ys = tt.splat %y_ptr : tensor<32x!ptr<f32>, #L3>
  %9 = ttg.convert_layout %rm : tensor<32xi32, #L3>
  %yp = tt.addptr %ys, %9 : tensor<32x!ptr<f32>, #L3>
  %10 = ttg.convert_layout %s : tensor<32xf32, #L3>
  tt.store %yp, %10 {vec = 1}
  tt.return
}
""")
    assert stats["converts_inserted"] == 2
    red = next(op for op in m.kernel.walk() if op.name == "tt.reduce")
    assert red.result.type.layout == Slice(1, red.operands[0].type.layout)
    assert_all_laid_out(m)


def test_expand_dims_sources_take_slice_of_the_access_layout(check):
    """A 2-D copy with a runtime row stride: the 1-D ranges are created directly in the #slice
    layouts that expand_dims turns into the access layout, so no conversion is needed."""
    m, stats = check(assign_layouts, """
tt.func @copy2d(%x: !ptr<f16> {tt.divisibility = 16}, %y: !ptr<f16> {tt.divisibility = 16}, %stride: i32 {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rn = tt.make_range {end = 128, start = 0} : tensor<128xi32>
  %r2 = tt.expand_dims %rm {axis = 1} : tensor<16x1xi32>
  %ss = tt.splat %stride : tensor<16x1xi32>
  %ro = arith.muli %r2, %ss : tensor<16x1xi32>
  %c2 = tt.expand_dims %rn {axis = 0} : tensor<1x128xi32>
  %rb = tt.broadcast %ro : tensor<16x128xi32>
  %cb = tt.broadcast %c2 : tensor<16x128xi32>
  %off = arith.addi %rb, %cb : tensor<16x128xi32>
  %xs = tt.splat %x : tensor<16x128x!ptr<f16>>
  %xp = tt.addptr %xs, %off : tensor<16x128x!ptr<f16>>
  %v = tt.load %xp : tensor<16x128xf16>
  %ys = tt.splat %y : tensor<16x128x!ptr<f16>>
  %yp = tt.addptr %ys, %off : tensor<16x128x!ptr<f16>>
  tt.store %yp, %v
  tt.return
}
""", """
#L0 = #slice<1, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>
#L1 = #slice<0, #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>>
#L2 = #blocked<[1, 8], [2, 16], [4, 1], [1, 0]>

tt.func @copy2d(%x: !ptr<f16> {tt.divisibility = 16}, %y: !ptr<f16> {tt.divisibility = 16}, %stride: i32 {tt.divisibility = 16}) {
  %rm = tt.make_range {end = 16, start = 0} : tensor<16xi32, #L0>
  %rn = tt.make_range {end = 128, start = 0} : tensor<128xi32, #L1>
  %r2 = tt.expand_dims %rm {axis = 1} : tensor<16x1xi32, #L2>
  %ss = tt.splat %stride : tensor<16x1xi32, #L2>
  %ro = arith.muli %r2, %ss : tensor<16x1xi32, #L2>
  %c2 = tt.expand_dims %rn {axis = 0} : tensor<1x128xi32, #L2>
  %rb = tt.broadcast %ro : tensor<16x128xi32, #L2>
  %cb = tt.broadcast %c2 : tensor<16x128xi32, #L2>
  %off = arith.addi %rb, %cb : tensor<16x128xi32, #L2>
  %xs = tt.splat %x : tensor<16x128x!ptr<f16>, #L2>
  %xp = tt.addptr %xs, %off : tensor<16x128x!ptr<f16>, #L2>
  %v = tt.load %xp {vec = 8} : tensor<16x128xf16, #L2>
  %ys = tt.splat %y : tensor<16x128x!ptr<f16>, #L2>
  %yp = tt.addptr %ys, %off : tensor<16x128x!ptr<f16>, #L2>
  tt.store %yp, %v {vec = 8}
  tt.return
}
""")
    assert stats == {"anchors": 2, "converts_inserted": 0}
    lay = Blocked((1, 8), (2, 16), (4, 1), (1, 0))
    rm = m.kernel.body.ops[0].result
    assert rm.type.layout == Slice(1, lay)
    assert_all_laid_out(m)


def test_loop_carried_pointer_tensor(check):
    m, stats = check(assign_layouts, """
tt.func @loop(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %offs = tt.make_range {end = 512, start = 0} : tensor<512xi32>
  %0 = tt.splat %x_ptr : tensor<512x!ptr<f32>>
  %p = tt.addptr %0, %offs : tensor<512x!ptr<f32>>
  %acc = arith.constant {value = 0.0} : tensor<512xf32>
  %1 = arith.constant {value = 0} : i32
  %2 = arith.constant {value = 1} : i32
  %3 = arith.constant {value = 512} : tensor<512xi32>
  %acc_1, %p_1 = scf.for %1, %n, %2, %acc, %p : tensor<512xf32>, tensor<512x!ptr<f32>> {
  ^bb(%i: i32, %acc_2: tensor<512xf32>, %p_2: tensor<512x!ptr<f32>>):
    %4 = tt.load %p_2 : tensor<512xf32>
    %acc_3 = arith.addf %acc_2, %4 : tensor<512xf32>
    %p_3 = tt.addptr %p_2, %3 : tensor<512x!ptr<f32>>
    scf.yield %acc_3, %p_3
  }
  %5 = tt.splat %y_ptr : tensor<512x!ptr<f32>>
  %6 = tt.addptr %5, %offs : tensor<512x!ptr<f32>>
  tt.store %6, %acc_1
  tt.return
}
""", """
#L0 = #blocked<[4], [32], [4], [0]>

tt.func @loop(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %offs = tt.make_range {end = 512, start = 0} : tensor<512xi32, #L0>
  %0 = tt.splat %x_ptr : tensor<512x!ptr<f32>, #L0>
  %p = tt.addptr %0, %offs : tensor<512x!ptr<f32>, #L0>
  %acc = arith.constant {value = 0.0} : tensor<512xf32, #L0>
  %1 = arith.constant {value = 0} : i32
  %2 = arith.constant {value = 1} : i32
  %3 = arith.constant {value = 512} : tensor<512xi32, #L0>
  %acc_1, %p_1 = scf.for %1, %n, %2, %acc, %p : tensor<512xf32, #L0>, tensor<512x!ptr<f32>, #L0> {
  ^bb(%i: i32, %acc_2: tensor<512xf32, #L0>, %p_2: tensor<512x!ptr<f32>, #L0>):
    %4 = tt.load %p_2 {vec = 4} : tensor<512xf32, #L0>
    %acc_3 = arith.addf %acc_2, %4 : tensor<512xf32, #L0>
    %p_3 = tt.addptr %p_2, %3 : tensor<512x!ptr<f32>, #L0>
    scf.yield %acc_3, %p_3
  }
  %5 = tt.splat %y_ptr : tensor<512x!ptr<f32>, #L0>
  %6 = tt.addptr %5, %offs : tensor<512x!ptr<f32>, #L0>
  tt.store %6, %acc_1 {vec = 4}
  tt.return
}
""")
    assert stats == {"anchors": 2, "converts_inserted": 0}
    assert_all_laid_out(m)


LOOP_ROW_SUM = """
tt.func @rowsum(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %r = tt.make_range {end = 64, start = 0} : tensor<64xi32>
  %rows = tt.expand_dims %r {axis = 1} : tensor<64x1xi32>
  %c64 = arith.constant {value = 64} : tensor<64x1xi32>
  %ro = arith.muli %rows, %c64 : tensor<64x1xi32>
  %cols = tt.expand_dims %r {axis = 0} : tensor<1x64xi32>
  %rb = tt.broadcast %ro : tensor<64x64xi32>
  %cb = tt.broadcast %cols : tensor<64x64xi32>
  %offs = arith.addi %rb, %cb : tensor<64x64xi32>
  %0 = tt.splat %x_ptr : tensor<64x64x!ptr<f32>>
  %p = tt.addptr %0, %offs : tensor<64x64x!ptr<f32>>
  %l = arith.constant {value = 0.0} : tensor<64xf32>
  %1 = arith.constant {value = 0} : i32
  %2 = arith.constant {value = 1} : i32
  %l_1 = scf.for %1, %n, %2, %l : tensor<64xf32> {
  ^bb(%i: i32, %l_2: tensor<64xf32>):
    %x = tt.load %p : tensor<64x64xf32>
    %s = tt.reduce %x {axis = 1} : tensor<64xf32> {
    ^bb(%a: f32, %b: f32):
      %c = arith.addf %a, %b : f32
      tt.reduce.return %c
    }
    %l_3 = arith.addf %l_2, %s : tensor<64xf32>
    scf.yield %l_3
  }
  %3 = tt.splat %y_ptr : tensor<64x!ptr<f32>>
  %4 = tt.addptr %3, %r : tensor<64x!ptr<f32>>
  tt.store %4, %l_1
  tt.return
}
"""


def test_loop_carried_value_enters_in_the_layout_its_body_yields(run_pass):
    # the running sum starts as a constant in the store's 1-D layout, but the body updates it from a row
    # reduction (a slice of the load's layout): entering in that slice costs one conversion after the
    # loop instead of one per iteration
    m, stats = run_pass(assign_layouts, LOOP_ROW_SUM)
    assert stats["loop_layouts_followed"] == 1
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    assert not [op for op in loop.regions[0].ops if op.name == "ttg.convert_layout"]
    arg = loop.regions[0].args[1]
    assert str(arg.type.layout).startswith("#slice<1, #blocked")
    assert [op.name for op in m.kernel.body.ops].count("ttg.convert_layout") >= 1  # the one for the store


def test_elementwise_op_takes_the_computed_operand_layout_over_index_math(run_pass):
    # x + (row index): the index math is recomputed in x's layout, x is not converted
    text = LOOP_ROW_SUM.replace("%l_3 = arith.addf %l_2, %s : tensor<64xf32>",
                                "%rf = arith.sitofp %r : tensor<64xf32>\n    %l_3 = arith.addf %rf, %s : tensor<64xf32>")
    m, _ = run_pass(assign_layouts, text)
    loop = next(op for op in m.kernel.body.ops if op.name == "scf.for")
    add = next(op for op in loop.regions[0].ops if op.name == "arith.addf")
    s = next(op for op in loop.regions[0].ops if op.name == "tt.reduce").result
    assert add.result.type.layout == s.type.layout and add.operands[1] is s


RESHAPED_RANGE_LOAD = """
tt.func @k(%x_ptr: !ptr<i32> {tt.divisibility = 16}, %y_ptr: !ptr<i32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 2048, start = 0} : tensor<2048xi32>
  %idx = tt.reshape %r : tensor<2x2x8x64xi32>
  %0 = tt.splat %x_ptr : tensor<2x2x8x64x!ptr<i32>>
  %1 = tt.addptr %0, %idx : tensor<2x2x8x64x!ptr<i32>>
  %x = tt.load %1 : tensor<2x2x8x64xi32>
  %2 = tt.splat %y_ptr : tensor<2x2x8x64x!ptr<i32>>
  %3 = tt.addptr %2, %idx : tensor<2x2x8x64x!ptr<i32>>
  tt.store %3, %x
  tt.return
}
"""


def test_an_access_takes_its_pointer_tiles_layout_where_that_coalesces_the_same(check):
    """`arange(2048).reshape(2, 2, 8, 64)` at 8 warps: the reshape keeps the range's registers (#L1: two
    registers along each of dims 0 and 1, lanes along the contiguous dim 3). The accesses' own layout would put
    warps on dims 0-2 instead, and the range cannot be made in the layout the reshape would need for that (its
    bits would interleave warp and register bits), so the 8-byte pointer tile would cross shared memory. Lanes
    and the per-thread run along dim 3 are the same in both layouts: the load and the store take #L1.
    The axis analysis sees the range's runs through the reshape, so the accesses' own layout (#L2) reads 16 bytes a
    thread; #L1 still reads whole 128-byte lines a warp (32 lanes over consecutive words), in more instructions,
    which beats converting 8-byte pointers through shared memory: the accesses take #L1 at vec 1."""
    from kernellab.compiler.gpu.options import GpuOptions

    m, stats = check(assign_layouts, RESHAPED_RANGE_LOAD, """
#L0 = #blocked<[1], [32], [8], [0]>
#L1 = #blocked<[2, 2, 1, 1], [1, 1, 1, 32], [1, 1, 4, 2], [3, 2, 1, 0]>
#L2 = #blocked<[1, 1, 1, 4], [1, 1, 2, 16], [2, 2, 2, 1], [3, 2, 1, 0]>

tt.func @k(%x_ptr: !ptr<i32> {tt.divisibility = 16}, %y_ptr: !ptr<i32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 2048, start = 0} : tensor<2048xi32, #L0>
  %idx = tt.reshape %r : tensor<2x2x8x64xi32, #L1>
  %0 = tt.splat %x_ptr : tensor<2x2x8x64x!ptr<i32>, #L2>
  %1 = ttg.convert_layout %0 : tensor<2x2x8x64x!ptr<i32>, #L1>
  %2 = tt.addptr %1, %idx : tensor<2x2x8x64x!ptr<i32>, #L1>
  %x = tt.load %2 {vec = 1} : tensor<2x2x8x64xi32, #L1>
  %3 = tt.splat %y_ptr : tensor<2x2x8x64x!ptr<i32>, #L2>
  %4 = ttg.convert_layout %3 : tensor<2x2x8x64x!ptr<i32>, #L1>
  %5 = tt.addptr %4, %idx : tensor<2x2x8x64x!ptr<i32>, #L1>
  tt.store %5, %x {vec = 1}
  tt.return
}
""", GpuOptions(num_warps=8))
    assert stats["accesses_in_pointer_layout"] == 2, stats
    # the splats (made in the accesses' layout first) are made again in #L1 by the next pass: nothing is converted
    from kernellab.compiler.passes import remove_layout_conversions
    assert remove_layout_conversions.run(m, GpuOptions(num_warps=8))["remaining"] == 0


SHIFTED = """
tt.func @shift(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %z_ptr: !ptr<f16> {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c : i32
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %base = tt.splat %start : tensor<1024xi32>
  %offs = arith.addi %base, %range : tensor<1024xi32>
  %one = arith.constant {value = 1} : tensor<1024xi32>
  %next = arith.addi %offs, %one : tensor<1024xi32>
  %xs = tt.splat %x_ptr : tensor<1024x!ptr<f16>>
  %xp = tt.addptr %xs, %offs : tensor<1024x!ptr<f16>>
  %xq = tt.addptr %xs, %next : tensor<1024x!ptr<f16>>
  %x = tt.load %xp : tensor<1024xf16>
  %x1 = tt.load %xq : tensor<1024xf16>
  %y = arith.addf %x, %x1 : tensor<1024xf16>
  %zs = tt.splat %z_ptr : tensor<1024x!ptr<f16>>
  %zp = tt.addptr %zs, %offs : tensor<1024x!ptr<f16>>
  tt.store %zp, %y
  tt.return
}
"""


def test_unaligned_contiguous_load_takes_the_wide_run(check):
    """x[i] + x[i + 1] stored to z[i] (a stencil's shifted tap): the shifted load cannot be a vector (its address
    is one element off 16 bytes) but is contiguous; it takes the aligned accesses' 8 elements per thread, reading
    them one at a time, so the sum needs no conversion through shared memory (Triton's coalescing does the same)."""
    m, stats = check(assign_layouts, SHIFTED, """
#L0 = #blocked<[8], [32], [4], [0]>

tt.func @shift(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %z_ptr: !ptr<f16> {tt.divisibility = 16}) {
  %pid = tt.get_program_id {axis = 0} : i32
  %c = arith.constant {value = 1024} : i32
  %start = arith.muli %pid, %c : i32
  %range = tt.make_range {end = 1024, start = 0} : tensor<1024xi32, #L0>
  %base = tt.splat %start : tensor<1024xi32, #L0>
  %offs = arith.addi %base, %range : tensor<1024xi32, #L0>
  %one = arith.constant {value = 1} : tensor<1024xi32, #L0>
  %next = arith.addi %offs, %one : tensor<1024xi32, #L0>
  %xs = tt.splat %x_ptr : tensor<1024x!ptr<f16>, #L0>
  %xp = tt.addptr %xs, %offs : tensor<1024x!ptr<f16>, #L0>
  %xq = tt.addptr %xs, %next : tensor<1024x!ptr<f16>, #L0>
  %x = tt.load %xp {vec = 8} : tensor<1024xf16, #L0>
  %x1 = tt.load %xq {vec = 1} : tensor<1024xf16, #L0>
  %y = arith.addf %x, %x1 : tensor<1024xf16, #L0>
  %zs = tt.splat %z_ptr : tensor<1024x!ptr<f16>, #L0>
  %zp = tt.addptr %zs, %offs : tensor<1024x!ptr<f16>, #L0>
  tt.store %zp, %y {vec = 8}
  tt.return
}
""")
    assert stats == {"anchors": 3, "converts_inserted": 0, "unaligned_loads_widened": 1}


def test_unaligned_store_keeps_its_own_run(run_pass):
    """Only loads widen: a store one element off (z[i + 1] = x[i]) keeps one element per thread (a wider run per
    thread would leave gaps in each warp's write), its value converted."""
    src = SHIFTED.replace("%zp = tt.addptr %zs, %offs", "%zp = tt.addptr %zs, %next")
    m, stats = run_pass(assign_layouts, src)
    store = next(op for op in m.kernel.walk() if op.name == "tt.store")
    assert store.operands[0].type.layout.spt == (1,) and store.attrs["vec"] == 1
    assert stats["unaligned_loads_widened"] == 1 and stats["converts_inserted"] >= 1
