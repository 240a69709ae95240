"""Mark integer and boolean element ops whose result is the same along runs of a thread's registers.

`offs < n` with `offs = i + tl.arange(0, BLOCK)` and `n` a multiple of 16 (argument specialization) is
constant over aligned runs of 16 elements; a thread holding 4 consecutive elements needs one compare, not
four (Liger's cross-entropy loop: 33 compares per thread and iteration where Triton has 9). The axis
analysis gives each value's constancy; this pass writes `uniform_run = k` on ops whose result is constant
over aligned runs of k registers along the layout's fastest dimension, and codegen computes the first
register of each run and reuses it for the others.
"""
from __future__ import annotations

from ..gpu.axis_info import AxisAnalysis
from ..gpu.layouts import Blocked
from ..ir import Module
from ..ops import is_elementwise
from ..types import PointerType, TensorType

NAME = "share_uniform_runs"
DESCRIPTION = "integer/mask ops constant over runs of a thread's registers are computed once per run"


def _run_length(op, axis: AxisAnalysis) -> int:
    res = op.results[0]
    t = res.type
    if not isinstance(t, TensorType) or not isinstance(t.layout, Blocked) or isinstance(t.scalar, PointerType):
        return 1
    if not (t.scalar.is_int() or t.scalar.kind == "bool"):
        return 1
    fast = t.layout.order[0]
    const = axis[res].const
    if len(const) != len(t.shape):  # values the analysis does not track at this rank
        return 1
    k = min(const[fast], t.layout.spt[fast], t.shape[fast])
    return k if k >= 2 and k & (k - 1) == 0 else 1


def run(module: Module, options) -> dict:
    stats = {"marked": 0}
    for fn in module.functions:
        axis = AxisAnalysis(fn)
        for op in fn.walk():
            if len(op.results) == 1 and not op.regions and is_elementwise(op.name) and op.name != "arith.constant":
                k = _run_length(op, axis)
                if k > 1:
                    op.attrs["uniform_run"] = k
                    stats["marked"] += 1
    return stats
