"""Host-side tools (Triton's `triton.tools`): `TensorDescriptor`, the microscaling data classes (`mxfp`)."""
from . import mxfp  # noqa: F401
from .tensor_descriptor import TensorDescriptor  # noqa: F401
