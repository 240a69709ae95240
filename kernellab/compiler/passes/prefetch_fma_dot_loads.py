"""Prefetch the next iteration's loads in loops whose `tl.dot` runs on CUDA cores, when the kernel asks for stages.

Triton pipelines every dot loop of a kernel launched with `num_stages >= 2`, CUDA-core (FMA) dots included: the
next iteration's tiles are in flight (cp.async into shared memory) while this iteration multiplies. Tensor-core
dots get that here from pipeline_dot_operands; an FMA dot (fp32 with input_precision="ieee", integer, fp64) had
nothing without the per-loop `tl.range(..., num_stages=2)` opt-in, so each iteration waited for its loads
(FlagGems' bmm: two global round trips where Triton's kernel has one). This pass applies pipeline_loads'
register double-buffering to such loops, after accelerate_matmul has chosen which dots run on CUDA cores, while
the tiles it holds cost at most MAX_REGS registers a thread. Loops that chose their own stages are left alone.
"""
from __future__ import annotations

from ..gpu.scratch import is_wgmma
from ..ir import Module
from .pipeline_loads import _pipeline

NAME = "prefetch_fma_dot_loads"
DESCRIPTION = "prefetch the next iteration's loads in CUDA-core dot loops (num_stages >= 2), as Triton pipelines them"
MAX_REGS = 32  # per thread, for the next iteration's tiles (a 32x32 fp32 A and B over 4 warps: 16)


def _fma_dot_loop(op) -> bool:
    dots = [d for d in op.regions[0].ops if d.name == "tt.dot"]
    return bool(dots) and all("mma" not in d.attrs and not is_wgmma(d) for d in dots)


def run(module: Module, options) -> dict:
    if options.num_stages < 2:
        return {}
    count = 0
    threads = options.num_warps * 32
    for op in list(module.kernel.walk()):
        if op.name == "scf.for" and op.block is not None and "num_stages" not in op.attrs and _fma_dot_loop(op):
            count += _pipeline(op, MAX_REGS * threads)
    return {"prefetched_loads": count} if count else {}
