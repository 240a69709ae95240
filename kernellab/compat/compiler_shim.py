"""`triton.compile(triton.compiler.ASTSource(fn, signature, constexprs))`: compile a @jit function for a
signature written as Triton's type strings, without arguments and without launching. Triton's compile-error
tests and tools that pre-build kernels go through this; kernellab's frontend does the work, so its
CompilationError (Triton's `triton.compiler.errors.CompilationError` under compat) is what a bad kernel raises."""
from __future__ import annotations

from ..compiler.frontend import RuntimeArg
from ..compiler.types import DTYPES, TYPE_CANONICAL_NAMES, PointerType
from ..errors import KernelLabError
from ..language.core import unwrap

# Triton's canonical type strings ("i32", "fp16", "u1", ...) and kernellab's IR names, to dtypes
_BY_NAME = {**{TYPE_CANONICAL_NAMES.get(d.name, d.ir): d for d in DTYPES.values()}, **DTYPES}


class ASTSource:
    """A @jit function with the types of its runtime parameters (`signature`: name -> "i32", "*fp32",
    "constexpr") and the values of its compile-time ones (`constexprs`: name or (index,) -> value)."""

    def __init__(self, fn, signature, constexprs=None, attrs=None):
        self.fn, self.signature = fn, dict(signature or {})
        self.constexprs, self.attrs = dict(constexprs or {}), dict(attrs or {})
        if not hasattr(fn, "_kl_source"):
            raise KernelLabError(f"ASTSource: fn must be a @triton.jit function, got {type(fn).__name__}")
        for k, v in self.signature.items():
            if not isinstance(k, str) or k not in fn.arg_names:
                raise KernelLabError(f"ASTSource: {fn.__name__}() has no parameter {k!r} (signature keys are "
                                     f"parameter names: {', '.join(fn.arg_names)})")
            if not isinstance(v, str):
                raise KernelLabError(f"ASTSource: the type of {k!r} must be a string such as 'i32' or '*fp32'")

    def name_of(self, key) -> str:
        """A constexprs key as a parameter name: Triton allows a name or a 1-element index path."""
        if isinstance(key, tuple) and len(key) == 1:
            key = key[0]
        if isinstance(key, int) and 0 <= key < len(self.fn.arg_names):
            return self.fn.arg_names[key]
        if isinstance(key, str) and key in self.fn.arg_names:
            return key
        raise KernelLabError(f"ASTSource: constexprs key {key!r} names no parameter of {self.fn.__name__}()")


def parse_arg_type(name: str, text: str):
    """A Triton signature string ("*fp32", "i64", "*const bf16"...) as kernellab's runtime argument."""
    t = text.strip()
    depth = 0
    while t.startswith("*"):
        t, depth = t[1:].strip(), depth + 1
    const = t.startswith("const ")
    t = t[6:].strip() if const else t
    d = _BY_NAME.get(TYPE_CANONICAL_NAMES.get(t, t))
    if d is None:
        raise KernelLabError(f"ASTSource: parameter {name!r} has unknown type {text!r} (e.g. 'i32', 'fp16', "
                             "'*fp32', 'constexpr')")
    for i in range(depth):
        d = PointerType(d, const=const and i == 0)
    return RuntimeArg(d)


def compile(src, target=None, options=None):
    """Compile `src` (an ASTSource) with kernellab's frontend and tile passes; returns the CompiledKernel,
    whose `.asm` has "ttir" now and builds "ptx"/"cubin" on first access, for `target` (a GPUTarget) if given.
    A parameter neither in the signature nor in constexprs takes its default. Compiling for a GPU (not under
    TRITON_INTERPRET=1) refuses what that GPU's backend refuses (fp8 formats), as Triton's frontend does."""
    if not isinstance(src, ASTSource):
        raise KernelLabError("triton.compile(...) takes a triton.compiler.ASTSource here (compiling IR files is "
                             "not served by kernellab); or call kernel.warmup(*args, grid=...) on the @jit function")
    fn = src.fn
    code = fn._kl_source()
    consts = {src.name_of(k): unwrap(v) for k, v in src.constexprs.items()}
    spec, key, names = {}, [], []
    for name, p in code.signature.parameters.items():
        fn.check_constexpr_param(name)
        if name in consts:
            spec[name] = consts[name]
            key.append((name, "c", repr(consts[name])))
        elif name in src.signature and src.signature[name] != "constexpr":
            spec[name] = parse_arg_type(name, src.signature[name])
            names.append(name)
            key.append((name, "r") + spec[name].key())
        elif p.default is not p.empty:
            spec[name] = unwrap(p.default)
            key.append((name, "c", repr(spec[name])))
        else:
            raise KernelLabError(f"triton.compile: parameter {name!r} of {fn.__name__}() has no type in the "
                                 "signature, no value in constexprs and no default")
    opts = dict(options or {})
    from .driver import driver
    from .runtime_shim import interpreting

    kl_target = _target(target) if target is not None else None
    check = None
    if not interpreting():  # compiling for a GPU: refuse what its backend refuses, as Triton's frontend does
        from ..compiler.backend import check_fp8_formats

        arch = (kl_target or _target(driver.active.get_current_target())).arch
        check = lambda module: check_fp8_formats(module, arch)  # noqa: E731
    ck = fn.compile(spec, ("ASTSource",) + tuple(key), names, opts, check_frontend=check)
    ck.default_target = kl_target
    return ck


def _target(target):
    """Triton's GPUTarget("cuda", 100, 32) as kernellab's Target (sm_100a): the GPU stages are built for it."""
    from ..compiler.codegen.target import Target

    backend, arch = getattr(target, "backend", None), getattr(target, "arch", None)
    if backend != "cuda" or not isinstance(arch, int):
        raise KernelLabError(f"triton.compile: kernellab compiles for NVIDIA GPUs (GPUTarget('cuda', 90, 32)), "
                             f"got {target!r}")
    return Target(arch)
