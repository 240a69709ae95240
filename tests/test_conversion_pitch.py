"""The row pitch of a layout conversion's scratch (gpu/scratch.py): the fewest shared-memory wavefronts for
both sides, the 16-byte rule where it is already best."""
from __future__ import annotations

from kernellab.compiler.gpu import scratch
from kernellab.compiler.gpu.layouts import parse_layout

ROWS = parse_layout("#blocked<[1, 8], [4, 8], [4, 1], [1, 0]>")      # 8 fp16 along a row per thread
COLS = parse_layout("#blocked<[8, 1], [8, 4], [1, 4], [0, 1]>")      # 8 fp16 down a column per thread


def test_transpose_pitch_avoids_the_8_way_conflict():
    shape = (64, 64)
    rule = 64 + 8  # 16 bytes a row
    assert scratch._wavefronts(COLS, shape, 2, rule) == 32 * 8  # 32 scalar stores, 8 lanes on one bank
    pitch = scratch.conversion_pitch(shape, 2, (COLS, ROWS))
    assert pitch == 64 + 2  # 4 bytes a row
    assert scratch._wavefronts(COLS, shape, 2, pitch) == 32 * 2
    # the row side reads 4-byte vectors there (66 is not a multiple of 8), in as many wavefronts as 16-byte ones
    assert scratch.contiguous_run(ROWS, shape, 2, pitch) == 2
    assert scratch._wavefronts(ROWS, shape, 2, pitch) == scratch._wavefronts(ROWS, shape, 2, rule)


def test_rule_kept_where_it_is_best(monkeypatch):
    wide = parse_layout("#blocked<[1, 4], [2, 16], [4, 1], [1, 0]>")
    assert scratch.conversion_pitch((64, 64), 2, (ROWS, wide)) == 64 + 8
    assert scratch.conversion_pitch((64, 64), 2, ()) == 64 + 8          # layouts unknown: the rule
    monkeypatch.setenv("KERNELLAB_CONVERSION_PITCH", "rows")
    assert scratch.conversion_pitch((64, 64), 2, (COLS, ROWS)) == 64 + 8


def test_rows_shorter_than_128_bytes_may_be_padded():
    # a 128x32 fp16 transposed tile: rows of 64 bytes, unpadded under the rule (8-way on the column side)
    cols = parse_layout("#blocked<[8, 1], [16, 2], [1, 4], [0, 1]>")
    rows = parse_layout("#blocked<[1, 8], [8, 4], [4, 1], [1, 0]>")
    shape = (128, 32)
    pitch = scratch.conversion_pitch(shape, 2, (cols, rows))
    assert pitch != 32
    assert (scratch._wavefronts(cols, shape, 2, pitch) + scratch._wavefronts(rows, shape, 2, pitch)
            < scratch._wavefronts(cols, shape, 2, 32) + scratch._wavefronts(rows, shape, 2, 32))
