"""LLVM IR text -> PTX text: parse, link libdevice when needed, NVVMReflect + O3, NVPTX backend.

The pipeline (what Triton and NVPTXUsage.rst's libdevice recipe do):

1. parse the IR (llvmlite.binding), set the NVPTX triple and data layout;
2. when the module calls ``__nv_*`` functions: link ``libdevice.10.bc``, set the ``nvvm-reflect-ftz`` module
   flag (0 = IEEE denormals, 1 = flush to zero) and internalize everything except the kernels, so that O3's
   global DCE drops the hundreds of libdevice functions the kernel does not call;
3. run the new-pass-manager O3 pipeline built from the NVPTX TargetMachine, with libdevice's
   ``__nvvm_reflect("__CUDA_FTZ")`` / ``("__CUDA_ARCH")`` queries still unanswered (see :func:`_defer_reflect`);
   the NVPTX code generator's own NVVMReflect answers them (checked: no ``__nvvm_reflect`` survives into the PTX);
4. emit PTX and check it for calls LLVM could not resolve: a declared ``llvm.nvvm.*`` function that is not an
   intrinsic in this LLVM version, a ``__nv_*`` name libdevice lacks. LLVM keeps those as ``.extern .func``
   and only ptxas or the driver would complain, far from the cause.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ...errors import ToolchainError
from .libdevice import find_libdevice
from .target import Target

# LLVM's global state (pass registry, command-line options) is not meant for concurrent use: one compile at a time.
_LOCK = threading.Lock()
_INITIALIZED = False

_KERNEL_DEF_RE = re.compile(r'^define\b[^@\n]*\bptx_kernel\b[^@\n]*@("(?:[^"\\]|\\.)*"|[\w.$-]+)\s*\(', re.M)
_NV_CALL_RE = re.compile(r"@__nv_\w+")
_NV_NAME_RE = re.compile(r'@"?(__nv_\w+)')
_EXTERN_FUNC_RE = re.compile(r"\.extern\s+\.func\s*(?:\([^)]*\)\s*)?([\w.$]+)")
_UNRESOLVED_PREFIXES = ("llvm.", "__nv_", "__nvvm_")
_DEFERRED_REFLECT = "__kernellab_nvvm_reflect_deferred"


@dataclass
class LLVMResult:
    """What compiling LLVM IR produced: the PTX plus what the lab shows about the LLVM stage."""

    ptx: str
    optimized_ir: str
    linked_libdevice: str | None  # the path of the libdevice that was linked, None when not needed
    kernels: list[str]
    times: dict[str, float] = field(default_factory=dict)  # seconds per step
    slsr: bool = True  # whether the code generator ran straight-line strength reduction
    max_addresses_per_pointer: int = 0  # getelementptrs off one pointer in the optimized IR (the most)
    slsr_pairs: int = 0  # pairs SLSR compares without an early stop (slsr_pairs)


def _initialize() -> None:
    global _INITIALIZED
    if not _INITIALIZED:
        import llvmlite.binding as llvm

        # llvmlite >= 0.44 initializes the core itself; llvm.initialize() now raises.
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        # NVVMReflect in LLVM 22 ignores an "nvvm-reflect-prec-sqrt" module flag (checked: __nv_sqrtf stayed
        # sqrt.approx); its -nvvm-reflect-add option works. A process-wide setting, done once: IEEE sqrt.
        llvm.set_option("kernellab", "-nvvm-reflect-add=__CUDA_PREC_SQRT=1")
        # 32-bit shared/const/local pointers (as Triton): a 64-bit shared address costs two registers, and
        # LLVM keeps the addresses of one layout conversion live for the next that reuses them
        llvm.set_option("kernellab", "-nvptx-short-ptr")
        if slsr_mode() == "off":
            llvm.set_option("kernellab", "-opt-disable=slsr")  # the pass gate only grows: for the whole process
        _INITIALIZED = True


# Straight-line strength reduction (SLSR, run inside the NVPTX code generator) in LLVM 22 searches, for every
# address computation B + i*S, all earlier ones with the same base B in dominating blocks, and computes a SCEV
# difference with each whose stride differs, with no limit on the search (LLVM 21 and Triton 3.6's LLVM stop after
# 50 candidates). A thread's element addresses off one pointer cost n^2 SCEV subtractions: Liger's group_norm (512
# weights per thread gathered through a division, 512 getelementptrs off each of two pointers) spent 8.5 s of CPU
# there and 0.2 s in the rest of the code generator; at 128 or fewer per pointer (every other Liger, attorch and
# benchmark kernel) it takes milliseconds and its rewrites save registers (attorch's 1-warp softmax backward spills
# 1424 bytes without it, 172 with). Above this many getelementptrs off one pointer, the code generator runs in a
# child process with SLSR off (nvptx_codegen.py): OptDisable, LLVM's only switch for the pass, is process-wide.
SLSR_MAX_ADDRESSES_PER_POINTER = 128

_GEP_BASE_RE = re.compile(r"= getelementptr (?:inbounds |nuw |nusw )*[^,]+, ptr(?: addrspace\(\d+\))? (%[\w.$\"-]+)")

# KERNELLAB_LLVM_SLSR=pairs (the default): SLSR also off above this many pairs of candidates it compares without
# an early stop. The per-pointer count misses kernels with many pointers and integer sums: attorch's conv2d (its
# AvgPool layers) at 2 warps has at most 128 addresses off one pointer, but 128 rows a thread of (row offset +
# column offset) sums and addresses off four pointers: 60k such pairs, 7.2 s of SLSR in an 8.2 s code generator
# (issue 14, benchmarks/NOTES.md). Measured there: 5k pairs 0.9 s of SLSR, 15k 2.4 s, 27k 5.9 s, 60k 7.2 s.
SLSR_MAX_PAIRS = 8192
_GEP_VAR_RE = re.compile(r"= getelementptr (?:inbounds |nuw |nusw )*[^,]+, ptr(?: addrspace\(\d+\))? "
                         r"(%[\w.$\"-]+), i\d+ (%[\w.$\"-]+)")
_ADD_RE = re.compile(r"= add (?:nuw |nsw )*(i\d+) (%[\w.$\"-]+), (%[\w.$\"-]+)")


def slsr_mode() -> str:
    """KERNELLAB_LLVM_SLSR: "on" (SLSR always, in process), "off" (never, for the whole process), "auto" (off for
    kernels with more than SLSR_MAX_ADDRESSES_PER_POINTER addresses off one pointer) or "pairs" (the default: as
    auto, and off above SLSR_MAX_PAIRS pairs: slsr_pairs)."""
    mode = os.environ.get("KERNELLAB_LLVM_SLSR", "pairs").lower()
    return mode if mode in ("on", "off", "auto") else "pairs"


def slsr_pairs(ir_text: str) -> int:
    """Pairs of SLSR candidates in one bucket whose difference is not a constant, in the (optimized) IR. LLVM 22's
    SLSR files `B + S` (an add; both ways round) and `&B[S]` (a getelementptr) by the operand they share, and for
    each candidate walks every earlier one sharing it, computing a SCEV difference; a constant difference stops the
    walk, a variable one does not. So the candidates that share an operand and whose other operand is a value
    (not a constant) cost a comparison a pair: n(n-1)/2 for n of them."""
    groups: dict = {}
    for m in _GEP_VAR_RE.finditer(ir_text):
        groups[m.group(1)] = groups.get(m.group(1), 0) + 1
    for m in _ADD_RE.finditer(ir_text):
        ty, a, b = m.groups()
        groups[(ty, a)] = groups.get((ty, a), 0) + 1
        if b != a:
            groups[(ty, b)] = groups.get((ty, b), 0) + 1
    return sum(n * (n - 1) // 2 for n in groups.values())


def max_addresses_per_pointer(ir_text: str) -> int:
    """The most getelementptrs off one pointer value in the (optimized) IR: the size of SLSR's largest search."""
    counts: dict[str, int] = {}
    for m in _GEP_BASE_RE.finditer(ir_text):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return max(counts.values(), default=0)


def _emit_in_child(ir_text: str, target: Target, options: list[str], kernel_name: str) -> str:
    """The PTX of optimized IR from the code generator in a fresh process started with `options`."""
    import json
    import subprocess
    import sys

    header = json.dumps({"triple": target.triple, "cpu": target.cpu, "features": target.features,
                         "options": options})
    script = str(Path(__file__).with_name("nvptx_codegen.py"))
    p = subprocess.run([sys.executable, script], input=header + "\n" + ir_text, capture_output=True, text=True)
    if p.returncode != 0:
        raise ToolchainError(f"kernel '{kernel_name}': the NVPTX code generator (child process, SLSR off) failed:\n"
                             f"{p.stderr[-2000:]}")
    return p.stdout


@lru_cache(maxsize=None)
def _target_machine(cpu: str, features: str):
    import llvmlite.binding as llvm

    return llvm.Target.from_triple(Target(80).triple).create_target_machine(
        cpu=cpu, features=features, opt=3, codemodel="default")


@lru_cache(maxsize=4)
def _read_bitcode(path: str) -> bytes:
    return Path(path).read_bytes()


def _flags_module(triple: str, data_layout: str, flags: dict[str, int]) -> str:
    """A module holding only ``!llvm.module.flags`` entries (behaviour 4 = override), to link into the kernel's."""
    refs = ", ".join(f"!{i}" for i in range(len(flags)))
    body = "".join(f'!{i} = !{{i32 4, !"{name}", i32 {value}}}\n' for i, (name, value) in enumerate(flags.items()))
    return (f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n'
            f"!llvm.module.flags = !{{{refs}}}\n{body}")


# The single-precision libdevice functions with a rarely taken path (inf/NaN/negative operands, huge arguments)
# that early reflect answers leave cheap enough for SimplifyCFG to speculate into selects, and that deferred
# reflect keeps a branch (measured: more conditional branches in the PTX of one call with "late" than with
# "early", every float function of libdevice.10.bc; tests/test_libdevice_reflect.py checks some of them). The
# double-precision functions ask no reflect question there (no FTZ), the others gain no branch.
BRANCHY_LIBDEVICE = frozenset(
    f"__nv_{n}" for n in ("logf", "log2f", "log10f", "log1pf", "acoshf", "asinhf", "atanhf", "atanf", "atan2f",
                          "sinf", "cosf", "sinpif", "cospif", "erff", "normcdff", "lgammaf", "remainderf",
                          "j0f", "j1f", "y0f", "y1f"))


def reflect_mode() -> str:
    """KERNELLAB_NVVM_REFLECT: "auto" (the default: answer libdevice's reflect queries after O3, in the code
    generator as Triton does, when the kernel calls a BRANCHY_LIBDEVICE function; else at the start of O3),
    "late" (always after O3) or "early" (never). See :func:`_defer_reflect`."""
    mode = os.environ.get("KERNELLAB_NVVM_REFLECT", "auto").lower()
    return mode if mode in ("auto", "late", "early") else "auto"


def defers_reflect(ir_text: str) -> bool:
    """Whether this module's reflect queries are answered after O3 (see reflect_mode)."""
    mode = reflect_mode()
    if mode != "auto":
        return mode == "late"
    return any(m.group(1) in BRANCHY_LIBDEVICE for m in _NV_NAME_RE.finditer(ir_text))


def _defer_reflect(llvm, lib, mod, triple: str, data_layout: str) -> None:
    """Hide libdevice's ``__nvvm_reflect`` from O3 (renamed to an opaque function until :func:`_restore_reflect`).

    Why: libdevice's ``logf`` (and ``log2f``, ``log1pf``, ...) ends in ``if (x is inf/NaN/negative) r = fmaf(x,
    inf, inf)``; the fmaf is itself ``__nvvm_reflect("__CUDA_FTZ") ? fma.ftz : fma``. Answered early, the slow path
    is one fma and SimplifyCFG speculates it into a select: straight-line code, in which ptxas issues all of a
    thread's loads first and keeps every element live (Liger's kl_div forward, 32 logs a thread: 95 registers).
    Unanswered during O3, the reflect call (declared here as writing memory nothing else can see: never
    speculated, merged or hoisted, and no barrier to loads and stores) keeps the slow path a branch, as in
    Triton, whose O3 also runs before NVVMReflect; ptxas then finishes each element's log before the next
    element's loads and predicates the branches away (33 registers, Triton 32). The code generator runs
    NVVMReflect (NVPTXPassConfig::addIRPasses) and folds the calls and their selects there.

    Only for kernels that call such a function (BRANCHY_LIBDEVICE): elsewhere the deferral only costs. The FTZ
    choice of e.g. ``rsqrtf`` stays a branch diamond through O3, splitting the block, and attorch's 1-warp layer
    norm forward then spills 280 bytes (as Triton's does) where it spilled none."""
    mod.link_in(llvm.parse_assembly(
        f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n'
        f"declare i32 @{_DEFERRED_REFLECT}(ptr) #0\n"
        "attributes #0 = { nounwind willreturn memory(inaccessiblemem: readwrite) }\n"))
    for f in lib.functions:
        if f.name == "__nvvm_reflect":
            f.name = _DEFERRED_REFLECT


def _restore_reflect(mod) -> None:
    for f in mod.functions:
        if f.name == _DEFERRED_REFLECT:
            f.name = "__nvvm_reflect"


def _kernels_in(ir_text: str) -> list[str]:
    return [name.strip('"') for name in _KERNEL_DEF_RE.findall(ir_text)]


def unresolved_calls(ptx: str) -> list[str]:
    """Functions the PTX declares ``.extern`` that nothing will ever define (LLVM intrinsics it did not know,
    libdevice names it did not have)."""
    return [n for n in _EXTERN_FUNC_RE.findall(ptx) if n.startswith(_UNRESOLVED_PREFIXES)]


def compile_llvm(llvm_ir: str, target: Target, kernel_name: str, ftz: bool = False,
                 loop_strength_reduction: bool = True) -> LLVMResult:
    """LLVM IR text -> :class:`LLVMResult` (PTX, optimized IR, timings). See the module docstring.

    ``ftz`` answers libdevice's ``__nvvm_reflect("__CUDA_FTZ")`` through the ``nvvm-reflect-ftz`` module flag
    (unless the IR sets it); the default keeps IEEE denormals, like nvcc. ``__CUDA_PREC_SQRT`` is always 1
    (``__nv_sqrtf`` is correctly rounded); emit ``llvm.nvvm.sqrt.approx.f`` for the fast one.
    ``loop_strength_reduction=False`` turns off LLVM's LSR for this compile (see :func:`llvm_to_ptx`).
    """
    import llvmlite.binding as llvm

    with _LOCK:
        _initialize()
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        try:
            mod = llvm.parse_assembly(llvm_ir)
        except RuntimeError as e:
            raise ToolchainError(f"kernel '{kernel_name}': LLVM rejected the generated IR (a kernellab codegen "
                                 f"bug):\n{e}") from None
        tm = _target_machine(target.cpu, target.features)
        data_layout = str(tm.target_data)
        mod.triple = target.triple
        mod.data_layout = data_layout
        text = str(mod)
        kernels = _kernels_in(text)
        if kernel_name not in kernels:
            kernels.append(kernel_name)
        times["parse"] = time.perf_counter() - t0

        libdevice_path = None
        if _NV_CALL_RE.search(text):
            t0 = time.perf_counter()
            libdevice_path = find_libdevice()
            lib = llvm.parse_bitcode(_read_bitcode(libdevice_path))
            lib.triple = target.triple
            lib.data_layout = data_layout
            if defers_reflect(text):
                _defer_reflect(llvm, lib, mod, target.triple, data_layout)
            lib_globals = {g.name for g in lib.global_variables if not g.is_declaration}
            mod.link_in(lib)
            if '"nvvm-reflect-ftz"' not in text:
                mod.link_in(llvm.parse_assembly(_flags_module(target.triple, data_layout,
                                                              {"nvvm-reflect-ftz": int(ftz)})))
            for g in mod.global_variables:
                if g.name in lib_globals and not g.is_declaration:
                    g.linkage = "internal"
            times["link_libdevice"] = time.perf_counter() - t0

        keep = set(kernels)
        for f in mod.functions:
            if not f.is_declaration and f.name not in keep:
                f.linkage = "internal"  # device functions and libdevice: inlined or dropped by O3
        try:
            mod.verify()
        except RuntimeError as e:
            raise ToolchainError(f"kernel '{kernel_name}': the generated LLVM IR does not verify (a kernellab "
                                 f"codegen bug):\n{e}") from None

        t0 = time.perf_counter()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(tm, pto)
        if libdevice_path is not None:
            # Drop the ~350 unused (now internal) libdevice functions first: O3 would otherwise optimize each
            # of them before its own global DCE runs (measured 40 ms -> 1.5 ms for a kernel calling expf).
            dce = llvm.create_new_module_pass_manager()
            dce.add_global_dead_code_eliminate_pass()
            dce.run(mod, pb)
        pb.getModulePassManager().run(mod, pb)
        _restore_reflect(mod)
        times["optimize"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        optimized_ir = str(mod)
        addresses = max_addresses_per_pointer(optimized_ir)
        mode = slsr_mode()
        pairs = slsr_pairs(optimized_ir) if mode == "pairs" else 0
        slsr = mode == "on" or (mode in ("auto", "pairs") and addresses <= SLSR_MAX_ADDRESSES_PER_POINTER
                                and pairs <= SLSR_MAX_PAIRS)
        # LSR runs in the NVPTX code generator, so the switch is the process-wide option, set under the lock
        lsr = f"-disable-lsr={0 if loop_strength_reduction else 1}"
        if slsr or slsr_mode() == "off":
            llvm.set_option("kernellab", lsr)
            ptx = tm.emit_assembly(mod)
        else:
            ptx = _emit_in_child(optimized_ir, target, ["-nvvm-reflect-add=__CUDA_PREC_SQRT=1", "-nvptx-short-ptr", lsr,
                                                        "-opt-disable=slsr"], kernel_name)
        times["emit_ptx"] = time.perf_counter() - t0

    bad = unresolved_calls(ptx)
    if bad:
        hints = []
        if any(n.startswith("llvm.") for n in bad):
            hints.append("an 'llvm.nvvm.*' name that is not an intrinsic in this LLVM version "
                         f"({llvm.llvm_version_info}) is kept as a call to an external function; "
                         "emit the instruction as inline PTX instead")
        if any(n.startswith("__nv_") for n in bad):
            hints.append("a '__nv_*' function that libdevice does not define")
        if any(n.startswith("__nvvm_") for n in bad):
            hints.append("NVVMReflect did not run")
        raise ToolchainError(f"kernel '{kernel_name}': the PTX calls functions nothing defines: "
                             f"{', '.join(sorted(set(bad)))} ({'; '.join(hints)}). This is a kernellab codegen "
                             f"bug; the PTX is in compiled.asm['ptx'].")
    if not re.search(rf"\.entry\s+{re.escape(kernel_name)}\s*\(", ptx):
        raise ToolchainError(f"kernel '{kernel_name}': no '.entry {kernel_name}' in the PTX; the kernel function "
                             f"must exist and use the ptx_kernel calling convention")
    return LLVMResult(ptx=ptx, optimized_ir=optimized_ir, linked_libdevice=libdevice_path,
                      kernels=kernels, times=times, slsr=slsr, max_addresses_per_pointer=addresses,
                      slsr_pairs=pairs)


def llvm_to_ptx(llvm_ir: str, target: Target, kernel_name: str, ftz: bool = False,
                loop_strength_reduction: bool = True) -> str:
    """LLVM IR text -> PTX text for ``target``; ``kernel_name`` is the ``ptx_kernel`` entry to keep.

    ``loop_strength_reduction=False`` for kernels whose loops already carry their pointers (the tile pass
    strength_reduce_pointers, or the user's ``ptrs += step``): LLVM's LSR then re-forms each carried 64-bit
    pointer as an invariant base plus a shared offset, which ptxas turns into register-pair copies and an
    ``IMAD.WIDE`` per pointer next to the tensor-core instructions (H200, matmul loops: 0.90-0.95x -> 0.98-1.00x
    Triton; benchmarks/NOTES.md).

    Raises :class:`kernellab.errors.ToolchainError` when LLVM rejects the IR, libdevice is needed but missing,
    or the PTX still calls unresolved ``llvm.nvvm.*`` / ``__nv_*`` functions.
    """
    return compile_llvm(llvm_ir, target, kernel_name, ftz=ftz, loop_strength_reduction=loop_strength_reduction).ptx
