"""Reshapes that move no data (gpu/reshape_layout.py, assign_layouts, allocate_shared): the layout a reshape's
result gets keeps every element in the thread that held it, checked against an ownership model written here
(the index formula tests/gpu_passes/test_layouts.py checks), not against the module's own enumeration."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from kernellab.compiler.gpu.layouts import WARP_SIZE, Blocked, Mma, Slice, default_blocked
from kernellab.compiler.gpu.reshape_layout import register_map, reshape_layout, unit_dim_plan
from kernellab.compiler.passes import allocate_shared, assign_layouts
from kernellab.compiler.printer import print_module


def _part(info, lane, warp):
    """A thread's part of the element index along one dimension (the formula test_layouts.py checks)."""
    return ((warp // info.warp_div) % info.warps) * info.warp_stride + \
        ((lane // info.lane_div) % info.lanes) * info.lane_stride


def holdings(layout, shape, num_warps):
    """Per thread, {row-major element index} it holds, by the test's own index formula."""
    infos = layout.dims_info(shape)
    regs = layout.registers(shape)
    out = []
    for t in range(WARP_SIZE * num_warps):
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        parts = [_part(i, lane, warp) for i in infos]
        out.append({int(np.ravel_multi_index(tuple((p + o) % i.size for p, o, i in zip(parts, offs, infos)), shape))
                    for offs in regs})
    return out


def assert_free(src_layout, src_shape, dst_layout, dst_shape, num_warps=4):
    """Every thread holds the same elements (row-major) before and after, and register_map says where."""
    assert holdings(src_layout, src_shape, num_warps) == holdings(dst_layout, dst_shape, num_warps)
    m = register_map(src_layout, src_shape, dst_layout, dst_shape)
    assert m is not None and len(m) == len(dst_layout.registers(dst_shape))


B = Blocked((1, 4), (1, 32), (4, 1), (1, 0))  # a [4, 128] fp32 tile: a warp per row, 16-byte accesses


@pytest.mark.parametrize("src, shape, dst, want", [
    # unit dims: a reduction's result comes back in its parent layout, like expand_dims
    (Slice(1, B), (4,), (4, 1), B),
    (Slice(0, B), (128,), (1, 128), B),
    (Slice(1, B), (4,), (1, 4), Slice(2, Blocked((1, 1, 4), (1, 1, 32), (1, 4, 1), (2, 1, 0)))),
    # inserted with nothing along them, removed where nothing is along them, sliced away otherwise
    (B, (4, 128), (4, 1, 128), Blocked((1, 1, 4), (1, 1, 32), (4, 1, 1), (2, 0, 1))),
    (B, (4, 128), (1, 4, 128, 1), Blocked((1, 1, 4, 1), (1, 1, 32, 1), (1, 4, 1, 1), (2, 1, 0, 3))),
    (Blocked((1, 1, 4), (1, 1, 32), (4, 1, 1), (2, 0, 1)), (4, 1, 128), (4, 128), B),
    (Blocked((1, 4), (1, 32), (4, 1), (1, 0)), (1, 1024), (1024,), Slice(0, B)),
    # splitting and merging dims: the index bits regrouped
    (B, (4, 128), (512,), Blocked((4,), (32,), (4,), (0,))),
    (B, (4, 128), (4, 2, 64), Blocked((1, 1, 4), (1, 2, 16), (4, 1, 1), (2, 1, 0))),
    (B, (4, 128), (4, 64, 2), Blocked((1, 2, 2), (1, 32, 1), (4, 1, 1), (2, 1, 0))),
    (B, (4, 128), (2, 2, 128), Blocked((1, 1, 4), (1, 1, 32), (2, 2, 1), (2, 1, 0))),
    (Blocked((1, 2, 2), (1, 32, 1), (4, 1, 1), (2, 1, 0)), (4, 64, 2), (4, 128), B),
    (Blocked((4,), (32,), (4,), (0,)), (1024,), (32, 32), Blocked((1, 4), (4, 8), (4, 1), (1, 0))),
    # copies (a tile smaller than the threads): the copy-selecting warp bit stays on top of a dimension
    (Blocked((1,), (32,), (4,), (0,)), (64,), (8, 8), Blocked((1, 1), (4, 8), (4, 1), (1, 0))),
])
def test_result_layouts(src, shape, dst, want):
    got = reshape_layout(src, shape, dst)
    assert got == want, f"got {got}"
    assert_free(src, shape, got, dst)


def test_bitonic_shapes_from_a_vectorized_row():
    """tl.sort and tl.flip view a row as (2, 2, ..., 2): one bit per dimension, every one of them free."""
    src = Blocked((4,), (32,), (4,), (0,))
    got = reshape_layout(src, (1024,), (2,) * 10)
    assert got is not None
    assert_free(src, (1024,), got, (2,) * 10)
    assert reshape_layout(got, (2,) * 10, (1024,)) is not None


def test_no_free_layout():
    # an mma accumulator is not regrouped
    assert reshape_layout(Mma((4, 1)), (64, 64), (4096,)) is None
    assert reshape_layout(B, (4, 128), (4, 128)) is B
    assert reshape_layout(None, (4, 128), (512,)) is None
    # a layout that holds other elements is refused by the map
    assert register_map(B, (4, 128), Blocked((4, 1), (32, 1), (1, 4), (0, 1)), (4, 128)) is None
    assert register_map(B, (4, 128), default_blocked((512,), 8), (512,)) is None  # other warp count


def test_unit_dim_plan():
    assert unit_dim_plan((4,), (4, 1)) == ([], [1])
    assert unit_dim_plan((4, 1, 8), (1, 4, 8)) == ([1], [0])
    assert unit_dim_plan((1,), (1, 1)) == ([], [1])
    assert unit_dim_plan((4, 8), (8, 4)) is None
    assert unit_dim_plan((4, 8), (32,)) is None


def _random_blocked(rng, rank, num_warps):
    """A blocked layout of `rank` dims over power-of-2 sizes, lanes and warps split at random."""
    def split(total):
        parts = [1] * rank
        for _ in range(total.bit_length() - 1):
            parts[rng.randrange(rank)] *= 2
        return tuple(parts)

    order = list(range(rank))
    rng.shuffle(order)
    return Blocked(tuple(rng.choice((1, 1, 2, 4)) for _ in range(rank)), split(WARP_SIZE), split(num_warps),
                   tuple(order))


def _random_shape(rng, numel, rank):
    bits = numel.bit_length() - 1
    cuts = sorted(rng.randrange(bits + 1) for _ in range(rank - 1))
    return tuple(1 << (b - a) for a, b in zip([0] + cuts, cuts + [bits]))


def test_random_reshapes_keep_every_thread_s_elements():
    """Any layout the regrouping proposes is checked against the independent ownership model; and a tile
    without copies (no lane or warp past its size) is regrouped into *some* free layout at least most of the
    time, splits and merges of whole dimensions always."""
    rng = random.Random(7)
    found = tried = 0
    for _ in range(120):
        num_warps = rng.choice((1, 2, 4, 8))
        rank_in, rank_out = rng.choice((1, 2, 3)), rng.choice((1, 2, 3, 4))
        numel = 1 << rng.randrange(6, 11)
        src_shape = _random_shape(rng, numel, rank_in)
        lay = _random_blocked(rng, rank_in, num_warps)
        dst_shape = _random_shape(rng, numel, rank_out)
        got = reshape_layout(lay, src_shape, dst_shape)
        if got is not None:
            assert_free(lay, src_shape, got, dst_shape, num_warps)
            found += 1
        tried += 1
    assert found > tried // 4, (found, tried)


@pytest.mark.parametrize("shape, split", [((16, 64), (16, 16, 4)), ((64, 32), (8, 8, 32)), ((8, 256), (8, 2, 128))])
def test_splitting_the_fastest_dim_of_a_coalesced_tile_is_free(shape, split):
    for nw in (1, 4, 8):
        lay = default_blocked(shape, nw, spt_fast=4)
        got = reshape_layout(lay, shape, split)
        assert got is not None, (lay, shape, split)
        assert_free(lay, shape, got, split, nw)
        back = reshape_layout(got, split, shape)
        assert back is not None
        assert_free(got, split, back, shape, nw)


REDUCE_RESHAPE = """
tt.func @k(%x_ptr: !ptr<f32> {tt.divisibility = 16}, %y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %rows = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %cols = tt.make_range {end = 128, start = 0} : tensor<128xi32>
  %r2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %c128 = arith.constant {value = 128} : tensor<4x1xi32>
  %r3 = arith.muli %r2, %c128 : tensor<4x1xi32>
  %r4 = tt.broadcast %r3 : tensor<4x128xi32>
  %c2 = tt.expand_dims %cols {axis = 0} : tensor<1x128xi32>
  %c3 = tt.broadcast %c2 : tensor<4x128xi32>
  %offs = arith.addi %r4, %c3 : tensor<4x128xi32>
  %xs = tt.splat %x_ptr : tensor<4x128x!ptr<f32>>
  %xp = tt.addptr %xs, %offs : tensor<4x128x!ptr<f32>>
  %x = tt.load %xp : tensor<4x128xf32>
  %m = tt.reduce %x {axis = 1} : tensor<4xf32> {
  ^bb(%a: f32, %b: f32):
    %c = arith.maxnumf %a, %b : f32
    tt.reduce.return %c
  }
  %r = tt.reshape %m : tensor<4x1xf32>
  %s = tt.broadcast %r : tensor<4x128xf32>
  %z = arith.subf %x, %s : tensor<4x128xf32>
  %f = tt.reshape %z : tensor<4x2x64xf32>
  %g = tt.reshape %f : tensor<512xf32>
  %flat = tt.make_range {end = 512, start = 0} : tensor<512xi32>
  %ys = tt.splat %y_ptr : tensor<512x!ptr<f32>>
  %yp = tt.addptr %ys, %flat : tensor<512x!ptr<f32>>
  tt.store %yp, %g
  tt.return
}
"""


def test_assign_layouts_gives_a_reshape_the_layout_that_keeps_elements(run_pass):
    """No conversion after `tl.reshape(tl.max(x, 1), (ROWS, 1))` (the result is the tile's own layout), and
    splitting and merging keep every thread's registers: allocate_shared gives none of them a buffer."""
    m, stats = run_pass(assign_layouts, REDUCE_RESHAPE)
    assert stats["converts_inserted"] == 0
    ops = {op.results[0].hint: op for op in m.kernel.walk() if op.results}
    assert str(ops["x"].result.type.layout) == "#blocked<[1, 4], [1, 32], [4, 1], [1, 0]>"
    assert str(ops["r"].result.type.layout) == "#blocked<[1, 4], [1, 32], [4, 1], [1, 0]>"
    assert str(ops["f"].result.type.layout) == "#blocked<[1, 1, 4], [1, 2, 16], [4, 1, 1], [2, 1, 0]>"
    assert str(ops["g"].result.type.layout) == "#blocked<[4], [32], [4], [0]>"
    m, _ = run_pass(allocate_shared, print_module(m))
    assert m.shared_plan == []  # and the 4-row max stays inside each warp: no cross-warp buffer either


def test_a_reshape_without_a_free_layout_still_goes_through_shared_memory(run_pass):
    text = """
#L0 = #mma<[4, 1]>

tt.func @k(%acc: tensor<64x64xf32, #L0>) {
  %f = tt.reshape %acc : tensor<4096xf32>
  tt.print %f
  tt.return
}
"""
    m, _ = run_pass(assign_layouts, text)
    m, _ = run_pass(allocate_shared, print_module(m))
    assert [(b["op"], b["reason"]) for b in m.shared_plan] == [("tt.reshape", "reshape through shared memory")]


def test_a_conversion_between_layouts_holding_the_same_elements_needs_no_buffer(run_pass):
    text = """
#L0 = #blocked<[1, 4], [1, 32], [4, 1], [1, 0]>
#L1 = #blocked<[1, 1], [1, 32], [4, 1], [1, 0]>
#L2 = #blocked<[4, 1], [32, 1], [1, 4], [0, 1]>

tt.func @k(%r: tensor<4x1xf32, #L0>, %x: tensor<4x128xf32, #L0>) {
  %a = ttg.convert_layout %r : tensor<4x1xf32, #L1>
  %b = ttg.convert_layout %x : tensor<4x128xf32, #L2>
  tt.print %a, %b
  tt.return
}
"""
    m, _ = run_pass(allocate_shared, text)
    assert [(b["line"], b["reason"]) for b in m.shared_plan] == [(None, "layout conversion")]
    assert [op.results[0].hint for op in m.kernel.walk() if "smem_bytes" in op.attrs] == ["b"]


def test_every_pair_of_small_layouts_agrees_with_the_model():
    """register_map against the ownership model on every pair of a family of [4, 8] and [32] layouts."""
    lays2 = [Blocked(s, t, w, o) for s, t, w, o in itertools.product(
        [(1, 1), (1, 2), (2, 1)], [(1, 32), (4, 8), (8, 4)], [(1, 2), (2, 1)], [(1, 0), (0, 1)])]
    lays1 = [Blocked((s,), (32,), (2,), (0,)) for s in (1, 2)]
    for a, b in itertools.product(lays2, lays1):
        same = holdings(a, (4, 8), 2) == holdings(b, (32,), 2)
        assert (register_map(a, (4, 8), b, (32,)) is not None) == same, (a, b)
