"""GPU IR -> LLVM IR for one kernel: the entry of code generation.

The machinery lives in lowering_core.py; each lower_*.py registers the handlers of its ops there
(`@handles`), so importing them here is what makes the table complete.
"""
from __future__ import annotations

from ..ir import Module
from . import (  # noqa: F401 - importing them registers their op handlers
    lower_async,
    lower_control,
    lower_dot,
    lower_indexed,
    lower_inline_asm,
    lower_map,
    lower_memory,
    lower_reduce,
    lower_shape,
    lower_tma,
    lower_warp_specialize,
    lower_wgmma,
)
from .lowering_core import KernelLowering, LoweringError

__all__ = ["LoweringError", "lower_kernel"]


def lower_kernel(module: Module, options, arch: int = 90) -> tuple[str, list]:
    """(LLVM IR text, argument kinds) for the module's kernel."""
    lw = KernelLowering(module, options, arch, lower_tma.tensormap_recipes(module.kernel))
    lw.lower()
    lw.b.ret_void()
    text = lower_control.self_reference_loop_ids(str(lw.mod))
    return lower_tma.patch_params(text, [p.name for p in lw.tensormap_params]), lw.arg_kinds
