"""`tl.extra.cuda`: CUDA-specific language extras (Triton's module path)."""
from . import libdevice  # noqa: F401
