"""Launch-side names of Triton's runtime that real code touches, mapped onto kernellab."""
from __future__ import annotations

from ..compiler.types import TYPE_CANONICAL_NAMES  # noqa: F401 - served as triton.runtime.jit's
from ..errors import KernelLabError
from ..language.builtins import constexpr_function  # noqa: F401 - served as triton.constexpr_function
from ..runtime.wrappers import TensorWrapper, reinterpret  # noqa: F401 - served as triton.reinterpret ...


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
    """Triton marks builtins whose result must be used; kernellab keeps the function unchanged."""
    if callable(x):
        return x
    return lambda fn: fn


class NullAllocator:
    """The allocator in place until set_allocator is called: asking it for memory is an error."""

    def __call__(self, size: int, alignment: int, stream=None):
        raise KernelLabError("a kernel asked for scratch memory but no allocator is set; call "
                             "triton.set_allocator(fn) with fn(size, alignment, stream) -> tensor")


_allocator = [NullAllocator()]


def set_allocator(allocator) -> None:
    """Accepts Triton's scratch allocator (`allocator(size, alignment, stream) -> tensor`). kernellab's
    device-side tensor descriptors need no global scratch, so it is stored and never called."""
    _allocator[0] = allocator


class NullAllocator:
    """Triton's "no allocator set" allocator: calling it is an error (kernellab never calls it)."""

    def __call__(self, size, alignment, stream):
        raise RuntimeError("kernels using global scratch memory need an allocator; set one with "
                           "triton.set_allocator")


def compile_unsupported(*args, **kwargs):
    raise KernelLabError("triton.compile(...) (compiling an ASTSource or IR file) is not served by kernellab; "
                         "use the @triton.jit function itself: kernel.warmup(*args, grid=...) compiles without "
                         "launching")
