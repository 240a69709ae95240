"""allocate_shared: scratch sizes per op, disjoint placement for small plans, reuse by liveness."""
from __future__ import annotations

from kernellab.compiler.gpu.scratch import scratch_bytes
from kernellab.compiler.passes import allocate_shared

HEADER = """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L2 = #blocked<[1], [32], [4], [0]>
#L3 = #slice<0, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L4 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
"""


def by_op(module):
    return [op for op in module.kernel.walk() if "smem_bytes" in op.attrs]


def test_sizes_per_op(run_pass):
    m, stats = run_pass(allocate_shared, HEADER + """
tt.func @k(%v: tensor<1024xf32, #L0>, %t: tensor<64x32xf32, #L1>, %a: tensor<32x16xf16, #L1>, %b: tensor<16x32xf16, #L1>, %acc: tensor<32x32xf32, #L1>, %i: tensor<1024xi32, #L0>) {
  %cv = ttg.convert_layout %v : tensor<1024xf32, #L2>
  %s = tt.reduce %v {axis = 0} : f32 {
  ^bb(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    tt.reduce.return %z
  }
  %cols = tt.reduce %t {axis = 0} : tensor<32xf32, #L3> {
  ^bb(%x1: f32, %y1: f32):
    %z1 = arith.addf %x1, %y1 : f32
    tt.reduce.return %z1
  }
  %rows = tt.reduce %t {axis = 1} : tensor<64xf32, #L4> {
  ^bb(%x2: f32, %y2: f32):
    %z2 = arith.addf %x2, %y2 : f32
    tt.reduce.return %z2
  }
  %mv, %mi = tt.reduce %v, %i {axis = 0} : f32, i32 {
  ^bb(%x3: f32, %i3: i32, %y3: f32, %j3: i32):
    %z3 = arith.maxnumf %x3, %y3 : f32
    tt.reduce.return %z3, %i3
  }
  %d = tt.dot %a, %b, %acc {input_precision = "ieee"} : tensor<32x32xf32, #L1>
  %sc = tt.scan %v {axis = 0, reverse = false} : tensor<1024xf32, #L0> {
  ^bb(%x4: f32, %y4: f32):
    %z4 = arith.addf %x4, %y4 : f32
    tt.reduce.return %z4
  }
  tt.print %cv, %s, %cols, %rows, %mv, %mi, %d, %sc
  tt.return
}
""")
    sizes = {op.results[0].hint: scratch_bytes(op) for op in m.kernel.walk() if op.results}
    assert sizes["cv"] == (1024 * 4, "layout conversion")
    assert sizes["s"] == (4 * 1 * 4, "cross-warp reduction over 4 warps")         # warps x out x bytes
    assert sizes["cols"] == (4 * 32 * 4, "cross-warp reduction over 4 warps")
    assert sizes["rows"] == (0, "")                                                 # all in one warp
    assert sizes["mv"] == (4 * 1 * (4 + 4), "cross-warp reduction over 4 warps")  # both operands
    assert sizes["d"] == (32 * 16 * 2 + 16 * 32 * 2, "dot operand staging")
    # hierarchical scan: one running total per (repetition, warp, line); 1024 = 2 repetitions of 512
    assert sizes["sc"] == (2 * 4 * 1 * 4, "scan: one running total per warp (4 warps) and repetition")
    assert [(op.results[0].hint, op.attrs["smem_bytes"]) for op in by_op(m)] == [
        ("cv", 4096), ("s", 16), ("cols", 512), ("mv", 32), ("d", 2048), ("sc", 32)]
    assert stats == {"buffers": 6, "bytes": 4096 + 16 + 512 + 32 + 2048 + 32}


def test_sizes_are_rounded_to_16_bytes_and_i1_is_a_byte(run_pass):
    m, stats = run_pass(allocate_shared, HEADER + """
tt.func @k(%m: tensor<4xi1, #L0>, %p: tensor<4x!ptr<f32>, #L0>, %h: tensor<8xf16, #L0>) {
  %m2 = ttg.convert_layout %m : tensor<4xi1, #L2>
  %p2 = ttg.convert_layout %p : tensor<4x!ptr<f32>, #L2>
  %h2 = ttg.convert_layout %h : tensor<8xf16, #L2>
  tt.print %m2, %p2, %h2
  tt.return
}
""")
    assert [scratch_bytes(op)[0] for op in by_op(m)] == [4, 32, 16]
    assert [op.attrs["smem_bytes"] for op in by_op(m)] == [16, 32, 16]
    assert [op.attrs["smem_offset"] for op in by_op(m)] == [0, 16, 48]
    assert m.shared_bytes == 64


PLAN = HEADER + """#L5 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>

tt.func @k(%v: tensor<1024xf32, #L0>, %t: tensor<64x32xf32, #L1>) {
  %a = ttg.convert_layout %v : tensor<1024xf32, #L2> loc(3:4)
  %rows = tt.reduce %t {axis = 1} : tensor<64xf32, #L4> {
  ^bb(%x2: f32, %y2: f32):
    %z2 = arith.addf %x2, %y2 : f32
    tt.reduce.return %z2
  } loc(4:4)
  %cols = tt.reduce %t {axis = 0} : tensor<32xf32, #L3> {
  ^bb(%x1: f32, %y1: f32):
    %z1 = arith.addf %x1, %y1 : f32
    tt.reduce.return %z1
  } loc(5:4)
  %b = ttg.convert_layout %t : tensor<64x32xf32, #L5> loc(6:4)
  tt.print %a, %rows, %cols, %b loc(7:4)
  tt.return loc(8:1)
}
"""


def test_small_plan_is_disjoint(check):
    m, stats = check(allocate_shared, PLAN, """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L2 = #blocked<[1], [32], [4], [0]>
#L3 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L4 = #slice<0, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L5 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>

tt.func @k(%v: tensor<1024xf32, #L0>, %t: tensor<64x32xf32, #L1>) {
  %a = ttg.convert_layout %v {smem_bytes = 4096, smem_offset = 0} : tensor<1024xf32, #L2>
  %rows = tt.reduce %t {axis = 1} : tensor<64xf32, #L3> {
  ^bb(%x2: f32, %y2: f32):
    %z2 = arith.addf %x2, %y2 : f32
    tt.reduce.return %z2
  }
  %cols = tt.reduce %t {axis = 0, smem_bytes = 512, smem_offset = 4096} : tensor<32xf32, #L4> {
  ^bb(%x1: f32, %y1: f32):
    %z1 = arith.addf %x1, %y1 : f32
    tt.reduce.return %z1
  }
  %b = ttg.convert_layout %t {smem_bytes = 8448, smem_offset = 4608} : tensor<64x32xf32, #L5>
  tt.print %a, %rows, %cols, %b
  tt.return
}
""")
    # the 64x32 f32 transposing conversion: rows padded by 4 bytes (fewest wavefronts, scratch.py): 64 x 33 x 4
    assert stats == {"buffers": 3, "bytes": 4096 + 512 + 8448}
    assert m.shared_bytes == 4096 + 512 + 8448
    assert m.shared_plan == [
        {"op": "ttg.convert_layout", "line": 3, "size": 4096, "live": [0, 0], "reason": "layout conversion",
         "file": None, "offset": 0},
        {"op": "tt.reduce", "line": 5, "size": 512, "live": [4, 4], "reason": "cross-warp reduction over 4 warps",
         "file": None, "offset": 4096},
        {"op": "ttg.convert_layout", "line": 6, "size": 8448, "live": [7, 7], "reason": "layout conversion",
         "file": None, "offset": 4608},
    ]
    # no two buffers overlap
    spans = sorted((b["offset"], b["offset"] + b["size"]) for b in m.shared_plan)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_large_plan_reuses_addresses_by_liveness(run_pass, monkeypatch):
    monkeypatch.setattr(allocate_shared, "DISJOINT_LIMIT", 1024)
    m, stats = run_pass(allocate_shared, PLAN)
    # every scratch buffer lives during its own op only, so all of them start at 0
    assert [(b["offset"], b["size"]) for b in m.shared_plan] == [(0, 4096), (0, 512), (0, 8448)]
    assert m.shared_bytes == 8448 == stats["bytes"]
    assert [op.attrs["smem_offset"] for op in by_op(m)] == [0, 0, 0]


def test_ops_nested_in_regions_get_buffers(run_pass):
    m, stats = run_pass(allocate_shared, HEADER + """
tt.func @k(%v: tensor<1024xf32, #L0>, %n: i32, %c: i1) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %r = scf.for %c0, %n, %c1, %v : tensor<1024xf32, #L0> {
  ^bb(%i: i32, %acc: tensor<1024xf32, #L0>):
    %a = ttg.convert_layout %acc : tensor<1024xf32, #L2> loc(10:8)
    %b = ttg.convert_layout %a : tensor<1024xf32, #L0> loc(11:8)
    scf.yield %b
  } loc(9:4)
  scf.if %c {
    %d = ttg.convert_layout %r : tensor<1024xf32, #L2> loc(13:8)
    tt.print %d
    scf.yield
  } {
    scf.yield
  } loc(12:4)
  tt.return
}
""")
    assert [(b["line"], b["live"], b["offset"], b["size"]) for b in m.shared_plan] == [
        (10, [3, 3], 0, 4096), (11, [4, 4], 4096, 4096), (13, [7, 7], 8192, 4096)]
    assert m.shared_bytes == 3 * 4096 == stats["bytes"]


def test_no_shared_memory(check):
    text = HEADER + """
tt.func @k(%t: tensor<64x32xf32, #L1>) {
  %rows = tt.reduce %t {axis = 1} : tensor<64xf32, #L4> {
  ^bb(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    tt.reduce.return %z
  }
  tt.print %rows
  tt.return
}
"""
    expected = """
#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L1 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>

tt.func @k(%t: tensor<64x32xf32, #L0>) {
  %rows = tt.reduce %t {axis = 1} : tensor<64xf32, #L1> {
  ^bb(%x: f32, %y: f32):
    %z = arith.addf %x, %y : f32
    tt.reduce.return %z
  }
  tt.print %rows
  tt.return
}
"""
    m, stats = check(allocate_shared, text, expected)
    assert stats == {"buffers": 0, "bytes": 0}
    assert m.shared_plan == [] and m.shared_bytes == 0
