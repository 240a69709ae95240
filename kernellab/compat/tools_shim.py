"""`triton.tools`: the host-side `TensorDescriptor` and the microscaling helpers (`kernellab.tools`)."""
from __future__ import annotations

from ..tools.mxfp import MXFP4Tensor, MXScaleTensor  # noqa: F401
from ..tools.tensor_descriptor import TensorDescriptor  # noqa: F401
