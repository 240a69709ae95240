"""Tile IR -> GPU IR -> LLVM IR -> PTX -> cubin, recording every stage in the CompileTrace."""
from __future__ import annotations

import time

from ..errors import CompilationError, ToolchainError
from .codegen.llvm_to_ptx import llvm_to_ptx
from .codegen.lower import LoweringError, lower_kernel
from .codegen.ptx_to_cubin import ptx_to_cubin
from .codegen.target import Target
from .gpu.options import GpuOptions
from .ir import Module
from .pipeline import CompileTrace, run_gpu_pipeline


def compile_to_cubin(module: Module, trace: CompileTrace, options: GpuOptions, target: Target,
                     assemble: bool = True) -> dict:
    """Lower a tile-IR module (mutated into GPU IR) and return every stage plus ptxas' report."""
    run_gpu_pipeline(module, trace, options)
    name = module.kernel.name
    t0 = time.perf_counter()
    try:
        llir, arg_kinds = lower_kernel(module, options, target.arch)
    except (LoweringError, NotImplementedError) as e:
        raise CompilationError(name, f"GPU code generation failed: {e}", module.kernel.source_file,
                               module.kernel.first_line) from None
    trace.record("to_llvm", "GPU IR -> LLVM IR (one function; registers per layout)", llir,
                 time.perf_counter() - t0, True, {})
    t0 = time.perf_counter()
    ptx = llvm_to_ptx(llir, target, name)
    trace.record("to_ptx", f"LLVM O3 + NVPTX backend -> PTX for {target.cpu}", ptx, time.perf_counter() - t0, True,
                 {})
    out = {"gpu": trace.ir_after("insert_barriers"), "llir": llir, "ptx": ptx, "arg_kinds": arg_kinds,
           "shared": getattr(module, "shared_bytes", 0), "shared_plan": getattr(module, "shared_plan", [])}
    if assemble:
        t0 = time.perf_counter()
        try:
            cubin, report = ptx_to_cubin(ptx, target, name)
        except ToolchainError as e:
            err = ToolchainError(f"kernel '{name}': ptxas rejected the generated PTX; see compiled.asm['ptx']\n{e}")
            err.stages = {k: out[k] for k in ("gpu", "llir", "ptx")}  # build_gpu keeps them for that asm['ptx']
            raise err from None
        trace.record("to_cubin", f"ptxas -> cubin ({report.get('n_regs')} registers, "
                     f"{report.get('n_spills', 0)} bytes spilled)", report.get("log", ""), time.perf_counter() - t0,
                     True, {k: v for k, v in report.items() if k in ("n_regs", "n_spills", "shared", "local")})
        out["cubin"] = cubin
        out["report"] = report
    return out
