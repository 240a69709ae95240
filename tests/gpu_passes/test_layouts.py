"""Distributed layouts: every element of a tile is held by exactly one representative
(thread, register), computed with the same index formula as codegen (codegen/lower.py)."""
from __future__ import annotations

from collections import Counter

import pytest

from kernellab.compiler.gpu.layouts import WARP_SIZE, Blocked, Slice, default_blocked, parse_layout, sliced_infos
from kernellab.compiler.parser import parse_module
from kernellab.compiler.printer import print_module
from kernellab.compiler.types import parse_type


def _part(info, lane, warp):
    lane_c = (lane // info.lane_div) % info.lanes
    warp_c = (warp // info.warp_div) % info.warps
    return warp_c * info.warp_stride + lane_c * info.lane_stride


def ownership(layout, shape, num_warps):
    """{element index tuple: [(thread, register), ...] of its representative copies}, plus every copy."""
    infos = layout.dims_info(shape)
    extra = sliced_infos(layout, shape)
    regs = layout.registers(shape)
    reps, copies = {}, Counter()
    for t in range(WARP_SIZE * num_warps):
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        parts = [_part(i, lane, warp) for i in infos]
        for r, offs in enumerate(regs):
            raw = [p + o for p, o in zip(parts, offs)]
            for d, info in enumerate(infos):
                # codegen masks the index only on replicated dims: elsewhere it must already fit
                assert info.replicated or raw[d] < info.size, (layout, shape, t, r)
            idx = tuple(x % i.size for x, i in zip(raw, infos))
            copies[idx] += 1
            rep = all(x < i.size for x, i in zip(raw, infos)) and all(_part(i, lane, warp) == 0 for i in extra)
            if rep:
                reps.setdefault(idx, []).append((t, r))
    return reps, copies


def assert_exact_cover(layout, shape, num_warps):
    reps, copies = ownership(layout, shape, num_warps)
    numel = 1
    for s in shape:
        numel *= s
    every = {idx for idx in copies}
    assert len(every) == numel, f"{layout} on {shape}: {numel - len(every)} elements held by no thread"
    assert set(reps) == every, f"{layout} on {shape}: elements without a representative"
    multi = {k: v for k, v in reps.items() if len(v) != 1}
    assert not multi, f"{layout} on {shape}: several representatives, e.g. {next(iter(multi.items()))}"
    return reps, copies


@pytest.mark.parametrize("layout, shape", [
    (Blocked((4,), (32,), (4,), (0,)), (512,)),    # exactly one CTA tile
    (Blocked((4,), (32,), (4,), (0,)), (1024,)),   # two repetitions
    (Blocked((4,), (32,), (4,), (0,)), (4096,)),
    (Blocked((8,), (32,), (4,), (0,)), (2048,)),
    (Blocked((1,), (32,), (4,), (0,)), (128,)),
])
def test_blocked_1d_cover(layout, shape):
    reps, copies = assert_exact_cover(layout, shape, 4)
    assert set(copies.values()) == {1}  # no replication at all
    # the thread holds spt consecutive elements per repetition
    assert len(layout.registers(shape)) == shape[0] // 128


def test_blocked_1d_register_offsets():
    lay = Blocked((4,), (32,), (4,), (0,))
    (info,) = lay.dims_info((1024,))
    assert info.offsets == (0, 1, 2, 3, 512, 513, 514, 515)
    assert (info.lane_div, info.warp_div, info.cta_extent, info.replicated) == (1, 1, 512, False)
    assert lay.registers((1024,)) == [(o,) for o in info.offsets]


@pytest.mark.parametrize("shape, num_warps", [((16,), 4), ((32,), 4), ((32,), 2), ((8,), 1), ((128,), 8)])
def test_blocked_1d_replicated(shape, num_warps):
    """A tile smaller than the thread grid: copies wrap around, exactly one is representative."""
    lay = default_blocked(shape, num_warps)
    reps, copies = assert_exact_cover(lay, shape, num_warps)
    threads = WARP_SIZE * num_warps
    assert lay.dims_info(shape)[0].replicated
    assert sum(copies.values()) == threads * len(lay.registers(shape))
    assert set(copies.values()) == {threads // shape[0]}


def test_blocked_1d_replicated_by_spt():
    """spt larger than the tile itself (e.g. a 4-wide vector layout applied to a 2-element tile)."""
    lay = Blocked((4,), (32,), (4,), (0,))
    assert lay.dims_info((2,))[0].replicated
    assert_exact_cover(lay, (2,), 4)


@pytest.mark.parametrize("shape, order, spt_fast, num_warps", [
    ((64, 64), (1, 0), 1, 4),
    ((64, 64), (1, 0), 4, 4),
    ((64, 64), (0, 1), 4, 4),
    ((16, 128), (1, 0), 4, 4),
    ((128, 16), (1, 0), 2, 8),
    ((8, 8), (1, 0), 1, 4),     # replicated along both dims
    ((2, 4), (0, 1), 1, 2),
    ((1, 256), (1, 0), 1, 4),
    ((256, 1), (0, 1), 1, 4),
    ((32, 1), (1, 0), 1, 4),
])
def test_blocked_2d_cover(shape, order, spt_fast, num_warps):
    lay = default_blocked(shape, num_warps, order=order, spt_fast=spt_fast)
    assert lay.num_warps == num_warps
    assert_exact_cover(lay, shape, num_warps)


def test_blocked_2d_explicit_layout_on_other_shapes():
    """One layout applied to tiles bigger and smaller than its CTA tile (16 x 32 here)."""
    lay = Blocked((1, 4), (4, 8), (4, 1), (1, 0))
    for shape in [(16, 32), (64, 32), (16, 128), (4, 8), (2, 64), (128, 4)]:
        assert_exact_cover(lay, shape, 4)


def test_blocked_3d_cover():
    lay = default_blocked((4, 8, 16), 4, spt_fast=2)
    assert_exact_cover(lay, (4, 8, 16), 4)


@pytest.mark.parametrize("parent, parent_shape, dim", [
    (Blocked((1, 4), (4, 8), (4, 1), (1, 0)), (64, 32), 1),   # row reduce: warps stay along the kept dim
    (Blocked((1, 4), (4, 8), (4, 1), (1, 0)), (64, 32), 0),   # column reduce over lanes and warps
    (Blocked((4, 1), (32, 1), (2, 2), (0, 1)), (128, 8), 0),
    (Blocked((4, 1), (32, 1), (2, 2), (0, 1)), (128, 8), 1),
    (default_blocked((8, 8), 4), (8, 8), 1),                   # replicated parent
    (default_blocked((2, 1024), 4, spt_fast=4), (2, 1024), 0),
])
def test_slice_cover(parent, parent_shape, dim):
    sl = Slice(dim, parent)
    shape = tuple(s for d, s in enumerate(parent_shape) if d != dim)
    assert sl.rank == 1
    reps, copies = assert_exact_cover(sl, shape, 4)
    # the sliced dimension carries threads: those holding copies are the ones with thread part != 0
    (extra,) = sliced_infos(sl, shape)
    assert extra.size == 1
    if extra.lanes * extra.warps > 1:
        assert max(copies.values()) > 1


def test_slice_of_slice_cover():
    parent = default_blocked((4, 8, 16), 4, spt_fast=2)
    sl = Slice(0, Slice(2, parent))
    assert sl.rank == 1
    assert len(sliced_infos(sl, (8,))) == 2
    assert_exact_cover(sl, (8,), 4)


def test_slice_dims_info_matches_parent():
    parent = Blocked((1, 4), (4, 8), (4, 1), (1, 0))
    sl = Slice(1, parent)
    (info,) = sl.dims_info((64,))
    assert info == parent.dims_info((64, 1))[0]
    assert sl.reg_order() == [0]
    assert Slice(0, parent).reg_order() == [0]


@pytest.mark.parametrize("shape, num_warps, spt_fast, order, expected", [
    ((1024,), 4, 4, None, Blocked((4,), (32,), (4,), (0,))),
    ((1024,), 4, 8, None, Blocked((8,), (32,), (4,), (0,))),
    ((16,), 4, 1, None, Blocked((1,), (32,), (4,), (0,))),        # leftover lanes and warps replicate
    ((2,), 4, 4, None, Blocked((2,), (32,), (4,), (0,))),          # spt clipped to the tile
    ((64, 64), 4, 1, None, Blocked((1, 1), (1, 32), (4, 1), (1, 0))),
    ((64, 64), 4, 4, None, Blocked((1, 4), (2, 16), (4, 1), (1, 0))),
    ((64, 64), 4, 4, (0, 1), Blocked((4, 1), (16, 2), (1, 4), (0, 1))),
    ((16, 8), 8, 1, None, Blocked((1, 1), (4, 8), (4, 2), (1, 0))),
    ((1, 1024), 4, 4, None, Blocked((1, 4), (1, 32), (1, 4), (1, 0))),
])
def test_default_blocked_choices(shape, num_warps, spt_fast, order, expected):
    lay = default_blocked(shape, num_warps, order=order, spt_fast=spt_fast)
    assert lay == expected
    tpw = wpc = 1
    for t, w in zip(lay.tpw, lay.wpc):
        tpw, wpc = tpw * t, wpc * w
    assert (tpw, wpc) == (WARP_SIZE, num_warps)


@pytest.mark.parametrize("layout", [
    Blocked((4,), (32,), (4,), (0,)),
    Blocked((1, 4), (4, 8), (4, 1), (1, 0)),
    Blocked((2, 2, 1), (2, 4, 4), (1, 2, 2), (0, 2, 1)),
    Slice(1, Blocked((1, 4), (4, 8), (4, 1), (1, 0))),
    Slice(0, Slice(2, Blocked((2, 2, 1), (2, 4, 4), (1, 2, 2), (0, 2, 1)))),
])
def test_layout_text_round_trip(layout):
    text = str(layout)
    assert parse_layout(text) == layout
    assert str(parse_layout(text)) == text
    shape = "x".join(["16"] * layout.rank)
    ty = parse_type(f"tensor<{shape}xf32, {text}>")
    assert ty.layout == layout and str(ty) == f"tensor<{shape}xf32, {text}>"


def test_parse_layout_rejects_garbage():
    with pytest.raises(ValueError):
        parse_layout("#blocked<[4], [32]>")


def test_module_layout_aliases_round_trip():
    text = """
#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L1 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>

tt.func @k(%x: tensor<64x32xf32, #L0>) {
  %r = tt.reduce %x {axis = 1} : tensor<64xf32, #L1> {
  ^bb(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    tt.reduce.return %s
  }
  tt.return
}
"""
    m = parse_module(text)
    (red,) = [op for op in m.kernel.walk() if op.name == "tt.reduce"]
    assert red.result.type.layout == Slice(1, Blocked((1, 4), (4, 8), (4, 1), (1, 0)))
    out = print_module(m, with_locs=False)
    assert out.splitlines()[:3] == [
        "#L0 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>",
        "#L1 = #slice<1, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>",
        "",
    ]
    assert "tensor<64xf32, #L1>" in out and "%x: tensor<64x32xf32, #L0>" in out
    assert print_module(parse_module(out), with_locs=False) == out


@pytest.mark.parametrize("warps, shape", [((4, 1), (128, 64)), ((8, 1), (256, 128)), ((4, 2), (128, 128)),
                                          ((2, 2), (32, 32)), ((4, 1), (64, 32))])
def test_mma_cover(warps, shape):
    from kernellab.compiler.gpu.layouts import Mma

    assert_exact_cover(Mma(warps), shape, warps[0] * warps[1])


@pytest.mark.parametrize("num_warps, m", [(4, 64), (4, 128), (8, 128), (8, 256)])
def test_mma_rows_interleave_warps_as_wgmma_instructions_do(num_warps, m):
    """Warp w of warpgroup g holds rows 16w'..16w'+15 (w' = w mod 4) of each m64 wgmma instruction the
    warpgroup issues; instruction r of warpgroup g covers rows 16 * num_warps * r + 64 g .. + 63, and its
    N/2 accumulators per thread are registers r*N/2 .. (r+1)*N/2 - 1 of the #mma layout."""
    from kernellab.compiler.gpu.layouts import Mma

    n = 32
    reps, _ = ownership(Mma((num_warps, 1)), (m, n), num_warps)
    per_instr = n // 2
    for (row, col), [(t, reg)] in reps.items():
        warp, lane = t // WARP_SIZE, t % WARP_SIZE
        g, w, r = warp // 4, warp % 4, reg // per_instr
        first = 16 * num_warps * r + 64 * g
        # wgmma's D fragment: lane l holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1)
        assert first <= row < first + 64 and (row - first) // 16 == w
        assert (row - first) % 8 == lane // 4 and col % 8 // 2 == lane % 4
