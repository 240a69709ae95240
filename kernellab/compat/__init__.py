"""`import triton` served by kernellab: an opt-in for existing Triton code and the libraries it imports.

    import kernellab.compat
    kernellab.compat.install()     # before anything imports triton
    import triton, triton.language as tl   # now kernellab's compiler, interpreter and lab

or run a whole script or module unchanged: `python -m kernellab.run script.py` /
`python -m kernellab.run -m pytest tests/`. Without `install()` nothing changes: a real Triton
installed beside kernellab keeps working as before.

The modules are assembled from kernellab's own objects (no copies of Triton): the language is
`kernellab.language`, the exceptions are kernellab's, arranged so that code catching Triton's
(`triton.TritonError`, `triton.CompilationError`, `triton.runtime.errors.OutOfResources`...) catches ours.
"""
from __future__ import annotations

import importlib.machinery
import sys
import types

TRITON_VERSION = "3.6.0"  # the Triton release whose surface this serves

_installed: dict[str, types.ModuleType] = {}


def _module(name: str, doc: str, package: bool = True, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    if package:
        mod.__path__ = []  # a package: `import triton.x` for an x we do not serve fails with ModuleNotFoundError
    # a spec, as imported modules have: `importlib.util.find_spec("triton")` (torch asks it) raises on None
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
    mod.__kernellab__ = True
    mod.__dict__.update(attrs)
    return mod


def _triton_key() -> str:
    """Triton's compiler identity (part of torch inductor's cache keys): kernellab's own compiler hash."""
    from ..runtime.cache import compiler_hash

    return f"kernellab-{TRITON_VERSION}-{compiler_hash()}"


def _build() -> dict[str, types.ModuleType]:
    import kernellab
    import kernellab.language as tl
    from kernellab import errors, testing
    from kernellab.language import core as tl_core
    from kernellab.language import extra, math, random

    from ..runtime import jit as _jit
    from . import (
        blas_shim,
        compiler_shim,
        driver,
        filecheck_shim,
        gluon_shim,
        knobs,
        profiler_shim,
        runtime_shim,
        testing_shim,
        tools_shim,
    )

    mods: dict[str, types.ModuleType] = {}

    def add(name, mod):
        mods[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(mods[parent], child, mod)
        return mod

    triton = add("triton", _module(
        "triton", "Triton's API, served by kernellab (kernellab.compat).",
        __version__=TRITON_VERSION,
        jit=kernellab.jit, JITFunction=kernellab.JITFunction, KernelInterface=_jit.KernelInterface,
        autotune=kernellab.autotune, Config=kernellab.Config, heuristics=kernellab.heuristics,
        cdiv=kernellab.cdiv, next_power_of_2=kernellab.next_power_of_2,
        TritonError=errors.KernelLabError, CompilationError=errors.CompilationError,
        OutOfResources=errors.OutOfResources, InterpreterError=runtime_shim.InterpreterError,
        reinterpret=runtime_shim.reinterpret, TensorWrapper=runtime_shim.TensorWrapper,
        MockTensor=runtime_shim.MockTensor, constexpr_function=runtime_shim.constexpr_function,
        set_allocator=runtime_shim.set_allocator, must_use_result=runtime_shim.must_use_result,
        compile=compiler_shim.compile,
    ))
    add("triton.errors", _module("triton.errors", "Triton's exception base.", package=False,
                                 TritonError=errors.KernelLabError))
    mods["triton.language"] = tl
    triton.language = tl
    mods["triton.language.core"] = tl_core
    mods["triton.language.math"] = math
    mods["triton.language.random"] = random
    mods["triton.language.standard"] = tl.standard
    mods["triton.language.extra"] = extra
    mods["triton.language.extra.libdevice"] = extra.libdevice
    mods["triton.language.extra.cuda"] = extra.cuda
    mods["triton.language.extra.cuda.libdevice"] = extra.cuda.libdevice
    mods["triton.language.target_info"] = tl.target_info

    add("triton.testing", testing_shim.module(_module, testing))
    runtime = add("triton.runtime", _module(
        "triton.runtime", "Launch-side objects.",
        driver=driver.driver, autotune=kernellab.autotune, Config=kernellab.Config, heuristics=kernellab.heuristics,
        JITFunction=kernellab.JITFunction, KernelInterface=_jit.KernelInterface,
        reinterpret=runtime_shim.reinterpret, TensorWrapper=runtime_shim.TensorWrapper,
        MockTensor=runtime_shim.MockTensor, OutOfResources=errors.OutOfResources,
        InterpreterError=runtime_shim.InterpreterError,
        Autotuner=sys.modules["kernellab.runtime.autotuner"].Autotuner,
        Heuristics=sys.modules["kernellab.runtime.autotuner"].Heuristics,
    ))
    add("triton.runtime.jit", _module(
        "triton.runtime.jit", "The @jit decorator and launch-time wrappers.", package=False,
        jit=kernellab.jit, JITFunction=kernellab.JITFunction, KernelInterface=_jit.KernelInterface,
        TensorWrapper=runtime_shim.TensorWrapper, reinterpret=runtime_shim.reinterpret,
        MockTensor=runtime_shim.MockTensor, constexpr_function=runtime_shim.constexpr_function,
        type_canonicalisation_dict=runtime_shim.TYPE_CANONICAL_NAMES,
    ))
    add("triton.runtime.errors", _module(
        "triton.runtime.errors", "Runtime exceptions.", package=False,
        InterpreterError=runtime_shim.InterpreterError, OutOfResources=errors.OutOfResources,
        PTXASError=errors.ToolchainError, AutotunerError=errors.LaunchError,
    ))
    add("triton.runtime.autotuner", _module(
        "triton.runtime.autotuner", "The autotuner.", package=False,
        autotune=kernellab.autotune, Config=kernellab.Config, heuristics=kernellab.heuristics,
        Autotuner=sys.modules["kernellab.runtime.autotuner"].Autotuner,
        Heuristics=sys.modules["kernellab.runtime.autotuner"].Heuristics,
        OutOfResources=errors.OutOfResources, PTXASError=errors.ToolchainError,
    ))
    add("triton.runtime.driver", _module("triton.runtime.driver", "The active driver.", package=False,
                                         driver=driver.driver))
    add("triton.runtime._allocation", _module("triton.runtime._allocation", "Scratch allocator.", package=False,
                                              set_allocator=runtime_shim.set_allocator,
                                              NullAllocator=runtime_shim.NullAllocator))
    runtime.driver = driver.driver  # `triton.runtime.driver.active`: the object, as Triton has it
    compiler = add("triton.compiler", _module(
        "triton.compiler", "Compiler entry points.",
        CompilationError=errors.CompilationError, compile=compiler_shim.compile,
        ASTSource=compiler_shim.ASTSource, CompiledKernel=_jit.CompiledKernel,
    ))
    add("triton.compiler.errors", _module(
        "triton.compiler.errors", "Compile-time exceptions.", package=False,
        CompilationError=errors.CompilationError, CompileTimeAssertionFailure=errors.StaticAssertionError,
        UnsupportedLanguageConstruct=errors.CompilationError,
    ))
    compiler.errors = mods["triton.compiler.errors"]
    # torch (inductor, dynamo) imports this module whenever `triton` is importable; without it importing
    # torch._dynamo (which liger_kernel does) fails under install()
    add("triton.compiler.compiler", _module(
        "triton.compiler.compiler", "Compiler entry points.", package=False,
        compile=compiler_shim.compile, CompilationError=errors.CompilationError, ASTSource=compiler_shim.ASTSource,
        CompiledKernel=_jit.CompiledKernel, triton_key=_triton_key,
    ))
    # torch._inductor's triton_compat (imported by torch._dynamo, torch.compile) reads triton_key from here
    add("triton.runtime.cache", _module("triton.runtime.cache", "Compile caches.", package=False,
                                        triton_key=_triton_key))
    # one backend plugin, "nvidia" (see driver.BACKENDS); torch's has_triton() looks for "cpu" here and finds none
    add("triton.backends", _module("triton.backends", "Backends.", backends=dict(driver.BACKENDS),
                                   Backend=driver.Backend))
    add("triton.backends.compiler", _module("triton.backends.compiler", "Targets.", package=False,
                                            GPUTarget=driver.GPUTarget))
    add("triton.knobs", knobs.module(_module))
    triton.knobs = mods["triton.knobs"]
    tools = add("triton.tools", _module("triton.tools", "Host-side tools."))
    add("triton.tools.tensor_descriptor", _module(
        "triton.tools.tensor_descriptor", "Host-side tensor descriptors.", package=False,
        TensorDescriptor=tools_shim.TensorDescriptor,
    ))
    tools.tensor_descriptor = mods["triton.tools.tensor_descriptor"]
    add("triton.tools.mxfp", _module("triton.tools.mxfp", "Microscaling (MX) host data: fp4 e2m1, e8m0 scales.",
                                     package=False,
                                     MXFP4Tensor=tools_shim.MXFP4Tensor, MXScaleTensor=tools_shim.MXScaleTensor))
    add("triton.profiler", profiler_shim.module(_module))
    add("triton._filecheck", filecheck_shim.module(_module))
    for name, mod in blas_shim.modules(_module).items():
        add(name, mod)
    for name, mod in gluon_shim.modules(_module).items():
        add(name, mod)
    return mods


def install() -> None:
    """Make `import triton` (and its submodules that real code imports) resolve to kernellab.

    Call it before anything imports Triton; a real Triton already imported in this process would be
    replaced under the feet of the code holding it, so that is refused."""
    if _installed:
        return
    existing = sys.modules.get("triton")
    if existing is not None and not getattr(existing, "__kernellab__", False):
        from kernellab.errors import KernelLabError

        raise KernelLabError("kernellab.compat.install(): the real Triton is already imported in this process; "
                             "call install() first (e.g. at the top of the script, or run it with "
                             "`python -m kernellab.run script.py`)")
    mods = _build()
    sys.modules.update(mods)
    _installed.update(mods)
    from ..runtime import jit

    knobs = mods["triton.knobs"]  # its groups get replaced (Triton's fresh_knobs fixture): read them per launch
    jit.option_defaults = lambda: {} if knobs.language.default_fp_fusion else {"enable_fp_fusion": False}
    jit.default_bounds = "allocation"  # a Triton pointer may reach its tensor's storage (loads: its allocation)
    from ..compiler.types import DType
    from . import runtime_shim
    from .runtime_shim import interpreting

    DType.repr_module = "triton.language"  # repr(tl.float32) is Triton's evaluatable text
    from ..compiler import frontend

    # Triton's rule on the globals a kernel reads (its knob, or TRITON_ALLOW_NON_CONSTEXPR_GLOBALS, lifts it)
    frontend.strict_globals = lambda: not knobs.compilation.allow_non_constexpr_globals
    jit.compile_hook = lambda fn, specialization, warmup: runtime_shim.call_jit_cache_hook(
        knobs.runtime.jit_cache_hook, fn, specialization, warmup)
    if interpreting():  # TRITON_INTERPRET=1 asked for the CPU: no notice that kernels run there
        jit._NOTICE.append(True)


def uninstall() -> None:
    """Undo install(): `import triton` finds whatever is installed again."""
    for name, mod in _installed.items():
        if sys.modules.get(name) is mod:
            del sys.modules[name]
    _installed.clear()
    from ..runtime import jit

    jit.option_defaults = None
    jit.default_bounds = "view"
    jit.compile_hook = None
    from ..compiler.types import DType

    DType.repr_module = None
    from ..compiler import frontend

    frontend.strict_globals = None


def installed() -> bool:
    return bool(_installed)
