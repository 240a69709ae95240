"""Launch-side names of Triton's runtime that real code touches, mapped onto kernellab."""
from __future__ import annotations

import os

from .. import errors
from ..compiler.types import TYPE_CANONICAL_NAMES  # noqa: F401 - served as triton.runtime.jit's
from ..errors import KernelLabError
from ..language.builtins import constexpr_function  # noqa: F401 - served as triton.constexpr_function
from ..runtime.wrappers import TensorWrapper, reinterpret  # noqa: F401 - served as triton.reinterpret ...


def interpreting() -> bool:
    """Triton's interpreter mode (TRITON_INTERPRET=1), in which Triton runs kernels as Python."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() not in ("", "0", "false", "off")


class _InterpreterErrorType(type):
    """Under TRITON_INTERPRET=1 Triton reports every error of a kernel it interprets as an InterpreterError,
    compile-time ones (a bad descriptor block shape, a failed static_assert) included, since it never compiles.
    kernellab compiles before it interprets, so there its CompilationError counts as one too; outside that
    mode only kernellab's own InterpreterError (a run-time error on the CPU) does."""

    def __instancecheck__(cls, obj):
        return cls.__subclasscheck__(type(obj))

    def __subclasscheck__(cls, sub):
        if type.__subclasscheck__(cls, sub) or issubclass(sub, errors.InterpreterError):
            return True
        return interpreting() and issubclass(sub, errors.CompilationError)


class InterpreterError(errors.InterpreterError, metaclass=_InterpreterErrorType):
    """`triton.runtime.errors.InterpreterError`: catches kernellab's InterpreterError (see the metaclass)."""


def call_jit_cache_hook(hook, fn, specialization, warmup):
    """Triton's `knobs.runtime.jit_cache_hook`, called before a compile with Triton's keywords; its
    `compile["specialization_data"]` is what `fn.preload` takes. A true result skips the compile."""
    if hook is None:
        return None
    from types import SimpleNamespace

    spec, key, _, options = specialization
    opts = {k: options.get(k, d) for k, d in (("num_warps", 4), ("num_ctas", 1), ("num_stages", 3),
                                                ("enable_fp_fusion", True), ("launch_cooperative_grid", False))}
    name = fn.fn.__qualname__
    signature = {n: str(getattr(v, "type", "constexpr")) for n, v in spec.items()}
    args = ", ".join(f"{n}: {t}" for n, t in signature.items())
    text = f"{name}[{', '.join(f'{k}={v}' for k, v in opts.items())}]({args})"
    compile_kwargs = dict(key=key, signature=signature, device=None, constants={}, extern_libs=None, configs=None,
                          specialization_data=fn.specialization_data(specialization), is_warmup=warmup, **opts)
    return hook(key=key, repr=text, fn=SimpleNamespace(module=fn.fn.__module__, name=name, jit_function=fn),
                compile=compile_kwargs, is_manual_warmup=warmup, already_compiled=False)


class MockTensor:
    """A stand-in argument with a dtype and no memory (Triton uses it to warm up kernels)."""

    def __init__(self, dtype, shape=None):
        self.dtype, self.shape = dtype, list(shape or [1])

    @staticmethod
    def data_ptr():
        return 0

    @staticmethod
    def wrap_dtype(arg):
        import torch

        return MockTensor(arg) if isinstance(arg, torch.dtype) else arg


def must_use_result(x, s=True):
    """Marks a function whose result must be used: a kernel statement that calls it and drops the result is a
    CompilationError. `@must_use_result("why")` adds the words to the message."""
    if isinstance(x, str):
        return lambda fn: must_use_result(fn, x)
    try:
        x.__kl_must_use__ = s
    except AttributeError:  # a builtin that takes no attributes: left unchecked
        pass
    return x


class NullAllocator:
    """The allocator in place until set_allocator is called: asking it for memory is an error."""

    def __call__(self, size: int, alignment: int, stream=None):
        raise KernelLabError("a kernel asked for scratch memory but no allocator is set; call "
                             "triton.set_allocator(fn) with fn(size, alignment, stream) -> tensor")


_allocator = [NullAllocator()]


def set_allocator(allocator) -> None:
    """Triton's scratch allocator (`allocator(size, alignment, stream) -> tensor`): kernellab's launcher asks it for
    the global scratch of tensor maps a kernel makes itself (runtime/scratch.py)."""
    from ..runtime import scratch

    _allocator[0] = allocator
    scratch.set_allocator(None if isinstance(allocator, NullAllocator) else allocator)


class NullAllocator:
    """Triton's "no allocator set" allocator: calling it is an error (kernellab never calls it)."""

    def __call__(self, size, alignment, stream):
        raise RuntimeError("kernels using global scratch memory need an allocator; set one with "
                           "triton.set_allocator")

