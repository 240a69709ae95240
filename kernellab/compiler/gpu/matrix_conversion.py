"""A layout conversion through shared memory in 8x8 matrices: one side moves its registers with ldmatrix (a load,
sm_75+) or stmatrix (a store, sm_90), the other with vector accesses of up to 16 bytes.

ldmatrix/stmatrix m8n8 moves four (x4; or two, one) 8x8 b16 matrices a warp: lane l names row l % 8 of matrix
l // 8 (16 contiguous bytes), and each lane receives (or gives) one b32 word per matrix. Without .trans lane t's
word j is bytes 4(t % 4)..+3 of row t // 4 of matrix j; with .trans (16-bit elements) it is element t // 4 of
rows 2(t % 4) and 2(t % 4) + 1. So the matrix side fixes which elements share a 16-byte row ("chunk"): for its
register group g (2 x count registers, pairs (2j, 2j + 1) one b32 word each; 4 / elem_bytes registers a word
without .trans) the chunk (warp, g, j, row) holds the elements its eight position-lanes hold. Where each chunk's
elements lie in one thread of the other side, that side moves a whole 16-byte chunk with one vector access
(st.shared.v4 / ld.shared.v4), the rest two or four-byte pieces of it.

A transposed 64x64 fp16 tile (#blocked<[8, 1], [8, 4], [1, 4], [0, 1]> to #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>)
is 4 st.shared.v4 and 4 ldmatrix.x4.trans a thread (Triton 3.6's form), against 32 two-byte stores and 16 four-byte
loads through a padded row-major scratch (`scratch.conversion_pitch`).

Where the chunks go: the matrix side's chunk (warp, g, j, row) takes the 16-byte slot ((warp * groups + g) * count
+ j) * 8 + row, so each matrix is one 128-byte line (one wavefront), and its lanes' addresses are the warp's and
group's base plus 16 x lane. Where the vector side's lanes of one phase meet in a bank group, the slot's low three
bits are XORed with a linear function of its higher bits (a swizzle; each matrix stays one line): the one, of those
the search tries, with the fewest wavefronts. Every address is then a GF(2)-linear function of the thread id XOR a
constant per access (`thread_basis`), which codegen turns into shifts and masks once and an immediate or one XOR per
access.

`plan(src, dst, shape, elem_bytes, num_warps, arch)` returns the cheapest plan (fewest wavefronts, then fewest
instructions, ldmatrix on a tie) or None where the layouts do not fit: both blocked (or linear `Bits`) 2-D layouts of
the program's warps holding each element once, power-of-two sides, 1-, 2- or 4-byte elements, the matrix side's
registers a multiple of one word x count and at most MATRIX_BYTES of the tile a thread. `chosen` is what codegen
(codegen/lower_shape.py) and the lab's shared-memory view take: with KERNELLAB_CONVERSION_LDMATRIX=on, the plan where
it takes fewer wavefronts than the padded scratch (`scratch.conversion_pitch`); `stmatrix` prefers stmatrix plans
(to time the two forms); default off, not timed on a GPU yet.
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass

import numpy as np

WARP = 32
# A thread's bytes of the tile beyond which no side moves by ldmatrix / stmatrix: ptxas keeps the .aligned matrix
# instructions in order with the global accesses around them (where it interleaves plain ld.shared with the stores
# that consume them), so more of the tile is live at once. Measured (sm_90a, transposes): a 64x128 fp32 tile in one
# program of 4 warps (256 bytes a thread) took 91 registers by ldmatrix against 32; 128x128 fp16 at 4 warps (256
# bytes) 98-108 by stmatrix against 40-56, at 8 warps (128 bytes) 60-62 against 38-40; the idioms' tiles (64 bytes:
# 32 fp16) 32-35 against 30-32
MATRIX_BYTES = 64


def ldmatrix_on() -> bool:
    """KERNELLAB_CONVERSION_LDMATRIX=on (or `stmatrix`: the same, preferring stmatrix plans where one exists)."""
    return os.environ.get("KERNELLAB_CONVERSION_LDMATRIX", "").lower() in ("on", "1", "true", "stmatrix")


def preferred_side() -> str:
    return "stmatrix" if os.environ.get("KERNELLAB_CONVERSION_LDMATRIX", "").lower() == "stmatrix" else ""


@dataclass(frozen=True)
class Access:
    """One vector access (or one ldmatrix/stmatrix) of a thread: the registers it moves (in memory order; for a
    matrix access, count words of registers each) and its byte address per thread id (a tuple over all threads of
    the program)."""

    regs: tuple
    addrs: tuple


@dataclass(frozen=True)
class MatrixPlan:
    side: str           # "ldmatrix": the source stores vectors, the result loads matrices; "stmatrix": the reverse
    trans: bool
    count: int          # matrices an instruction (1, 2, 4)
    word_regs: int      # registers of one b32 word of the matrix side (2 with .trans)
    vec: int            # elements of one vector access of the other side
    matrix: tuple       # Access per ldmatrix/stmatrix
    vector: tuple       # Access per vector store/load
    bytes: int          # scratch bytes used (the tile, unpadded)
    wavefronts: tuple   # (source side, result side) of warp 0
    elem_bytes: int

    @property
    def instructions(self) -> int:
        return len(self.matrix) + len(self.vector)


def _thread_coords(layout, shape, num_warps):
    """coords[tid][r] = (row, col) of register r of thread tid; None where the layout does not fit."""
    from .layouts import Bits, Blocked

    if not isinstance(layout, (Blocked, Bits)) or len(shape) != 2 or layout.num_warps != num_warps:
        return None
    infos = layout.dims_info(shape)
    if any(i.replicated for i in infos):
        return None
    regs = layout.registers(shape)
    if len(regs) * WARP * num_warps != shape[0] * shape[1]:
        return None
    out = []
    for tid in range(WARP * num_warps):
        w, ln = divmod(tid, WARP)
        part = [((ln // i.lane_div) % i.lanes) * i.lane_stride + ((w // i.warp_div) % i.warps) * i.warp_stride
                for i in infos]
        out.append([tuple((p + o) % i.size for p, o, i in zip(part, off, infos)) for off in regs])
    seen = {c for th in out for c in th}
    return out if len(seen) == shape[0] * shape[1] else None


def _matrix_places(coords, trans: bool, count: int, word_regs: int):
    """{element: (slot, position)} of the matrix side, positions in elements within the 16-byte chunk, and the
    per-thread (slot of the row this lane addresses) of each instruction."""
    nregs = len(coords[0])
    per_instr = count * word_regs
    groups = nregs // per_instr
    places, lane_slots = {}, []
    for tid, regs in enumerate(coords):
        w, t = divmod(tid, WARP)
        for r, el in enumerate(regs):
            g, rem = divmod(r, per_instr)
            j, h = divmod(rem, word_regs)
            base = ((w * groups + g) * count + j) * 8
            if trans:
                places[el] = (base + 2 * (t % 4) + h, t // 4)
            else:
                places[el] = (base + t // 4, (t % 4) * word_regs + h)
    for g in range(groups):
        lane_slots.append([((tid // WARP * groups + g) * count + (tid % WARP) % (8 * count) // 8) * 8 + tid % 8
                           for tid in range(len(coords))])
    return places, lane_slots


def _vector_accesses(coords, places, chunk_elems: int):
    """The widest vectors (elements) the other side's registers group into, uniformly over threads: lists of
    register indices whose elements fill positions p0..p0 + v - 1 (p0 a multiple of v) of one chunk in every
    thread. (v, [regs, ...]) or None."""
    n = len(coords[0])
    v = chunk_elems
    while v >= 1:
        first = sorted(range(n), key=lambda r: places[coords[0][r]])
        groups = [tuple(first[i:i + v]) for i in range(0, n, v)]
        ok = all(len(g) == v for g in groups)
        for regs in coords if ok else ():
            for g in groups:
                s0, p0 = places[regs[g[0]]]
                if p0 % v or any(places[regs[r]] != (s0, p0 + i) for i, r in enumerate(g)):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return v, groups
        v //= 2
    return None


def phase_wavefronts(addrs, width: int) -> int:
    """Wavefronts of one warp-wide access of `width` bytes a lane at byte addresses `addrs` (32 lanes): phases of
    128 bytes (32 lanes of up to 4 bytes, 16 of 8, 8 of 16), each as many wavefronts as the most distinct 4-byte
    words one bank serves."""
    phase = 32 if width <= 4 else 128 // width
    total = 0
    for p0 in range(0, len(addrs), phase):
        banks: dict = {}
        for a in addrs[p0:p0 + phase]:
            for w in range(a // 4, (a + width - 1) // 4 + 1):
                banks.setdefault(w % 32, set()).add(w)
        total += max(len(ws) for ws in banks.values())
    return total


def _swizzles(vec_slots, nslots: int):
    """Candidate swizzles (tuples of (high bit, 3-bit mask)): none first, then XORs of the slot's row bits by the
    high bits that vary among the lanes of one phase of the vector side."""
    yield ()
    bits = nslots.bit_length() - 1
    varying = set()
    for slots in vec_slots:
        for a in slots[1:]:
            d = a ^ slots[0]
            varying |= {b for b in range(3, bits) if d >> b & 1}
    varying = sorted(varying)[:3]
    for masks in itertools.product(range(8), repeat=len(varying)):
        if any(masks):
            yield tuple((b, m) for b, m in zip(varying, masks) if m)


def _swizzle(slot: int, swz) -> int:
    x = slot
    for b, m in swz:
        if slot >> b & 1:
            x ^= m
    return x


def _swizzle_np(slots, swz):
    x = slots.copy()
    for b, m in swz:
        x ^= ((slots >> b) & 1) * m
    return x


def _wavefronts_np(addrs, width: int) -> int:
    """`phase_wavefronts` summed over the rows of `addrs` (accesses x lanes), all at once."""
    phase = 32 if width <= 4 else 128 // width
    unit = max(4, width)  # aligned accesses: a lane's words are one group of width/4 banks
    a = addrs.reshape(-1, phase)
    ident = a // unit
    key = ident % (128 // unit)
    comb = np.sort(key * (1 << 24) + ident, axis=1)
    distinct = np.ones_like(comb, dtype=np.int64)
    distinct[:, 1:] = comb[:, 1:] != comb[:, :-1]
    counts = np.zeros((a.shape[0], 128 // unit), dtype=np.int64)
    np.add.at(counts, (np.arange(a.shape[0])[:, None].repeat(phase, 1), comb >> 24), distinct)
    return int(counts.max(axis=1).sum())


def _build(mside, vside, shape, elem_bytes, num_warps, trans, side):
    word_regs = 2 if trans else 4 // elem_bytes
    nregs = len(mside[0])
    count = next((c for c in (4, 2, 1) if nregs % (c * word_regs) == 0), None)
    if count is None:
        return None
    places, lane_slots = _matrix_places(mside, trans, count, word_regs)
    chunk = 16 // elem_bytes
    va = _vector_accesses(vside, places, chunk)
    if va is None:
        return None
    vec, groups = va
    width = vec * elem_bytes
    nslots = len(places) // chunk

    def vaddrs(g, swz, threads):
        out = []
        for regs in threads:
            s, p = places[regs[g[0]]]
            out.append(_swizzle(s, swz) * 16 + p * elem_bytes)
        return out

    phase = 32 if width <= 4 else 128 // width
    conflict_free = len(groups) * max(1, WARP // phase)
    # warp 0's slots and byte positions per access (rows) and lane (columns), and the matrix side's row slots
    vs = np.array([[places[regs[g[0]]][0] for regs in vside[:WARP]] for g in groups])
    vp = np.array([[places[regs[g[0]]][1] * elem_bytes for regs in vside[:WARP]] for g in groups])
    ms = np.array([ls[:8 * count] for ls in lane_slots])
    probe = [list(row[p0:p0 + phase]) for row in vs for p0 in range(0, WARP, phase)]
    best = None
    for swz in _swizzles(probe, nslots):
        vf = _wavefronts_np(_swizzle_np(vs, swz) * 16 + vp, width)
        if best is not None and vf >= best[2]:
            continue
        # each of the count matrices is one phase of its 8 row addresses (lanes past 8 x count are not read)
        mf = _wavefronts_np(_swizzle_np(ms, swz) * 16, 16)
        if best is None or (vf + mf, vf) < best[0]:
            best = ((vf + mf, vf), swz, vf, mf)
        if vf == conflict_free:
            break
    _, swz, vf, mf = best
    matrix = tuple(Access(tuple(range(g * count * word_regs, (g + 1) * count * word_regs)),
                          tuple(_swizzle(s, swz) * 16 for s in ls)) for g, ls in enumerate(lane_slots))
    vector = tuple(Access(g, tuple(vaddrs(g, swz, vside))) for g in groups)
    if any(thread_basis(a.addrs) is None for a in matrix + vector):
        return None  # an address codegen could not compute as a XOR of the thread id's bits
    fronts = (vf, mf) if side == "ldmatrix" else (mf, vf)
    return MatrixPlan(side, trans, count, word_regs, vec, matrix, vector, len(places) * elem_bytes, fronts,
                      elem_bytes)


@functools.lru_cache(maxsize=1024)
def plan(src, dst, shape: tuple, elem_bytes: int, num_warps: int, arch: int = 90, prefer: str = "",
         max_bytes: int = MATRIX_BYTES):
    """The cheapest matrix plan for converting `src` to `dst` (layouts) over a tile of `shape`, or None; with
    `prefer` ("stmatrix", "ldmatrix"), a plan of that side first where there is one; none whose matrix side holds
    more than `max_bytes` of the tile a thread."""
    if len(shape) != 2 or elem_bytes not in (1, 2, 4) or any(s & (s - 1) for s in shape):
        return None
    if arch < 75 or shape[0] * shape[1] * elem_bytes > max_bytes * WARP * num_warps:
        return None  # (a tile held once is numel / threads elements a thread on either side)
    cs, cd = _thread_coords(src, shape, num_warps), _thread_coords(dst, shape, num_warps)
    if cs is None or cd is None:
        return None
    cands = []
    for side, (mside, vside) in (("ldmatrix", (cd, cs)), ("stmatrix", (cs, cd))):
        if side == "stmatrix" and arch < 90:
            continue
        if len(mside[0]) * elem_bytes > max_bytes:
            continue
        for trans in ((True, False) if elem_bytes == 2 else (False,)):
            p = _build(mside, vside, shape, elem_bytes, num_warps, trans, side)
            if p is not None:
                cands.append(p)
    if not cands:
        return None
    return min(cands, key=lambda p: (bool(prefer) and p.side != prefer, sum(p.wavefronts), p.instructions,
                                     p.side != "ldmatrix"))


def thread_basis(addrs):
    """(constant, [basis per thread-id bit]) with addrs[tid] == constant ^ XOR of basis[b] over tid's set bits,
    or None where the table is not GF(2)-linear in the thread id."""
    n = len(addrs)
    bits = n.bit_length() - 1
    c = addrs[0]
    basis = [addrs[1 << b] ^ c for b in range(bits)]
    for tid in range(n):
        x = c
        for b in range(bits):
            if tid >> b & 1:
                x ^= basis[b]
        if x != addrs[tid]:
            return None
    return c, basis


def address_terms(basis):
    """How codegen computes the XOR over the thread id's set bits b of basis[b]: terms (kind, from the warp, bit,
    argument, shift) and whether they are disjoint (OR, else XOR). ("run", w, bit, mask, shift): (src & mask) shifted
    left by `shift` (right where negative), for bits bit.. of the lane (w False: thread-id bits 0-4) or the warp that
    land on consecutive address bits; ("mul", w, bit, value, 0): ((src >> bit) & 1) * value, for a bit that lands on
    several address bits (a swizzle)."""
    terms, k = [], 0
    while k < len(basis):
        v = basis[k]
        if not v:
            k += 1
            continue
        warp, bit = (k >= 5), (k - 5 if k >= 5 else k)
        if v & (v - 1):
            terms.append(("mul", warp, bit, v, 0))
            k += 1
            continue
        n = 1
        while k + n < len(basis) and (k + n >= 5) == warp and basis[k + n] == v << n:
            n += 1
        terms.append(("run", warp, bit, ((1 << n) - 1) << bit, v.bit_length() - 1 - bit))
        k += n
    disjoint = all(not (u & w) for i, u in enumerate(basis) for w in basis[i + 1:])
    return terms, disjoint


def eval_terms(terms, disjoint, tid: int) -> int:
    """`address_terms`' value for one thread (what the emitted code computes)."""
    out = 0
    for kind, warp, bit, arg, shift in terms:
        src = tid >> 5 if warp else tid & 31
        x = ((src >> bit) & 1) * arg if kind == "mul" else (src & arg) << shift if shift >= 0 else (src & arg) >> -shift
        out = out | x if disjoint else out ^ x
    return out


def split_constant(c: int, basis):
    """An access's constant as (the bits the thread part may set: XORed into it, the rest: an immediate added)."""
    union = 0
    for v in basis:
        union |= v
    return c & union, c & ~union


def chosen(src, dst, shape, elem_bytes: int, num_warps: int, arch: int, pitch: int):
    """The plan codegen lowers a conversion with: with KERNELLAB_CONVERSION_LDMATRIX=on (or `stmatrix`), `plan`'s
    where it takes fewer shared-memory wavefronts than the padded row-major scratch of row pitch `pitch` (at as
    many, a non-.trans ldmatrix only saves instructions: 32-bit transposes grew registers and SASS); else None.
    The lab's shared-memory view asks the same."""
    from .scratch import padded_scratch_cost

    if not ldmatrix_on() or len(shape) != 2:
        return None
    p = plan(src, dst, tuple(shape), elem_bytes, num_warps, arch, preferred_side())
    if p is None:
        return None
    old = padded_scratch_cost(src, dst, tuple(shape), elem_bytes, pitch)
    if old is not None and sum(p.wavefronts) >= old[0]:
        return None
    return p


def side_banks(p: MatrixPlan, side: str, num_warps: int) -> dict:
    """Bank conflicts of one side ("write": the source's accesses, "read": the result's) of a plan, in the lab's
    form (`viz.data.bank_conflicts`): {ways: the worst phase's wavefronts, avg_ways: per access, instructions: a
    thread's, form: what moves}. A matrix instruction is one phase per matrix (its 8 row addresses)."""
    matrix = (side == "read") == (p.side == "ldmatrix")
    accs = p.matrix if matrix else p.vector
    width = 16 if matrix else p.vec * p.elem_bytes
    phase = 8 if matrix else (32 if width <= 4 else 128 // width)
    lanes = 8 * p.count if matrix else WARP
    worst, total, n = 1, 0, 0
    for acc in accs:
        for w in range(num_warps):
            addrs = acc.addrs[w * WARP:w * WARP + lanes]
            fronts = [phase_wavefronts(addrs[p0:p0 + phase], width) for p0 in range(0, lanes, phase)]
            worst = max(worst, max(fronts))
            total += max(fronts)
            n += 1
    if matrix:
        op = "ldmatrix" if p.side == "ldmatrix" else "stmatrix"
        form = f"{op}.x{p.count}{'.trans' if p.trans else ''}"
    else:
        form = f"{width} B {'stores' if side == 'write' else 'loads'}"
    return {"ways": worst, "avg_ways": total / max(n, 1), "instructions": len(accs), "form": form}
