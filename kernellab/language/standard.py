"""`tl.*` functions built from other ops, as Triton's standard library builds them: flips, interleaving,
squeeze / unsqueeze, swizzle2d, reduce_or, and the bitonic sort / top-k / merge.

Nothing here adds an op: each function composes reshapes, size-2 reductions and selects through the
compiler's `Semantic`, so the interpreter and the GPU backend run them with no code of their own.

The sorting functions view the sorted dimension of n = 2**m elements as m axes of size 2 (a hypercube):
axis j from the end holds bit j of an element's index. The partner of an element across that axis is
found without shuffles: xor-reducing the pair (as integers of the same width) gives a ^ b, and
a ^ (a ^ b) = b. A compare-and-swap keeps the smaller of the pair in one position and the larger in the
other; which position gets which is the "descending" bit of each element, fixed or alternating with
a higher index bit (the bitonic pattern).
"""
from __future__ import annotations

import builtins as _py

from ..compiler.types import int8, int16, int32, int64
from ..errors import SemanticError
from .core import builtin, tensor, unwrap

_INT_OF_WIDTH = {8: int8, 16: int16, 32: int32, 64: int64}


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _is_pow2(n) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _dim(x: tensor, dim, what: str) -> int:
    """`dim` (None: the last) as a non-negative dimension of x, or an error naming `what`."""
    rank = len(x.shape)
    if rank == 0:
        raise SemanticError(f"{what} needs a tensor, got a scalar")
    dim = unwrap(dim)
    if dim is None:
        return rank - 1
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise SemanticError(f"{what}: dim must be a constexpr integer in [{-rank}, {rank}), got {dim!r}")
    return dim % rank


def _as_bits(sem, x: tensor):
    """x as an integer tensor of its width (unchanged when it already is one), so the xor trick moves
    floats and NaN payloads bit-exactly; and the function that turns such bits back into x's dtype."""
    dt = x.dtype
    if dt.is_int():
        return x, lambda y: y
    if dt.is_ptr():
        return sem.cast(x, int64, bitcast=True), lambda y: sem.cast(y, dt, bitcast=True)
    it = _INT_OF_WIDTH[dt.bits]
    return sem.cast(x, it, bitcast=True), lambda y: sem.cast(y, dt, bitcast=True)


def _swap_across(sem, bits: tensor, axis: int) -> tensor:
    """Each element's partner across a size-2 `axis` (the pair exchanged), on integer bits."""
    pair_xor = sem.reduction([bits], axis, lambda a, b: [a[0] ^ b[0]], keep_dims=True)
    return bits ^ pair_xor


def _upper(sem, rank: int, axis: int) -> tensor:
    """An i1 tensor of shape [1, .., 2, .., 1] (the 2 at `axis`): whether an element is the upper one of
    its pair. Built with expand_dims (free in registers) rather than a reshape."""
    u = sem.binary("==", sem.arange(0, 2), 1)
    for _ in _py.range(axis):
        u = sem.expand_dims(u, 0)
    for _ in _py.range(rank - axis - 1):
        u = sem.expand_dims(u, len(u.shape))
    return u


# --------------------------------------------------------------------------- shapes


@builtin
def flip(x, dim=None, _sem=None):
    """Reverse x along `dim` (default: the last), whose size must be a power of 2. Reversing an index
    of m bits flips every bit: one pair swap per bit."""
    x = _sem.to_tensor(x)
    d = _dim(x, dim, "tl.flip")
    n = x.shape[d]
    if not _is_pow2(n):
        raise SemanticError(f"tl.flip needs a power-of-2 size along dim {d}, got shape {list(x.shape)}")
    if n == 1:
        return x
    steps = _log2(n)
    bits, back = _as_bits(_sem, x)
    y = _sem.reshape(bits, x.shape[:d] + (2,) * steps + x.shape[d + 1:])
    for i in _py.range(steps):
        y = _swap_across(_sem, y, d + i)
    return back(_sem.reshape(y, x.shape))


@builtin
def interleave(a, b, _sem=None):
    """a and b alternating along their last dimension: join(a, b) with the two last dims merged."""
    c = _sem.join(a, b)
    if len(c.shape) == 1:  # two scalars
        return c
    return _sem.reshape(c, c.shape[:-2] + (2 * c.shape[-2],))


@builtin
def squeeze(x, dim, _sem=None):
    """x without its size-1 dimension `dim`."""
    x = _sem.to_tensor(x)
    d = _dim(x, dim, "tl.squeeze")
    if x.shape[d] != 1:
        raise SemanticError(f"tl.squeeze: dimension {d} of shape {list(x.shape)} has size {x.shape[d]}, not 1")
    return _sem.reshape(x, x.shape[:d] + x.shape[d + 1:])


@builtin
def unsqueeze(x, dim, _sem=None):
    """x with a new size-1 dimension at `dim` (what expand_dims does)."""
    return _sem.expand_dims(x, dim)


@builtin
def swizzle2d(i, j, size_i, size_j, size_g, _sem=None):
    """Map row-major (i, j) of a size_i x size_j grid to column-major order inside groups of size_g rows
    (the last group may be shorter): the program-id reordering that keeps a matmul's tiles in L2."""
    s = _sem
    linear = s.binary("+", s.binary("*", i, size_j), j)
    group_size = s.binary("*", size_g, size_j)  # elements in one group of size_g rows
    first_row = s.binary("*", s.binary("//", linear, group_size), size_g)
    rows = s.minmax("min", s.binary("-", size_i, first_row), size_g)  # rows in this group
    within = s.binary("%", linear, group_size)
    return s.binary("+", first_row, s.binary("%", within, rows)), s.binary("//", within, rows)


@builtin
def reduce_or(input, axis, keep_dims=False, _sem=None):
    """Bitwise or of the elements along `axis` (integers only, as in Triton)."""
    x = _sem.numeric(input, "tl.reduce_or")
    if not x.dtype.is_int():
        raise SemanticError(f"tl.reduce_or needs integers, got {x.dtype}")
    return _sem.reduction([x], axis, lambda a, b: [a[0] | b[0]], unwrap(keep_dims))


# --------------------------------------------------------------------------- bitonic sorting


def _compare_swap(sem, h: tensor, bit: int, desc):
    """One compare-and-swap across index bit `bit` of the last (hypercube) axes of h. `desc`: a Python
    bool for all elements, or an i1 tensor (broadcastable) per element: the pair is put in descending
    order there."""
    rank = len(h.shape)
    axis = rank - 1 - bit
    bits, back = _as_bits(sem, h)
    partner = back(_swap_across(sem, bits, axis))
    upper = _upper(sem, rank, axis)
    wants_larger = upper if desc is False else (sem.unary("not", upper) if desc is True else upper ^ desc)
    take_partner = sem.binary(">", h, partner) ^ wants_larger
    return sem.where(take_partner, partner, h)


def _merge(sem, h: tensor, stage: int, order):
    """Bitonic merge of runs of 2**stage elements (bits below `stage`): `order` False / True for
    ascending / descending everywhere, "alternate" for runs whose direction follows bit `stage`."""
    if order == "alternate":
        desc = _upper(sem, len(h.shape), len(h.shape) - 1 - stage)
    else:
        desc = bool(order)
    for bit in _py.range(stage - 1, -1, -1):
        h = _compare_swap(sem, h, bit, desc)
    return h


def _sort_last(sem, x: tensor, k, descending: bool, what: str) -> tensor:
    """Sort x along its last dimension (all of it, or its top k when k is given) with a bitonic network."""
    n = x.shape[-1]
    if not _is_pow2(n):
        raise SemanticError(f"{what} needs a power-of-2 size along the sorted dimension, got shape {list(x.shape)}")
    log_n = _log2(n)
    log_k = log_n if k is None else _log2(k)
    if log_n == 0:
        return x
    lead = x.shape[:-1]
    h = sem.reshape(x, lead + (2,) * log_n)
    for stage in _py.range(1, log_k + 1):
        h = _merge(sem, h, stage, "alternate" if stage < log_n else descending)
    # top-k: sorted runs of k alternate in direction; the elementwise max (min) of two neighbouring runs
    # holds the larger (smaller) k of their 2k as a bitonic run, which one merge sorts again
    for stage in _py.range(log_k + 1, log_n + 1):
        axis = len(h.shape) - 1 - log_k
        h = sem.reduction([h], axis, lambda a, b: [sem.where(sem.binary(">" if descending else "<", a[0], b[0]),
                                                             a[0], b[0])])
        h = _merge(sem, h, log_k, "alternate" if stage < log_n else descending)
    return sem.reshape(h, lead + (2 ** log_k,))


def _along(sem, x: tensor, dim, what: str, fn):
    """fn applied along dimension `dim` (moved last, then back)."""
    x = sem.numeric(x, what)
    d = _dim(x, dim, what)
    rank = len(x.shape)
    if d == rank - 1:
        return fn(x)
    order = [i for i in _py.range(rank) if i != d] + [d]
    y = fn(sem.permute(x, order))
    inverse = [order.index(i) for i in _py.range(rank)]
    return sem.permute(y, inverse)


@builtin
def sort(x, dim=None, descending=False, _sem=None):
    """x sorted along `dim` (default: the last; a power-of-2 size). Triton sorts the last dim only; other
    dims are sorted here by moving them last. NaNs are not ordered (as in Triton)."""
    desc = bool(unwrap(descending))
    return _along(_sem, x, dim, "tl.sort", lambda t: _sort_last(_sem, t, None, desc, "tl.sort"))


@builtin
def topk(x, k, dim=None, _sem=None):
    """The k largest elements along `dim` (default: the last) in descending order; k a power of 2 no
    larger than that dim. The dtype stays x's (Triton widens 8/16-bit inputs where k < n)."""
    k = unwrap(k)
    x = _sem.numeric(x, "tl.topk")
    d = _dim(x, dim, "tl.topk")
    if not _is_pow2(k) or k > x.shape[d]:
        raise SemanticError(f"tl.topk's k must be a constexpr power of 2 no larger than dimension {d} "
                            f"(size {x.shape[d]}), got {k!r}")
    return _along(_sem, x, d, "tl.topk", lambda t: _sort_last(_sem, t, k, True, "tl.topk"))


@builtin
def bitonic_merge(x, dim=None, descending=False, _sem=None):
    """Sort x along `dim` (default: the last) when each row there is bitonic (rises then falls, or the
    reverse): the last merge of a bitonic sort."""
    desc = bool(unwrap(descending))

    def merge(t):
        n = t.shape[-1]
        if not _is_pow2(n):
            raise SemanticError(f"tl.bitonic_merge needs a power-of-2 size along the merged dimension, got shape "
                                f"{list(t.shape)}")
        if n == 1:
            return t
        h = _sem.reshape(t, t.shape[:-1] + (2,) * _log2(n))
        return _sem.reshape(_merge(_sem, h, _log2(n), desc), t.shape)

    return _along(_sem, x, dim, "tl.bitonic_merge", merge)
