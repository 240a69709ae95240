"""What a block pointer (`tl.make_block_ptr` + `tl.advance`) lets the pipeliner do with its tile.

A block-pointer load names its tile by (base, shape, strides, offsets) instead of a tensor of addresses,
so the facts a vectorized copy needs are read off the `tt.make_block_ptr` it came from and the
`tt.advance`s applied since (through the iter args of loops that carry it):

- `copy_vec`: how many consecutive elements one cp.async may move (16 bytes at most) — the innermost
  stride must be 1, the base, the other strides and every offset along the contiguous dim must be
  multiples of it, and so must the contiguous extent when it is boundary-checked (the mask then never
  changes inside a run);
- `tma_operands`: whether a TMA tensor map made on the host from the kernel's arguments can describe the
  whole tensor — its base, shape and strides must be kernel arguments (or constants), not values
  computed per program — and why not otherwise.
"""
from __future__ import annotations

from ..ir import Block, Op, Value
from .axis_info import AxisAnalysis


def origin(v: Value) -> tuple[Op, list[Op]] | str:
    """(the `tt.make_block_ptr`, every `tt.advance` on the way) for a block-pointer value, following loop
    iter args to both their initial value and their update (and an `scf.if`'s result to both branches); a reason
    string when the value comes from anything else (a select between block pointers, a function argument...).
    Several makes (a fused loop's tile prologue and its copies ahead, see flatten_loops) are one when they agree
    on all but the offsets: the first is returned, `makes` lists them all."""
    found = makes(v)
    if isinstance(found, str):
        return found
    return found[0][0], found[1]


def makes(v: Value) -> tuple[list, list] | str:
    """(every `tt.make_block_ptr` but placeholders, every `tt.advance`) block pointer `v` may come from, or why
    it cannot be followed; the makes agree on base, shape, strides and attributes."""
    found, advances, seen, stack = [], [], set(), [v]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        d = x.defining_op
        if d is None:
            blk = x.owner
            loop = blk.parent if isinstance(blk, Block) else None
            if loop is None or loop.name != "scf.for" or x.index == 0:
                return "the block pointer is not made by tl.make_block_ptr in this kernel"
            i = x.index - 1
            stack += [loop.operands[3 + i], blk.terminator.operands[i]]
        elif d.name == "tt.advance":
            advances.append(d)
            stack.append(d.operands[0])
        elif d.name == "tt.make_block_ptr":
            if not any(m is d for m in found):
                found.append(d)
        elif d.name == "scf.if":  # a fused loop's tile prologue makes it where a tile starts (flatten_loops)
            stack += [r.terminator.operands[x.index] for r in d.regions]
        else:
            return f"the block pointer comes from {d.name}"
    real = [m for m in found if not placeholder(m)]
    if not real:
        return "the block pointer is never made with defined offsets"
    n = len(real[0].attrs["block_shape"])
    if any(m.operands[:1 + 2 * n] != real[0].operands[:1 + 2 * n] or m.attrs != real[0].attrs for m in found):
        return "the block pointer may come from several tl.make_block_ptr"
    return real, advances


def placeholder(mk: Op) -> bool:
    """A `tt.make_block_ptr` whose offsets are all undefined (`ub.poison`): the value a fused loop carries before a
    tile's prologue sets it (flatten_loops), not a pointer anything reads through."""
    offs = parts(mk)[3]
    return bool(offs) and all(o.defining_op is not None and o.defining_op.name == "ub.poison" for o in offs)


def parts(mk: Op) -> tuple[Value, list, list, list]:
    """(base, shape, strides, offsets) operands of a `tt.make_block_ptr`."""
    n = len(mk.attrs["block_shape"])
    ops = mk.operands
    return ops[0], ops[1:1 + n], ops[1 + n:1 + 2 * n], ops[1 + 2 * n:1 + 3 * n]


def unwiden(v: Value) -> Value:
    """`v` before any integer widening (the i64 shapes and strides of a block pointer are often i32 values) and
    before `tt.hint`s (the same value: a tensor descriptor's alignment promise, semantic.py), so the host can still
    evaluate what the kernel only annotated."""
    d = v.defining_op
    while d is not None and d.name in ("arith.extsi", "arith.extui", "tt.hint"):
        v = d.operands[0]
        d = v.defining_op
    return v


def squeezed(mk: Op, rank: int) -> int:
    """How many leading unit dims of `mk`'s block a tile of `rank` dims drops: a `[1, M, K]` descriptor block
    loaded as its `[M, K]` tile (pipeline_dot_operands folds the `tl.reshape`), or 0 when the ranks agree."""
    return len(mk.attrs["block_shape"]) - rank


def tile_order(mk: Op, rank: int) -> tuple:
    """The block's dim order (fastest first) as dims of its rank-`rank` tile: the dropped leading dims left out."""
    k = squeezed(mk, rank)
    return tuple(d - k for d in mk.attrs["order"] if d >= k)


def _const(v: Value):
    d = unwiden(v).defining_op
    return d.attrs.get("value") if d is not None and d.name == "arith.constant" else None


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def copy_vec(ld: Op, axis: AxisAnalysis) -> tuple[int, str | None]:
    """(elements per cp.async, or per vector load/store, None) for a block-pointer load or store, or
    (1, why not even 4 bytes work)."""
    tile = ld.result.type if ld.name == "tt.load" else ld.operands[1].type
    found = makes(ld.operands[0])
    if isinstance(found, str):
        return 1, found
    (mk, *others), advances = found
    base, shape, strides, offs = parts(mk)
    fast = mk.attrs["order"][0]
    k = squeezed(mk, len(tile.shape))
    if fast < k:
        return 1, f"the contiguous dim {fast} is a dropped unit dim of the block"
    esize = max(1, tile.scalar.bits // 8)  # int1 lives in bytes
    if _const(strides[fast]) != 1:
        return 1, f"the stride of the contiguous dim {fast} is not the constant 1"
    vec = min(16 // esize, tile.shape[fast - k], max(1, axis[base].div[0] // esize))
    limits = [axis[s].div[0] for d, s in enumerate(strides) if d != fast]
    limits += [axis[parts(m)[3][fast]].div[0] for m in [mk] + others] + [axis[a.operands[1 + fast]].div[0]
                                                                       for a in advances]
    if fast in ld.attrs.get("boundary_check", []):
        limits.append(axis[shape[fast]].div[0])
    for lim in limits:
        vec = min(vec, lim)
    vec = _pow2_floor(vec)
    if vec * esize < 4:
        return 1, (f"{vec * esize}-byte runs (the base, strides, offsets or extent along dim {fast} are not "
                   f"multiples of {4 // esize} elements)")
    return vec, None


HOST_ARITH = ("arith.muli", "arith.addi")  # what the launcher evaluates besides arguments and constants


def _kernel_value(v: Value, fn_args) -> bool:
    """Whether the host can evaluate `v` from the launch's arguments: a kernel argument or a constant, possibly
    widened, or a product or sum of such (tutorial 06's `Z * H * N_CTX` rows)."""
    v = unwiden(v)
    d = v.defining_op
    if d is None:
        return any(v is a for a in fn_args)
    if d.name in HOST_ARITH:
        return all(_kernel_value(x, fn_args) for x in d.operands)
    return d.name == "arith.constant"


def tma_operands(bp: Value, elem_bytes: int, boundary_check, fn_args, axis: AxisAnalysis,
                 device: bool = False) -> tuple[list | None, str]:
    """([base, extent of the contiguous dim, extent of the other dim, stride of the other dim, then extent and
    stride of each leading unit dim, innermost first], unwidened: kernel arguments or constants) when a host-made
    tensor map can serve the 2-D tiles of block pointer `bp` (elements of `elem_bytes`, read with
    `boundary_check`), else (None, why not). A block of rank 3 to 5 qualifies when its leading dims are 1 (a
    host descriptor's `[1, M, K]` block): the map has the block's rank, its box is 1 along those dims, and TMA's
    zero fill outside the shape covers their boundary check too (an out-of-range batch index reads zeros).
    `device`: the kernel makes the map itself (codegen/lower_tma.py), so base, shape and strides may be computed in
    the kernel; only for tensor descriptors (whose 16-byte alignment Triton's contract promises; a block pointer
    with a per-program base keeps cp.async, as before), and the alignment must still be proven or promised."""
    found = origin(bp)
    if isinstance(found, str):
        return None, found
    mk, _ = found
    base, shape, strides, _ = parts(mk)
    n = len(shape)
    block = list(mk.attrs["block_shape"])
    if device and not mk.attrs.get("descriptor"):
        return None, "a tl.make_block_ptr (only tensor descriptors get tensor maps made in the kernel)"
    if n > 5:
        return None, f"a rank-{n} block (a TMA tensor map has at most 5 dims)"
    if n > 2 and any(b != 1 for b in block[:n - 2]):
        return None, f"a rank-{n} block {block} whose leading dims are not 1 (TMA here fills 2-D stages)"
    order = list(mk.attrs["order"])
    fast, slow = order[0], order[1]
    if n > 2 and sorted((fast, slow)) != [n - 2, n - 1]:
        return None, f"a rank-{n} block whose two fastest dims are not its last two (order {order})"
    if not device and (base.defining_op is not None or not any(base is a for a in fn_args)):
        return None, "the base has a per-program offset (pass offsets= to tl.make_block_ptr instead)"
    if axis[base].div[0] < 16:
        return None, "the base pointer is not known to be 16-byte aligned"
    if _const(strides[fast]) != 1:
        return None, f"the stride of the contiguous dim {fast} is not 1"
    outer = list(range(n - 3, -1, -1))  # the leading unit dims, innermost first (the map's dims 2, 3, ...)
    for what, v in [("shape", shape[d]) for d in range(n)] + [("stride", strides[d]) for d in [slow] + outer]:
        if not device and not _kernel_value(v, fn_args):
            return None, f"its {what} is computed in the kernel (the host makes the tensor map from arguments)"
    for d in [slow] + outer:
        if (axis[strides[d]].div[0] * elem_bytes) % 16:
            return None, f"the stride of dim {d} is not known to be a multiple of 16 bytes"
    if sorted(boundary_check or []) != list(range(n)):
        return None, "a dim is not boundary-checked (TMA zero-fills everything outside the shape)"
    ops = [base, shape[fast], shape[slow], strides[slow]]
    for d in outer:
        ops += [shape[d], strides[d]]
    return [unwiden(v) for v in ops], ""
