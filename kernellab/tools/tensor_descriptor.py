"""`TensorDescriptor`: a host-side description of a tiled view of a tensor, passed to a kernel as one
argument. The launch flattens it into the base pointer, the shape and the strides (kernel parameters)
and compiles in the block shape and padding; the kernel sees a `tl.tensor_descriptor`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TensorDescriptor:
    """`base` seen as `shape` with `strides` (in elements, the last one 1), read and written in tiles of
    `block_shape`; out-of-bounds reads give 0 (`padding="zero"`) or NaN (`"nan"`). Checked as Triton
    checks it: rank 1 to 5, power-of-two block dims, a 16-byte aligned base and strides."""

    base: object
    shape: list
    strides: list
    block_shape: list
    padding: str = "zero"

    def __post_init__(self):
        from ..errors import LaunchError

        def bad(msg):
            raise LaunchError(f"TensorDescriptor(shape={self.shape}, strides={self.strides}, block_shape="
                              f"{self.block_shape}): {msg}")

        self.shape, self.strides = [int(s) for s in self.shape], [int(s) for s in self.strides]
        self.block_shape = [int(getattr(b, "value", b)) for b in self.block_shape]
        rank = len(self.shape)
        if not (len(self.strides) == len(self.block_shape) == rank):
            bad("shape, strides and block_shape must have the same rank")
        if not 1 <= rank <= 5:
            bad(f"the rank must be 1 to 5, got {rank}")
        for b in self.block_shape:
            if b <= 0 or b & (b - 1):
                bad(f"block dims must be powers of 2, got {b}")
        if self.strides[-1] != 1:
            bad("the last stride must be 1 (the last dimension contiguous)")
        if any(s <= 0 for s in self.shape):
            bad("every dimension of the shape must be positive")
        if self.padding not in ("zero", "nan"):
            bad(f"padding is 'zero' or 'nan', got {self.padding!r}")
        dtype = getattr(self.base, "dtype", None)
        if self.padding == "nan" and dtype is not None and not getattr(dtype, "is_floating_point", True):
            bad("padding 'nan' needs a floating-point tensor")
        itemsize = getattr(dtype, "itemsize", None)
        if itemsize:
            if any(s * itemsize % 16 for s in self.strides[:-1]):
                bad(f"the strides must be multiples of 16 bytes ({itemsize}-byte elements)")
            dp = getattr(self.base, "data_ptr", None)
            if dp is not None and dp() % 16:
                bad("the base must be 16-byte aligned")

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        """The descriptor of the whole of `tensor` (its own shape and strides)."""
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)
