"""How many bytes of shared-memory scratch an op needs in its layout, and why."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from ..types import TensorType
from .layouts import Blocked, Mma, Slice


def mem_bytes(t) -> int:
    """Bytes one element occupies in memory (i1 is stored as a byte, pointers as 8 bytes)."""
    s = t.scalar
    if s.is_ptr():
        return 8
    return max(1, s.bits // 8)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def warps_along(layout, axis: int, shape=None) -> int:
    """Warps the layout spreads along `axis`. With the tile's shape, from the layout's own per-dimension info
    (what codegen reads): every layout kind, an mma accumulator's warps along N included (a cross-warp reduction
    of a 64-row dot over 8 warps, [4, 2], had no scratch and wrote its partials over other buffers)."""
    if shape is not None and hasattr(layout, "dims_info"):
        return layout.dims_info(tuple(shape))[axis].warps
    if isinstance(layout, Blocked):
        return layout.wpc[axis]
    if isinstance(layout, Slice):
        return warps_along(layout.parent, axis if axis < layout.dim else axis + 1)
    return 1


def _renames(op) -> bool:
    from .reshape_layout import register_map

    src, res = op.operands[0].type, op.results[0].type
    return isinstance(src, TensorType) and isinstance(res, TensorType) and \
        register_map(src.layout, src.shape, res.layout, res.shape) is not None


def _renames_halves(op) -> bool:
    """A split or join whose every result register is a register of its source in the same thread."""
    from .reshape_layout import join_map, split_map

    src = op.operands[0].type
    if not isinstance(src, TensorType) or not all(isinstance(r.type, TensorType) for r in op.results):
        return False
    if op.name == "tt.split":
        return all(split_map(src.layout, src.shape, r.type.layout, r.type.shape, k) is not None
                   for k, r in enumerate(op.results))
    res = op.results[0].type
    return op.operands[1].type.layout == src.layout and \
        join_map(src.layout, src.shape, res.layout, res.shape) is not None


def scratch_bytes(op) -> tuple[int, str]:
    """(bytes, reason); (0, '') when the op needs no shared memory."""
    name = op.name
    if name in ("tt.split", "tt.join") and _renames_halves(op):
        return 0, ""  # the halves are registers of the source: renamed
    if name in ("ttg.convert_layout", "tt.reshape") and _renames(op):
        return 0, ""  # every thread already holds the elements the result's layout gives it
    if name == "ttg.convert_layout":
        t = op.operands[0].type
        rows = _numel(t.shape[:-1]) if len(t.shape) else 1
        return rows * conversion_pitch(t.shape, mem_bytes(t), conversion_layouts(op)) * mem_bytes(t), \
            "layout conversion"
    if name == "tt.reduce":
        t = op.operands[0].type
        w = warps_along(t.layout, op.attrs["axis"], t.shape) if isinstance(t, TensorType) else 1
        if w <= 1:
            return 0, ""
        out = _numel(op.results[0].type.shape)
        return sum(_align16(w * out * mem_bytes(v.type)) for v in op.operands), f"cross-warp reduction over {w} warps"
    if name == "tt.scan":
        t = op.operands[0].type
        plan = scan_plan(t.layout, t.shape, op.attrs["axis"]) if isinstance(t, TensorType) else None
        if plan is None:
            return sum(_align16(_numel(t.shape) * mem_bytes(v.type)) for v in op.operands), \
                "scan through shared memory"
        reps, warps, lines = plan
        if warps == 1:
            return 0, ""
        return sum(_align16(reps * warps * lines * mem_bytes(v.type)) for v in op.operands), \
            f"scan: one running total per warp ({warps} warps) and repetition"
    return _other_ops(op)


def a_from_registers(op) -> bool:
    """Whether a tensor-core dot takes its A operand straight from registers: A is itself an mma
    accumulator tile (attention's probabilities) split over the same warps along M and not split along
    K, so each thread already holds exactly the A fragments mma.sync (and wgmma with A in registers)
    wants: two adjacent n8 accumulator tiles are one k16 A fragment. fp8 A tiles of a wgmma dot too (FA3's fp8
    probabilities): a k32 fragment's bytes sit in other lanes of the quad, and two shuffles per register pair
    bring them (`a_fragment_8bit_from_accumulator`) instead of a round trip through shared memory and a barrier.
    KERNELLAB_FP8_A_REGS=0 stages fp8 A tiles in shared memory as before (to compare)."""
    import os

    from .layouts import Mma

    a = op.operands[0].type
    lay = getattr(a, "layout", None)
    if not (isinstance(lay, Mma) and lay.warps[1] == 1 and lay.warps[0] == op.attrs["mma"][0]):
        return False
    if a.scalar.ir in ("f16", "bf16"):
        return a.shape[1] % 16 == 0
    if a.scalar.ir in ("f8e4nv", "f8e5"):
        return a.shape[1] % 32 == 0 and is_wgmma(op) and os.environ.get("KERNELLAB_FP8_A_REGS", "1") != "0"
    # fp32 on mma.sync m16n8k8.tf32 where passes/register_dot_operand.py put A there (`a_in_registers`): each 16x8
    # accumulator block is one k-step's A fragment with k permuted (columns 2t, 2t + 1 as the instruction's slots
    # t, t + 4); B is read to match. An fp32 accumulator fed to a second dot as it is (fla's parallel attention's
    # probabilities) stays staged: held in registers through the mma.syncs it spilled more (248 -> 384 bytes)
    return bool(a.scalar.ir == "f32" and a.shape[1] % 8 == 0 and not is_wgmma(op) and op.attrs.get("a_in_registers")
                and op.attrs.get("instr") == "mma.sync.m16n8k8.tf32")


def is_wgmma(op) -> bool:
    return op.name == "tt.dot" and str(op.attrs.get("instr", "")).startswith("wgmma")


@dataclass(frozen=True)
class WgmmaKind:
    """What one wgmma.mma_async takes for a dot's element types: the operand type in PTX (`f16`, `bf16`, `tf32`,
    `e4m3`, `e5m2`, `s8`), the k of one instruction (32 bytes of each operand row), the accumulator type in
    PTX (`f32`, `f16`, `s32`) and whether both operands must be K-major in shared memory (wgmma transposes
    16-bit operands only)."""

    ptx: str
    k: int
    acc: str

    @property
    def k_major_only(self) -> bool:
        return self.ptx not in ("f16", "bf16")

    @property
    def esize(self) -> int:
        return 32 // self.k

    def shape(self, n: int) -> str:
        sat = ".satfinite" if self.ptx == "s8" else ""  # integer sums clamp to the s32 range, as mma.sync's do
        return f"wgmma.mma_async.sync.aligned.m64n{n}k{self.k}{sat}.{self.acc}.{self.ptx}.{self.ptx}"

    @property
    def scale_args(self) -> str:
        """The immediate operands after scale-d: scale-a and scale-b (none for integers)."""
        return "" if self.ptx == "s8" else ", 1, 1"


WGMMA_OPERANDS = {"f16": ("f16", 16), "bf16": ("bf16", 16), "f32": ("tf32", 8), "f8e4nv": ("e4m3", 32),
                  "f8e5": ("e5m2", 32), "i8": ("s8", 32)}


def wgmma_kind(op) -> WgmmaKind:
    """The wgmma form of a dot (its operand types decide; fp32 operands run as tf32)."""
    ptx, k = WGMMA_OPERANDS[op.operands[0].type.scalar.ir]
    acc = op.operands[2].type.scalar.ir
    return WgmmaKind(ptx, k, "s32" if acc == "i32" else acc)


def wgmma_staging(op) -> tuple:
    """The swizzled encodings a wgmma dot stages its register operands in (None for operands already in
    shared memory, and for an A that wgmma reads from registers): A K-major [M][K]; B [K][N] with N
    contiguous for 16-bit types, else K-major (stored [N][K]: wgmma transposes 16-bit operands only)."""
    from .smem_layout import swizzled

    a, b = op.operands[0].type, op.operands[1].type
    sa = None if a.is_memdesc() or a_from_registers(op) else swizzled(a.shape, a.scalar, (1, 0))
    b_order = (0, 1) if wgmma_kind(op).k_major_only else (1, 0)
    sb = None if b.is_memdesc() else swizzled(b.shape, b.scalar, b_order)
    return sa, sb


def buffer_align(op) -> int:
    """Swizzled tiles repeat their pattern every 1024 bytes and must start on that boundary."""
    t = op.results[0].type if op.results else None
    if op.name == "ttg.local_alloc" and getattr(t, "swizzle", 0):
        return 1024
    if op.name == "ttg.make_tensormap":
        return 128  # tensormap.replace on shared memory wants a 128-byte aligned object
    return 1024 if is_wgmma(op) else 16


def _other_ops(op):
    name = op.name
    if name == "ttg.make_tensormap":
        return 128, "a tensor map made in the kernel, staged before its copy to global scratch"
    if is_wgmma(op):
        sa, sb = wgmma_staging(op)
        n = sum(t.tile_bytes for t in (sa, sb) if t is not None)
        return n, "dot operands staged swizzled for wgmma" if n else ""
    if name == "tt.dot" and "mma" in op.attrs:
        (m, k), n = op.operands[0].type.shape, op.operands[1].type.shape[1]
        a_bytes, b_bytes = mma_staging(m, n, k, mma_instr(op))
        in_smem_or_regs = (op.operands[0].type.is_memdesc() or a_from_registers(op), op.operands[1].type.is_memdesc())
        staged = [x for x, v in zip((a_bytes, b_bytes), in_smem_or_regs) if not v]
        if not staged:
            return 0, ""
        which = "dot operands" if len(staged) == 2 else "a dot operand"
        return sum(staged), f"{which} staged for ldmatrix (rows padded by 16 bytes: no bank conflicts)"
    if name == "tt.dot":
        a, b = op.operands[0].type, op.operands[1].type
        return _align16(_numel(a.shape) * mem_bytes(a)) + _numel(b.shape) * mem_bytes(b), "dot operand staging"
    if name == "tt.reshape" and not op.results[0].type.shape:
        return 0, ""  # a 1-element tensor to a scalar (.item()): every thread already holds the element
    if name in ("tt.reshape", "tt.join", "tt.split", "tt.cat"):
        n = sum(_numel(v.type.shape) * mem_bytes(v.type) for v in op.operands)
        return n, f"{name[3:]} through shared memory"
    if name == "tt.gather":
        t = op.operands[0].type
        return _numel(t.shape) * mem_bytes(t), "gather: the source tile, read at the indices"
    if name == "tt.histogram":
        return 4 * op.attrs["num_bins"], f"histogram: {op.attrs['num_bins']} i32 counters (shared-memory atomics)"
    if name in ("tt.atomic_rmw", "tt.atomic_cas") and not op.results[0].type.shape:
        return 8, "broadcast of a scalar atomic's old value"
    if name in ("tt.atomic_rmw", "tt.atomic_cas") and op.results[0].uses:
        # one thread per element does the atomic; copies of the element held by other threads (a tile
        # smaller than the block) read its old value from here
        t = op.results[0].type
        return _numel(t.shape) * mem_bytes(t), "old values of a tensor atomic, for the threads holding copies"
    return 0, ""


def scan_plan(layout, shape, axis):
    """(repetitions, warps, lines) of a hierarchical scan along `axis`, or None when the layout
    needs the simple shared-memory scan (copies of elements along the axis, or a sliced layout)."""
    if not isinstance(layout, Blocked):
        return None
    info = layout.dims_info(shape)[axis]
    if info.replicated:
        return None
    reps = len(info.offsets) // info.spt
    return reps, info.warps, _numel(shape) // shape[axis]


MMA_PAD = 8  # halves added to each staged row: 16 bytes shift consecutive rows across the 32 banks


@dataclass(frozen=True)
class MmaInstr:
    """One mma.sync shape: its k, operand element size and PTX. Every kind takes 4 b32 registers of A and
    2 of B (8x8 b16 matrices for ldmatrix) and accumulates 4 values per thread per 16x8 tile."""

    name: str
    k: int
    esize: int
    ptx: str
    acc: str  # "f32", "f16" or "s32"

    @property
    def pad(self) -> int:
        """Elements added to each staged row: 16 bytes, so ldmatrix's 8 row addresses hit 8 bank groups."""
        return 16 // self.esize

    @property
    def b_k_contiguous(self) -> bool:
        """Staged B is stored [N][K] (tf32, int8: ldmatrix cannot transpose 32- or 8-bit elements) rather
        than [K][N] (fp16/bf16, read with ldmatrix .trans)."""
        return self.esize != 2


MMA_INSTRS = {
    "f16": MmaInstr("mma.sync.m16n8k16.f16", 16, 2, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "f32"),
    "bf16": MmaInstr("mma.sync.m16n8k16.bf16", 16, 2, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "f32"),
    "tf32": MmaInstr("mma.sync.m16n8k8.tf32", 8, 4, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "f32"),
    "s8": MmaInstr("mma.sync.m16n8k32.s8", 32, 1, "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32",
                   "s32"),
    # fp16 accumulation: C and D are two f16x2 registers per 16x8 tile, the same elements as the f32 form's four
    "f16acc": MmaInstr("mma.sync.m16n8k16.f16.f16acc", 16, 2, "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
                       "f16"),
}


def mma_instr(op) -> MmaInstr:
    """The instruction accelerate_matmul chose for a dot (its `instr` attribute)."""
    name = op.attrs.get("instr", "mma.sync.m16n8k16." + op.operands[0].type.scalar.ir)
    return next(i for i in MMA_INSTRS.values() if i.name == name)


def mma_b_k_contiguous(instr: MmaInstr, n: int) -> bool:
    """Whether B is staged [N][K]: for the 8- and 32-bit types, and for a B narrower than 8 columns (ldmatrix .trans
    would read 8 columns of each k row; from [N][K] each lane addresses one column, wrapped onto the tile)."""
    return instr.b_k_contiguous or n < 8


def mma_staging(m: int, n: int, k: int, instr: MmaInstr = MMA_INSTRS["f16"]) -> tuple[int, int]:
    """Bytes of the staged A ([M][K + pad]) and B ([K][N + pad], or [N][K + pad]) tiles."""
    b_elems = n * (k + instr.pad) if mma_b_k_contiguous(instr, n) else k * (n + instr.pad)
    return _align16(m * (k + instr.pad) * instr.esize), _align16(b_elems * instr.esize)


def conversion_pitch(shape, elem_bytes: int, layouts=()) -> int:
    """Elements from one row of a layout conversion's scratch to the next. A 2-D tile whose rows are a
    multiple of 128 bytes long gets padding per row, so that the rows a warp touches at once start in
    different banks (unpadded, every row starts in bank 0).

    An MMA accumulator side (`layouts` holds the conversion's two layouts) writes or reads 8 rows per warp
    access, 4 lanes per row, each lane one register pair: 16-bit elements are 4 lanes x 4 bytes = 16 bytes a
    row (and stmatrix's 8x8 matrices are 16-byte rows too), so 16 bytes of padding puts row r at banks
    4r..4r+3 and the 8 rows on 32 distinct banks. 32-bit elements are 4 lanes x 8 bytes = 32 bytes a row, moved
    as 8-byte accesses, which the hardware runs as two 16-lane phases of 4 rows each: 16 bytes of padding
    overlaps rows r and r+1 on 4 banks (2 wavefronts a phase), 32 bytes puts the phase's 4 rows on banks
    8r..8r+7, all 32 once. Other 32-bit conversions keep 16 bytes (column-wise accesses spread over 8 banks
    rather than 4). KERNELLAB_MMA32_PAD=16 gives the MMA side 16 bytes again (kept to time the two)."""
    if not shape:
        return 1
    if len(shape) != 2 or shape[0] == 1 or elem_bytes > 16:
        return shape[-1]
    rule = _padded_rows_pitch(shape, elem_bytes, layouts)
    if any(isinstance(lay, Mma) for lay in layouts) or len(layouts) != 2 or \
            os.environ.get("KERNELLAB_CONVERSION_PITCH", "").lower() == "rows":
        return rule
    return _fewest_wavefronts_pitch(tuple(shape), elem_bytes, tuple(layouts), rule)


def _padded_rows_pitch(shape, elem_bytes: int, layouts) -> int:
    """The rule above: rows a multiple of 128 bytes long padded by 16 bytes (32 for a 32-bit MMA side)."""
    if (shape[1] * elem_bytes) % 128:
        return shape[-1]
    pad = 16
    if elem_bytes == 4 and _mma_pad32() and any(isinstance(lay, Mma) for lay in layouts):
        pad = 32
    return shape[-1] + pad // elem_bytes


@functools.lru_cache(maxsize=4096)
def _fewest_wavefronts_pitch(shape: tuple, elem_bytes: int, layouts: tuple, rule: int) -> int:
    """Between blocked layouts (a transpose, a change of vector width), the row pitch whose accesses by both
    sides take the fewest shared-memory wavefronts: the 16-byte rule's pitch unless padding of 0, 4, 8, 16 or 32
    bytes a row, each side moving the widest vectors that pitch allows (`contiguous_run`), takes fewer. The rule
    suits sides that both run along rows; a side whose lanes step down columns hits one bank with it (a
    transposed 64x64 fp16 tile: rows 8 apart are 8 x 144 bytes, 8 lanes on one bank), where 4 bytes of padding
    leaves 2. KERNELLAB_CONVERSION_PITCH=rows keeps the rule everywhere (kept to time the two)."""
    rule = shape[-1] + (16 // elem_bytes if (shape[1] * elem_bytes) % 128 == 0 else 0)

    def cost(pitch):
        """(wavefronts, accesses) of both sides: fewer wavefronts first, then fewer (wider) accesses."""
        costs = [_wavefronts(lay, shape, elem_bytes, pitch) for lay in layouts]
        if None in costs:
            return None
        return sum(costs), sum(len(lay.registers(shape)) // contiguous_run(lay, shape, elem_bytes, pitch)
                               for lay in layouts)

    best = (cost(rule), rule)
    if best[0] is None:  # a side the model does not cover
        return rule
    for pad_bytes in (0, 4, 8, 16, 32):
        pitch = shape[-1] + pad_bytes // elem_bytes
        if pad_bytes % elem_bytes or pitch == rule:
            continue
        c = cost(pitch)
        if c < best[0]:
            best = (c, pitch)
    return best[1]


def access_wavefronts(layout, shape, elem_bytes: int, pitch=None, vec: int = 1, warp: int = 0, base: int = 0):
    """Per access of one warp (`vec` consecutive registers of `layout` at their row-major index in a scratch
    with rows `pitch` elements apart, plus `base` bytes), per phase of the warp (32 lanes for up to 4 bytes a
    lane, 16 for 8, 8 for 16: 128 bytes each): the shared-memory wavefronts it takes, i.e. the most distinct
    4-byte words any of the 32 banks serves (one word read by many lanes is one broadcast)."""
    infos = layout.dims_info(shape)
    regs = layout.registers(shape)
    strides, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        strides[d] = acc
        acc *= (pitch or shape[d]) if d == len(shape) - 1 else shape[d]
    width = elem_bytes * vec
    phase = 32 if width <= 4 else max(1, 128 // width)
    parts = [[((warp // i.warp_div) % i.warps) * i.warp_stride + ((lane // i.lane_div) % i.lanes) * i.lane_stride
              for i in infos] for lane in range(32)]
    out = []
    for off in regs[::vec]:
        addrs = [base + sum(((p + o) % i.size) * st for p, o, i, st in zip(lane, off, infos, strides)) * elem_bytes
                 for lane in parts]
        fronts = []
        for p0 in range(0, 32, phase):
            banks: dict = {}
            for a in addrs[p0:p0 + phase]:
                for w in range(a // 4, (a + width - 1) // 4 + 1):
                    banks.setdefault(w % 32, set()).add(w)
            fronts.append(max(len(ws) for ws in banks.values()))
        out.append(fronts)
    return out


def _wavefronts(layout, shape, elem_bytes: int, pitch: int):
    """All wavefronts warp 0 takes to move its registers of `layout` to or from the scratch in vectors of
    `contiguous_run` registers; None for layouts with copies or of other kinds (only the representative copy
    writes: not the plain pattern modeled here)."""
    from .layouts import Bits

    if not isinstance(layout, (Blocked, Bits)) or any(i.replicated for i in layout.dims_info(shape)):
        return None
    v = contiguous_run(layout, shape, elem_bytes, pitch)
    return sum(sum(f) for f in access_wavefronts(layout, shape, elem_bytes, pitch, v))




def padded_scratch_cost(src, dst, shape: tuple, elem_bytes: int, pitch: int):
    """(wavefronts of warp 0, accesses a thread) of a conversion through the padded row-major scratch, both sides
    moving `contiguous_run` vectors; None where the bank model does not cover a side."""
    fronts = [_wavefronts(lay, shape, elem_bytes, pitch) for lay in (src, dst)]
    if None in fronts:
        return None
    return sum(fronts), sum(len(lay.registers(shape)) // contiguous_run(lay, shape, elem_bytes, pitch)
                            for lay in (src, dst))


def _mma_pad32() -> bool:
    import os

    return os.environ.get("KERNELLAB_MMA32_PAD", "32") != "16"


def conversion_layouts(op) -> tuple:
    """The two layouts of a ttg.convert_layout (what `conversion_pitch` pads for)."""
    return tuple(getattr(v.type, "layout", None) for v in (op.operands[0], op.results[0]))


def contiguous_run(layout, shape, elem_bytes: int, pitch: int) -> int:
    """How many registers a thread can move to or from a conversion's scratch as one vector (up to 16 bytes):
    v consecutive registers holding consecutive elements along the last dim from an index that is a multiple
    of v, for every thread (its first element's index along the last dim is a multiple of v too), with rows
    `pitch` elements apart. 1 where the layout replicates elements or is not blocked/MMA."""
    from .layouts import Bits, Blocked, Mma

    if not isinstance(layout, (Blocked, Mma, Bits)) or not shape:
        return 1
    infos = layout.dims_info(shape)
    if any(i.replicated for i in infos):
        return 1
    last = infos[-1]
    regs = layout.registers(shape)
    v = max(1, 16 // elem_bytes)
    while v > 1:
        bases_aligned = ((last.lanes == 1 or last.lane_stride % v == 0)
                         and (last.warps == 1 or last.warp_stride % v == 0))
        if bases_aligned and pitch % v == 0 and len(regs) % v == 0 and all(
                regs[k][-1] % v == 0 and all(regs[k + i][:-1] == regs[k][:-1] and regs[k + i][-1] == regs[k][-1] + i
                                             for i in range(1, v))
                for k in range(0, len(regs), v)):
            return v
        v //= 2
    return 1
