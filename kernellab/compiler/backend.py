"""Tile IR -> GPU IR -> LLVM IR -> PTX -> cubin, recording every stage in the CompileTrace."""
from __future__ import annotations

import re
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
    _check_fp8_formats(module)
    run_gpu_pipeline(module, trace, options)
    name = module.kernel.name
    t0 = time.perf_counter()
    try:
        llir, arg_kinds = lower_kernel(module, options, target.arch)
    except (LoweringError, NotImplementedError) as e:
        raise CompilationError(name, f"GPU code generation failed: {e}", module.kernel.source_file,
                               module.kernel.first_line) from None
    trace.record("to_llvm", "GPU IR -> LLVM IR (one function; registers per layout)", llir,
                 time.perf_counter() - t0, True, {}, stage="llir")
    t0 = time.perf_counter()
    ptx = llvm_to_ptx(llir, target, name, ftz=options.reflect_ftz)
    if options.maxnreg:
        ptx = _cap_registers(ptx, options.maxnreg)
    trace.record("to_ptx", f"LLVM O3 + NVPTX backend -> PTX for {target.cpu}", ptx, time.perf_counter() - t0, True,
                 {}, stage="ptx")
    out = {"gpu": trace.stage("gpu").ir, "llir": llir, "ptx": ptx, "arg_kinds": arg_kinds,
           "shared": module.shared_bytes, "shared_plan": module.shared_plan}
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
                     True, {k: v for k, v in report.items() if k in ("n_regs", "n_spills", "shared", "local")},
                     stage="cubin")
        out["cubin"] = cubin
        out["report"] = report
    return out


def _check_fp8_formats(module: Module):
    """Triton's CUDA backend knows only the fp8 formats NVIDIA GPUs convert (e4m3, e5m2) and its own e4b15; the AMD
    fnuz formats (float8e4b8, float8e5b16) are refused wherever they appear, as Triton refuses them."""
    from .fp8 import FORMATS, GPU_SUPPORTED
    from .types import DType

    def bad(t):
        s = getattr(t, "scalar", t)
        s = getattr(s, "elem", s)
        return isinstance(s, DType) and s.ir in FORMATS and s.ir not in GPU_SUPPORTED and s

    fn = module.kernel
    found = [(bad(a.type), fn.first_line) for a in fn.args if bad(a.type)]
    for op in fn.walk():
        for v in list(op.operands) + list(op.results):
            if bad(v.type):
                found.append((bad(v.type), getattr(op.loc, "line", None) or fn.first_line))
    if found:
        t, line = found[0]
        names = tuple(f"fp8{x[2:]}" for x in GPU_SUPPORTED)
        raise CompilationError(fn.name, f"type {t.name} not supported in this architecture. The supported fp8 dtypes "
                               f"are {names} (float8e4b8 and float8e5b16 are AMD formats; the CPU interpreter runs "
                               "them)", fn.source_file, line)


def _cap_registers(ptx: str, n: int) -> str:
    """Triton's maxnreg: a `.maxnreg` directive on the entry (ptxas ignores --maxrregcount once `.maxntid` is
    given)."""
    return re.sub(r"^(\.maxntid[^\n]*)$", lambda m: f"{m.group(1)}\n.maxnreg {int(n)}", ptx, count=1, flags=re.M)
