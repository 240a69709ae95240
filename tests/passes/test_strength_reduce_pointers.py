"""strength_reduce_pointers: a pointer tile rebuilt from the loop counter becomes loop-carried: an invariant
tile plus a carried scalar offset (64-bit for a 16-bit dot operand; `KERNELLAB_DOT_POINTER_FORM=tile` carries
the dot operand's pointer tile instead)."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module
from kernellab.compiler.passes import canonicalize, constant_fold, cse, dce
from kernellab.compiler.passes import strength_reduce_pointers as sr
from kernellab.compiler.printer import print_module


class _ThenCleanUp:
    """The pass builds its start values and steps naively; folding, CSE and DCE make the result readable."""

    NAME = sr.NAME

    @staticmethod
    def run(module):
        stats = sr.run(module)
        for p in (constant_fold, canonicalize, cse, dce):
            p.run(module)
        return stats


REBUILT_1D = """tt.func @k(%pa: !ptr<f16>, %sb: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %sbt = tt.splat %sb : tensor<16xi32>
  scf.for %c0, %n, %c1 {
  ^bb(%k: i32):
    %kk = arith.muli %k, %c16 : i32
    %s = tt.splat %kk : tensor<16xi32>
    %o = arith.addi %s, %rng : tensor<16xi32>
    %o2 = arith.muli %o, %sbt : tensor<16xi32>
    %p = tt.addptr %base, %o2 : tensor<16x!ptr<f16>>
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    scf.yield
  }
  tt.return
}
"""

CARRIED_1D = """tt.func @k(%pa: !ptr<f16>, %sb: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %sbt = tt.splat %sb : tensor<16xi32>
  %0 = arith.muli %rng, %sbt : tensor<16xi32>
  %1 = arith.muli %c16, %sb : i32
  %2 = tt.addptr %base, %0 : tensor<16x!ptr<f16>>
  %3 = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%k: i32, %p_offset: i32):
    %4 = tt.splat %p_offset : tensor<16xi32>
    %5 = tt.addptr %2, %4 : tensor<16x!ptr<f16>>
    %x = tt.load %5 : tensor<16xf16>
    tt.print %x
    %6 = arith.addi %p_offset, %1 : i32
    scf.yield %6
  }
  tt.return
}
"""


def test_offsets_from_the_counter_become_a_carried_offset(check):
    # base + (splat(k*16) + r) * splat(sb): the invariant base + r*sb plus splat(o), o carried from 0 by 16*sb
    assert check(_ThenCleanUp, REBUILT_1D, CARRIED_1D) == {"carried": 1, "offset": 0}


REBUILT_2D = """tt.func @k(%pa: !ptr<f16>, %sa: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c8 = arith.constant {value = 8} : i32
  %rm = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %rk = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %sat = tt.splat %sa : tensor<4xi32>
  %rows = arith.muli %rm, %sat : tensor<4xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %pbase = tt.splat %pa : tensor<4x1x!ptr<f16>>
  %prow = tt.addptr %pbase, %rows2 : tensor<4x1x!ptr<f16>>
  %prowb = tt.broadcast %prow : tensor<4x8x!ptr<f16>>
  scf.for %c0, %n, %c8 {
  ^bb(%k0: i32):
    %s = tt.splat %k0 : tensor<8xi32>
    %ok = arith.addi %s, %rk : tensor<8xi32>
    %ok2 = tt.expand_dims %ok {axis = 0} : tensor<1x8xi32>
    %okb = tt.broadcast %ok2 : tensor<4x8xi32>
    %p = tt.addptr %prowb, %okb : tensor<4x8x!ptr<f16>>
    %x = tt.load %p : tensor<4x8xf16>
    %q = tt.addptr %p, %okb : tensor<4x8x!ptr<f16>>
    tt.store %q, %x
    scf.yield
  }
  tt.return
}
"""

CARRIED_2D = """tt.func @k(%pa: !ptr<f16>, %sa: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c8 = arith.constant {value = 8} : i32
  %rm = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %rk = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %sat = tt.splat %sa : tensor<4xi32>
  %rows = arith.muli %rm, %sat : tensor<4xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %pbase = tt.splat %pa : tensor<4x1x!ptr<f16>>
  %prow = tt.addptr %pbase, %rows2 : tensor<4x1x!ptr<f16>>
  %prowb = tt.broadcast %prow : tensor<4x8x!ptr<f16>>
  %0 = tt.expand_dims %rk {axis = 0} : tensor<1x8xi32>
  %1 = tt.broadcast %0 : tensor<4x8xi32>
  %2 = tt.addptr %prowb, %1 : tensor<4x8x!ptr<f16>>
  %3 = tt.addptr %2, %1 : tensor<4x8x!ptr<f16>>
  %4 = arith.constant {value = 16} : i32
  %5, %6 = scf.for %c0, %n, %c8, %c0, %c0 : i32, i32 {
  ^bb(%k0: i32, %p_offset: i32, %q_offset: i32):
    %7 = tt.splat %p_offset : tensor<4x8xi32>
    %8 = tt.addptr %2, %7 : tensor<4x8x!ptr<f16>>
    %x = tt.load %8 : tensor<4x8xf16>
    %9 = tt.splat %q_offset : tensor<4x8xi32>
    %10 = tt.addptr %3, %9 : tensor<4x8x!ptr<f16>>
    tt.store %10, %x
    %11 = arith.addi %p_offset, %c8 : i32
    %12 = arith.addi %q_offset, %4 : i32
    scf.yield %11, %12
  }
  tt.return
}
"""


def test_expand_dims_broadcast_and_pointer_chains(check):
    # the store's pointer adds the per-iteration column offset twice: its offset advances twice as fast
    assert check(_ThenCleanUp, REBUILT_2D, CARRIED_2D) == {"carried": 2, "offset": 0}


ALREADY_CARRIED = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : tensor<16xi32>
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %p0 = tt.addptr %base, %rng : tensor<16x!ptr<f16>>
  %r = scf.for %c0, %n, %c1, %p0 : tensor<16x!ptr<f16>> {
  ^bb(%k: i32, %p: tensor<16x!ptr<f16>>):
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    %next = tt.addptr %p, %c16 : tensor<16x!ptr<f16>>
    scf.yield %next
  }
  tt.return
}
"""


def test_pointers_already_carried_are_left_alone(check):
    assert check(sr, ALREADY_CARRIED, ALREADY_CARRIED) == {"carried": 0, "offset": 0}


ONE_SPLAT = """
tt.func @k(%pa: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %base = tt.splat %pa : tensor<16x!ptr<f16>>
  %p0 = tt.addptr %base, %rng : tensor<16x!ptr<f16>>
  scf.for %c0, %n, %c1 {
  ^bb(%k: i32):
    %s = tt.splat %k : tensor<16xi32>
    %p = tt.addptr %p0, %s : tensor<16x!ptr<f16>>
    %x = tt.load %p : tensor<16xf16>
    tt.print %x
    scf.yield
  }
  tt.return
}
"""


def test_one_splat_added_per_iteration_is_left_alone(check):
    assert check(sr, ONE_SPLAT, ONE_SPLAT) == {"carried": 0, "offset": 0}


def test_offsets_not_affine_in_the_counter_are_left_alone(check):
    # k * k is not c * k + d
    text = REBUILT_1D.replace("%kk = arith.muli %k, %c16 : i32", "%kk = arith.muli %k, %k : i32")
    assert check(sr, text, text) == {"carried": 0, "offset": 0}


def test_offsets_of_another_width_are_left_alone(check):
    # an extsi of a per-iteration value does not distribute over a wrapping add
    text = REBUILT_1D.replace("%o = arith.addi %s, %rng : tensor<16xi32>",
                              "%o32 = arith.addi %s, %rng : tensor<16xi32>\n    %o = arith.extsi %o32 : tensor<16xi64>")
    text = text.replace("%sbt = tt.splat %sb : tensor<16xi32>", "%sb64 = arith.extsi %sb : i64\n"
                        "  %sbt = tt.splat %sb64 : tensor<16xi64>")
    text = text.replace("%o2 = arith.muli %o, %sbt : tensor<16xi32>", "%o2 = arith.muli %o, %sbt : tensor<16xi64>")
    assert check(sr, text, text) == {"carried": 0, "offset": 0}


@kl.jit
def _gather_columns(X, Y, n_rows, stride, START: tl.constexpr, STEP: tl.constexpr, ROWS: tl.constexpr,
                    COLS: tl.constexpr):
    # rows START, START + STEP, ... of a (n_rows, stride) tile, pointers rebuilt from the counter each time
    r = tl.arange(0, ROWS)
    c = tl.arange(0, COLS)
    for k in range(START, n_rows, STEP):
        rows = k + r
        x = tl.load(X + rows[:, None] * stride + c[None, :])
        tl.store(Y + (k - START) * COLS + r[:, None] * stride + c[None, :], x + 1.0)


def test_interpreted_results_with_a_start_and_a_step():
    x = torch.randn(64, 8)
    y = torch.full((64, 8), float("nan"))
    _gather_columns[(1,)](x, y, 40, 8, START=3, STEP=5, ROWS=2, COLS=8)
    compiled = list(_gather_columns.cache.values())[-1]
    assert "strength_reduce_pointers" in compiled.trace.summary()
    rec = next(p for p in compiled.trace.passes if p.name == "strength_reduce_pointers")
    assert rec.stats == {"carried": 2, "offset": 0}
    ref = torch.full((64, 8), float("nan"))
    for k in range(3, 40, 5):
        ref.view(-1)[(k - 3) * 8:(k - 3) * 8 + 16] = (x[k:k + 2] + 1.0).reshape(-1)
    torch.testing.assert_close(y, ref, equal_nan=True)


@kl.jit
def _rows_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, n, BLOCK):
        offs = k + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs * 2, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@kl.jit
def _mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :] * 1)
        b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :] * 1)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _loop_header(tile_ir: str) -> str:
    return next(line for line in tile_ir.splitlines() if "scf.for" in line)


def test_a_loop_without_a_dot_carries_a_scalar_offset():
    ck = _rows_sum.warmup(torch.randn(300), torch.empty(64), 150, BLOCK=64, grid=(1,))
    header = _loop_header(ck.asm["tile"])
    assert "!ptr" not in header.split(":")[-1] and "i32" in header.split(":")[-1], header


def test_a_loop_with_a_dot_carries_64_bit_offsets():
    a, b = torch.randn(64, 64).half(), torch.randn(64, 32).half()
    ck = _mm.warmup(a, b, torch.empty(64, 32), 64, BM=64, BN=32, BK=16, grid=(1,))
    types = _loop_header(ck.asm["tile"]).split(":")[-1]
    assert "!ptr" not in types and types.count("i64") == 2, types


def test_a_small_m_loop_with_a_dot_carries_pointer_tiles():
    a, b = torch.randn(32, 64).half(), torch.randn(64, 32).half()
    ck = kl.jit(_mm.fn).warmup(a, b, torch.empty(32, 32), 64, BM=32, BN=32, BK=16, grid=(1,))
    types = _loop_header(ck.asm["tile"]).split(":")[-1]
    assert types.count("!ptr") == 2 and "i64" not in types, types


def test_the_tile_form_stays_behind_its_switch(monkeypatch):
    monkeypatch.setenv(sr.DOT_FORM_ENV, "tile")
    a, b = torch.randn(64, 64).half(), torch.randn(64, 32).half()
    ck = kl.jit(_mm.fn).warmup(a, b, torch.empty(64, 32), 64, BM=64, BN=32, BK=16, grid=(1,))
    assert _loop_header(ck.asm["tile"]).count("!ptr") >= 2


@kl.jit
def _scores_minus_row(q_ptr, k_ptr, lse_ptr, o_ptr, N, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    # attention backward's shape of loop: a key tile read by a dot, and a row vector broadcast over the scores
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for n in range(0, N, BN):
        kT = tl.load(k_ptr + (n + rn)[None, :] * D + rd[:, None])
        row = tl.load(lse_ptr + n + rn)
        acc += tl.dot(q, kT) - row[None, :]
    tl.store(o_ptr + rm[:, None] * BN + rn[None, :], acc)


def test_a_row_vector_next_to_a_dot_carries_a_scalar_offset():
    """In a loop with a dot, the dot's operand carries a 64-bit offset (the pipeliner copies from base + offset); a
    vector broadcast over the dot's result gets the 32-bit scalar offset, so later passes can load it in any
    layout."""
    q, k = torch.randn(64, 16).half(), torch.randn(64, 16).half()
    ck = _scores_minus_row.warmup(q, k, torch.randn(64), torch.empty(64, 16), 64, BM=64, BN=16, D=16, grid=(1,))
    types = _loop_header(ck.asm["tile"]).split(":")[-1]
    assert "!ptr" not in types and " i64" in types and " i32" in types, types
    x = torch.full((64, 16), float("nan"))
    lse = torch.randn(64)
    _scores_minus_row[(1,)](q, k, lse, x, 64, BM=64, BN=16, D=16)
    ref = sum(q.float() @ k[n:n + 16].float().T - lse[n:n + 16][None, :] for n in range(0, 64, 16))
    torch.testing.assert_close(x, ref, atol=1e-2, rtol=1e-2)


def _rows(text: str, m: int) -> str:
    """A dot-operand IR text of this file with its A tile (and the dot) `m` rows tall."""
    return text.replace("{M}", str(m))


# A (M x 16, rows of an aligned stride) rebuilt from k each step, B (16 x 16) loaded once; M is the dot's rows
REBUILT_DOT = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %sa: i32 {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rm = tt.make_range {end = {M}, start = 0} : tensor<{M}xi32>
  %rk = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %sat = tt.splat %sa : tensor<{M}xi32>
  %rows = arith.muli %rm, %sat : tensor<{M}xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<{M}x1xi32>
  %rowsb = tt.broadcast %rows2 : tensor<{M}x16xi32>
  %pbase = tt.splat %pa : tensor<{M}x16x!ptr<f16>>
  %prow = tt.addptr %pbase, %rowsb : tensor<{M}x16x!ptr<f16>>
  %b = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %bt = tt.load %b : tensor<16x16xf16>
  %z = arith.constant {value = 0.0} : tensor<{M}x16xf32>
  %acc = scf.for %c0, %n, %c1, %z : tensor<{M}x16xf32> {
  ^bb(%k: i32, %a0: tensor<{M}x16xf32>):
    %kk = arith.muli %k, %c16 : i32
    %s = tt.splat %kk : tensor<16xi32>
    %ok = arith.addi %s, %rk : tensor<16xi32>
    %ok2 = tt.expand_dims %ok {axis = 0} : tensor<1x16xi32>
    %okb = tt.broadcast %ok2 : tensor<{M}x16xi32>
    %p = tt.addptr %prow, %okb : tensor<{M}x16x!ptr<f16>>
    %x = tt.load %p : tensor<{M}x16xf16>
    %d = tt.dot %x, %bt, %a0 : tensor<{M}x16xf32>
    scf.yield %d
  }
  tt.print %acc
  tt.return
}
"""

CARRIED_DOT = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %sa: i32 {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rm = tt.make_range {end = {M}, start = 0} : tensor<{M}xi32>
  %rk = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %sat = tt.splat %sa : tensor<{M}xi32>
  %rows = arith.muli %rm, %sat : tensor<{M}xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<{M}x1xi32>
  %rowsb = tt.broadcast %rows2 : tensor<{M}x16xi32>
  %pbase = tt.splat %pa : tensor<{M}x16x!ptr<f16>>
  %prow = tt.addptr %pbase, %rowsb : tensor<{M}x16x!ptr<f16>>
  %b = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %bt = tt.load %b : tensor<16x16xf16>
  %z = arith.constant {value = 0.0} : tensor<{M}x16xf32>
  %0 = tt.expand_dims %rk {axis = 0} : tensor<1x16xi32>
  %1 = tt.broadcast %0 : tensor<{M}x16xi32>
  %2 = tt.addptr %prow, %1 : tensor<{M}x16x!ptr<f16>>
  %3 = arith.constant {value = 0} : i64
  %4 = arith.constant {value = 16} : i64
  %acc, %5 = scf.for %c0, %n, %c1, %z, %3 : tensor<{M}x16xf32>, i64 {
  ^bb(%k: i32, %a0: tensor<{M}x16xf32>, %p_offset: i64):
    %6 = tt.splat %p_offset : tensor<{M}x16xi64>
    %7 = tt.addptr %2, %6 : tensor<{M}x16x!ptr<f16>>
    %x = tt.load %7 : tensor<{M}x16xf16>
    %d = tt.dot %x, %bt, %a0 : tensor<{M}x16xf32>
    %8 = arith.addi %p_offset, %4 : i64
    scf.yield %d, %8
  }
  tt.print %acc
  tt.return
}
"""

CARRIED_DOT_TILE = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %sa: i32 {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rm = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %sat = tt.splat %sa : tensor<16xi32>
  %rows = arith.muli %rm, %sat : tensor<16xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<16x1xi32>
  %rowsb = tt.broadcast %rows2 : tensor<16x16xi32>
  %pbase = tt.splat %pa : tensor<16x16x!ptr<f16>>
  %prow = tt.addptr %pbase, %rowsb : tensor<16x16x!ptr<f16>>
  %b = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %bt = tt.load %b : tensor<16x16xf16>
  %z = arith.constant {value = 0.0} : tensor<16x16xf32>
  %0 = tt.expand_dims %rm {axis = 0} : tensor<1x16xi32>
  %1 = tt.broadcast %0 : tensor<16x16xi32>
  %2 = tt.addptr %prow, %1 : tensor<16x16x!ptr<f16>>
  %3 = arith.constant {value = 16} : tensor<16x16xi32>
  %acc, %4 = scf.for %c0, %n, %c1, %z, %2 : tensor<16x16xf32>, tensor<16x16x!ptr<f16>> {
  ^bb(%k: i32, %a0: tensor<16x16xf32>, %p: tensor<16x16x!ptr<f16>>):
    %x = tt.load %p : tensor<16x16xf16>
    %d = tt.dot %x, %bt, %a0 : tensor<16x16xf32>
    %5 = tt.addptr %p, %3 : tensor<16x16x!ptr<f16>>
    scf.yield %d, %5
  }
  tt.print %acc
  tt.return
}
"""


def test_a_dot_operand_carries_a_64_bit_offset(check):
    # a 64-row dot (wgmma's shape): A's columns k*16 + r are the invariant base + r plus splat(o), o an i64 from 0
    # by 16 elements
    assert check(_ThenCleanUp, _rows(REBUILT_DOT, 64), _rows(CARRIED_DOT, 64)) == {"carried": 1, "offset": 0}


def test_a_small_m_dot_operand_carries_its_pointer_tile(check):
    # a 16-row dot (mma.sync): the pointer tile itself is carried, advanced by splat(16); the offset form would
    # hold the base tile beside the ldmatrix addresses (more registers, spills) for no shorter loop
    assert check(_ThenCleanUp, _rows(REBUILT_DOT, 16), CARRIED_DOT_TILE) == {"carried": 1, "offset": 0}


def test_the_pass_leaves_no_dead_pointer_arithmetic():
    """The pass's own output (no clean-up after it) holds no tile arithmetic of the rebuilt pointer: the
    per-iteration offsets and pointer tile it replaced are gone, as the lab's graph and diff views read it."""
    m = parse_module(_rows(REBUILT_DOT, 64))
    sr.run(m)
    body = print_module(m, with_locs=False).split("^bb")[1]
    assert "%kk" not in body and "%okb" not in body and "%p " not in body and body.count("tt.addptr") == 1, body


def test_a_dot_operand_copied_element_by_element_keeps_its_pointer_tile(check):
    # rows of an unaligned stride: 2-byte runs, no cp.async; the pointer tile itself is carried (as before)
    text = _rows(REBUILT_DOT, 64).replace("%sa: i32 {tt.divisibility = 16}", "%sa: i32")
    stats = sr.run(parse_module(text))
    assert stats == {"carried": 1, "offset": 0}
    m = parse_module(text)
    sr.run(m)
    header = next(line for line in print_module(m, with_locs=False).splitlines() if "scf.for" in line)
    assert "tensor<64x16x!ptr<f16>>" in header, header


def test_the_tile_form_of_a_dot_operand_behind_its_switch(monkeypatch):
    """KERNELLAB_DOT_POINTER_FORM=tile: a 64-row dot's operand carries its pointer tile (advanced by splat(16)),
    and the user's own carried pointer tile is left alone."""
    monkeypatch.setenv(sr.DOT_FORM_ENV, "tile")
    m = parse_module(_rows(REBUILT_DOT, 64))
    assert sr.run(m) == {"carried": 1, "offset": 0}
    text = print_module(m, with_locs=False)
    header = next(line for line in text.splitlines() if "scf.for" in line)
    assert header.endswith("tensor<64x16xf32>, tensor<64x16x!ptr<f16>> {") and "i64" not in text, header
    user = parse_module(_rows(USER_CARRIED_DOT, 64))
    assert sr.run(user) == {"carried": 0, "offset": 0}


# the user's own carried A pointer (`p += 16`), M x 16 rows of 16 contiguous elements
USER_CARRIED_DOT = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rm = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rm2 = tt.expand_dims %rm {axis = 0} : tensor<1x16xi32>
  %rmb = tt.broadcast %rm2 : tensor<{M}x16xi32>
  %pbase = tt.splat %pa : tensor<{M}x16x!ptr<f16>>
  %p0 = tt.addptr %pbase, %rmb : tensor<{M}x16x!ptr<f16>>
  %step = arith.constant {value = 16} : tensor<{M}x16xi32>
  %b = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %bt = tt.load %b : tensor<16x16xf16>
  %z = arith.constant {value = 0.0} : tensor<{M}x16xf32>
  %acc, %pl = scf.for %c0, %n, %c1, %z, %p0 : tensor<{M}x16xf32>, tensor<{M}x16x!ptr<f16>> {
  ^bb(%k: i32, %a0: tensor<{M}x16xf32>, %p: tensor<{M}x16x!ptr<f16>>):
    %x = tt.load %p : tensor<{M}x16xf16>
    %d = tt.dot %x, %bt, %a0 : tensor<{M}x16xf32>
    %pn = tt.addptr %p, %step : tensor<{M}x16x!ptr<f16>>
    scf.yield %d, %pn
  }
  tt.print %acc
  tt.return
}
"""

# what the pass itself writes (no clean-up after it): the old tile, its step and its advance are gone
USER_CARRIED_DOT_OUT = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %rm = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %rm2 = tt.expand_dims %rm {axis = 0} : tensor<1x16xi32>
  %rmb = tt.broadcast %rm2 : tensor<64x16xi32>
  %pbase = tt.splat %pa : tensor<64x16x!ptr<f16>>
  %p0 = tt.addptr %pbase, %rmb : tensor<64x16x!ptr<f16>>
  %b = tt.splat %pb : tensor<16x16x!ptr<f16>>
  %bt = tt.load %b : tensor<16x16xf16>
  %z = arith.constant {value = 0.0} : tensor<64x16xf32>
  %0 = arith.constant {value = 16} : i64
  %1 = arith.constant {value = 0} : i64
  %acc, %2 = scf.for %c0, %n, %c1, %z, %1 : tensor<64x16xf32>, i64 {
  ^bb(%k: i32, %a0: tensor<64x16xf32>, %p_offset: i64):
    %3 = tt.splat %p_offset : tensor<64x16xi64>
    %4 = tt.addptr %p0, %3 : tensor<64x16x!ptr<f16>>
    %x = tt.load %4 : tensor<64x16xf16>
    %d = tt.dot %x, %bt, %a0 : tensor<64x16xf32>
    %5 = arith.addi %p_offset, %0 : i64
    scf.yield %d, %5
  }
  tt.print %acc
  tt.return
}
"""


def test_a_carried_dot_operand_pointer_becomes_a_64_bit_offset(check):
    # the user's `p += 16`: the first tile plus splat(o), o an i64 from 0 by 16; the pass drops the old tile
    assert check(sr, _rows(USER_CARRIED_DOT, 64), USER_CARRIED_DOT_OUT) == {"carried": 0, "offset": 1}


def test_a_small_m_carried_dot_operand_pointer_is_left_alone(check):
    text = _rows(USER_CARRIED_DOT, 32)
    assert check(sr, text, text) == {"carried": 0, "offset": 0}


def test_a_carried_pointer_also_used_after_the_loop_is_left_alone(check):
    text = _rows(USER_CARRIED_DOT, 64).replace(
        "  tt.print %acc\n", "  tt.print %acc\n  %y = tt.load %pl : tensor<64x16xf16>\n  tt.print %y\n")
    assert check(sr, text, text) == {"carried": 0, "offset": 0}


# a descriptor's load at tile level (a block pointer, before its lowering) added to, next to a loop whose dot
# operand asks the axis analysis: the analysis met the load's scalar operand with the tile (an IndexError in
# arith.addi's rule: host tensor descriptors of int32 failed to compile)
BLOCK_PTR_LOAD = """tt.func @k(%pa: !ptr<f16> {tt.divisibility = 16}, %pb: !ptr<f16>, %d: !ptr<i32> {tt.divisibility = 16}, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %s8 = arith.constant {value = 8} : i64
  %s32 = arith.constant {value = 32} : i64
  %one = arith.constant {value = 1} : i64
  %bp = tt.make_block_ptr %d, %s8, %s32, %s32, %one, %c0, %c0 {block_shape = [8, 32], descriptor = true, order = [1, 0]} : !blockptr<i32, 8x32>
  %v = tt.load %bp {boundary_check = [0, 1], padding = "zero"} : tensor<8x32xi32>
  %k1 = arith.constant {value = 1} : tensor<8x32xi32>
  %w = arith.addi %v, %k1 : tensor<8x32xi32>
  tt.store %bp, %w {boundary_check = [0, 1]}
""" + USER_CARRIED_DOT.split("\n", 3)[3].replace("{M}", "64")


def test_a_block_pointer_load_beside_a_dot_loop(check):
    m = parse_module(BLOCK_PTR_LOAD)
    assert sr.run(m) == {"carried": 0, "offset": 1}
    assert "%w = arith.addi %v, %k1" in print_module(m, with_locs=False)


@kl.jit
def _mm_rebuilt(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    # pointers rebuilt from k each step (no K mask: K a multiple of BK); the operands' storage is padded to whole
    # tiles (the loads are unmasked), the store is masked to the ragged M x N
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(K // BK):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :])
        acc = tl.dot(a, b) + acc
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    tl.store(c_ptr + om[:, None] * scm + on[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(om[:, None] < M) & (on[None, :] < N))


@kl.jit
def _mm_carried(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    # the user's own carried pointers (`ptrs += step`), a K mask (K need not be a multiple of BK)
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.gpu
@pytest.mark.parametrize("text", ["rebuilt", "carried"])
@pytest.mark.parametrize("form", ["offset64", "tile"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cfg", [(128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (64, 128, 32, 4, 4)])
def test_dot_operand_pointer_forms_gpu(text, form, dtype, cfg, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv(sr.DOT_FORM_ENV, form)
    kernel = kl.jit({"rebuilt": _mm_rebuilt, "carried": _mm_carried}[text].fn)  # a fresh cache for each form
    BM, BN, BK, warps, stages = cfg
    dt = getattr(torch, dtype)
    M, N, K = 300, 333, 7 * BK if text == "rebuilt" else 7 * BK - 16
    g = torch.Generator().manual_seed(1)
    a = torch.randn(512, K, generator=g).to(dt).cuda()[:M]
    b = torch.randn(K, 512, generator=g).to(dt).cuda()[:, :N]
    c = torch.full((M, 336), float("nan"), dtype=dt, device="cuda")[:, :N]
    grid = (triton_cdiv(M, BM), triton_cdiv(N, BN))
    kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK,
                      num_warps=warps, num_stages=stages)
    ref = (a.double() @ b.double()).to(dt)
    torch.testing.assert_close(c, ref, atol=3e-2, rtol=3e-2)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_carried_dot_operand_pointers_interpreted():
    """The user's `ptrs += step` rewritten to base + 64-bit offset (aligned rows: the copies can be cp.async),
    run by the interpreter against float64 with a ragged K (the K mask) and a poisoned, ragged output."""
    M, N, K = 70, 24, 48  # two K steps of 32, the second half masked; a ragged second row block
    g = torch.Generator().manual_seed(3)
    a = torch.randn(128, 64, generator=g).half()[:M, :K]
    b = torch.randn(64, 32, generator=g).half()[:K, :N]
    c = torch.full((128, 32), float("nan"))[:M, :N]
    kernel = kl.jit(_mm_carried.fn)
    kernel[(2, 2)](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=64, BN=16, BK=32,
                   bounds="storage")  # the unmasked loads read the padding of the views' storage
    compiled = list(kernel.cache.values())[-1]
    rec = next(p for p in compiled.trace.passes if p.name == "strength_reduce_pointers")
    assert rec.stats == {"carried": 0, "offset": 2}
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), atol=1e-2, rtol=1e-2)


def _idiom_matmuls():
    from tests.idioms import make_idioms

    return {v.name: v for v in next(w for w in make_idioms(kl.jit, tl) if w.name == "matmul").variants}


# the idioms' matmul texts: dot(a, b, acc) with % M wrap and K masks (acc_arg), acc += dot (plus_eq), rows and
# columns masked, pointers rebuilt from k (masked_2d), rebuilt from k with no masks (dot_plus_acc); the pass's
# stats in each form
IDIOM_STATS = {"acc_arg": ({"carried": 0, "offset": 2}, {"carried": 0, "offset": 0}),
               "plus_eq": ({"carried": 0, "offset": 2}, {"carried": 0, "offset": 0}),
               "masked_2d": ({"carried": 2, "offset": 0}, {"carried": 2, "offset": 0}),
               "dot_plus_acc": ({"carried": 2, "offset": 0}, {"carried": 2, "offset": 0})}


def _run_idiom(name, form, M, N, K, BM, BN, BK, device, monkeypatch, dtype=torch.float16, **opts):
    """Run the idiom `name` in pointer form `form` on a ragged M x N (poisoned output) against float64; the
    operands sit in storage padded to whole tiles (dot_plus_acc reads whole tiles unmasked). N a multiple of 16
    keeps B's wrapped columns (`% N`) in 16-byte runs, so both operands are copied by cp.async."""
    monkeypatch.setenv(sr.DOT_FORM_ENV, form)
    v = _idiom_matmuls()[name]
    kernel = kl.jit(v.kernel.fn)  # a fresh cache for each form
    g = torch.Generator().manual_seed(M + N + K)
    pm, pn, pk = triton_cdiv(M, BM) * BM, triton_cdiv(N, BN) * BN, triton_cdiv(K, BK) * BK
    a = torch.randn(pm, pk, generator=g).to(dtype).to(device)[:M, :K]
    b = torch.randn(pk, pn, generator=g).to(dtype).to(device)[:K, :N]
    c = torch.full((pm, pn), float("nan"), dtype=dtype, device=device)[:M, :N]
    grid = (triton_cdiv(M, BM), triton_cdiv(N, BN)) if name == "masked_2d" else \
        (triton_cdiv(M, BM) * triton_cdiv(N, BN),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=BM, BN=BN, BK=BK, GM=2, **opts)
    compiled = list(kernel.cache.values())[-1]
    rec = next(p for p in compiled.trace.passes if p.name == "strength_reduce_pointers")
    assert rec.stats == IDIOM_STATS[name][form == "tile" or BM < sr.OFFSET_MIN_M], rec.stats
    ref = (a.double() @ b.double()).to(dtype)
    torch.testing.assert_close(c, ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("form", ["offset64", "tile"])
@pytest.mark.parametrize("name", list(IDIOM_STATS))
def test_idiom_matmuls_interpreted(name, form, monkeypatch):
    """Each idiom text in each form through the interpreter: 64-row tiles (the offset form's), ragged M and N,
    K a whole number of steps for dot_plus_acc (it has no K mask) and ragged for the others."""
    K = 64 if name == "dot_plus_acc" else 80
    _run_idiom(name, form, 70, 48, K, 64, 32, 32, "cpu", monkeypatch, bounds="storage")


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["offset64", "tile"])
@pytest.mark.parametrize("name", list(IDIOM_STATS))
@pytest.mark.parametrize("cfg", [(128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (64, 128, 32, 4, 4),
                                 (16, 32, 256, 4, 4), (32, 64, 128, 4, 4)], ids=lambda c: "x".join(map(str, c)))
def test_idiom_matmuls_gpu(name, form, cfg, monkeypatch):
    """The idioms' texts on the GPU in both forms (the small-M configs take the tile form either way): ragged M and
    N, a ragged K where the text masks it, poisoned output."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    BM, BN, BK, warps, stages = cfg
    # a ragged K that stays a multiple of 16 (the divisibility launches specialize on): with K = 552 the K mask
    # changes every element, A is read element by element and keeps its pointer tile, as in Triton
    K = 9 * BK if name == "dot_plus_acc" else 9 * BK - 16
    _run_idiom(name, form, 301, 336, K, BM, BN, BK, "cuda", monkeypatch, num_warps=warps, num_stages=stages)


def test_a_carried_pointer_of_a_load_feeding_no_dot_is_left_alone(check):
    text = _rows(USER_CARRIED_DOT, 64).replace("%d = tt.dot %x, %bt, %a0 : tensor<64x16xf32>",
                                               "%xf = arith.extf %x : tensor<64x16xf32>\n"
                                               "    %d = arith.addf %xf, %a0 : tensor<64x16xf32>")
    assert check(sr, text, text) == {"carried": 0, "offset": 0}


# ------------------------------------------------------------------ KERNELLAB_OFFSET_TILE=1 (default off)
# In the scalar-offset form (a pointer that feeds no dot) the loop-invariant part is held as an integer offset tile
# from a scalar base, the pointer rebuilt each iteration as splat(base) + (offsets + splat(o)), instead of a 64-bit
# pointer tile: Unsloth's `_rms_sum_dw_partials` (64x64 fp32 summed over rows, 4 warps) 148 -> 72 registers
# (Triton 94), its loop's SASS the same length.

OFFSET_TILE_1D = """tt.func @k(%pa: !ptr<f16>, %sb: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %c16 = arith.constant {value = 16} : i32
  %rng = tt.make_range {end = 16, start = 0} : tensor<16xi32>
  %sbt = tt.splat %sb : tensor<16xi32>
  %0 = arith.muli %rng, %sbt : tensor<16xi32>
  %1 = arith.muli %c16, %sb : i32
  %2 = scf.for %c0, %n, %c1, %c0 : i32 {
  ^bb(%k: i32, %p_offset: i32):
    %3 = tt.splat %p_offset : tensor<16xi32>
    %4 = arith.addi %0, %3 : tensor<16xi32>
    %5 = tt.splat %pa : tensor<16x!ptr<f16>>
    %6 = tt.addptr %5, %4 : tensor<16x!ptr<f16>>
    %x = tt.load %6 : tensor<16xf16>
    tt.print %x
    %7 = arith.addi %p_offset, %1 : i32
    scf.yield %7
  }
  tt.return
}
"""

OFFSET_TILE_2D = """tt.func @k(%pa: !ptr<f16>, %sa: i32, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c8 = arith.constant {value = 8} : i32
  %rm = tt.make_range {end = 4, start = 0} : tensor<4xi32>
  %rk = tt.make_range {end = 8, start = 0} : tensor<8xi32>
  %sat = tt.splat %sa : tensor<4xi32>
  %rows = arith.muli %rm, %sat : tensor<4xi32>
  %rows2 = tt.expand_dims %rows {axis = 1} : tensor<4x1xi32>
  %0 = tt.expand_dims %rk {axis = 0} : tensor<1x8xi32>
  %1 = tt.broadcast %0 : tensor<4x8xi32>
  %2 = tt.broadcast %rows2 : tensor<4x8xi32>
  %3 = arith.addi %2, %1 : tensor<4x8xi32>
  %4 = arith.constant {value = 16} : i32
  %5 = arith.addi %3, %1 : tensor<4x8xi32>
  %6, %7 = scf.for %c0, %n, %c8, %c0, %c0 : i32, i32 {
  ^bb(%k0: i32, %p_offset: i32, %q_offset: i32):
    %8 = tt.splat %p_offset : tensor<4x8xi32>
    %9 = arith.addi %3, %8 : tensor<4x8xi32>
    %10 = tt.splat %pa : tensor<4x8x!ptr<f16>>
    %11 = tt.addptr %10, %9 : tensor<4x8x!ptr<f16>>
    %x = tt.load %11 : tensor<4x8xf16>
    %12 = tt.splat %q_offset : tensor<4x8xi32>
    %13 = arith.addi %5, %12 : tensor<4x8xi32>
    %14 = tt.addptr %10, %13 : tensor<4x8x!ptr<f16>>
    tt.store %14, %x
    %15 = arith.addi %p_offset, %c8 : i32
    %16 = arith.addi %q_offset, %4 : i32
    scf.yield %15, %16
  }
  tt.return
}
"""


def test_offset_tile_1d(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_OFFSET_TILE", "1")
    assert check(_ThenCleanUp, REBUILT_1D, OFFSET_TILE_1D) == {"carried": 1, "offset": 0}


def test_offset_tile_through_expand_dims_and_broadcast(check, monkeypatch):
    monkeypatch.setenv("KERNELLAB_OFFSET_TILE", "1")
    assert check(_ThenCleanUp, REBUILT_2D, OFFSET_TILE_2D) == {"carried": 2, "offset": 0}


def test_offset_tile_off_by_default(check, monkeypatch):
    monkeypatch.delenv("KERNELLAB_OFFSET_TILE", raising=False)
    assert check(_ThenCleanUp, REBUILT_1D, CARRIED_1D) == {"carried": 1, "offset": 0}


@kl.jit
def _sum_partials(partials, out, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """Unsloth's _rms_sum_dw_partials, rewritten: column sums of an (n_rows, n_cols) fp32 tile, rows BLOCK_ROWS at
    a time, pointers rebuilt from the counter."""
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
    for start in tl.range(0, n_rows, BLOCK_ROWS, num_stages=3):
        rows = start + tl.arange(0, BLOCK_ROWS)
        mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
        acc += tl.load(partials + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0)
    tl.store(out + cols, tl.sum(acc, axis=0), mask=cols < n_cols)


def _sum_partials_check(device, n_rows, n_cols, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, n_cols, generator=g, dtype=torch.float64).float()
    out = torch.full((n_cols,), float("nan"))
    x, out = x.to(device), out.to(device)
    _sum_partials[(-(-n_cols // 64),)](x, out, n_rows, n_cols, BLOCK_ROWS=64, BLOCK_COLS=64)
    torch.testing.assert_close(out.cpu().double(), x.cpu().double().sum(0), rtol=1e-5, atol=1e-4)


def test_offset_tile_interpreted(monkeypatch):
    monkeypatch.setenv("KERNELLAB_OFFSET_TILE", "1")
    _sum_partials_check("cpu", 150, 70, 0)


def test_offset_tile_codegen_registers(monkeypatch):
    import shutil

    from kernellab.compiler.codegen.target import Target

    if shutil.which("ptxas") is None:
        pytest.skip("ptxas (CUDA toolkit) is not on PATH")

    def regs(knob):
        monkeypatch.setenv("KERNELLAB_OFFSET_TILE", knob)
        ck = _sum_partials.warmup(torch.zeros(150, 70), torch.zeros(70), 150, 70, BLOCK_ROWS=64, BLOCK_COLS=64,
                                  num_warps=4, grid=(2,))
        ck.build_gpu(Target(90))
        return ck.n_regs, ck.n_spills

    (off, _), (on, spills) = regs("0"), regs("1")
    assert on < off and spills == 0, (off, on)


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
def test_offset_tile_gpu(monkeypatch, knob):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_OFFSET_TILE", knob)
    for n_rows, n_cols, seed in ((150, 70, 1), (64, 64, 2), (1000, 300, 3)):
        _sum_partials_check("cuda", n_rows, n_cols, seed)
