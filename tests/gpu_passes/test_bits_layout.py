"""Bit layouts (gpu/layouts.py `Bits`, gpu/reshape_layout.py): reshape, permute, split and join of an MMA
accumulator rename registers where the bits they move are register bits -- tutorial 09's subtiled epilogue
`split(permute(reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))`. Checked against the PTX fragment written out here
(which element each thread holds in each register), and assign_layouts on IR text."""
from __future__ import annotations

import numpy as np
import pytest

from kernellab.compiler.gpu.layouts import WARP_SIZE, Bits, Blocked, Mma, parse_layout
from kernellab.compiler.gpu.reshape_layout import (
    as_bits,
    join_layout,
    join_map,
    permuted_layout,
    register_map,
    reshape_layout,
    split_layout,
    split_map,
)
from kernellab.compiler.passes import assign_layouts


# ------------------------------------------------------------------------------------------- the layouts
def mma_owner(warps, shape):
    """[thread, register] -> (row, col) an MMA accumulator holds, from the fragment as PTX documents it: lane l
    holds rows l/4 and l/4 + 8, columns 2*(l%4) + {0, 1} of each m16n8 tile; warp w of wm along M starts at
    row 16*(w % wm) of every 16*wm rows, along N at column (w // wm) * N/wn; registers go (m-tile, n-tile,
    row half, column)."""
    (m, n), (wm, wn) = shape, warps
    tm, tn = m // wm, n // wn
    out = np.zeros((WARP_SIZE * wm * wn, (tm // 16) * (tn // 8) * 4, 2), dtype=np.int64)
    for t in range(out.shape[0]):
        lane, w = t % WARP_SIZE, t // WARP_SIZE
        r = 0
        for i in range(tm // 16):
            for j in range(tn // 8):
                for h in (0, 8):
                    for c in (0, 1):
                        out[t, r] = (i * 16 * wm + 16 * (w % wm) + lane // 4 + h, (w // wm) * tn + j * 8 + 2 * (lane % 4) + c)
                        r += 1
    return out


def owner(layout, shape):
    """[thread, register] -> the element's multi-index, from dims_info and registers (the codegen formula)."""
    infos = layout.dims_info(shape)
    regs = layout.registers(shape)
    out = np.zeros((WARP_SIZE * layout.num_warps, len(regs), len(shape)), dtype=np.int64)
    for t in range(out.shape[0]):
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        for r, offs in enumerate(regs):
            for d, (info, o) in enumerate(zip(infos, offs)):
                part = ((warp // info.warp_div) % info.warps) * info.warp_stride + \
                    ((lane // info.lane_div) % info.lanes) * info.lane_stride
                out[t, r, d] = (part + o) % info.size
    return out


@pytest.mark.parametrize("warps, shape", [((4, 1), (64, 64)), ((8, 1), (128, 256)), ((4, 2), (128, 128)),
                                          ((2, 2), (64, 32))])
def test_mma_accumulator_as_bits_and_the_subtile_chain(warps, shape):
    m, n = shape
    lay = Mma(warps)
    ref = mma_owner(warps, shape)
    assert np.array_equal(owner(lay, shape), ref)  # the Mma layout is the PTX fragment
    bits = as_bits(lay, shape)
    assert isinstance(bits, Bits) and np.array_equal(owner(bits, shape), ref)
    # reshape (m, n) -> (m, 2, n/2): element (r, c) is (r, c // (n/2), c % (n/2)), in the same register
    r3 = reshape_layout(lay, shape, (m, 2, n // 2))
    got = owner(r3, (m, 2, n // 2))
    assert np.array_equal(got[..., 0], ref[..., 0])
    assert np.array_equal(got[..., 1] * (n // 2) + got[..., 2], ref[..., 1])
    assert register_map(lay, shape, r3, (m, 2, n // 2)) == tuple(range(ref.shape[1]))
    # permute (0, 2, 1): the same registers, dimensions swapped
    p3 = permuted_layout(r3, (m, 2, n // 2), (0, 2, 1))
    assert np.array_equal(owner(p3, (m, n // 2, 2)), got[..., [0, 2, 1]])
    # split: half k holds the elements whose last index is k, each from a register of the same thread -- where
    # the top column bit is a register bit; with warps along N it is a warp bit and the halves are in other warps
    half = split_layout(p3, (m, n // 2, 2))
    if warps[1] > 1:
        assert half is None
        return
    assert half is not None and half.num_warps == lay.num_warps
    for k in range(2):
        sm = split_map(p3, (m, n // 2, 2), half, (m, n // 2), k)
        assert sm is not None
        h = owner(half, (m, n // 2))
        src = ref[:, list(sm)]
        assert np.array_equal(h[..., 0], src[..., 0]) and np.array_equal(h[..., 1] + k * (n // 2), src[..., 1])
    # join undoes split, renaming registers too
    j = join_layout(half, (m, n // 2))
    jm = join_map(half, (m, n // 2), j, (m, n // 2, 2))
    assert jm is not None and {s for s, _ in jm} == {0, 1}
    assert parse_layout(str(half)) == half and parse_layout(str(j)) == j


def test_split_of_a_dimension_held_across_lanes_is_not_free():
    """A last dimension of size 2 spread over two lanes: the halves are in other threads (shared memory)."""
    lay = Blocked((1, 1), (16, 2), (4, 1), (1, 0))
    assert split_layout(lay, (64, 2)) is None
    assert split_map(lay, (64, 2), Blocked((1,), (32,), (4,), (0,)), (64,), 0) is None


def test_bits_refuses_what_codegen_cannot_index():
    assert Bits.make([["l0", "l2"], ["l1", "l3", "l4"]]) is None  # lane bits of a dimension not consecutive
    assert Bits.make([["r0", "r0"], ["l0", "l1", "l2", "l3", "l4"]]) is None  # a bit used twice
    assert Bits.make([["r1"], ["l0", "l1", "l2", "l3", "l4"]]) is None  # register bit 0 missing


# ------------------------------------------------------------------------------------------- assign_layouts
SUBTILE_IR = """
tt.func @epi(%y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %a = arith.constant {value = 1.0} : tensor<64x16xf16>
  %b = arith.constant {value = 1.0} : tensor<16x64xf16>
  %z = arith.constant {value = 0.0} : tensor<64x64xf32>
  %d = tt.dot %a, %b, %z {input_precision = "ieee", mma = [4, 1]} : tensor<64x64xf32>
  %r = tt.reshape %d : tensor<64x2x32xf32>
  %t = tt.trans %r {order = [0, 2, 1]} : tensor<64x32x2xf32>
  %h0, %h1 = tt.split %t : tensor<64x32xf32>, tensor<64x32xf32>
  %s = arith.addf %h0, %h1 : tensor<64x32xf32>
  %j = tt.join %h1, %h0 : tensor<64x32x2xf32>
  tt.return
}
"""


def test_assign_layouts_keeps_the_accumulator_registers_through_reshape_permute_split_join(check):
    check(assign_layouts, SUBTILE_IR, """
#L0 = #blocked<[1, 1], [2, 16], [4, 1], [1, 0]>
#L1 = #blocked<[1, 1], [1, 32], [4, 1], [1, 0]>
#L2 = #mma<[4, 1]>
#L3 = #bits<[l2, l3, l4, r1, w0, w1], [r4], [r0, l0, l1, r2, r3]>
#L4 = #bits<[l2, l3, l4, r1, w0, w1], [r0, l0, l1, r2, r3], [r4]>
#L5 = #bits<[l2, l3, l4, r1, w0, w1], [r0, l0, l1, r2, r3]>

tt.func @epi(%y_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %a = arith.constant {value = 1.0} : tensor<64x16xf16, #L0>
  %b = arith.constant {value = 1.0} : tensor<16x64xf16, #L1>
  %z = arith.constant {value = 0.0} : tensor<64x64xf32, #L2>
  %d = tt.dot %a, %b, %z {input_precision = "ieee", mma = [4, 1]} : tensor<64x64xf32, #L2>
  %r = tt.reshape %d : tensor<64x2x32xf32, #L3>
  %t = tt.trans %r {order = [0, 2, 1]} : tensor<64x32x2xf32, #L4>
  %h0, %h1 = tt.split %t : tensor<64x32xf32, #L5>, tensor<64x32xf32, #L5>
  %s = arith.addf %h0, %h1 : tensor<64x32xf32, #L5>
  %j = tt.join %h1, %h0 : tensor<64x32x2xf32, #L4>
  tt.return
}
""")
