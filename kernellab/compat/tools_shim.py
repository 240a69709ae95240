"""`triton.tools.tensor_descriptor.TensorDescriptor`: a host-side description of a tiled view of a tensor."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TensorDescriptor:
    """`base` seen as `shape` with `strides`, read and written in tiles of `block_shape` (the last stride 1)."""

    base: object
    shape: list
    strides: list
    block_shape: list
    padding: str = "zero"

    def __post_init__(self):
        from ..errors import LaunchError

        self.shape, self.strides, self.block_shape = list(self.shape), list(self.strides), list(self.block_shape)
        if not (len(self.shape) == len(self.strides) == len(self.block_shape)):
            raise LaunchError(f"TensorDescriptor: shape {self.shape}, strides {self.strides} and block_shape "
                              f"{self.block_shape} must have the same rank")
        if self.strides and self.strides[-1] != 1:
            raise LaunchError(f"TensorDescriptor: the last stride must be 1, got strides {self.strides}")
        if self.padding not in ("zero", "nan"):
            raise LaunchError(f"TensorDescriptor: padding is 'zero' or 'nan', got {self.padding!r}")

    @staticmethod
    def from_tensor(tensor, block_shape, padding="zero"):
        return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape), padding)
