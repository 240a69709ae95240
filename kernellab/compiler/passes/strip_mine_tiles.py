"""Compute a tile too large for the registers in chunks of rows, when every op on it works element by element.

Liger's multi-token-attention masks launch with BLOCK = next_pow2(L) = 1024 and 4 warps: a 1024x1024 tile,
8192 elements per thread. No register file holds that; Triton spills for minutes. These kernels only load,
compare, select and store, so the same elements come out of a loop over chunks of C rows:
each oversized shape [D0, D1, ...] becomes [C, D1, ...], a `tt.make_range` feeding dim 0 gets `+ iv`
(iv = 0, C, 2C, ... D0-C), and values without dim 0 (a column index [1, D1], a scalar) stay before the loop.

The chunk is as many rows (a power of two) as keep the largest tile at CHUNK_ELEMS_PER_THREAD elements a
thread. Liger's forward mask (sm_90a, ptxas) at 8 / 16 / 32 / 64 elements: 32 / 32 / 64 / 127 registers, no
spills, builds under a second; 16 keeps 16 loads in flight a thread at the lowest register count.

Only the GPU pipeline runs it (before layouts are assigned); the interpreter runs the whole tile. The
decision (`plan`) is shared with the runtime's register-budget check, so a tile the pass cannot split (one
that feeds a reduction, a dot, a reshape...) is still refused there, with the reason. Memory order: each
element's loads and stores keep their order; order between elements of one program was never promised (the
threads of a program run them concurrently without a barrier), and the pass refuses when another side effect
sits among the chunked ops.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import Block, Builder, Module, Op, Value
from ..ops import info, is_pure
from ..types import TensorType, int32

NAME = "strip_mine_tiles"
DESCRIPTION = "a tile over the per-thread register budget, computed element by element, becomes a loop over row chunks"

# Bytes of one tile value per thread beyond which the GPU build splits the tile or refuses it.
TILE_BYTES_PER_THREAD = 16 * 1024
# Elements a thread computes per chunk (of the largest tile).
CHUNK_ELEMS_PER_THREAD = 16

# Ops that map each element of the chunk to the same element (or a repeat) of their operands, besides the ones
# the catalogue marks elementwise.
_SHAPE_OPS = ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.make_range", "arith.constant")


def _numel(t) -> int:
    return math.prod(t.shape)


def tile_bytes(t) -> int:
    """The bytes of one tile value as the budget counts them (pointer tiles count 0: their addresses are
    recomputed, not held)."""
    if not t.is_block() or t.scalar.is_ptr():
        return 0
    return _numel(t) * t.scalar.itemsize


def worst_tile(fn):
    """(bytes, op) of the largest tile value in `fn`."""
    worst, where = 0, None
    for op in fn.walk():
        for r in op.results:
            size = tile_bytes(r.type)
            if size > worst:
                worst, where = size, op
    return worst, where


@dataclass
class Plan:
    shape: tuple  # the oversized shape
    rows: int  # C: rows (of dim 0) per chunk
    roots: list = field(default_factory=list)  # top-level ops touching an oversized value, in program order


class Refusal(Exception):
    """Why an oversized tile cannot be split; `op` is where (for the error's source line)."""

    def __init__(self, reason: str, op: Op | None = None):
        super().__init__(reason)
        self.reason, self.op = reason, op


def _allowed(op: Op) -> bool:
    if op.name in ("tt.load", "tt.store"):
        return op.operands[0].type.is_block() and "boundary_check" not in op.attrs
    return info(op.name).elementwise or op.name in _SHAPE_OPS


def plan(fn, num_warps: int) -> Plan | None:
    """None when no tile is over the budget; a Plan when the pass can split it; raises Refusal otherwise."""
    threads = 32 * num_warps
    worst, where = worst_tile(fn)
    if worst // threads <= TILE_BYTES_PER_THREAD:
        return None
    shape = next(r.type.shape for r in where.results if tile_bytes(r.type) == worst)
    big_numel = math.prod(shape)

    def big(v: Value) -> bool:
        t = v.type
        if not t.is_block() or not isinstance(t, TensorType):
            return False
        return t.shape == shape or _numel(t) >= big_numel or (_numel(t) * max(t.scalar.itemsize, 1)) // threads > \
            TILE_BYTES_PER_THREAD

    roots = []
    for op in fn.walk():
        if not (any(big(v) for v in op.operands) or any(big(r) for r in op.results)):
            continue
        for v in list(op.operands) + list(op.results):
            if big(v) and v.type.shape != shape:
                raise Refusal(f"{op.name} makes a {_shape_str(v.type.shape)} tile beside the "
                              f"{_shape_str(shape)} one", op)
        if not _allowed(op):
            raise Refusal(f"it feeds {op.name}, which is not computed element by element", op)
        if op.block is not fn.body:
            raise Refusal(f"its {op.name} is inside a loop or branch", op)
        for v in op.operands:
            if big(v) and v.defining_op is None:
                raise Refusal("it is a block argument", op)
        roots.append(op)
    d0 = shape[0]
    rest = math.prod(shape[1:])
    rows = d0
    while rows > 1 and rows * rest > CHUNK_ELEMS_PER_THREAD * threads:
        rows //= 2
    biggest_item = max(max((r.type.scalar.itemsize for op in roots for r in op.results if r.type.is_block()
                            and not r.type.scalar.is_ptr()), default=1), 1)
    if rows * rest * biggest_item // threads > TILE_BYTES_PER_THREAD or d0 % rows:
        raise Refusal(f"even one row of the {_shape_str(shape)} tile is over the budget", where)
    # Moving the chunked ops into one loop must not move them across another side effect.
    body = fn.body.ops
    first, last = body.index(roots[0]), body.index(roots[-1])
    root_ids = {id(o) for o in roots}
    for op in body[first:last]:
        if id(op) not in root_ids and not is_pure(op):
            raise Refusal(f"{op.name} between its loads and stores would change order", op)
    p = Plan(shape, rows, roots)
    scratch = Block([int32], ["chunk"])  # a trial build finds what the chunks need; then it is dropped
    try:
        _fill(p, Builder(scratch), scratch.args[0])
    finally:
        for op in reversed(scratch.ops):
            op.erase()
    return p


def _fill(p: Plan, builder: Builder, iv: Value) -> _Chunker:
    """Append to `builder` the ops of one chunk (the roots and the smaller tiles they need along dim 0)."""
    ch = _Chunker(p, builder, iv, {id(r) for op in p.roots for r in op.results})
    for op in p.roots:
        if op.results:
            ch.value(op.results[0], 0)
        else:
            ch.op(op, 0)
    return ch


def _shape_str(shape) -> str:
    return "x".join(map(str, shape))


class _Chunker:
    """Clones the ops a chunk needs into the loop body: `value(v, axis)` is v's chunk when v's dim `axis`
    is the split dim, or v itself when axis is None (computed once, before the loop)."""

    def __init__(self, plan_: Plan, builder: Builder, iv: Value, big_ids: set):
        self.plan, self.b, self.iv, self.big_ids = plan_, builder, iv, big_ids
        self.done: dict = {}

    def chunk_type(self, t, axis):
        shape = list(t.shape)
        shape[axis] = self.plan.rows
        return TensorType(tuple(shape), t.scalar)

    def value(self, v: Value, axis):
        if axis is None or not v.type.is_block():
            return v
        key = (id(v), axis)
        if key in self.done:
            return self.done[key]
        op = v.defining_op
        if op is None:
            raise Refusal("a value along the split dim is a block argument")
        if v.type.shape[axis] != self.plan.shape[0]:
            raise Refusal(f"{op.name} gives a {_shape_str(v.type.shape)} value along the split dim", op)
        new = self.op(op, axis)
        self.done[key] = new.results[v.index]
        return self.done[key]

    def op(self, op: Op, axis) -> Op:
        """The chunk clone of `op` whose results have the split dim at `axis`."""
        b, rows = self.b, self.plan.rows
        name = op.name
        res_t = op.results[0].type if op.results else None
        attrs = dict(op.attrs)
        if name == "tt.make_range":
            start = attrs["start"]
            rng = b.create(name, [], [TensorType((rows,), int32)], {"start": start, "end": start + rows}, loc=op.loc)
            off = b.create("tt.splat", [self.iv], [TensorType((rows,), int32)], loc=op.loc)
            return b.create("arith.addi", [rng.result, off.result], [TensorType((rows,), int32)], loc=op.loc,
                            hints=[r.hint for r in op.results])
        if name == "tt.broadcast":
            src = op.operands[0]
            src_axis = None if src.type.shape[axis] == 1 else axis
            operands = [self.value(src, src_axis)]
        elif name == "tt.expand_dims":
            k = attrs["axis"]
            if k == axis:
                raise Refusal("tt.expand_dims makes the split dim", op)
            operands = [self.value(op.operands[0], axis if axis < k else axis - 1)]
        elif name in ("tt.splat", "arith.constant"):
            operands = list(op.operands)
        elif name == "tt.load" and not any(id(r) in self.big_ids for r in op.results):
            raise Refusal("a smaller load feeds the split tile (it would be re-read in each chunk)", op)
        elif _allowed(op):
            rank = len(res_t.shape) if res_t is not None else len(op.operands[0].type.shape)
            operands = [self.value(v, axis) if v.type.is_block() and len(v.type.shape) == rank else v
                        for v in op.operands]
            if name == "tt.hint":  # promises about the whole dim hold for a chunk up to its length
                for key in ("multiple_of", "max_contiguous"):
                    if key in attrs and len(attrs[key]) == rank:
                        vals = list(attrs[key])
                        vals[axis] = math.gcd(vals[axis], rows) if key == "multiple_of" else min(vals[axis], rows)
                        attrs[key] = vals
        else:
            raise Refusal(f"{name} feeds the split tile", op)
        types = [self.chunk_type(r.type, axis) if r.type.is_block() else r.type for r in op.results]
        return b.create(name, operands, types, attrs, loc=op.loc, hints=[r.hint for r in op.results])


def run(module: Module, options) -> dict:
    fn = module.kernel
    try:
        p = plan(fn, options.num_warps)
    except Refusal:
        return {}  # the runtime's budget check refuses it with the reason
    if p is None:
        return {}
    body = fn.body
    last = p.roots[-1]
    b = Builder(body)
    b.set_insertion_point_before(last)
    b.loc = last.loc
    lb = b.create("arith.constant", [], [int32], {"value": 0}).result
    ub = b.create("arith.constant", [], [int32], {"value": p.shape[0]}).result
    step = b.create("arith.constant", [], [int32], {"value": p.rows}).result
    loop_body = Block([int32], ["chunk"])
    loop = b.create("scf.for", [lb, ub, step], [], {}, [loop_body])
    inner = Builder(loop_body)
    inner.loc = last.loc
    _fill(p, inner, loop_body.args[0])
    inner.create("scf.yield", [], [])
    # The originals: the roots go, then whatever only they used (smaller index tiles cloned into the loop).
    for op in reversed(p.roots):
        op.erase()
    changed = True
    while changed:
        changed = False
        for op in reversed(list(body.ops[:body.ops.index(loop)])):
            if op.results and is_pure(op) and not any(r.uses for r in op.results) and not info(op.name).terminator:
                op.erase()
                changed = True
    return {"ops_moved": len(p.roots), "rows_per_chunk": p.rows, "chunks": p.shape[0] // p.rows,
            "ops_in_loop": len(loop_body.ops) - 1}
