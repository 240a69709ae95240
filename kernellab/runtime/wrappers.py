"""`kl.reinterpret(tensor, dtype)`: pass a tensor to a kernel as another element type of the same width.

torch has no uint16/uint32/uint64 arithmetic and no fp8 on every build; a kernel can still read and write such
data through a tensor of the same width (an int32 tensor read as uint32). The wrapper changes only what the
kernel sees; the launch takes its address and memory from the base tensor.
"""
from __future__ import annotations

from ..compiler.types import DType
from ..errors import LaunchError


class TensorWrapper:
    """A tensor seen by kernels with element type `dtype` (Triton's name for the same object)."""

    def __init__(self, base, dtype: DType):
        self.base, self.dtype = base, dtype

    # The launch and the interpreter reach the memory through these.
    def data_ptr(self):
        return self.base.data_ptr()

    @property
    def _kl_base(self):
        return self.base

    def __getattr__(self, name):  # shape, device, is_cuda, stride(), numel(), element_size() ...: the base's
        return getattr(self.base, name)

    def __str__(self):
        return f"TensorWrapper[{self.dtype}]({self.base})"

    __repr__ = __str__

    def cpu(self):
        return TensorWrapper(self.base.cpu(), self.dtype)

    def to(self, device):
        return TensorWrapper(self.base.to(device), self.dtype)

    def clone(self):
        return TensorWrapper(self.base.clone(), self.dtype)

    def copy_(self, other):
        self.base.copy_(other.base if isinstance(other, TensorWrapper) else other)
        return self

    def new_empty(self, sizes):
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)


def reinterpret(tensor, dtype: DType):
    """`tensor` as seen with element type `dtype` (same bit width); reinterpreting back gives the base."""
    base = tensor.base if isinstance(tensor, TensorWrapper) else tensor
    if not isinstance(dtype, DType):
        import torch

        if isinstance(dtype, torch.dtype):
            return base.view(dtype)
        raise LaunchError(f"reinterpret: dtype must be a tl dtype (e.g. tl.uint32) or a torch dtype, got {dtype!r}")
    width = base.element_size() * 8
    if dtype.bits != width and not (dtype.bits == 1 and width == 8):
        raise LaunchError(f"reinterpret: a tensor of {base.dtype} ({width} bits) cannot be seen as {dtype.name} "
                          f"({dtype.bits} bits); pick a dtype of the same width")
    from .jit import dtype_of_array

    try:
        native = dtype_of_array(base)
    except LaunchError:
        native = None
    return base if native == dtype else TensorWrapper(base, dtype)
