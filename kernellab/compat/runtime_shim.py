"""Launch-side names of Triton's runtime that real code touches, mapped onto kernellab."""
from __future__ import annotations

from ..errors import KernelLabError
from ..language.builtins import constexpr_function  # noqa: F401 - served as triton.constexpr_function
from ..runtime.wrappers import TensorWrapper, reinterpret  # noqa: F401 - served as triton.reinterpret ...

# Triton's canonical dtype spellings, keyed by every alias it accepts (its signature strings use these).
TYPE_CANONICAL_NAMES = {
    "bool": "u1", "int1": "u1", "uint1": "u1", "i1": "u1",
    "float8e4nv": "fp8e4nv", "float8_e4m3fn": "fp8e4nv", "float8e5": "fp8e5", "float8_e5m2": "fp8e5",
    "float8e4b15": "fp8e4b15", "float8e4b8": "fp8e4b8", "float8_e4m3fnuz": "fp8e4b8",
    "float8e5b16": "fp8e5b16", "float8_e5m2fnuz": "fp8e5b16",
    "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32",
    "double": "fp64", "float64": "fp64",
    "int8": "i8", "int16": "i16", "int": "i32", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "void": "void",
}
for _v in list(TYPE_CANONICAL_NAMES.values()):
    TYPE_CANONICAL_NAMES[_v] = _v


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
