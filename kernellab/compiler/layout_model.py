"""The layout model, public: which warp, lane and register hold each element of a tile, and what a warp's
accesses look like. The lab draws its pictures with it; it is the same code the compiler chooses layouts
and generates code with, so a picture shows the mapping the kernel really runs with.

What it offers (and all a view may use besides the CompileTrace):
- `parse_layout(text)` -> a `Layout` from the text a trace records (`ValueRecord.layout`): `Blocked(spt, tpw,
  wpc, order)`, `Slice(dim, parent)` or `Mma(warps)`. A layout answers `dims_info(shape)` (per dimension a
  `DimInfo`: size, spt, lanes, lane_div, warps, warp_div, register offsets, lane and warp strides),
  `registers(shape)` (each register's per-dimension offset), `reg_order()` (dims from fastest) and
  `num_warps`; `sliced_infos(layout, shape)` gives the DimInfos a slice removed (they decide which copy of a
  replicated element is the representative one).
- `thread_part(info, lane, warp)`: the thread's part of the element index along one dimension; the element
  a thread holds in register r is ((thread part + registers[r][d]) mod size) along each dimension d.
- `coalescing(...)`: the dense-tile model of a warp's global accesses (recorded per access in the trace).
- `conversion_pitch`, `contiguous_run`, `access_wavefronts`: how a layout conversion's scratch is laid out and
  accessed, and the bank conflicts of an access.
- `matrix_conversion_plan(src, dst, shape, elem_bytes, num_warps, pitch)`, `matrix_side_banks(plan, side,
  num_warps)`: the 8x8-matrix form of a conversion (ldmatrix / stmatrix with 16-byte vectors, behind
  KERNELLAB_CONVERSION_LDMATRIX) where codegen uses it instead of the padded scratch, and its bank conflicts.
- `shared_byte(tile, r, c)`: the byte offset of element (r, c) of a shared-memory tile (`SharedTile`),
  swizzled or padded as the code generator places it.
"""
from __future__ import annotations

import functools

from .gpu.layouts import WARP_SIZE, Blocked, DimInfo, Layout, Mma, Slice, parse_layout, sliced_infos
from .gpu.matrix_conversion import side_banks as matrix_side_banks
from .gpu.scratch import access_wavefronts, contiguous_run, conversion_pitch
from .trace import Coalescing, SharedTile

__all__ = ["WARP_SIZE", "SECTOR_BYTES", "Layout", "Blocked", "Slice", "Mma", "DimInfo", "parse_layout",
           "as_layout", "sliced_infos", "thread_part", "coalescing", "conversion_pitch", "contiguous_run",
           "access_wavefronts", "shared_byte", "matrix_conversion_plan", "matrix_side_banks"]

SECTOR_BYTES = 32  # what a global-memory transaction fetches


def matrix_conversion_plan(src, dst, shape, elem_bytes: int, num_warps: int, pitch: int, arch: int = 90):
    """The matrix plan codegen lowers the conversion with (None: the padded scratch)."""
    from .gpu.matrix_conversion import chosen

    return chosen(as_layout(src), as_layout(dst), tuple(shape), elem_bytes, num_warps, arch, pitch)


def as_layout(layout) -> Layout:
    """A Layout from a Layout or its text."""
    return layout if isinstance(layout, Layout) else parse_layout(layout)


def thread_part(info: DimInfo, lane: int, warp: int) -> int:
    """The part of a thread's element index along one dimension that its lane and warp decide."""
    return (((warp // info.warp_div) % info.warps) * info.warp_stride
            + ((lane // info.lane_div) % info.lanes) * info.lane_stride)


def _dense_strides(lay: Layout, shape) -> list[int]:
    strides, acc = [0] * len(shape), 1
    for d in lay.reg_order():
        strides[d] = acc
        acc *= shape[d]
    return strides


def coalescing(layout, shape, num_warps: int, vec: int = 1, elem_bytes: int = 4) -> Coalescing:
    """The dense-tile model of `_coalescing`, remembered per layout text and arguments: every GPU snapshot records
    it for each access, the same tiles come back in each build of an autotuning sweep, and the model walks every
    lane and register of the tile (a tenth of a second for a 128x128 tile). A Coalescing is frozen."""
    if isinstance(layout, str):
        return _coalescing_of_text(layout, tuple(shape), num_warps, vec, elem_bytes)
    return _coalescing(layout, shape, num_warps, vec, elem_bytes)


@functools.lru_cache(maxsize=1024)
def _coalescing_of_text(layout: str, shape: tuple, num_warps: int, vec: int, elem_bytes: int) -> Coalescing:
    return _coalescing(layout, shape, num_warps, vec, elem_bytes)


def _coalescing(layout, shape, num_warps: int, vec: int = 1, elem_bytes: int = 4) -> Coalescing:
    """How one warp's global accesses look when the tile's addresses are dense, contiguous along the layout's
    fastest dimension and then the next ones (assign_layouts aligns `order[0]` with the pointers' contiguous
    axis): each warp instruction touches 32-byte sectors; efficiency = useful bytes / bytes of the sectors
    touched; coalesced means no sector byte is wasted. `vec` falls back to 1 when the registers are not in
    runs of `vec` along the fastest dimension."""
    lay = as_layout(layout)
    shape = tuple(shape)
    infos = lay.dims_info(shape)
    regs = lay.registers(shape)
    fast = lay.reg_order()[0]
    vec = max(1, vec)
    if len(regs) % vec or any(regs[g + k][fast] != regs[g][fast] + k for g in range(0, len(regs), vec)
                              for k in range(vec)):
        vec = 1
    strides = _dense_strides(lay, shape)
    nbytes = vec * elem_bytes

    def addr(lane, warp, r):
        idx = [(thread_part(info, lane, warp) + o) % info.size for info, o in zip(infos, regs[r])]
        return sum(i * s for i, s in zip(idx, strides)) * elem_bytes

    total_sectors, total_ideal, useful, fetched, n = 0, 0, 0, 0, 0
    for warp in range(num_warps):
        for g in range(0, len(regs), vec):
            sectors, cells = set(), set()
            for lane in range(WARP_SIZE):
                a = addr(lane, warp, g)
                sectors.update(range(a // SECTOR_BYTES, (a + nbytes - 1) // SECTOR_BYTES + 1))
                cells.update(range(a, a + nbytes, elem_bytes))
            total_sectors += len(sectors)
            total_ideal += -(-len(cells) * elem_bytes // SECTOR_BYTES)
            useful += len(cells) * elem_bytes
            fetched += len(sectors) * SECTOR_BYTES
            n += 1
    finfo = infos[fast]
    lanes_fast = finfo.lanes if finfo.lane_div == 1 else 1
    starts0 = [addr(lane, 0, 0) for lane in range(WARP_SIZE)]
    pairs = [(a, b) for k, (a, b) in enumerate(zip(starts0, starts0[1:])) if (k + 1) % max(lanes_fast, 1)]
    consecutive = lanes_fast > 1 and all(b - a == nbytes for a, b in pairs)
    eff = useful / fetched if fetched else 1.0
    return Coalescing(vec=vec, elem_bytes=elem_bytes, bytes_per_access=nbytes, fast_dim=fast,
                      lanes_along_fast=lanes_fast, instructions=len(regs) // vec,
                      sectors=total_sectors / max(n, 1), ideal_sectors=total_ideal / max(n, 1), efficiency=eff,
                      consecutive_lanes=consecutive, coalesced=eff >= 0.999)


def shared_byte(tile: SharedTile, r: int, c: int) -> int:
    """Byte offset of logical element (r, c) of one stage of `tile` (the code generator's placement)."""
    from .gpu.smem_layout import element_byte
    from .types import DTYPES, MemDescType

    return element_byte(MemDescType(tile.shape, DTYPES[tile.elem], tile.order, tile.pad, tile.swizzle), r, c)
