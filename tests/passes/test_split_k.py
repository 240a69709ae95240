"""split_k (passes/split_k.py): IR text in -> IR text out, and each refusal leaves the IR as it was."""
from kernellab.compiler.passes import split_k
from kernellab.compiler.trip_count import evaluate as evaluate_trip

LOOP = """
tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pc: !ptr<f32> {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %zero = arith.constant {value = 0.0} : tensor<16x16xf32>
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %r2 = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %r3 = tt.broadcast %r2 : tensor<16x16xi32>
  %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %pa0 = tt.addptr %ta, %r3 : tensor<16x16x!ptr<f16>>
  %step = arith.constant {value = 16} : tensor<16x16xi32>
  %acc, %p = scf.for %c0, %n, %c1, %zero, %pa0 : tensor<16x16xf32>, tensor<16x16x!ptr<f16>> {
  ^bb(%i: i32, %a0: tensor<16x16xf32>, %p0: tensor<16x16x!ptr<f16>>):
    %a = tt.load %p0 : tensor<16x16xf16>
    %d = tt.dot %a, %a, %a0 {input_precision = "ieee"} : tensor<16x16xf32>
    %p1 = tt.addptr %p0, %step : tensor<16x16x!ptr<f16>>
    scf.yield %d, %p1
  }
  %tc = tt.splat %pc : tensor<16x16x!ptr<f32>>
  %pcs = tt.addptr %tc, %r3 : tensor<16x16x!ptr<f32>>
  %m = arith.cmpi %r3, %r3 {predicate = "slt"} : tensor<16x16xi1>
  %out = arith.mulf %acc, %acc : tensor<16x16xf32>
  tt.store %pcs, %out, %m
  tt.return
}
"""

SPLIT = """
tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pc: !ptr<f32> {tt.divisibility = 16}, %n: i32, %splitk_workspace: !ptr<f32> {tt.divisibility = 16}, %splitk_counters: !ptr<i32> {tt.divisibility = 16}) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %zero = arith.constant {value = 0.0} : tensor<16x16xf32>
  %r = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %r2 = tt.expand_dims %r {axis = 1} : tensor<16x1xi32>
  %r3 = tt.broadcast %r2 : tensor<16x16xi32>
  %ta = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %pa0 = tt.addptr %ta, %r3 : tensor<16x16x!ptr<f16>>
  %step = arith.constant {value = 16} : tensor<16x16xi32>
  %split = tt.get_program_id {axis = 2} : i32
  %splits = tt.get_num_programs {axis = 2} : i32
  %0 = arith.constant {value = 1} : i32
  %1 = arith.constant {value = 0} : i32
  %2 = arith.subi %n, %c0 : i32
  %trips = arith.maxsi %2, %1 : i32
  %3 = arith.divsi %trips, %splits : i32
  %4 = arith.remsi %trips, %splits : i32
  %5 = arith.addi %split, %0 : i32
  %6 = arith.muli %split, %3 : i32
  %7 = arith.minsi %split, %4 : i32
  %split_lo = arith.addi %6, %7 : i32
  %8 = arith.muli %5, %3 : i32
  %9 = arith.minsi %5, %4 : i32
  %split_hi = arith.addi %8, %9 : i32
  %10 = arith.constant {value = 1} : i32
  %11 = arith.muli %split_lo, %10 : i32
  %12 = arith.addi %c0, %11 : i32
  %13 = arith.muli %split_hi, %10 : i32
  %14 = arith.addi %c0, %13 : i32
  %15 = arith.extsi %split_lo : i64
  %16 = arith.extsi %step : tensor<16x16xi64>
  %17 = tt.splat %15 : tensor<16x16xi64>
  %18 = arith.muli %16, %17 : tensor<16x16xi64>
  %pa0_1 = tt.addptr %pa0, %18 : tensor<16x16x!ptr<f16>>
  %acc, %p = scf.for %12, %14, %c1, %zero, %pa0_1 : tensor<16x16xf32>, tensor<16x16x!ptr<f16>> {
  ^bb(%i: i32, %a0: tensor<16x16xf32>, %p0: tensor<16x16x!ptr<f16>>):
    %a = tt.load %p0 : tensor<16x16xf16>
    %d = tt.dot %a, %a, %a0 {input_precision = "ieee"} : tensor<16x16xf32>
    %p1 = tt.addptr %p0, %step : tensor<16x16x!ptr<f16>>
    scf.yield %d, %p1
  }
  %tc = tt.splat %pc : tensor<16x16x!ptr<f32>>
  %pcs = tt.addptr %tc, %r3 : tensor<16x16x!ptr<f32>>
  %m = arith.cmpi %r3, %r3 {predicate = "slt"} : tensor<16x16xi1>
  %19 = tt.get_program_id {axis = 0} : i32
  %20 = tt.get_program_id {axis = 1} : i32
  %21 = tt.get_num_programs {axis = 0} : i32
  %22 = arith.muli %20, %21 : i32
  %tile = arith.addi %19, %22 : i32
  %23 = tt.get_num_programs {axis = 0} : i32
  %24 = tt.get_num_programs {axis = 1} : i32
  %tiles = arith.muli %23, %24 : i32
  %25 = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %26 = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %27 = tt.expand_dims %25 {axis = 1} : tensor<16x1xi32>
  %28 = arith.constant {value = 16} : tensor<16x1xi32>
  %29 = arith.muli %27, %28 : tensor<16x1xi32>
  %30 = tt.expand_dims %26 {axis = 0} : tensor<1x16xi32>
  %31 = tt.broadcast %29 : tensor<16x16xi32>
  %32 = tt.broadcast %30 : tensor<16x16xi32>
  %splitk_offs = arith.addi %31, %32 : tensor<16x16xi32>
  %33 = arith.muli %split, %tiles : i32
  %34 = arith.addi %33, %tile : i32
  %35 = arith.extsi %34 : i64
  %36 = arith.constant {value = 256} : i64
  %37 = arith.muli %35, %36 : i64
  %38 = tt.addptr %splitk_workspace, %37 : !ptr<f32>
  %39 = tt.splat %38 : tensor<16x16x!ptr<f32>>
  %40 = tt.addptr %39, %splitk_offs : tensor<16x16x!ptr<f32>>
  tt.store %40, %acc, %m
  tt.debug_barrier
  %41 = tt.addptr %splitk_counters, %tile : !ptr<i32>
  %42 = arith.constant {value = 1} : i32
  %arrived = tt.atomic_rmw %41, %42 {kind = "add", scope = "gpu", sem = "acq_rel"} : i32
  %43 = arith.constant {value = 1} : i32
  %44 = arith.subi %splits, %43 : i32
  %last = arith.cmpi %arrived, %44 {predicate = "eq"} : i1
  scf.if %last {
    %45 = arith.constant {value = 0} : i32
    %46 = arith.constant {value = 1} : i32
    %47 = arith.constant {value = 0.0} : tensor<16x16xf32>
    %splitk_sum = scf.for %45, %splits, %46, %47 : tensor<16x16xf32> {
    ^bb(%j: i32, %partial_sum: tensor<16x16xf32>):
      %48 = arith.muli %j, %tiles : i32
      %49 = arith.addi %48, %tile : i32
      %50 = arith.extsi %49 : i64
      %51 = arith.constant {value = 256} : i64
      %52 = arith.muli %50, %51 : i64
      %53 = tt.addptr %splitk_workspace, %52 : !ptr<f32>
      %54 = tt.splat %53 : tensor<16x16x!ptr<f32>>
      %55 = tt.addptr %54, %splitk_offs : tensor<16x16x!ptr<f32>>
      %56 = arith.constant {value = 0.0} : tensor<16x16xf32>
      %57 = tt.load %55, %m, %56 {cache = ".cg"} : tensor<16x16xf32>
      %58 = arith.addf %partial_sum, %57 : tensor<16x16xf32>
      scf.yield %58
    }
    %59 = arith.constant {value = 0} : i32
    tt.store %41, %59
    %out = arith.mulf %splitk_sum, %splitk_sum : tensor<16x16xf32>
    tt.store %pcs, %out, %m
    scf.yield
  } {
    scf.yield
  }
  tt.return
}
"""


def test_dot_loop_is_split_over_grid_z(check, monkeypatch):
    monkeypatch.setenv(split_k.REDUCE_KNOB, "simple")
    stats = check(split_k, LOOP, SPLIT)
    assert stats["split"] == 1 and stats["masked"] == 1 and stats["tile_elems"] == 256 and stats["reduce"] == "simple"
    assert evaluate_trip(stats["trip_count"], [0, 0, 37]) == 37


def test_chunked_sum(check_uses, monkeypatch):
    """The default sum: the same IR up to the last split's branch, whose sum skips chunks outside the store mask
    (OR-reductions of the mask's chunk bits) and reads UNROLL partials of a chunk at once, or (more than half
    the chunks live) sums whole tiles."""
    from kernellab.compiler.parser import parse_module
    from kernellab.compiler.printer import print_module
    from kernellab.compiler.verifier import verify

    monkeypatch.setattr(split_k, "CHUNK_ELEMS", 64)  # 4-row chunks of the 16x16 tile
    m = parse_module(LOOP)
    stats = split_k.run(m)
    check_uses(m)
    verify(m, after=split_k.NAME)
    got = print_module(m, with_locs=False)
    assert stats["reduce"] == "chunked"
    head = SPLIT.split("  scf.if %last {")[0].strip()
    assert got.split("  scf.if %last {")[0].strip() == head
    branch = got.split("  scf.if %last {")[1]
    assert branch.count("tt.reduce ") == 3 and "%live_chunks = tt.reduce" in branch and "%live_rows = tt.reduce" in branch
    # the chunked sum's UNROLL loads and its read-back, the whole-tile sum's load (taken when most chunks are live)
    assert branch.count('{cache = ".cg"}') == split_k.UNROLL + 2
    assert "%sparse = arith.cmpi" in branch and "%splitk_sum = scf.if %sparse" in branch
    assert "arith.constant {value = 4} : i32" in branch  # the chunk count
    assert f"arith.constant {{value = {split_k.UNROLL}}} : i32" in branch
    assert "tensor<4x16xf32>" in branch
    assert print_module(parse_module(got), with_locs=False) == got


def _refused(check, text, why):
    stats = check(split_k, text, text)
    assert stats["split"] == 0 and why in stats["refused"], stats


def test_store_in_loop_is_refused(check):
    text = LOOP.replace("    scf.yield %d, %p1", "    tt.store %pa0, %a\n    scf.yield %d, %p1")
    _refused(check, text, "side effect (tt.store)")


def test_atomic_in_loop_is_refused(check):
    text = LOOP.replace("    scf.yield %d, %p1", "    %x = tt.atomic_rmw %pc, %c1 {kind = \"add\", scope = \"gpu\", "
                        "sem = \"acq_rel\"} : i32\n    scf.yield %d, %p1").replace("%pc: !ptr<f32>", "%pc: !ptr<i32>")
    text = text.replace("tensor<16x16x!ptr<f32>>", "tensor<16x16x!ptr<i32>>").replace(
        "  %out = arith.mulf %acc, %acc : tensor<16x16xf32>\n", "  %out = arith.fptosi %acc : tensor<16x16xi32>\n")
    _refused(check, text, "side effect (tt.atomic_rmw)")


def test_print_before_loop_is_refused(check):
    text = LOOP.replace("  %step =", "  tt.print %c1\n  %step =")
    _refused(check, text, "before the loop has a side effect")


def test_nonzero_accumulator_is_refused(check):
    _refused(check, LOOP.replace("{value = 0.0} : tensor<16x16xf32>", "{value = 1.0} : tensor<16x16xf32>"),
             "does not start from zeros")


def test_program_id_of_axis_2_is_refused(check):
    text = LOOP.replace("  %step =", "  %z = tt.get_program_id {axis = 2} : i32\n  %step =")
    _refused(check, text, "axis 2")


def test_num_programs_of_axis_2_is_refused(check):
    text = LOOP.replace("  %step =", "  %z = tt.get_num_programs {axis = 2} : i32\n  %step =")
    _refused(check, text, "axis 2")


def test_carried_pointer_used_after_the_loop_is_refused(check):
    text = LOOP.replace("  tt.store %pcs, %out, %m", "  tt.store %pcs, %out, %m\n  %q = tt.load %p : tensor<16x16xf16>")
    _refused(check, text, "used after the loop")


def test_step_that_changes_in_the_loop_is_refused(check):
    text = LOOP.replace("    %p1 = tt.addptr %p0, %step", "    %st = tt.splat %i : tensor<16x16xi32>\n"
                        "    %p1 = tt.addptr %p0, %st")
    _refused(check, text, "loop-invariant step")


def test_accumulator_that_is_not_a_dot_chain_is_refused(check):
    text = LOOP.replace("    scf.yield %d, %p1", "    %d2 = arith.addf %d, %d : tensor<16x16xf32>\n    scf.yield %d2, %p1")
    _refused(check, text, "0 dot accumulators")


def test_two_loops_are_refused(check):
    text = LOOP.replace("  %tc = tt.splat", "  scf.for %c0, %n, %c1 {\n  ^bb(%i2: i32):\n    scf.yield\n  }\n"
                        "  %tc = tt.splat")
    _refused(check, text, "2 top-level loops")


def test_loop_bounds_from_the_program_id_split_without_a_trip_count(check):
    text = LOOP.replace("  %step =", "  %pid = tt.get_program_id {axis = 0} : i32\n  %step =").replace(
        "scf.for %c0, %n,", "scf.for %pid, %n,")
    from kernellab.compiler.parser import parse_module

    stats = split_k.run(parse_module(text))
    assert stats["split"] == 1 and stats["trip_count"] is None
