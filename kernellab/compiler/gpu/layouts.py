"""Distributed layouts: which thread and register of a program holds each element of a tile.

A `Blocked` layout splits each dimension d into
    sizePerThread[d] consecutive elements in one thread's registers,
    threadsPerWarp[d] lanes, and warpsPerCTA[d] warps,
with `order` listing the dimensions from the fastest-varying (contiguous) one. When a tile is larger
than one such "CTA tile" the pattern repeats in more registers; when it is smaller, several threads
hold copies of the same element (replication), and only the first copy is "representative".

A `Slice(dim, parent)` layout is what remains of `parent` after a reduction along `dim`: every thread
keeps the elements of its other dimensions; threads that differed only along `dim` hold copies.

For codegen every layout answers, per dimension of a shape: the thread part of the element index
(a function of lane and warp) and the list of register offsets; element index = (thread part +
register offset) mod size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

WARP_SIZE = 32


class Layout:
    rank: int

    def dims_info(self, shape):
        """Per dimension of `shape`: a DimInfo (thread-part recipe + register offsets)."""
        raise NotImplementedError

    def registers(self, shape) -> list[tuple]:
        """Register enumeration: each register's per-dimension offset, fastest dim innermost."""
        import itertools

        infos = self.dims_info(shape)
        slow_to_fast = list(reversed(self.reg_order()))
        regs = []
        for combo in itertools.product(*[infos[d].offsets for d in slow_to_fast]):
            off = [0] * len(shape)
            for d, o in zip(slow_to_fast, combo):
                off[d] = o
            regs.append(tuple(off))
        return regs

    def reg_order(self):
        raise NotImplementedError


@dataclass(frozen=True)
class DimInfo:
    """How one dimension of a shape is distributed.

    lane_div/lane_mod: lane component = (lane // lane_div) % lane_mod; the same for warps.
    thread part = (warp_component * lanes + lane_component) * spt.
    `sliced` dims (from a Slice) are not part of the shape; they only matter for representativeness.
    """

    size: int
    spt: int
    lanes: int
    lane_div: int
    warps: int
    warp_div: int
    offsets: tuple
    lane_step: int = 0  # element distance between neighbouring lanes (blocked: spt)
    warp_step: int = 0  # element distance between neighbouring warps (blocked: spt * lanes)

    @property
    def lane_stride(self):
        return self.lane_step or self.spt

    @property
    def warp_stride(self):
        return self.warp_step or self.spt * self.lanes

    @property
    def cta_extent(self):
        return self.warp_stride * self.warps

    @property
    def replicated(self):
        return self.cta_extent > self.size or self.spt > self.size


@dataclass(frozen=True)
class Blocked(Layout):
    spt: tuple
    tpw: tuple
    wpc: tuple
    order: tuple

    @property
    def rank(self):
        return len(self.spt)

    @property
    def num_warps(self):
        n = 1
        for w in self.wpc:
            n *= w
        return n

    def reg_order(self):
        return list(self.order)

    def _divs(self, per_dim):
        divs, acc = [0] * self.rank, 1
        for d in self.order:
            divs[d] = acc
            acc *= per_dim[d]
        return divs

    def dims_info(self, shape):
        assert len(shape) == self.rank, (shape, self)
        lane_div, warp_div = self._divs(self.tpw), self._divs(self.wpc)
        out = []
        for d, size in enumerate(shape):
            extent = self.spt[d] * self.tpw[d] * self.wpc[d]
            reps = max(1, size // extent)
            offs = tuple(r * extent + e for r in range(reps) for e in range(self.spt[d]))
            out.append(DimInfo(size, self.spt[d], self.tpw[d], lane_div[d], self.wpc[d], warp_div[d], offs))
        return out

    def __str__(self):
        def f(x):
            return "[" + ", ".join(map(str, x)) + "]"

        return f"#blocked<{f(self.spt)}, {f(self.tpw)}, {f(self.wpc)}, {f(self.order)}>"


@dataclass(frozen=True)
class Slice(Layout):
    dim: int
    parent: Layout

    @property
    def rank(self):
        return self.parent.rank - 1

    @property
    def num_warps(self):
        return self.parent.num_warps

    def parent_shape(self, shape):
        s = list(shape)
        s.insert(self.dim, 1)
        return tuple(s)

    def dims_info(self, shape):
        infos = self.parent.dims_info(self.parent_shape(shape))
        return [i for d, i in enumerate(infos) if d != self.dim]

    def sliced_infos(self, shape):
        """DimInfos of the dims removed by this slice (and by parents' slices)."""
        infos = self.parent.dims_info(self.parent_shape(shape))
        mine = [infos[self.dim]]
        if isinstance(self.parent, Slice):
            mine += self.parent.sliced_infos(self.parent_shape(shape))
        return mine

    def reg_order(self):
        po = self.parent.reg_order()
        return [d if d < self.dim else d - 1 for d in po if d != self.dim]

    def __str__(self):
        return f"#slice<{self.dim}, {self.parent}>"


@dataclass(frozen=True)
class Mma(Layout):
    """The accumulator of mma.sync m16n8k16 (sm_80+) and wgmma, warps tiled `warps` = (along M, along N).

    In an m16n8 tile, lane l holds rows l/4 and l/4 + 8, columns 2*(l%4) and 2*(l%4) + 1 (the
    instruction's fixed fragment). Along M the warps are interleaved: warp w holds rows 16w..16w+15 of
    every 16*wm rows (wgmma's warpgroup instruction gives warp w of it rows 16w..16w+15 of 64, so a tile
    taller than one instruction repeats the pattern); along N a warp holds N/wn consecutive columns.
    """

    warps: tuple

    rank = 2

    @property
    def num_warps(self):
        return self.warps[0] * self.warps[1]

    def reg_order(self):
        return [1, 0]

    def dims_info(self, shape):
        m, n = shape
        wm, wn = self.warps
        tm, tn = max(16, m // wm), max(8, n // wn)
        rows = tuple(i * 16 * wm + h for i in range(max(1, tm // 16)) for h in (0, 8))
        cols = tuple(j * 8 + c for j in range(max(1, tn // 8)) for c in (0, 1))
        return [DimInfo(m, 1, 8, 4, wm, 1, rows, 1, 16), DimInfo(n, 2, 4, 1, wn, wm, cols, 2, tn)]

    def registers(self, shape):
        """Fragment order: per (m-tile, n-tile): (row, col), (row, col+1), (row+8, col), (row+8, col+1);
        m-tile i of a warp starts at row 16*wm*i."""
        m, n = shape
        wm, wn = self.warps
        tm, tn = max(16, m // wm), max(8, n // wn)
        return [(i * 16 * wm + h, j * 8 + c) for i in range(max(1, tm // 16)) for j in range(max(1, tn // 8))
                for h in (0, 8) for c in (0, 1)]

    def __str__(self):
        return f"#mma<[{self.warps[0]}, {self.warps[1]}]>"


@dataclass(frozen=True)
class Bits(Layout):
    """A layout given bit by bit: `dims[d]` lists what selects each bit of dimension d's index, low to high --
    "rK" bit K of the register number, "lJ" bit J of the lane id, "wJ" bit J of the warp id. Every register,
    lane and warp bit selects exactly one index bit (no copies), and the register numbering is the one the
    bits give, so it can keep any other layout's registers in place.

    It is what a reshape, transpose, split or join of an MMA accumulator (or of a blocked tile whose result is
    not blocked) is when every thread keeps its elements (gpu/reshape_layout.py): the bits only move between
    dimensions, so no data moves. Codegen reads it like any layout -- per dimension a lane part, a warp part
    and register offsets -- which requires a dimension's lane (warp) bits to be consecutive ids at consecutive
    positions; `make` checks that."""

    dims: tuple

    @staticmethod
    def make(dims):
        """A Bits layout, or None when the bits are not a permutation or codegen's per-dimension form cannot
        describe them."""
        dims = tuple(tuple(d) for d in dims)
        flat = [b for d in dims for b in d]
        if len(set(flat)) != len(flat):
            return None
        for kind in "rlw":
            ids = sorted(int(b[1:]) for b in flat if b[0] == kind)
            if ids != list(range(len(ids))) or (kind == "l" and len(ids) != 5):
                return None
        for d in dims:
            for kind in "lw":
                pos = [(i, int(b[1:])) for i, b in enumerate(d) if b[0] == kind]
                if any(p1 != p0 + 1 or j1 != j0 + 1 for (p0, j0), (p1, j1) in zip(pos, pos[1:])):
                    return None
        return Bits(dims)

    @property
    def rank(self):
        return len(self.dims)

    @property
    def num_warps(self):
        return 1 << sum(b[0] == "w" for d in self.dims for b in d)

    def reg_order(self):
        low = [min((int(b[1:]) for b in d if b[0] == "r"), default=99) for d in self.dims]
        return sorted(range(self.rank), key=lambda d: (low[d], -d))

    def dims_info(self, shape):
        assert len(shape) == self.rank, (shape, self)
        out = []
        for d, size in enumerate(shape):
            bits = self.dims[d]
            assert size == 1 or size == 1 << len(bits), (shape, self)
            part = {}
            for kind in "lw":
                pos = [(i, int(b[1:])) for i, b in enumerate(bits) if b[0] == kind]
                part[kind] = (1 << pos[0][1], 1 << len(pos), 1 << pos[0][0]) if pos else (1, 1, 0)
            lane_div, lanes, lane_step = part["l"]
            warp_div, warps, warp_step = part["w"]
            reg_pos = [i for i, b in enumerate(bits) if b[0] == "r"]
            offs = sorted(sum(1 << p for k, p in enumerate(reg_pos) if m >> k & 1) for m in range(1 << len(reg_pos)))
            if size == 1:  # a dimension sliced away (Slice's parent shape): its thread part says which copy
                offs = [0]
            full = 1 << len(bits)
            out.append(DimInfo(size, 1, lanes, lane_div, warps, warp_div, tuple(offs), lane_step or full,
                               warp_step or full))
        return out

    def registers(self, shape):
        """Register K holds, along each dimension, the sum of the positions of the register bits set in K. A
        dimension of size 1 whose bits are lane or warp bits only (the tile a broadcast will widen: those threads
        hold copies, as `dims_info` reads it) has every register at 0."""
        assert len(shape) == self.rank and all(
            size == 1 << len(d) or (size == 1 and not any(b[0] == "r" for b in d))
            for size, d in zip(shape, self.dims)), (shape, self)
        where = {}
        for d, bits in enumerate(self.dims):
            for i, b in enumerate(bits):
                if b[0] == "r":
                    where[int(b[1:])] = (d, 1 << i)
        regs = []
        for k in range(1 << len(where)):
            off = [0] * self.rank
            for bit, (d, v) in where.items():
                if k >> bit & 1:
                    off[d] += v
            regs.append(tuple(off))
        return regs

    def __str__(self):
        return "#bits<" + ", ".join("[" + ", ".join(d) + "]" for d in self.dims) + ">"


def sliced_infos(layout, shape):
    return layout.sliced_infos(shape) if isinstance(layout, Slice) else []


def default_blocked(shape, num_warps: int, order=None, spt_fast: int = 1, warps_off=(),
                    warps_fast_first: bool = False) -> Blocked:
    """A blocked layout that spreads lanes, then warps, over `shape` from the fastest dimension. Warps go to the
    slowest dims first, those in `warps_off` last (a dim the tile is reduced along: warps there make the reduction
    cross warps through shared memory); with `warps_fast_first`, to the fastest dims first after the lanes, as
    Triton's blocked layouts place them."""
    rank = len(shape)
    order = tuple(order) if order is not None else tuple(reversed(range(rank)))
    spt = [1] * rank
    fast = order[0]
    spt[fast] = max(1, min(spt_fast, shape[fast]))
    tpw, wpc = [1] * rank, [1] * rank
    lanes_left, warps_left = WARP_SIZE, num_warps
    remaining = [max(1, shape[d] // spt[d]) for d in range(rank)]
    for d in order:
        take = min(lanes_left, remaining[d])
        tpw[d] = take
        lanes_left //= take
        remaining[d] = max(1, remaining[d] // take)
    tpw[order[-1]] *= lanes_left  # leftover lanes replicate along the slowest dim
    # warps go to the slowest dims first (rows of a 2-D tile), but not to the dims in `warps_off` while others can
    # take them
    warp_dims = list(order) if warps_fast_first else \
        [d for d in reversed(order) if d not in warps_off] + [d for d in reversed(order) if d in warps_off]
    for d in warp_dims:
        take = min(warps_left, remaining[d])
        wpc[d] = take
        warps_left //= take
        remaining[d] = max(1, remaining[d] // take)
    wpc[order[0]] *= warps_left
    return Blocked(tuple(spt), tuple(tpw), tuple(wpc), order)


_BLOCKED = re.compile(r"#blocked<\[([0-9, ]*)\], \[([0-9, ]*)\], \[([0-9, ]*)\], \[([0-9, ]*)\]>")


def parse_layout(text: str) -> Layout:
    text = text.strip()
    m = _BLOCKED.fullmatch(text)
    if m:
        vals = [tuple(int(x) for x in g.split(",") if x.strip()) for g in m.groups()]
        return Blocked(*vals)
    m = re.fullmatch(r"#mma<\[([0-9]+), ([0-9]+)\]>", text)
    if m:
        return Mma((int(m.group(1)), int(m.group(2))))
    if text.startswith("#bits<") and text.endswith(">"):
        dims = re.findall(r"\[([^\]]*)\]", text[len("#bits<"):-1])
        lay = Bits.make(tuple(tuple(b.strip() for b in d.split(",") if b.strip()) for d in dims))
        if lay is None:
            raise ValueError(f"not a layout: {text!r}")
        return lay
    if text.startswith("#slice<") and text.endswith(">"):
        inner = text[len("#slice<"):-1]
        dim, _, parent = inner.partition(",")
        return Slice(int(dim), parse_layout(parent))
    raise ValueError(f"cannot parse layout {text!r}")
