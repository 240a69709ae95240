"""Nested tuples as trees: a kernel argument, a helper's parameter or return value, a loop-carried or
branch-merged variable may be a (named) tuple whose leaves are tensors, numbers or compile-time
values. Triton flattens such values into one IR value per runtime leaf and rebuilds the tuple on
the other side; these helpers do the walking so the frontend and the launcher agree on the order."""
from __future__ import annotations


def is_node(v) -> bool:
    """Tuples (plain, named, tl.tuple, torch.Size), lists and aggregates (tl.core._aggregate classes, whose
    fields are the children) are inner nodes; everything else is a leaf."""
    return isinstance(v, (tuple, list)) or getattr(type(v), "__kl_aggregate__", False)


def rebuild_like(template, items):
    """A node of `template`'s kind holding `items`: a namedtuple stays that namedtuple, tl.tuple stays
    tl.tuple, a list stays a list; other tuple subclasses (torch.Size) become plain tuples."""
    if isinstance(template, list):
        return list(items)
    cls = type(template)
    if getattr(cls, "__kl_aggregate__", False):
        return template._kl_rebuild(items)
    if hasattr(cls, "_fields"):
        return cls(*items)
    if cls is tuple:
        return tuple(items)
    from ..language.core import tuple as tl_tuple

    if isinstance(template, tl_tuple):
        return tl_tuple(items)
    return tuple(items)


def map_leaves(v, fn):
    """`v` with every leaf replaced by `fn(leaf)` (leaves visited depth-first, left to right)."""
    if is_node(v):
        return rebuild_like(v, [map_leaves(x, fn) for x in v])
    return fn(v)


def leaves(v) -> list:
    """The leaves of `v` in the order `map_leaves` visits them."""
    out = []
    map_leaves(v, out.append)
    return out


def same_structure(a, b) -> bool:
    """Whether two trees have the same nesting (node kinds and lengths)."""
    if is_node(a) != is_node(b):
        return False
    if not is_node(a):
        return True
    if getattr(type(a), "__kl_aggregate__", False) and type(a) is type(b) and a._kl_static() != b._kl_static():
        return False  # an aggregate's constexpr fields are part of its type
    return len(a) == len(b) and type(a) is type(b) and all(same_structure(x, y) for x, y in zip(a, b))


def fill(template, values):
    """`template` with its leaves replaced, in order, by `values` (an iterable of the same count)."""
    it = iter(values)
    return map_leaves(template, lambda _: next(it))
