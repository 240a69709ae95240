"""strip_mine_tiles: a tile over the per-thread budget whose ops all work element by element (loads, stores,
arithmetic, compares, splats, broadcasts of aranges) becomes a loop over chunks of rows; values without the
split dim stay before the loop; anything else (a reduction, a side effect among the chunked ops) is left alone
for the runtime's budget check to refuse."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import strip_mine_tiles
from kernellab.compiler.printer import print_module

ONE_WARP = GpuOptions(num_warps=1)  # 32 threads: a tile over 512 KiB is over 16 KiB a thread

# A causal mask over a 1024x256 f32 tile (1 MiB: 32 KiB a thread), as Liger's multi-token attention writes it.
TRI = """
tt.func @tri(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %rows = tt.make_range {end = 1024, start = 0} : tensor<1024xi32>
  %cols = tt.make_range {end = 256, start = 0} : tensor<256xi32>
  %0 = tt.expand_dims %rows {axis = 1} : tensor<1024x1xi32>
  %1 = arith.constant {value = 256} : tensor<1024x1xi32>
  %2 = arith.muli %0, %1 : tensor<1024x1xi32>
  %3 = tt.expand_dims %cols {axis = 0} : tensor<1x256xi32>
  %4 = tt.broadcast %2 : tensor<1024x256xi32>
  %5 = tt.broadcast %3 : tensor<1024x256xi32>
  %offs = arith.addi %4, %5 : tensor<1024x256xi32>
  %6 = tt.splat %x_ptr : tensor<1024x256x!ptr<f32>>
  %7 = tt.addptr %6, %offs : tensor<1024x256x!ptr<f32>>
  %8 = tt.splat %n : tensor<1x256xi32>
  %9 = arith.cmpi %3, %8 {predicate = "slt"} : tensor<1x256xi1>
  %10 = tt.broadcast %9 : tensor<1024x256xi1>
  %11 = arith.constant {value = 1.0} : tensor<1024x256xf32>
  %x = tt.load %7, %10, %11 : tensor<1024x256xf32>
  %12 = tt.splat %o_ptr : tensor<1024x256x!ptr<f32>>
  %13 = tt.addptr %12, %offs : tensor<1024x256x!ptr<f32>>
  %14 = tt.broadcast %0 : tensor<1024x256xi32>
  %15 = arith.cmpi %5, %14 {predicate = "sgt"} : tensor<1024x256xi1>
  %16 = arith.constant {value = 2.0} : tensor<1024x256xf32>
  %17 = arith.mulf %x, %16 : tensor<1024x256xf32>
  %18 = arith.constant {value = 0.0} : tensor<1024x256xf32>
  %19 = arith.select %15, %18, %17 : tensor<1024x256xf32>
  tt.store %13, %19
  tt.return
}
"""


def test_a_2d_mask_tile_becomes_a_loop_over_row_chunks(check):
    """Two rows a chunk (16 elements a thread); the column index and its compare ([1, 256]) stay before the
    loop; the row index is rebuilt from a 2-long arange plus the chunk's first row."""
    _, stats = check(strip_mine_tiles, TRI, """
tt.func @tri(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}, %n: i32 {tt.divisibility = 16}) {
  %cols = tt.make_range {end = 256, start = 0} : tensor<256xi32>
  %0 = tt.expand_dims %cols {axis = 0} : tensor<1x256xi32>
  %1 = tt.splat %n : tensor<1x256xi32>
  %2 = arith.cmpi %0, %1 {predicate = "slt"} : tensor<1x256xi1>
  %3 = arith.constant {value = 0} : i32
  %4 = arith.constant {value = 1024} : i32
  %5 = arith.constant {value = 2} : i32
  scf.for %3, %4, %5 {
  ^bb(%chunk: i32):
    %6 = tt.make_range {end = 2, start = 0} : tensor<2xi32>
    %7 = tt.splat %chunk : tensor<2xi32>
    %rows = arith.addi %6, %7 : tensor<2xi32>
    %8 = tt.expand_dims %rows {axis = 1} : tensor<2x1xi32>
    %9 = arith.constant {value = 256} : tensor<2x1xi32>
    %10 = arith.muli %8, %9 : tensor<2x1xi32>
    %11 = tt.broadcast %10 : tensor<2x256xi32>
    %12 = tt.broadcast %0 : tensor<2x256xi32>
    %offs = arith.addi %11, %12 : tensor<2x256xi32>
    %13 = tt.splat %x_ptr : tensor<2x256x!ptr<f32>>
    %14 = tt.addptr %13, %offs : tensor<2x256x!ptr<f32>>
    %15 = tt.broadcast %2 : tensor<2x256xi1>
    %16 = arith.constant {value = 1.0} : tensor<2x256xf32>
    %x = tt.load %14, %15, %16 : tensor<2x256xf32>
    %17 = tt.splat %o_ptr : tensor<2x256x!ptr<f32>>
    %18 = tt.addptr %17, %offs : tensor<2x256x!ptr<f32>>
    %19 = tt.broadcast %8 : tensor<2x256xi32>
    %20 = arith.cmpi %12, %19 {predicate = "sgt"} : tensor<2x256xi1>
    %21 = arith.constant {value = 2.0} : tensor<2x256xf32>
    %22 = arith.mulf %x, %21 : tensor<2x256xf32>
    %23 = arith.constant {value = 0.0} : tensor<2x256xf32>
    %24 = arith.select %20, %23, %22 : tensor<2x256xf32>
    tt.store %18, %24
    scf.yield
  }
  tt.return
}
""", ONE_WARP)
    assert stats["rows_per_chunk"] == 2 and stats["chunks"] == 512


def test_a_tile_within_budget_is_left_alone(run_pass):
    m, stats = run_pass(strip_mine_tiles, TRI, GpuOptions(num_warps=4))  # 8 KiB a thread
    assert stats == {} and "scf.for" not in print_module(m, with_locs=False)


ONE_D = """
tt.func @scale(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %0 = tt.get_program_id {axis = 0} : i32
  %1 = arith.constant {value = 1048576} : i32
  %2 = arith.muli %0, %1 : i32
  %3 = tt.make_range {end = 1048576, start = 0} : tensor<1048576xi32>
  %4 = tt.splat %2 : tensor<1048576xi32>
  %5 = arith.addi %4, %3 : tensor<1048576xi32>
  %offs = tt.hint %5 {max_contiguous = [1048576], multiple_of = [1048576]} : tensor<1048576xi32>
  %6 = tt.splat %x_ptr : tensor<1048576x!ptr<f16>>
  %7 = tt.addptr %6, %offs : tensor<1048576x!ptr<f16>>
  %8 = tt.load %7 : tensor<1048576xf16>
  %9 = arith.extf %8 : tensor<1048576xf32>
  %10 = tt.splat %o_ptr : tensor<1048576x!ptr<f32>>
  %11 = tt.addptr %10, %offs : tensor<1048576x!ptr<f32>>
  tt.store %11, %9
  tt.return
}
"""


def test_a_1d_tile_is_the_same_loop_and_hints_shrink_to_the_chunk(check):
    """2**20 elements over 4 warps: chunks of 2048 (16 a thread); the contiguity and divisibility promised
    for the whole tile hold for a chunk up to its length."""
    _, stats = check(strip_mine_tiles, ONE_D, """
tt.func @scale(%x_ptr: !ptr<f16> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %0 = tt.get_program_id {axis = 0} : i32
  %1 = arith.constant {value = 1048576} : i32
  %2 = arith.muli %0, %1 : i32
  %3 = arith.constant {value = 0} : i32
  %4 = arith.constant {value = 1048576} : i32
  %5 = arith.constant {value = 2048} : i32
  scf.for %3, %4, %5 {
  ^bb(%chunk: i32):
    %6 = tt.make_range {end = 2048, start = 0} : tensor<2048xi32>
    %7 = tt.splat %chunk : tensor<2048xi32>
    %8 = arith.addi %6, %7 : tensor<2048xi32>
    %9 = tt.splat %2 : tensor<2048xi32>
    %10 = arith.addi %9, %8 : tensor<2048xi32>
    %offs = tt.hint %10 {max_contiguous = [2048], multiple_of = [2048]} : tensor<2048xi32>
    %11 = tt.splat %x_ptr : tensor<2048x!ptr<f16>>
    %12 = tt.addptr %11, %offs : tensor<2048x!ptr<f16>>
    %13 = tt.load %12 : tensor<2048xf16>
    %14 = arith.extf %13 : tensor<2048xf32>
    %15 = tt.splat %o_ptr : tensor<2048x!ptr<f32>>
    %16 = tt.addptr %15, %offs : tensor<2048x!ptr<f32>>
    tt.store %16, %14
    scf.yield
  }
  tt.return
}
""", GpuOptions(num_warps=4))
    assert stats == {"ops_moved": 11, "rows_per_chunk": 2048, "chunks": 512, "ops_in_loop": 13}


REDUCE = """
tt.func @red(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %offs = tt.make_range {end = 262144, start = 0} : tensor<262144xi32>
  %0 = tt.splat %x_ptr : tensor<262144x!ptr<f32>>
  %1 = tt.addptr %0, %offs : tensor<262144x!ptr<f32>>
  %x = tt.load %1 : tensor<262144xf32>
  %2 = tt.reduce %x {axis = 0} : f32 {
  ^bb(%3: f32, %4: f32):
    %5 = arith.addf %3, %4 : f32
    tt.reduce.return %5
  }
  tt.store %o_ptr, %2
  tt.return
}
"""

BETWEEN = """
tt.func @between(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %o_ptr: !ptr<f32> {tt.divisibility = 16}, %flag_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %offs = tt.make_range {end = 262144, start = 0} : tensor<262144xi32>
  %0 = tt.splat %x_ptr : tensor<262144x!ptr<f32>>
  %1 = tt.addptr %0, %offs : tensor<262144x!ptr<f32>>
  %x = tt.load %1 : tensor<262144xf32>
  %2 = arith.constant {value = 1.0} : f32
  tt.store %flag_ptr, %2
  %3 = tt.splat %o_ptr : tensor<262144x!ptr<f32>>
  %4 = tt.addptr %3, %offs : tensor<262144x!ptr<f32>>
  tt.store %4, %x
  tt.return
}
"""


@pytest.mark.parametrize("text, why", [(REDUCE, "tt.reduce"), (BETWEEN, "tt.store between")])
def test_what_it_cannot_split_is_left_for_the_budget_check(run_pass, text, why):
    """A reduction needs the whole tile; a scalar store among the chunked ops would move past their loads."""
    with pytest.raises(strip_mine_tiles.Refusal, match=why):
        strip_mine_tiles.plan(parse_module(text).kernel, 1)
    m, stats = run_pass(strip_mine_tiles, text, ONE_WARP)
    assert stats == {} and print_module(m, with_locs=False).strip() == print_module(parse_module(text),
                                                                                   with_locs=False).strip()
