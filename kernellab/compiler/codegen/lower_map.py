"""tt.map_elementwise (tl.map_elementwise) -> the region's scalar code, once per `pack` registers.

Each thread evaluates the region on its own elements, in register order, `pack` at a time; control flow in
the region becomes branches around each copy, so only the chosen side of an `if` runs per element.
"""
from __future__ import annotations

from ..types import TensorType
from .lowering_core import KernelLowering, handles


def operand_columns(lw: KernelLowering, op):
    """(registers per thread of the result, per operand its values register by register; a scalar operand
    repeated): the elementwise ops that apply a function per element read their inputs so."""
    res0 = op.results[0]
    n = len(res0.type.layout.registers(res0.type.shape)) if isinstance(res0.type, TensorType) else 1
    cols = []
    for v in op.operands:
        x = lw.get(v)
        cols.append(x if isinstance(x, list) else [x] * n)
    return n, cols


@handles("tt.map_elementwise")
def _map_elementwise(lw: KernelLowering, op):
    pack = int(op.attrs.get("pack", 1))
    region = op.regions[0]
    n, cols = operand_columns(lw, op)
    outs = [[] for _ in op.results]
    for g in range(-(-n // pack)):
        idx = [min(g * pack + j, n - 1) for j in range(pack)]  # a short last group repeats its last element
        for arg, val in zip(region.args, [col[i] for col in cols for i in idx]):
            lw.put(arg, val)
        lw.block_without_terminator(region)
        vals = [lw.get(v) for v in region.ops[-1].operands]
        take = min(pack, n - g * pack)
        for k in range(len(op.results)):
            outs[k].extend(vals[k * pack:k * pack + take])
    for r, vals in zip(op.results, outs):
        lw.put(r, vals if isinstance(r.type, TensorType) else vals[0])
