"""fp8 `tl.dot` on the GPU where wgmma cannot take it: operands widened to fp16 before tensor cores are chosen.

Every e4m3/e5m2 value is exact in fp16 and fp16 x fp16 products are exact in the fp32 accumulator, so the
result is what an fp8 tensor-core dot computes (up to summation order). Hopper's wgmma takes e4m3/e5m2
directly (k32, both operands K-major in shared memory): a dot that `accelerate_matmul.wgmma_plan` gives
wgmma keeps its fp8 operands. Elsewhere (sm_80, tiles smaller than a warpgroup's m64, enable_wgmma=False)
the dot runs as fp16, as Triton's does (mma.sync m16n8k16 f16).
"""
from __future__ import annotations

from ..fp8 import is_fp8
from ..ir import Module, Op
from ..rewrite import insert_before
from ..types import TensorType, float16
from .accelerate_matmul import wgmma_plan

NAME = "upcast_fp8_dot"
DESCRIPTION = "fp8 tl.dot operands converted to fp16 (exact) for the fp16 tensor-core path"


def run(module: Module, options=None) -> dict:
    n = 0
    for op in list(module.kernel.walk()):
        if op.name != "tt.dot":
            continue
        if not wgmma_plan(op, getattr(options, "num_warps", 4), getattr(options, "arch", 90),
                          getattr(options, "wgmma", True)).startswith("no wgmma"):
            continue
        for i in (0, 1):
            v = op.operands[i]
            if is_fp8(v.type.scalar):
                cvt = insert_before(op, Op("tt.fp_to_fp", [v], [TensorType(v.type.shape, float16)], {}, (), op.loc))
                op.set_operand(i, cvt.result)
                n += 1
    return {"operands_upcast": n}
