"""`triton.tools`: the host-side `TensorDescriptor` (kernellab.tools) and a placeholder `mxfp`."""
from __future__ import annotations

from ..tools.tensor_descriptor import TensorDescriptor  # noqa: F401


class _NotServed:
    """Triton's microscaling-format helpers (`triton.tools.mxfp`): importable so test modules that name
    them load, but kernellab has no fp4 / block-scaled dot, so making one explains that."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"triton.tools.mxfp.{type(self).__name__} is not served by kernellab "
                                  "(no fp4 / tl.dot_scaled support)")


class MXFP4Tensor(_NotServed):
    pass


class MXScaleTensor(_NotServed):
    pass
