"""Axis analysis: for every integer or pointer value, per dimension,

- contiguity: length of runs of consecutive values (x, x+1, x+2, ...) along the dimension,
- divisibility: a power of two dividing the first value of each run (bytes, for pointers),
- constancy: length of runs of equal values.

Fed by argument specialization (`tt.divisibility`) and `tl.multiple_of` / `tl.max_contiguous`; used
to choose vectorized, coalesced global accesses (a 16-byte load needs 4 contiguous, 16-byte-aligned
floats whose mask is constant across the 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import Function, Op, Value
from ..switches import switch
from ..types import TensorType

MAX_DIV = 1 << 30


def _pow2_div(v: int) -> int:
    if v == 0:
        return MAX_DIV
    v = abs(int(v))
    return min(v & -v, MAX_DIV)


@dataclass(frozen=True)
class AxisInfo:
    contig: tuple
    div: tuple
    const: tuple
    value: int | None = None  # a known constant value (scalars and splat constants)

    @property
    def rank(self):
        return len(self.contig)

    def elem_div(self, d):
        """A divisor of every element along d (not only of each run's first)."""
        return self.div[d] if self.contig[d] == 1 else 1


def unknown(shape) -> AxisInfo:
    n = max(1, len(shape))
    return AxisInfo((1,) * n, (1,) * n, (1,) * n)


def _shape(v: Value):
    return tuple(v.type.shape) if v.type.shape else (1,)


def _min_all(tuples):
    return tuple(min(xs) for xs in zip(*tuples))


def meet(a: AxisInfo, b: AxisInfo) -> AxisInfo:
    return AxisInfo(tuple(map(min, a.contig, b.contig)), tuple(map(math.gcd, a.div, b.div)),
                    tuple(map(min, a.const, b.const)), a.value if a.value == b.value else None)


def div_runs_enabled() -> bool:
    """KERNELLAB_DIV_RUNS (on by default, `0` turns it off; session 16, H100: heldout_texts5's bilinear upsample
    0.80-0.82 -> 0.96-0.99x Triton, the idioms' rope 1.00 either way; part of the compile caches' keys through
    runtime/codegen_env.py): a quotient by a splat divisor of known divisibility is constant over aligned blocks
    (axis rule), and share_uniform_runs marks ops of slice layouts too, so codegen divides once per block."""
    return switch("KERNELLAB_DIV_RUNS", True)


def reshape_axis_enabled() -> bool:
    """On unless KERNELLAB_RESHAPE_AXIS=0 (part of the compile caches' keys through runtime/codegen_env.py): runs
    along the last dimension pass through tt.reshape (`arange(n).reshape(...)` keeps its contiguous last dimension,
    as a load through it does); without it a reshaped value is unknown."""
    return switch("KERNELLAB_RESHAPE_AXIS", True)


class AxisAnalysis:
    def __init__(self, fn: Function, through_conversions: bool = False):
        """`through_conversions`: a ttg.convert_layout passes its operand's facts on (remove_layout_conversions'
        reloads, whose addresses assign_layouts converted); off elsewhere, where passes were tuned without it."""
        self.info: dict[int, AxisInfo] = {}
        self.through_conversions = through_conversions
        self.div_runs = div_runs_enabled()
        self.reshape_rule = reshape_axis_enabled()
        for i, arg in enumerate(fn.args):
            attrs = fn.arg_attrs[i] if i < len(fn.arg_attrs) else {}
            d = int(attrs.get("tt.divisibility", 1))
            # kernel arguments are scalars; a tensor argument (GPU pass tests' IR) is unknown
            self.info[id(arg)] = AxisInfo((1,), (d,), (1,)) if len(_shape(arg)) == 1 else unknown(_shape(arg))
        self.block(fn.body)

    def __getitem__(self, v: Value) -> AxisInfo:
        return self.info.get(id(v)) or unknown(_shape(v))

    def set(self, v: Value, ai: AxisInfo):
        shape = _shape(v)
        ai = AxisInfo(tuple(min(c, s) for c, s in zip(ai.contig, shape)), ai.div,
                      tuple(min(c, s) for c, s in zip(ai.const, shape)), ai.value)
        self.info[id(v)] = ai

    def block(self, block):
        for op in block.ops:
            self.op(op)

    def op(self, op: Op):
        name = op.name
        if name == "scf.for":
            self._loop(op, op.regions[0], op.operands[3:], 1)
            return
        if name == "scf.while":
            inits = op.operands
            for _ in range(3):
                for a, v in zip(op.regions[0].args, inits):
                    self.info.setdefault(id(a), self[v])
                self.block(op.regions[0])
                cond = op.regions[0].ops[-1]
                for a, v in zip(op.regions[1].args, cond.operands[1:]):
                    self.info[id(a)] = self[v]
                self.block(op.regions[1])
                changed = False
                for a, y in zip(op.regions[0].args, op.regions[1].ops[-1].operands):
                    m = meet(self[a], self[y])
                    if m != self[a]:
                        self.info[id(a)] = m
                        changed = True
                if not changed:
                    break
            for r, v in zip(op.results, op.regions[0].ops[-1].operands[1:]):
                self.set(r, self[v])
            return
        if name == "ub.poison" or (name == "tt.splat" and op.operands[0].defining_op is not None
                                   and op.operands[0].defining_op.name == "ub.poison"):
            # undefined contents: the meet's identity (a loop value that starts undefined, as flatten_loops makes,
            # takes what the loop gives it)
            top = (MAX_DIV,) * len(_shape(op.results[0]))
            self.set(op.results[0], AxisInfo(top, top, top))
            return
        if name == "scf.if":
            for r in op.regions:
                self.block(r)
            for i, res in enumerate(op.results):
                self.set(res, meet(self[op.regions[0].ops[-1].operands[i]], self[op.regions[1].ops[-1].operands[i]]))
            return
        for r in op.regions:
            self.block(r)
        for res in op.results:
            self.set(res, self.rule(op, res))

    def _loop(self, op, body, inits, skip):
        iv = body.args[0]
        lb, step = self[op.operands[0]], self[op.operands[2]]
        self.info[id(iv)] = AxisInfo((1,), (math.gcd(lb.div[0], step.div[0]),), (1,))
        for a, v in zip(body.args[skip:], inits):
            self.info[id(a)] = self[v]
        for _ in range(4):
            self.block(body)
            changed = False
            for a, y in zip(body.args[skip:], body.ops[-1].operands):
                m = meet(self[a], self[y])
                if m != self[a]:
                    self.info[id(a)] = m
                    changed = True
            if not changed:
                break
        for r, a in zip(op.results, body.args[skip:]):
            self.set(r, self[a])

    @staticmethod
    def _reshaped(a: AxisInfo, shape: tuple) -> AxisInfo:
        """A reshape keeps the row-major order of the elements, so runs along the source's last dimension stay
        runs along the result's last one: aligned runs of c consecutive values (c <= the source's last size)
        cut into rows of n give runs of min(c, n), each starting at a run start (n >= c, divisibility kept) or
        n elements into one (divisibility of the start and of n). The other dimensions of the result know
        only what holds for every element."""
        rank = len(shape)
        last_c, last_d, last_k, n = a.contig[-1], a.div[-1], a.const[-1], shape[-1]
        every = min(a.elem_div(d) for d in range(a.rank))
        contig = min(last_c, n)
        div = last_d if n >= last_c else math.gcd(last_d, _pow2_div(n))
        if contig == 1:
            div = every
        const = min(last_k, n)
        return AxisInfo((1,) * (rank - 1) + (contig,), (every,) * (rank - 1) + (div,),
                        (1,) * (rank - 1) + (const,), a.value)

    def rule(self, op: Op, res: Value) -> AxisInfo:
        name, shape = op.name, _shape(res)
        rank = len(shape)
        ops = [self[v] for v in op.operands]
        if name == "arith.constant":
            v = op.attrs["value"]
            if isinstance(v, bool) or not isinstance(v, int):
                return AxisInfo((1,) * rank, (1,) * rank, shape)
            return AxisInfo((1,) * rank, (_pow2_div(v),) * rank, shape, v)
        if name == "tt.make_range":
            return AxisInfo((shape[0],), (_pow2_div(op.attrs["start"]),), (1,))
        if name == "ttg.convert_layout" and self.through_conversions:
            return ops[0]
        if name == "tt.splat":
            s = ops[0]
            return AxisInfo((1,) * rank, (s.div[0],) * rank, shape, s.value)
        if name == "tt.broadcast":
            src = _shape(op.operands[0])
            a = ops[0]
            return AxisInfo(tuple(1 if src[d] == 1 else a.contig[d] for d in range(rank)),
                            tuple(a.div[d] for d in range(rank)),
                            tuple(shape[d] if src[d] == 1 else a.const[d] for d in range(rank)), a.value)
        if name == "tt.expand_dims":
            a, ax = ops[0], op.attrs["axis"]
            if not op.operands[0].type.shape:
                return AxisInfo((1,) * rank, (a.div[0],) * rank, (1,) * rank, a.value)
            new_div = min(a.elem_div(d) for d in range(a.rank))
            c, dv, k = list(a.contig), list(a.div), list(a.const)
            c.insert(ax, 1)
            dv.insert(ax, new_div)
            k.insert(ax, 1)
            return AxisInfo(tuple(c), tuple(dv), tuple(k), a.value)
        if name == "tt.hint":
            a = ops[0]
            div = tuple(op.attrs.get("multiple_of", a.div)) if "multiple_of" in op.attrs else a.div
            con = tuple(op.attrs.get("max_contiguous", a.contig)) if "max_contiguous" in op.attrs else a.contig
            if len(div) != rank:
                div = (div[0],) * rank
            if len(con) != rank:
                con = (con[0],) * rank
            return AxisInfo(con, div, a.const, a.value)
        if name in ("arith.addi", "tt.addptr"):
            a, b = ops
            scale = getattr(op.operands[0].type.scalar.elem, "itemsize", 8) if name == "tt.addptr" else 1
            contig = tuple(max(min(a.contig[d], b.const[d]), min(b.contig[d], a.const[d])) for d in range(rank))
            div = tuple(math.gcd(a.div[d], min(MAX_DIV, b.div[d] * scale)) for d in range(rank))
            val = a.value + b.value * scale if a.value is not None and b.value is not None else None
            return AxisInfo(contig, div, tuple(map(min, a.const, b.const)), val)
        if name == "arith.subi":
            a, b = ops
            contig = tuple(min(a.contig[d], b.const[d]) for d in range(rank))
            div = tuple(map(math.gcd, a.div, b.div))
            val = a.value - b.value if a.value is not None and b.value is not None else None
            return AxisInfo(contig, div, tuple(map(min, a.const, b.const)), val)
        if name == "arith.muli":
            a, b = ops
            contig = tuple(a.contig[d] if b.value == 1 else b.contig[d] if a.value == 1 else 1 for d in range(rank))
            div = tuple(min(MAX_DIV, a.elem_div(d) * b.elem_div(d)) if not (b.value == 1 or a.value == 1) else
                        (a.div[d] if b.value == 1 else b.div[d]) for d in range(rank))
            val = a.value * b.value if a.value is not None and b.value is not None else None
            return AxisInfo(contig, div, tuple(map(min, a.const, b.const)), val)
        if name == "arith.shli" and ops[1].value is not None:
            a, k = ops[0], ops[1].value
            div = tuple(min(MAX_DIV, a.elem_div(d) << k) for d in range(rank))
            return AxisInfo((1,) * rank, div, a.const)
        if name in ("arith.remsi", "arith.remui"):
            a, b = ops
            contig = tuple(min(a.contig[d], math.gcd(a.div[d], b.div[d])) if b.const[d] >= shape[d] or
                           b.value is not None else 1 for d in range(rank))
            return AxisInfo(contig, tuple(map(math.gcd, a.div, b.div)), tuple(map(min, a.const, b.const)))
        if name in ("arith.divsi", "arith.divui"):
            a, b = ops
            if b.value is not None and b.value > 0:
                c = b.value
                const = tuple(max(a.const[d], min(a.contig[d], math.gcd(a.div[d], _pow2_div(c)))
                                  if c & (c - 1) == 0 else a.const[d]) for d in range(rank))
                div = tuple(a.elem_div(d) // c if a.elem_div(d) % c == 0 else 1 for d in range(rank))
                return AxisInfo((1,) * rank, tuple(max(1, x) for x in div), const)
            const = tuple(map(min, a.const, b.const))
            if self.div_runs:
                # KERNELLAB_DIV_RUNS=1 (Triton's rule): a run x0, x0+1, ... (x0 a multiple of a.div) over a divisor
                # q the same along the dimension, a multiple of b.div: the quotient steps only at multiples of q,
                # so aligned blocks of gcd(a.div, b.div) share it (rows // H with H a multiple of 16: a 16-row tile
                # has one position). As the constant-divisor rule above, this takes x >= 0 (C division truncates)
                const = tuple(max(const[d], min(a.contig[d], math.gcd(a.div[d], b.div[d])))
                              if b.const[d] >= shape[d] else const[d] for d in range(rank))
            return AxisInfo((1,) * rank, (1,) * rank, const)
        if name in ("arith.cmpi",):
            a, b = ops
            pred = op.attrs.get("predicate", "")
            const = []
            for d in range(rank):
                k = min(a.const[d], b.const[d])
                # A run x, x+1, ... starting at a multiple of D compares the same against a multiple
                # of D only when the boundary falls at a run start: x < c and x >= c (c <= x, c > x),
                # not x <= c or x > c (true at x == c, false at x == c + 1).
                if pred in ("slt", "ult", "sge", "uge"):
                    if b.const[d] >= shape[d] or b.value is not None:
                        k = max(k, min(a.contig[d], math.gcd(a.div[d], b.div[d])))
                if pred in ("sgt", "ugt", "sle", "ule"):
                    if a.const[d] >= shape[d] or a.value is not None:
                        k = max(k, min(b.contig[d], math.gcd(a.div[d], b.div[d])))
                const.append(k)
            return AxisInfo((1,) * rank, (1,) * rank, tuple(const))
        if name == "arith.select":
            c, a, b = ops
            contig = tuple(min(a.contig[d], b.contig[d], c.const[d]) for d in range(rank))
            return AxisInfo(contig, tuple(map(math.gcd, a.div, b.div)), tuple(map(min, a.const, b.const, c.const)))
        if name in ("arith.andi", "arith.ori", "arith.xori", "arith.cmpf"):
            return AxisInfo((1,) * rank, (1,) * rank, _min_all([o.const for o in ops]))
        if name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.bitcast", "tt.int_to_ptr", "tt.ptr_to_int"):
            return ops[0]
        if name == "tt.reshape" and self.reshape_rule and op.operands[0].type.shape:
            return self._reshaped(ops[0], shape)
        if name == "tt.load":
            if not isinstance(op.operands[0].type, TensorType):
                # a block pointer's (or a scalar pointer's) load: its operands are scalars, whose rank-1 infos
                # say nothing per dimension of the tile (tile IR before block_ptr lowering; a descriptor's load)
                return unknown(shape)
            # the loaded values repeat where the pointers (and the mask and other) do
            return AxisInfo((1,) * rank, (1,) * rank, _min_all([o.const for o in ops if o.rank == rank]))
        if ops and all(o.rank == rank for o in ops) and name.startswith(("arith.", "math.")):
            return AxisInfo((1,) * rank, (1,) * rank, _min_all([o.const for o in ops]))
        return unknown(shape)


def access_vec(op: Op, axis: "AxisAnalysis", dim: int) -> int:
    """The most elements one instruction of memory op `op` (tt.load / tt.store / tt.atomic_rmw on a tile of
    pointers) may move along `dim`, as far as its addresses and mask allow: contiguous, aligned, under one mask bit,
    16 bytes at most; a power of two."""
    ptr = op.operands[0]
    info = axis[ptr]
    ebytes = getattr(ptr.type.scalar.elem, "itemsize", 8)
    vec = max(1, min(info.contig[dim], 16 // ebytes))
    align = info.div[dim] // ebytes if info.div[dim] >= ebytes else 1
    vec = min(vec, max(1, align))
    mask_index = {"tt.load": 1, "tt.store": 2, "tt.atomic_rmw": 2}.get(op.name)
    if mask_index is not None and len(op.operands) > mask_index:
        vec = min(vec, axis[op.operands[mask_index]].const[dim])
    return 1 << (max(1, vec).bit_length() - 1)
