"""fp8 `tl.dot` on the GPU: operands widened to fp16 before tensor cores are chosen.

Every e4m3/e5m2 value is exact in fp16 and fp16 x fp16 products are exact in the fp32 accumulator, so the
result is what an fp8 tensor-core dot computes (up to summation order). Hopper's wgmma takes e4m3/e5m2
directly (k=32, both operands K-major in shared memory); kernellab's wgmma and pipelining paths take
16-bit operands only, so this keeps fp8 dots correct at fp16 speed until that path exists.
"""
from __future__ import annotations

from ..fp8 import is_fp8
from ..ir import Module, Op
from ..rewrite import insert_before
from ..types import TensorType, float16

NAME = "upcast_fp8_dot"
DESCRIPTION = "fp8 tl.dot operands converted to fp16 (exact) for the fp16 tensor-core path"


def run(module: Module, options=None) -> dict:
    n = 0
    for op in list(module.kernel.walk()):
        if op.name != "tt.dot":
            continue
        for i in (0, 1):
            v = op.operands[i]
            if is_fp8(v.type.scalar):
                cvt = insert_before(op, Op("tt.fp_to_fp", [v], [TensorType(v.type.shape, float16)], {}, (), op.loc))
                op.set_operand(i, cvt.result)
                n += 1
    return {"operands_upcast": n}
