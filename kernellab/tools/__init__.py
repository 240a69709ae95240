"""Host-side tools (Triton's `triton.tools`): `TensorDescriptor`."""
from .tensor_descriptor import TensorDescriptor  # noqa: F401
