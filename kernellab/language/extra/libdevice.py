"""`from triton.language.extra import libdevice`: the same functions as `tl.extra.cuda.libdevice`."""
from .cuda.libdevice import *  # noqa: F401,F403
from .cuda.libdevice import __all__  # noqa: F401
