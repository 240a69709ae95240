"""On sm_90, give a pointer tile's store that writes a box of a strided tensor to tma_store, as a block pointer's.

tma_store writes a block pointer's (or a tensor descriptor's) tile by TMA, asynchronously: the tile goes to a
swizzled buffer in its own layout and one thread issues cp.async.bulk.tensor, so a persistent kernel's next tile
loads and multiplies while the TMA unit writes this one out. A store through a tensor of pointers, the tutorial
matmul's epilogue, gets none of that: its tile is converted through shared memory (stmatrix, bar.sync, ld.shared)
and written by st.global, every element masked, before the next tile starts. Triton does the same. Yet that store
is very often the same box a block pointer names:

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # any scalar offset, plus tl.arange(0, B)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
 ==
    tl.store(tl.make_block_ptr(c_ptr, (M, N), (stride_cm, stride_cn), (pid_m * BLOCK_M, pid_n * BLOCK_N),
                               (BLOCK_M, BLOCK_N), (1, 0)), c, boundary_check=(0, 1))

This pass, first of the GPU passes (before flatten_loops, so the fused loop carries the block pointer's offsets as
it does for the block-pointer text), rewrites the first form into the second; tma_store then does the rest, with
no second mechanism: the host's tensor map comes from the block pointer (block_ptr.tma_operands), shape (M, N) and
row stride from the kernel's arguments. It is one more way into tma_store, not a second TMA store, which is why it
is its own pass. Default off until timed on the GPU: KERNELLAB_TMA_POINTER_STORE=1 (a codegen knob: the caches key
on it).

A store is rewritten when all of this is proven from the IR (else it is left alone and the stats say why,
`not_lifted`):
- the addresses are `base + sum over the tile's two dims of (scalar offset + arange) * stride`, reached through
  splat, broadcast, expand_dims, addptr, add, mul, widening and tl.multiple_of-style hints, in any order the
  user writes them; `base` is a kernel argument, where scalars added to it (`c_ptr += pid_m * BLOCK_M *
  stride_cm + pid_n * BLOCK_N`) count as offsets of the dim whose stride they are multiplied by; one dim's
  stride is the constant 1 (the argument specialized to 1) and the other's is a value the host evaluates (an
  argument, a constant, products and sums of them); a wrap-around (`% M`, as the tutorial's loads write) or any
  other arithmetic on the indices keeps st.global;
- the mask is exactly the bounds of the two indices, `idx_d < bound_d` for both dims (either operand order:
  `bound > idx`), combined with `&`, as one 2-D mask or [:, None] / [None, :] pieces, where each index is, value
  for value (the same SSA scalars and constant), the offset + arange the addresses use along that dim, and each
  bound a value the host evaluates: those are the tensor map's extents. A store with no mask is not rewritten (the
  host would have no extents for the map), nor one whose mask says anything else;
- the tile's element type has a TMA map (tma_store.TMA_ELEMS) and is the pointer's, at most 256 rows along the
  strided dim, a contiguous extent a swizzled buffer can hold, base and row stride 16-byte aligned (the argument
  specialization's divisibility), the kernel's architecture sm_90 with TMA allowed;
- every use of `base` is the address of a store rewritten here: the kernel never reads the tensor (a TMA store is
  asynchronous, in the async proxy) and no st.global writes it beside a TMA store. Other arguments are taken not to
  alias it, tma_store's contract (a program that wrote a tile and read the same addresses back through another
  argument could see old data; across programs such a kernel races with st.global too).
What tma_store checks later (the buffers' fit in shared memory, a transposing layout) may still keep st.global:
the block pointer's own st.global then stores the tile, with the same bounds.

What may differ from the pointer store, and how it is kept exact. TMA writes the elements inside [0, M) x [0, N);
the mask lets through every element below the bounds, so an element at a NEGATIVE index (a negative tile offset)
would be written by the pointer store, outside the tensor the mask describes, and dropped by TMA. The offsets are
proven >= 0 where the IR shows it (program ids, loop counters from 0, non-negative constants, the map's extents and
row stride, which the launcher checks >= 0 before it encodes the map, through +, *, //, %, min, max; integer
overflow is not modelled: where the kernel's i32 arithmetic wraps, the pointer store writes elsewhere anyway). An
offset not proven so gets a device assertion after the store (a tile whose unproven offset is negative, with
elements the mask lets through, aborts the launch naming the store, rather than differ silently). In the tutorial
text the column tile `pid_n = (pid % group) // group_size_m` divides by a value the IR cannot prove positive, so its
offset gets the check: a compare and a branch per tile, after the store (where the accumulator is dead).
Not done: a rank-3 (batched) store, `base + b * stride_b + ...` with a per-program batch index.
"""
from __future__ import annotations

import os

from ..gpu import block_ptr
from ..gpu.axis_info import AxisAnalysis
from ..gpu.smem_layout import swizzled
from ..ir import Block, Module, Op, Value
from ..ops import is_pure
from ..rewrite import insert_before, int_const
from ..types import BlockPtrType, TensorType, int1, int32, int64
from .tma_store import TMA_ELEMS

NAME = "tma_pointer_store"
DESCRIPTION = "a pointer tile stored as a box of a strided tensor becomes a block-pointer store, for tma_store (sm_90)"
KNOB = "KERNELLAB_TMA_POINTER_STORE"


def mode() -> str:
    """KERNELLAB_TMA_POINTER_STORE: "off" (unset, 0: the default until timed on the GPU), "on" (1) or "unchecked"
    (2: no run-time check of the offsets not proven >= 0, to time what the check costs; a negative offset then
    drops what the pointer store would write outside the tensor)."""
    v = os.environ.get(KNOB, "0").strip().lower()
    return "on" if v in ("1", "on", "true", "yes") else "unchecked" if v == "2" else "off"


def enabled() -> bool:
    return mode() != "off"


class _No(Exception):
    """Why a store is not rewritten."""


# ---------------------------------------------------------------------------------------------- the addresses
# An integer tensor of the addresses is read as index terms (tile dim, start, length, stride): `stride *
# arange(start, start + length)` along that dim, and scalar shifts (value or int, stride) added to every element:
# `pid_m * BLOCK_M` in `(pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * stride_cm` is the shift
# (pid_m * BLOCK_M, stride_cm). A shift's stride says its dim (1: the contiguous dim, the row stride: the other), so
# a scalar added to the base pointer (`c_ptr += pid_m * BLOCK_M * stride_cm`) moves the box as the same offset in the
# index would. A dim's coordinate is its term's start plus its shifts: it must be, value for value, what the mask
# bounds.


def _uniform(v: Value):
    """The scalar (a Value, or an int for a constant) every element of tensor `v` holds, or None."""
    d = v.defining_op
    while d is not None and d.name in ("tt.broadcast", "tt.hint", "tt.expand_dims"):
        v = d.operands[0]
        d = v.defining_op
    if not isinstance(v.type, TensorType):
        return v
    if d is None:
        return None
    if d.name == "tt.splat":
        return d.operands[0]
    if d.name == "arith.constant" and type(d.attrs.get("value")) is int:
        return d.attrs["value"]
    return None


def _terms(v: Value, dims: tuple, shifts: list) -> list:
    """Integer tensor `v` (its axes lie along tile dims `dims`) as index terms [(dim, start, length, stride)], its
    scalar shifts appended to `shifts`; strides and shift strides are ints or scalar Values. _No for anything else."""
    u = _uniform(v)
    if u is not None:
        shifts.append((u, 1))
        return []
    d = v.defining_op
    if d is None:
        raise _No("an address offset that is a tensor argument or a loop value")
    name = d.name
    if name in ("tt.hint", "arith.extsi", "tt.broadcast"):
        return _terms(d.operands[0], dims, shifts)
    if name == "tt.expand_dims":
        axis = d.attrs["axis"]
        return _terms(d.operands[0], dims[:axis] + dims[axis + 1:], shifts)
    if name == "tt.make_range" and len(dims) == 1:
        return [(dims[0], d.attrs["start"], d.attrs["end"] - d.attrs["start"], 1)]
    if name == "arith.addi":
        return _terms(d.operands[0], dims, shifts) + _terms(d.operands[1], dims, shifts)
    if name == "arith.muli":
        for a, b in (d.operands, d.operands[::-1]):
            s = _uniform(a)
            if s is not None and _uniform(b) is None:
                inner: list = []
                out = []
                for dim, start, n, stride in _terms(b, dims, inner):
                    if not (isinstance(stride, int) and stride == 1):
                        raise _No("an index multiplied by two strides")
                    out.append((dim, start, n, s))
                for x, stride in inner:
                    if not (isinstance(stride, int) and stride == 1):
                        raise _No("an offset multiplied by two strides")
                    shifts.append((x, s))
                return out
        raise _No("a product of two index tensors in the addresses")
    if name in ("arith.remsi", "arith.remui"):
        raise _No("a wrap-around index (`% M`): its rows are not one box")
    raise _No(f"an address offset made by {name}")


def _scalar_shifts(off: Value, shifts: list) -> None:
    """The shifts of a scalar added to the base pointer (`tl.addptr` of a scalar): sums are split, a product keeps
    its factors for `_coordinates` to find the row stride among them."""
    off = block_ptr.unwiden(off)
    d = off.defining_op
    if d is not None and d.name == "arith.addi":
        _scalar_shifts(d.operands[0], shifts)
        _scalar_shifts(d.operands[1], shifts)
    elif d is not None and d.name == "arith.constant" and type(d.attrs.get("value")) is int:
        shifts.append((d.attrs["value"], 1))
    elif d is not None and d.name == "arith.muli":
        shifts.append((off, ("product", d.operands[0], d.operands[1])))
    else:
        shifts.append((off, 1))


def _through_shapes(v: Value, dims: tuple, what: str) -> tuple:
    """(the op making `v` below its broadcasts, hints and expand_dims, the tile dims of that op's axes), or _No
    when `v` (`what`: a pointer tensor, a mask) is an argument or a loop value."""
    while True:
        d = v.defining_op
        if d is None:
            raise _No(f"{what} that is an argument or a loop value")
        if d.name == "tt.expand_dims":
            axis = d.attrs["axis"]
            dims = dims[:axis] + dims[axis + 1:]
        elif d.name not in ("tt.broadcast", "tt.hint"):
            return d, dims
        v = d.operands[0]


def _addresses(v: Value, dims: tuple, shifts: list) -> tuple:
    """(base pointer, index terms) of pointer tensor `v`, its shifts appended to `shifts`, or _No."""
    d, dims = _through_shapes(v, dims, "a pointer tensor")
    if d.name == "tt.splat":
        p = d.operands[0]
        while p.defining_op is not None and p.defining_op.name == "tt.addptr":
            _scalar_shifts(p.defining_op.operands[1], shifts)
            p = p.defining_op.operands[0]
        return p, []
    if d.name == "tt.addptr":
        base, terms = _addresses(d.operands[0], dims, shifts)
        return base, terms + _terms(d.operands[1], dims, shifts)
    raise _No(f"pointers made by {d.name}")


def _same(a, b) -> bool:
    """Whether strides `a` and `b` (ints or scalar Values) are one value."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return block_ptr.unwiden(a) is block_ptr.unwiden(b)


def _coordinate(start: int, n: int, shifts: list) -> tuple:
    """A dim's coordinate `sum(scalars) + const + arange(0, n)` as its key (the scalars' ids, const, n) and its
    scalars; each scalar an i32 Value."""
    const, scalars = start, []
    for x in shifts:
        if isinstance(x, int):
            const += x
            continue
        x = block_ptr.unwiden(x)
        c = int_const(x) if x.defining_op is not None and x.defining_op.name == "arith.constant" else None
        if c is not None:
            const += c
            continue
        if x.type != int32:
            raise _No("a tile offset that is not an i32 value (TMA coordinates are 32-bit)")
        scalars.append(x)
    return (tuple(sorted(id(x) for x in scalars)), const, n), scalars


def _mask_coordinate(v: Value, dims: tuple) -> tuple:
    """(tile dim, coordinate key) of the index a mask compares, or _No."""
    shifts: list = []
    terms = _terms(v, dims, shifts)
    if len(terms) != 1 or not _same(terms[0][3], 1) or any(not _same(st, 1) for _, st in shifts):
        raise _No("a mask bounding something other than one dim's index")
    dim, start, n, _ = terms[0]
    return dim, _coordinate(start, n, [x for x, _ in shifts])[0]


# ----------------------------------------------------------------------------------------------------- the mask
def _bounds(m: Value, dims: tuple, out: dict) -> None:
    """Fill {tile dim: (coordinate key, bound)} from mask `m` (i1, axes along `dims`), or _No when it is not exactly
    the tile's bounds."""
    d, dims = _through_shapes(m, dims, "a mask")
    if d.name == "arith.andi":
        _bounds(d.operands[0], dims, out)
        _bounds(d.operands[1], dims, out)
        return
    if d.name == "arith.cmpi" and d.attrs.get("predicate") in ("slt", "sgt"):
        idx_v, bound_v = d.operands if d.attrs["predicate"] == "slt" else d.operands[::-1]
        bound = _uniform(bound_v)
        if bound is None or isinstance(bound, int) or _uniform(idx_v) is not None:
            raise _No("a mask comparing against something other than a scalar bound")
        dim, key = _mask_coordinate(idx_v, dims)
        if dim in out:
            raise _No(f"a mask bounding dim {dim} twice")
        out[dim] = (key, block_ptr.unwiden(bound))
        return
    raise _No(f"a mask made by {d.name} (not exactly `rows < M & cols < N`)")


# ------------------------------------------------------------------------------------------- offsets >= 0
def _lower(v, known: set, seen=None):
    """A lower bound of scalar `v` (an int), or None where none is proven (integer overflow not modelled): program
    ids and the values in `known` (ids: the tensor map's extents and row stride, which the launcher checks) are
    >= 0, a loop counter is >= its start when its step is positive, and +, -, *, //, %, min, max, select carry the
    bounds (`cdiv(N, B)` is (N + B - 1) // B: >= 0 where N >= 0)."""
    if isinstance(v, int):
        return v
    seen = set() if seen is None else seen
    if id(v) in seen:  # (a loop-carried cycle)
        return None
    seen = seen | {id(v)}
    if id(v) in known:
        return 0
    d = v.defining_op
    if d is None:
        blk = v.owner
        loop = blk.parent if isinstance(blk, Block) else None
        if loop is not None and loop.name == "scf.for" and v.index == 0:
            step = int_const(loop.operands[2])
            return _lower(loop.operands[0], known, seen) if step is not None and step > 0 else None
        return None
    n, ops = d.name, d.operands
    if n == "arith.constant":
        return int_const(v)
    if n in ("tt.get_program_id", "tt.get_num_programs", "arith.extui"):
        return 0
    if n in ("tt.hint", "arith.extsi"):
        return _lower(ops[0], known, seen)
    if n == "arith.remsi":  # the remainder has the dividend's sign, whatever the divisor
        a = _lower(ops[0], known, seen)
        return 0 if a is not None and a >= 0 else None
    lows = [_lower(x, known, seen) for x in ops] if n != "arith.select" else \
        [_lower(x, known, seen) for x in ops[1:]]
    if n == "arith.maxsi":
        return max((x for x in lows if x is not None), default=None)
    if None in lows:
        return None
    a = lows[0]
    if n == "arith.addi":
        return a + lows[1]
    if n == "arith.subi":
        k = int_const(ops[1])
        return a - k if k is not None else None
    if n == "arith.muli":
        return a * lows[1] if a >= 0 and lows[1] >= 0 else None
    if n == "arith.divsi":  # (a divisor of 0 is undefined: the quotient of a non-negative value stays >= 0)
        return 0 if a >= 0 and lows[1] >= 0 else None
    if n in ("arith.minsi", "arith.select"):
        return min(lows)
    return None


def _nonneg(v, known: set) -> bool:
    low = _lower(v, known)
    return low is not None and low >= 0


# ------------------------------------------------------------------------------------------------ matching
def _match(st: Op, fn, axis: AxisAnalysis, options) -> dict:
    """What the block pointer of pointer store `st` is made of, or _No."""
    ptrs, value = st.operands[0], st.operands[1]
    mask = st.operands[2] if len(st.operands) > 2 else None
    t = value.type
    if not isinstance(t, TensorType) or len(t.shape) != 2:
        raise _No(f"a rank-{len(getattr(t, 'shape', ()))} tile (2-D only; rank-3 batched stores are not lifted yet)")
    if mask is None:
        raise _No("no mask: the host would have no extents for the tensor map")
    shifts: list = []
    base, terms = _addresses(ptrs, (0, 1), shifts)
    if base.defining_op is not None or not any(base is a for a in fn.args):
        raise _No("the base pointer is not a kernel argument")
    if t.scalar.ir != base.type.elem.ir:
        raise _No("the value's type differs from the tensor's")
    if t.scalar.ir not in TMA_ELEMS:
        raise _No(f"no TMA tensor map for {t.scalar}")
    by_dim: dict = {}
    for dim, start, n, stride in terms:
        if dim in by_dim:
            raise _No(f"dim {dim} indexed twice in the addresses")
        if n != t.shape[dim]:
            raise _No(f"dim {dim}'s index runs over {n} elements, the tile over {t.shape[dim]}")
        by_dim[dim] = (start, n, stride)
    if sorted(by_dim) != [0, 1]:
        raise _No("the addresses do not move along both dims")
    unit = [dim for dim in (0, 1) if _same(by_dim[dim][2], 1)]
    if len(unit) != 1:
        raise _No("not exactly one dim of stride 1 (the stride argument specialized to 1)")
    fast, slow = unit[0], 1 - unit[0]
    stride = by_dim[slow][2]
    esize = t.scalar.bits // 8
    if isinstance(stride, int):
        if stride <= 0 or (stride * esize) % 16:
            raise _No("a constant row stride that is not a positive multiple of 16 bytes")
    elif not block_ptr._kernel_value(stride, fn.args):
        raise _No("the row stride is not a value the host evaluates (an argument, or sums and products of them)")
    elif (axis[stride].div[0] * esize) % 16:
        raise _No("the row stride is not known to be a multiple of 16 bytes")
    if axis[base].div[0] < 16:
        raise _No("the base pointer is not known to be 16-byte aligned")
    along = {fast: [], slow: []}
    for x, st_ in shifts:
        if isinstance(st_, tuple):  # a product added to the base: (a * b) moves the rows by a where b is the stride
            _, a, b = st_
            if _same(b, stride):
                along[slow].append(a)
            elif _same(a, stride):
                along[slow].append(b)
            else:
                along[fast].append(x)
        elif _same(st_, 1):
            along[fast].append(x)
        elif _same(st_, stride):
            along[slow].append(x)
        else:
            raise _No("an offset multiplied by a stride the addresses do not use")
    coords = {dim: _coordinate(by_dim[dim][0], by_dim[dim][1], along[dim]) for dim in (0, 1)}
    bounds: dict = {}
    _bounds(mask, (0, 1), bounds)
    if sorted(bounds) != [0, 1]:
        raise _No("the mask does not bound both dims")
    for dim in (0, 1):
        key, bound = bounds[dim]
        if key != coords[dim][0]:
            raise _No(f"the mask bounds another index of dim {dim} than the addresses use")
        if not block_ptr._kernel_value(bound, fn.args):
            raise _No(f"the bound of dim {dim} is not a value the host evaluates")
    if t.shape[slow] > 256:
        raise _No("over 256 rows (a TMA box dim holds at most 256)")
    if swizzled((1,) + tuple(t.shape), t.scalar, (fast, slow)) is None:
        raise _No("the tile's contiguous extent cannot be swizzled")
    return {"base": base, "value": value, "fast": fast,
            "stride": stride if isinstance(stride, int) else block_ptr.unwiden(stride),
            "offsets": [(coords[d][1], coords[d][0][1]) for d in (0, 1)], "bound": [bounds[0][1], bounds[1][1]],
            "ptrs": ptrs, "mask": mask}


def _base_only_stored(base: Value, stores: set) -> bool:
    """Whether every use of `base` leads only to the addresses of the stores in `stores` (ids)."""
    work = [base]
    while work:
        v = work.pop()
        for u in v.uses:
            if u.name == "tt.store" and id(u) in stores and u.operands[0] is v and v not in u.operands[1:]:
                continue
            if u.name in ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.hint") or \
                    (u.name == "tt.addptr" and u.operands[0] is v):
                work.append(u.result)
                continue
            return False
    return True


def _erase_dead(v: Value) -> None:
    work = [v]
    while work:
        d = work.pop().defining_op
        if d is not None and d.block is not None and not any(r.uses for r in d.results) and is_pure(d) \
                and not d.regions:
            ins = list(d.operands)
            d.erase()
            work.extend(ins)


# ----------------------------------------------------------------------------------------------- rewriting
def _rewrite(st: Op, m: dict) -> dict:
    loc = st.loc

    def op(name, operands, t, attrs=None, hint=None):
        return insert_before(st, Op(name, operands, [t], attrs or {}, (), loc, [hint])).result

    def wide(x):
        return op("arith.extsi", [x], int64) if x.type != int64 else x

    def offset(scalars, const):
        total = None
        for s in scalars:
            total = s if total is None else op("arith.addi", [total, s], int32)
        if const or total is None:
            c = op("arith.constant", [], int32, {"value": const})
            total = c if total is None else op("arith.addi", [total, c], int32)
        return total

    fast, slow = m["fast"], 1 - m["fast"]
    shape = [wide(b) for b in m["bound"]]
    one = op("arith.constant", [], int64, {"value": 1})
    strides = [None, None]
    stride = m["stride"]
    strides[fast] = one
    strides[slow] = op("arith.constant", [], int64, {"value": stride}) if isinstance(stride, int) else wide(stride)
    offs = [offset(*o) for o in m["offsets"]]
    tile = list(m["value"].type.shape)
    bp = op("tt.make_block_ptr", [m["base"]] + shape + strides + offs, BlockPtrType(m["base"].type.elem, tile),
            {"block_shape": tile, "order": [fast, slow]}, "c_block_ptr")
    attrs = {k: v for k, v in st.attrs.items() if k not in ("vec", "boundary_check")}
    attrs["boundary_check"] = [0, 1]
    new = insert_before(st, Op("tt.store", [bp, m["value"]], [], attrs, (), loc))
    st.erase()
    _erase_dead(m["ptrs"])
    _erase_dead(m["mask"])
    return {"store": new, "offsets": offs, "bounds": [m["bound"][0], m["bound"][1]]}


def _check_offsets(new: dict, known: set) -> int:
    """After the store: abort where an offset not proven >= 0 is negative while the mask lets elements through
    (what the pointer store would write outside [0, M) x [0, N) and TMA drops). Returns how many offsets it checks."""
    offs, bounds = new["offsets"], new["bounds"]
    unproven = [d for d in (0, 1) if not _nonneg(offs[d], known)]
    if not unproven:
        return 0
    st = new["store"]
    anchor = st.block.ops[st.block.ops.index(st) + 1]  # after the store (a block ends in its terminator)
    loc = st.loc

    def op(name, operands, t, attrs=None):
        return insert_before(anchor, Op(name, operands, [t], attrs or {}, (), loc)).result

    zero = op("arith.constant", [], int32, {"value": 0})
    ok = None
    for d in unproven:  # offset_d >= 0, or no element passes the other dim's bound (the tile is masked off)
        other = 1 - d
        c = op("arith.cmpi", [offs[d], zero], int1, {"predicate": "sge"})
        if bounds[other].type == int32:
            c = op("arith.ori", [c, op("arith.cmpi", [offs[other], bounds[other]], int1, {"predicate": "sge"})], int1)
        ok = c if ok is None else op("arith.andi", [ok, c], int1)
    where = f"line {loc.line}" if loc else "a store"
    insert_before(anchor, Op("tt.assert", [ok], [], {
        "message": f"KERNELLAB_TMA_POINTER_STORE: the tile stored at {where} has a negative offset; the pointer "
                   "store would write outside [0, M) x [0, N), TMA does not (run without the knob)"}, (), loc))
    return len(unproven)


def run(module: Module, options=None) -> dict:
    if not enabled():
        return {}
    stats = {"tma_pointer_store": 0}
    if getattr(options, "arch", 90) < 90 or not getattr(options, "tma", True):
        return stats
    fn = module.kernel
    stores = [op for op in fn.walk() if op.name == "tt.store" and isinstance(op.operands[0].type, TensorType)
              and op.operands[0].type.scalar.is_ptr()]
    if not stores:
        return stats
    axis = AxisAnalysis(fn)
    found, why = [], []
    for st in stores:
        try:
            found.append((st, _match(st, fn, axis, options)))
        except _No as e:
            why.append(f"line {st.loc.line if st.loc else '?'}: {e}")
    ids = {id(st) for st, _ in found}
    keep = []
    for st, m in found:
        if _base_only_stored(m["base"], ids):
            keep.append((st, m))
        else:
            why.append(f"line {st.loc.line if st.loc else '?'}: the kernel also reads or otherwise uses the tensor "
                       "(a TMA store is asynchronous: only a tensor the kernel only stores to qualifies)")
    for st, m in keep:
        known = {id(m["stride"])} | {id(b) for b in m["bound"]}
        new = _rewrite(st, m)
        checked = _check_offsets(new, known) if mode() == "on" else 0
        stats["tma_pointer_store"] += 1
        if checked:
            stats["offsets_checked_at_run_time"] = stats.get("offsets_checked_at_run_time", 0) + checked
    if why:
        stats["not_lifted"] = why
    return stats
