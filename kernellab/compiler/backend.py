"""Source -> tile IR -> GPU IR -> LLVM IR -> PTX -> cubin: one table of stages (STAGES), each recording what it
did in the CompileTrace."""
from __future__ import annotations

import contextlib
import gc
import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import CompilationError, ToolchainError
from .codegen import occupancy_cap
from .codegen.line_map import llvm_positions, ptx_positions
from .codegen.llvm_to_ptx import SLSR_MAX_ADDRESSES_PER_POINTER, SLSR_MAX_PAIRS, compile_llvm
from .codegen.lower import LoweringError, lower_kernel
from .codegen.lower_warp_specialize import registers
from .codegen.lowering_core import producer_warps
from .codegen.ptx_to_cubin import ptx_to_cubin
from .codegen.target import Target
from .gpu.options import GpuOptions
from .ir import Module
from .pipeline import CompileTrace, record_module, run_gpu_pipeline, run_tile_pipeline, tile_passes
from .types import TensorType
from .verifier import verify


@dataclass
class Build:
    """One compile of one kernel specialization, as the stages see it: each stage reads what the stages before
    it left here and adds its own artifact to `out` (and its records to `trace`)."""

    trace: CompileTrace
    module: Module | None = None
    options: GpuOptions | None = None
    target: Target | None = None
    make_module: Callable[[], Module] | None = None  # the frontend's work: Python source -> tile-IR module
    split_k: bool = False  # the split-K variant of a specialization (passes/split_k.py; runtime/split_k.py)
    persistent: bool = False  # the persistent variant (passes/make_persistent.py; runtime/persistent.py)
    out: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.module.kernel.name


@dataclass(frozen=True)
class Stage:
    """One step from source to cubin: `run(build)` with the same signature for every stage."""

    name: str  # the artifact it makes: "tile", "gpu", "llir", "ptx", "cubin" (and "frontend" before them)
    description: str
    run: Callable[[Build], None]


def _frontend(b: Build):
    t0 = time.perf_counter()
    b.module = b.make_module()
    verify(b.module, after="frontend")
    record_module(b.trace, "frontend", "Python AST -> tile IR (types, shapes, structured control flow)", b.module,
                  time.perf_counter() - t0, {"functions": len(b.module.functions)}, with_snapshot=True)


def _tile(b: Build):
    variant = b.split_k or b.persistent
    run_tile_pipeline(b.module, b.trace, tile_passes(b.split_k, b.persistent) if variant else None)
    b.out["tile"] = b.trace.final_ir


def _gpu(b: Build):
    check_fp8_formats(b.module, b.target.arch if b.target is not None else 90)
    run_gpu_pipeline(b.module, b.trace, b.options)
    b.out.update(gpu=b.trace.stage("gpu").ir, shared=b.module.shared_bytes, shared_plan=b.module.shared_plan,
                 launch_warps=b.options.num_warps + producer_warps(b.module.kernel))


def _llir(b: Build):
    t0 = time.perf_counter()
    try:
        b.out["llir"], b.out["arg_kinds"] = lower_kernel(b.module, b.options, b.target.arch)
    except (LoweringError, NotImplementedError) as e:
        raise CompilationError(b.name, f"GPU code generation failed: {e}", b.module.kernel.source_file,
                               b.module.kernel.first_line) from None
    positions = llvm_positions(b.out["llir"]) if b.options.line_info else None
    b.trace.record("to_llvm", "GPU IR -> LLVM IR (one function; registers per layout)", b.out["llir"],
                   time.perf_counter() - t0, True, {}, stage="llir", positions=positions)


def _dot_in_loop(module: Module) -> bool:
    return any(op.name == "scf.for" and any(o.name == "tt.dot" for o in op.walk())
               for fn in module.functions for op in fn.walk())


def _dot_loop_carries_addresses(module: Module) -> bool:
    """Whether a loop with a dot carries an address from one iteration to the next: a pointer, a tile of
    pointers, or a 64-bit scalar (strength_reduce_pointers' offset form, the pipeliner's `_ahead` copies)."""
    for fn in module.functions:
        for op in fn.walk():
            if op.name != "scf.for" or not any(o.name == "tt.dot" for o in op.walk()):
                continue
            for arg in op.regions[0].args:
                t = arg.type
                scalar = getattr(t, "scalar", t)
                if scalar.is_ptr() or (not isinstance(t, TensorType) and getattr(scalar, "ir", "") in ("i64", "u64")):
                    return True
    return False


# A dot loop carrying more than this many addresses per thread keeps LLVM's LSR: tiles of pointers that no vector
# access covers (a grouped GEMM's pointers loaded from memory, strides read in the kernel: one 2-byte load per
# element) are 64 registers per 32 addresses next to the accumulator; LSR carries one offset and rebuilds them.
LSR_MAX_CARRIED_ADDRESSES = 32


def _carried_addresses(module: Module) -> int:
    """The most addresses per thread that one loop with a dot carries in tiles of pointers: per tile, its registers
    per thread over the elements one vector access covers (the layout's size per thread along its fastest
    dimension)."""
    most = 0
    for fn in module.functions:
        for op in fn.walk():
            if op.name != "scf.for" or not any(o.name == "tt.dot" for o in op.walk()):
                continue
            n = 0
            for arg in op.regions[0].args:
                t = arg.type
                if not isinstance(t, TensorType) or not t.elem.is_ptr() or t.layout is None:
                    continue
                regs = len(t.layout.registers(t.shape))
                spt, order = getattr(t.layout, "spt", None), getattr(t.layout, "order", None)
                n += regs // spt[order[0]] if spt and order else regs
            most = max(most, n)
    return most


def _llvm_lsr(module: Module) -> bool:
    """LLVM's loop strength reduction, off for kernels with a dot in a loop (see llvm_to_ptx).
    KERNELLAB_LLVM_LSR=on/off overrides the choice, to measure it; =carried turns it off only where such a loop
    carries its addresses (what it was turned off for): a loop that rebuilds its pointers from the induction variable
    each iteration (fla's chunk kernels: `o_t = i_t * BT + arange(BT)` in int64) keeps LSR, which carries one offset
    instead of a 64-bit index per register (fla chunk_fwd_kernel_h with USE_GK: 168 -> 108 registers with
    KERNELLAB_REGISTER_DOT_OPERAND=1; Triton 96). A dot loop carrying more than LSR_MAX_CARRIED_ADDRESSES addresses
    per thread keeps LSR either way (a grouped GEMM over pointer arrays, 128x128x32 at 4 warps: 1440 spilled
    bytes with LSR off, 848 with it, Triton 688)."""
    forced = os.environ.get("KERNELLAB_LLVM_LSR", "").lower()
    if forced in ("on", "off"):
        return forced == "on"
    if _carried_addresses(module) > LSR_MAX_CARRIED_ADDRESSES:
        return True
    if forced == "carried":
        return not _dot_loop_carries_addresses(module)
    return not _dot_in_loop(module)


def _ptx(b: Build):
    t0 = time.perf_counter()
    lsr = _llvm_lsr(b.module)
    res = compile_llvm(b.out["llir"], b.target, b.name, ftz=b.options.reflect_ftz, loop_strength_reduction=lsr)
    ptx = res.ptx
    extra = producer_warps(b.module.kernel)
    if extra:  # setmaxnreg needs the count at entry: all the launch's threads share the register file
        ptx = _cap_registers(ptx, registers(b.options.num_warps, b.options.maxnreg, extra)[0])
    elif b.options.maxnreg:
        ptx = _cap_registers(ptx, b.options.maxnreg)
    if any(op.name == "ttg.make_tensormap" for op in b.module.kernel.walk()):
        ptx = _at_least_ptx(ptx, 83)
    b.out["ptx"] = ptx
    positions = ptx_positions(ptx) if b.options.line_info else None
    note = "" if lsr else " (LLVM loop strength reduction off: the loops carry their pointers)"
    if not res.slsr:
        if res.max_addresses_per_pointer > SLSR_MAX_ADDRESSES_PER_POINTER:
            why = f"{res.max_addresses_per_pointer} addresses off one pointer would make it quadratic"
        elif res.slsr_pairs > SLSR_MAX_PAIRS:
            why = f"{res.slsr_pairs} pairs of candidates would make it quadratic"
        else:
            why = "KERNELLAB_LLVM_SLSR=off"
        note += f" (straight-line strength reduction off: {why})"
    b.trace.record("to_ptx", f"LLVM O3 + NVPTX backend -> PTX for {b.target.cpu}{note}", ptx, time.perf_counter() - t0,
                   True, {**{f"{k}_s": round(v, 4) for k, v in res.times.items()},
                          "max_addresses_per_pointer": res.max_addresses_per_pointer,
                          **({"slsr_pairs": res.slsr_pairs} if res.slsr_pairs else {})}, stage="ptx",
                   positions=positions)


def _cubin(b: Build):
    t0 = time.perf_counter()
    try:
        # -lineinfo: keep the PTX's .loc lines as a line table in the cubin (the SASS view maps instructions to
        # source lines); it does not change the SASS
        cubin, report = ptx_to_cubin(b.out["ptx"], b.target, b.name, ["-lineinfo"] if b.options.line_info else ())
    except ToolchainError as e:
        err = ToolchainError(f"kernel '{b.name}': ptxas rejected the generated PTX; see compiled.asm['ptx']\n{e}")
        err.stages = {k: b.out[k] for k in ("gpu", "llir", "ptx")}  # build_gpu keeps them for that asm['ptx']
        raise err from None
    note = ""
    b.out["cubin"] = cubin
    capped = _occupancy_cap(b, report)
    if capped is not None:
        cubin, report, note = capped
    b.trace.record("to_cubin", f"ptxas -> cubin ({report.get('n_regs')} registers, "
                   f"{report.get('n_spills', 0)} bytes spilled){note}", report.get("log", ""), time.perf_counter() - t0,
                   True, {k: v for k, v in report.items() if k in ("n_regs", "n_spills", "shared", "local")},
                   stage="cubin")
    b.out["cubin"] = cubin
    b.out["report"] = report


def _occupancy_cap(b: Build, report: dict):
    """(cubin, report, note) of the kernel assembled again under the register count of the next occupancy cliff
    (codegen/occupancy_cap.py), or None when that does not apply or would spill."""
    regs = report.get("n_regs")
    if (not occupancy_cap.enabled() or b.options.maxnreg or not regs or report.get("n_spills")
            or b.target.arch not in occupancy_cap.SMEM_PER_SM or occupancy_cap.has_tensor_core_code(b.out["ptx"])):
        return None
    shared = b.out.get("shared") or 0
    cap = occupancy_cap.cliff(regs, b.options.num_warps, shared, b.target.arch)
    if cap is None:
        return None
    ptx = _cap_registers(b.out["ptx"], cap)
    try:
        cubin, rep = ptx_to_cubin(ptx, b.target, b.name, ["-lineinfo"] if b.options.line_info else ())
    except ToolchainError:
        return None
    if not occupancy_cap.acceptable(report, rep, cap, b.out["cubin"], cubin):
        return None
    before = occupancy_cap.blocks_per_sm(regs, b.options.num_warps, shared, b.target.arch)
    after = occupancy_cap.blocks_per_sm(rep["n_regs"], b.options.num_warps, shared, b.target.arch)
    b.out["ptx"] = ptx
    return cubin, rep, (f"; capped at {cap} registers (.maxnreg) for {after} blocks per SM instead of {before} "
                        f"at ptxas' own {regs}")


# Source to cubin, in order. The runtime runs "frontend".."tile" when a specialization is first launched (the
# interpreter needs no more) and "gpu".."cubin" when it is built for a GPU; each stage records what it did.
STAGES = (
    Stage("frontend", "Python AST -> tile IR", _frontend),
    Stage("tile", "tile passes (catalogue-driven simplification, loops)", _tile),
    Stage("gpu", "GPU passes: layouts, dot operands, shared memory, barriers", _gpu),
    Stage("llir", "GPU IR -> LLVM IR", _llir),
    Stage("ptx", "LLVM -> PTX", _ptx),
    Stage("cubin", "ptxas -> cubin", _cubin),
)


@contextlib.contextmanager
def paused_gc():
    """Python's cyclic garbage collector off for the duration (back on after, if it was on). A compile allocates
    hundreds of thousands of short-lived objects (IR ops, llvmlite instructions, trace records); each full
    collection then walks every object of the process (torch's included), which cost up to a third of the
    LLVM IR generation's time. The compile's cyclic garbage is collected after it, as before (peak memory of a
    16-config autotuning sweep unchanged). Nested and concurrent pauses leave it as the outermost found it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_stages(build: Build, first: str, last: str) -> Build:
    """Run the stages from `first` to `last` (names in STAGES) on `build`."""
    names = [s.name for s in STAGES]
    with paused_gc():
        for stage in STAGES[names.index(first):names.index(last) + 1]:
            stage.run(build)
    return build


def compile_to_cubin(module: Module, trace: CompileTrace, options: GpuOptions, target: Target,
                     assemble: bool = True, shared_limit: int | None = None) -> dict:
    """Lower a tile-IR module (mutated into GPU IR) and return every stage plus ptxas' report. With `shared_limit`,
    a plan over it stops after the GPU passes (`out["over_shared"]`): the caller builds another option set (fewer
    stages), so LLVM and ptxas would have been spent on a kernel that cannot launch."""
    build = run_stages(Build(trace, module, options, target), "gpu", "gpu")
    if shared_limit is not None and build.out["shared"] > shared_limit:
        build.out["over_shared"] = True
        return build.out
    return run_stages(build, "llir", "cubin" if assemble else "ptx").out


def check_fp8_formats(module: Module, arch: int = 90):
    """Triton's CUDA backend knows only the fp8 formats NVIDIA GPUs convert (e4m3, e5m2) and its own e4b15; the AMD
    fnuz formats (float8e4b8, float8e5b16) are refused wherever they appear, as Triton refuses them. From Hopper
    on, e4b15 compiles with Triton's deprecation warning."""
    import warnings

    from ..errors import SemanticError
    from .fp8 import FORMATS, GPU_SUPPORTED
    from .types import DType

    def fp8(t):
        s = getattr(t, "scalar", t)
        s = getattr(s, "elem", s)
        return s if isinstance(s, DType) and s.ir in FORMATS else None

    fn = module.kernel
    uses = [(fp8(a.type), fn.first_line) for a in fn.args if fp8(a.type)]
    for op in fn.walk():
        for v in list(op.operands) + list(op.results):
            if fp8(v.type):
                uses.append((fp8(v.type), getattr(op.loc, "line", None) or fn.first_line))
    found = [(t, line) for t, line in uses if t.ir not in GPU_SUPPORTED]
    if found:
        t, line = found[0]
        names = tuple(f"fp8{x[2:]}" for x in GPU_SUPPORTED)
        reason = (f"type {t.name} not supported in this architecture. The supported fp8 dtypes are {names} "
                  "(float8e4b8 and float8e5b16 are AMD formats; the CPU interpreter runs them)")
        # the cause carries the bare reason, as for other refused types (Triton's tests read it there)
        raise CompilationError(fn.name, reason, fn.source_file, line) from SemanticError(reason)
    if arch >= 90 and any(t.ir == "f8e4b15" for t, _ in uses):
        warnings.warn(f"kernel '{fn.name}': the use of fp8e4b15 is deprecated on Hopper and later architectures "
                      "(Triton's warning; it converts in software there); prefer float8e4nv", UserWarning,
                      stacklevel=2)


def _at_least_ptx(ptx: str, version: int) -> str:
    """Raise the PTX's `.version` to `version` (x10) where it is lower: tensormap.replace and
    tensormap.cp_fenceproxy (tensor maps made in the kernel) are PTX 8.3, newer than the NVPTX backend may
    target; the rest of the text means the same under the newer ISA."""
    def bump(m):
        have = int(m.group(1)) * 10 + int(m.group(2))
        return m.group(0) if have >= version else f".version {version // 10}.{version % 10}"
    return re.sub(r"^\.version (\d+)\.(\d+)", bump, ptx, count=1, flags=re.M)


def _cap_registers(ptx: str, n: int) -> str:
    """Triton's maxnreg: a `.maxnreg` directive on the entry (ptxas ignores --maxrregcount once `.reqntid` is
    given)."""
    return re.sub(r"^(\.reqntid[^\n]*)$", lambda m: f"{m.group(1)}\n.maxnreg {int(n)}", ptx, count=1, flags=re.M)
