"""Shared-memory tile encodings and the wgmma matrix descriptors that read them.

Two encodings of a 2-D tile in shared memory (`!memdesc`):
- padded (mma.sync + ldmatrix): rows along the contiguous dim, each followed by 16 bytes of padding so
  the 8 row addresses of an ldmatrix hit 8 different bank groups;
- swizzled (wgmma): the contiguous dim is cut into atoms of `swizzle` bytes (32, 64 or 128); an atom
  row of every slow index is stored back to back, and the 16-byte chunks of each row are permuted by
  XOR with the row's position in its 8-row group (address bits 4.. ^= bits 7..). This is the layout the
  wgmma unit reads through a descriptor, and it is free of bank conflicts for 16-byte accesses too.

For a tile with fast (contiguous) index f and slow index s, element size e, swizzle Z, atom width
W = Z / e:  linear = (f // W) * (S * Z) + s * Z + (f % W) * e, stored at
linear ^ (((linear >> 7) & (Z/16 - 1)) << 4), relative to a 1024-byte aligned base.
"""
from __future__ import annotations

from ..types import MemDescType

SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}  # the descriptor's bits 62-63


def choose_swizzle(fast_bytes: int) -> int:
    """The widest swizzle an extent of `fast_bytes` along the contiguous dim can use; 0 when none fits."""
    if fast_bytes % 128 == 0:
        return 128
    return fast_bytes if fast_bytes in (32, 64) else 0


def swizzled(shape, elem, order) -> MemDescType | None:
    """The wgmma encoding of a tile (a leading stage count in `shape` is kept), or None when the tile's
    contiguous extent cannot be swizzled."""
    fast = shape[-2:][order[0]]
    z = choose_swizzle(fast * (elem.bits // 8))
    return MemDescType(tuple(shape), elem, tuple(order), 0, z) if z else None


def element_byte(t: MemDescType, r: int, c: int) -> int:
    """Byte offset of logical element (r, c) of one stage of `t` (Python reference of the codegen). `r` and `c` may
    also be NumPy integer arrays (non-negative): the offsets of all those elements at once."""
    rows, cols = t.shape[-2:]
    e = t.scalar.bits // 8
    if t.order[0] == 0:
        f, s, S = r, c, cols
    else:
        f, s, S = c, r, rows
    if not t.swizzle:
        return (s * ((rows if t.order[0] == 0 else cols) + t.pad) + f) * e
    z = t.swizzle
    w = z // e
    lin = (f // w) * (S * z) + s * z + (f % w) * e
    return lin ^ (((lin >> 7) & (z // 16 - 1)) << 4)


def linear_delta(t, dr: int, dc: int):
    """The constant byte distance between elements (r + dr, c + dc) and (r, c) of one stage of `t`, when
    it is the same for every (r, c) a thread can hold, else None. A padded layout is linear; a swizzled
    one keeps its XOR pattern only across whole swizzle periods (8 rows of `swizzle` bytes) and whole
    `swizzle`-byte column blocks. Lets codegen address a thread's copies as one base plus immediates."""
    rows, cols = t.shape[-2:]
    e = t.scalar.bits // 8
    df, ds, slow = (dr, dc, cols) if t.order[0] == 0 else (dc, dr, rows)
    if not t.swizzle:
        return (ds * ((rows if t.order[0] == 0 else cols) + t.pad) + df) * e
    z = t.swizzle
    w = z // e
    if df % w:
        return None
    delta = (df // w) * slow * z + ds * z
    return delta if delta % (8 * z) == 0 else None


def descriptor_fields(t: MemDescType, k_major: bool, k0: int, mn0: int) -> tuple[int, int, int, int]:
    """(byte offset of the start, LBO, SBO, swizzle mode) of the wgmma descriptor that reads 16 k from
    k0 and the instruction's M or N extent from mn0 (a multiple of 8, of the atom width when MN-major)."""
    e = t.scalar.bits // 8
    z = t.swizzle
    w = z // e
    rows, cols = t.shape[-2:]
    slow = rows if t.order[0] == 1 else cols  # extent of the non-contiguous dim
    if k_major:  # rows are M (or N); k runs along each swizzled row
        start = (k0 // w) * (slow * z) + mn0 * z + (k0 % w) * e
        return start, 16, 8 * z, SWIZZLE_MODE[z]
    # MN-major: rows are k; M (or N) runs along each row, atoms of w elements `slow * z` bytes apart
    start = (mn0 // w) * (slow * z) + k0 * z + (mn0 % w) * e
    return start, slow * z, 8 * z, SWIZZLE_MODE[z]
