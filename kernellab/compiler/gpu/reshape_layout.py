"""Reshapes that move no data: a result layout in which every thread keeps the elements it already holds.

`tt.reshape` keeps the elements in row-major order and gives them another shape. When the result's layout
gives each thread exactly the elements the source's layout gave it, the reshape only renames registers (like
`tt.expand_dims` and `tt.trans`); otherwise it is a round trip through shared memory with a barrier.

- `register_map(src, src_shape, dst, dst_shape)` is the ground truth: it enumerates which element (row-major
  index) every thread holds in every register of both layouts and returns, per register of `dst`, a register
  of `src` holding the same element in every thread -- or None. It answers for any pair of layouts of the same
  number of elements, so a `ttg.convert_layout` between two layouts that hold the same elements per thread is
  free as well.
- `reshape_layout(layout, src_shape, dst_shape)` proposes such a layout for the result, or None:
  1. inserting or removing size-1 dimensions keeps the layout's structure: a removed unit dimension is
     dropped from a blocked layout that puts nothing along it, and sliced away otherwise; an inserted one
     brings a slice's parent back (what `expand_dims` does after a reduction) or is added with nothing
     along it;
  2. otherwise, for blocked (and sliced blocked) layouts over power-of-2 sizes, each element index is
     written as bits, low to high, each saying what chooses it -- a register, bit j of the lane id or bit j
     of the warp id -- and the bits of the flattened index are cut into the new dimensions. A dimension whose
     bits read `registers, lanes, warps, registers` with consecutive lane and warp bits is a blocked
     dimension; the lane and warp bits that select no element (copies) go on top of a dimension that can take
     them. Splitting a dimension and merging dimensions both reduce to this.
  3. otherwise any layout that holds every element once, with each register, lane and warp bit selecting one
     bit of the element index (an MMA accumulator, a blocked tile), is read as such bits (`as_bits`) and the
     bits are cut into the new dimensions: a `Bits` layout with the same register numbering.
  Every proposal is checked with `register_map` before it is returned.

Transposes, splits and joins move bits the same way: `permuted_layout`, `split_layout` and `join_layout`
propose the result's layout, and `split_map` / `join_map` say which register of the source each result
register takes (codegen renames; no shared memory). This is what makes tutorial 09's subtiled epilogue
`split(permute(reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))` on a wgmma accumulator free: the column bit the
split takes is a register bit of the MMA fragment.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from .layouts import WARP_SIZE, Bits, Blocked, Layout, Slice


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def held_elements(layout: Layout, shape) -> np.ndarray:
    """[threads, registers]: the row-major index of the element each thread holds in each register, by the
    index formula codegen uses (thread part + register offset, modulo the size on replicated dimensions)."""
    shape = tuple(shape)
    infos = layout.dims_info(shape)
    regs = np.array(layout.registers(shape), dtype=np.int64).reshape(-1, len(shape))
    t = np.arange(WARP_SIZE * layout.num_warps, dtype=np.int64)
    lane, warp = t % WARP_SIZE, t // WARP_SIZE
    lin = np.zeros((len(t), len(regs)), dtype=np.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        info = infos[d]
        part = ((warp // info.warp_div) % info.warps) * info.warp_stride + \
            ((lane // info.lane_div) % info.lanes) * info.lane_stride
        lin += ((part[:, None] + regs[None, :, d]) % info.size) * stride
        stride *= shape[d]
    return lin


@functools.lru_cache(maxsize=4096)
def _register_map(src: Layout, src_shape: tuple, dst: Layout, dst_shape: tuple):
    if src.num_warps != dst.num_warps or _numel(src_shape) != _numel(dst_shape) or not src_shape or not dst_shape:
        return None
    a, b = held_elements(src, src_shape), held_elements(dst, dst_shape)
    column = {}
    for j in range(a.shape[1]):
        column.setdefault(a[:, j].tobytes(), j)
    out = []
    for k in range(b.shape[1]):
        j = column.get(b[:, k].tobytes())
        if j is None:
            return None
        out.append(j)
    return tuple(out)


def register_map(src: Layout, src_shape, dst: Layout, dst_shape):
    """Per register of `dst` over `dst_shape`, the register of `src` over `src_shape` that holds the same
    element in every thread; None when some thread would need an element it does not hold (or the layouts
    span different numbers of warps)."""
    if src is None or dst is None:
        return None
    return _register_map(src, tuple(src_shape), dst, tuple(dst_shape))


def reshape_layout(layout: Layout, src_shape, dst_shape):
    """A layout for `reshape(x: src_shape in layout) -> dst_shape` in which every thread keeps its elements,
    or None when the structural rules and the bit regrouping find none (the reshape then goes through shared
    memory)."""
    src_shape, dst_shape = tuple(src_shape), tuple(dst_shape)
    if layout is None or not src_shape or not dst_shape or _numel(src_shape) != _numel(dst_shape):
        return None
    if src_shape == dst_shape:
        return layout
    for propose in (_unit_dims, _regroup, _bits_regroup):
        cand = propose(layout, src_shape, dst_shape)
        if cand is not None and register_map(layout, src_shape, cand, dst_shape) is not None:
            return cand
    return None


# --------------------------------------------------------------------------------- 1. size-1 dimensions
def unit_dim_plan(src_shape, dst_shape):
    """(src dims removed, dst dims inserted), in increasing order, when the shapes differ only by size-1
    dimensions; else None."""
    i = j = 0
    removed, inserted = [], []
    while i < len(src_shape) or j < len(dst_shape):
        if i < len(src_shape) and j < len(dst_shape) and src_shape[i] == dst_shape[j]:
            i, j = i + 1, j + 1
        elif i < len(src_shape) and src_shape[i] == 1:
            removed.append(i)
            i += 1
        elif j < len(dst_shape) and dst_shape[j] == 1:
            inserted.append(j)
            j += 1
        else:
            return None
    return removed, inserted


def _drop_unit(layout: Layout, d: int) -> Layout:
    """`layout` without its size-1 dimension d."""
    if isinstance(layout, Blocked) and layout.spt[d] == layout.tpw[d] == layout.wpc[d] == 1:
        def cut(xs):
            return tuple(x for k, x in enumerate(xs) if k != d)

        return Blocked(cut(layout.spt), cut(layout.tpw), cut(layout.wpc),
                       tuple(o - (o > d) for o in layout.order if o != d))
    return Slice(d, layout)


def _insert_unit(layout: Layout, p: int):
    """`layout` with a size-1 dimension inserted at p, or None."""
    if isinstance(layout, Slice):
        if layout.dim == p:  # what expand_dims does to a reduction's result
            return layout.parent
        inner = _insert_unit(layout.parent, p if p < layout.dim else p + 1)
        return None if inner is None else Slice(layout.dim + (p < layout.dim), inner)
    if isinstance(layout, Blocked):
        def put(xs):
            return xs[:p] + (1,) + xs[p:]

        return Blocked(put(layout.spt), put(layout.tpw), put(layout.wpc),
                       tuple(o + (o >= p) for o in layout.order) + (p,))
    return None


def _unit_dims(layout, src_shape, dst_shape):
    plan = unit_dim_plan(src_shape, dst_shape)
    if plan is None:
        return None
    removed, inserted = plan
    for d in reversed(removed):
        layout = _drop_unit(layout, d)
    for p in inserted:
        layout = _insert_unit(layout, p)
        if layout is None:
            return None
    return layout


# --------------------------------------------------------------------------------- 2. regrouping index bits
def _log2(n):
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def _index_bits(layout, shape):
    """(per dimension the sources of its index bits, low to high: "r" a register, ("l", j) lane-id bit j,
    ("w", j) warp-id bit j; the set of lane/warp bits that select copies), or None."""
    if isinstance(layout, Slice):
        inner = _index_bits(layout.parent, layout.parent_shape(shape))
        if inner is None:
            return None
        dims, spare = inner
        return dims[:layout.dim] + dims[layout.dim + 1:], spare  # the sliced dim has size 1: no bits
    if not isinstance(layout, Blocked):
        return None
    lane_div, warp_div = layout._divs(layout.tpw), layout._divs(layout.wpc)
    dims, spare = [], set()
    for d, n in enumerate(shape):
        logs = [_log2(x) for x in (n, layout.spt[d], layout.tpw[d], layout.wpc[d], lane_div[d], warp_div[d])]
        if None in logs:
            return None
        nb, s, t, w, l0, w0 = logs
        seq = ["r"] * s + [("l", l0 + i) for i in range(t)] + [("w", w0 + i) for i in range(w)]
        seq += ["r"] * max(0, nb - len(seq))  # repetitions: more registers above the CTA tile
        dims.append(seq[:nb])
        spare.update(b for b in seq[nb:] if b != "r")  # beyond the size: copies (registers: duplicates)
    return dims, spare


def _consecutive(ids) -> bool:
    return all(b == a + 1 for a, b in zip(ids, ids[1:]))


def _parse_dim(seq):
    """A dimension's bits as (spt bits, lane ids, warp ids, repetition bits) if they read
    registers, lanes, warps, registers with consecutive ids; else None."""
    i = 0
    while i < len(seq) and seq[i] == "r":
        i += 1
    low = i
    groups = []
    for kind in ("l", "w"):
        ids = []
        while i < len(seq) and seq[i] != "r" and seq[i][0] == kind:
            ids.append(seq[i][1])
            i += 1
        if not _consecutive(ids):
            return None
        groups.append(ids)
    if any(b != "r" for b in seq[i:]):
        return None
    return [low, groups[0], groups[1], len(seq) - i]


def _runs(ids):
    out = []
    for x in sorted(ids):
        if out and out[-1][-1] == x - 1:
            out[-1].append(x)
        else:
            out.append([x])
    return out


def _regroup(layout, src_shape, dst_shape):
    got = _index_bits(layout, src_shape)
    if got is None or any(_log2(n) is None for n in dst_shape):
        return None
    dims, spare = got
    flat = [b for seq in reversed(dims) for b in seq]  # row-major: the last dimension holds the lowest bits
    cut, pos = [None] * len(dst_shape), 0
    for d in reversed(range(len(dst_shape))):
        nb = _log2(dst_shape[d])
        cut[d] = flat[pos:pos + nb]
        pos += nb
    parts = [_parse_dim(seq) for seq in cut]
    if any(p is None for p in parts):
        return None
    lane_runs = _runs(j for k, j in spare if k == "l")
    warp_runs = _runs(j for k, j in spare if k == "w")

    def takers(run, kind):
        """Dimensions that can take a run of copy-selecting bits on top (nothing above their lanes/warps)."""
        out = []
        for d, (_, lanes, warps, high) in enumerate(parts):
            if high:
                continue
            ids = lanes if kind == "l" else warps
            if kind == "l" and warps:
                continue
            if not ids or ids[-1] + 1 == run[0]:
                out.append(d)
        return out

    choices = [takers(r, "l") for r in lane_runs] + [takers(r, "w") for r in warp_runs]
    for pick in itertools.islice(itertools.product(*choices), 64):
        cand = _build(parts, lane_runs + warp_runs, ["l"] * len(lane_runs) + ["w"] * len(warp_runs), pick,
                      len(dst_shape))
        if cand is not None:
            return cand
    return None


def _build(parts, runs, kinds, pick, rank):
    lanes = [list(p[1]) for p in parts]
    warps = [list(p[2]) for p in parts]
    for run, kind, d in zip(runs, kinds, pick):
        ids = lanes[d] if kind == "l" else warps[d]
        if ids and ids[-1] + 1 != run[0]:
            return None
        ids.extend(run)
    if not all(_consecutive(ids) for ids in lanes + warps):
        return None
    # An order in which every dimension's lanes (warps) start where the earlier dimensions' lanes (warps) end:
    # the dims with lanes sorted by their first lane bit, those with warps by their first warp bit, merged.
    after = {d: set() for d in range(rank)}
    for ids in (lanes, warps):
        chain = sorted((v[0], d) for d, v in enumerate(ids) if v)
        for (_, a), (_, b) in zip(chain, chain[1:]):
            after[b].add(a)
    order, left = [], set(range(rank))
    while left:
        ready = [d for d in left if not (after[d] & left)]
        if not ready:
            return None
        d = max(ready)  # among the free choices, the dimension holding the lowest bits first
        order.append(d)
        left.remove(d)
    return Blocked(tuple(1 << p[0] for p in parts), tuple(1 << len(v) for v in lanes),
                   tuple(1 << len(v) for v in warps), tuple(order))


# --------------------------------------------------------------------------------- 3. any layout as bits
def _flat_owner(shape):
    """Per bit of the row-major flat index, low to high: (dimension, bit position in it)."""
    out = []
    for d in reversed(range(len(shape))):
        out.extend((d, i) for i in range(_log2(shape[d])))
    return out


@functools.lru_cache(maxsize=1024)
def _as_bits(layout: Layout, shape: tuple):
    if any(_log2(n) is None for n in shape) or _log2(layout.num_warps) is None:
        return None
    held = held_elements(layout, shape)
    threads, regs = held.shape
    if _log2(regs) is None or threads * regs != _numel(shape) or len(np.unique(held)) != held.size or held[0, 0]:
        return None
    owner = _flat_owner(shape)
    dims = [[None] * _log2(n) for n in shape]
    probes = [(f"r{k}", held[0, 1 << k]) for k in range(_log2(regs))] + \
        [(f"l{j}", held[1 << j, 0]) for j in range(5)] + \
        [(f"w{j}", held[WARP_SIZE << j, 0]) for j in range(_log2(layout.num_warps))]
    for name, v in probes:
        p = _log2(int(v))
        if p is None:
            return None
        d, i = owner[p]
        dims[d][i] = name
    cand = Bits.make(dims)
    if cand is None or not np.array_equal(held_elements(cand, shape), held):
        return None
    return cand


def as_bits(layout: Layout, shape):
    """`layout` over `shape` as a `Bits` layout with the same register numbering, or None when it holds copies or
    its elements are not a bit permutation of (register, lane, warp)."""
    if isinstance(layout, Bits):
        return layout
    if layout is None or not shape:
        return None
    return _as_bits(layout, tuple(shape))


def _bits_regroup(layout, src_shape, dst_shape):
    got = as_bits(layout, src_shape)
    if got is None or any(_log2(n) is None for n in dst_shape):
        return None
    flat = [b for bits in reversed(got.dims) for b in bits]
    dims, pos = [None] * len(dst_shape), 0
    for d in reversed(range(len(dst_shape))):
        nb = _log2(dst_shape[d])
        dims[d] = flat[pos:pos + nb]
        pos += nb
    return Bits.make(dims)


def permuted_layout(layout: Layout, shape, order):
    """The layout of `trans(x, order)` in which every thread keeps its registers, for a layout that is not
    blocked (blocked ones permute their own fields), or None."""
    got = as_bits(layout, shape)
    return None if got is None else Bits.make([got.dims[o] for o in order])


def split_layout(layout: Layout, shape):
    """The layout of both halves of `split(x)` (x's last dimension of size 2) in which each thread keeps its
    elements: where that dimension is a register bit, the bit is dropped. None otherwise."""
    got = as_bits(layout, shape)
    if got is None or len(got.dims[-1]) != 1 or got.dims[-1][0][0] != "r" or len(shape) < 2:
        return None
    k = int(got.dims[-1][0][1:])

    def renumber(b):
        return b if b[0] != "r" or int(b[1:]) < k else f"r{int(b[1:]) - 1}"

    return Bits.make([[renumber(b) for b in bits] for bits in got.dims[:-1]])


def join_layout(layout: Layout, shape):
    """The layout of `join(a, b)` (both in `layout` over `shape`) in which each thread keeps its elements: a new
    last dimension selected by a new, highest register bit. None where `layout` is not a bit layout."""
    got = as_bits(layout, shape)
    if got is None:
        return None
    nregs = sum(b[0] == "r" for bits in got.dims for b in bits)
    return Bits.make(list(got.dims) + [[f"r{nregs}"]])


def _column_index(held):
    index = {}
    for j in range(held.shape[1]):
        index.setdefault(held[:, j].tobytes(), j)
    return index


@functools.lru_cache(maxsize=1024)
def _split_map(src, src_shape, res, res_shape, k):
    if src.num_warps != res.num_warps:
        return None
    index = _column_index(held_elements(src, src_shape))
    out = []
    for col in held_elements(res, res_shape).T:
        j = index.get((col * 2 + k).tobytes())
        if j is None:
            return None
        out.append(j)
    return tuple(out)


def split_map(src: Layout, src_shape, res: Layout, res_shape, k: int):
    """Per register of half k of `split(x)`, the register of x holding the same element in every thread, or
    None when some thread does not hold it."""
    if src is None or res is None:
        return None
    return _split_map(src, tuple(src_shape), res, tuple(res_shape), k)


@functools.lru_cache(maxsize=1024)
def _join_map(a, a_shape, res, res_shape):
    if a.num_warps != res.num_warps:
        return None
    index = _column_index(held_elements(a, a_shape))
    out = []
    for col in held_elements(res, res_shape).T:
        side = col % 2
        if not (side == side[0]).all():
            return None
        j = index.get((col // 2).tobytes())
        if j is None:
            return None
        out.append((int(side[0]), j))
    return tuple(out)


def join_map(a: Layout, a_shape, res: Layout, res_shape):
    """Per register of `join(a, b)` (a and b in one layout): (0 for a or 1 for b, its register) holding the same
    element in every thread, or None."""
    if a is None or res is None:
        return None
    return _join_map(a, tuple(a_shape), res, tuple(res_shape))
