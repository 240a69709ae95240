"""`tl.extra`: Triton's extra language modules (`tl.extra.cuda.libdevice`, `tl.extra.libdevice`)."""
from . import cuda, libdevice  # noqa: F401
