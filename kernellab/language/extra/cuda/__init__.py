"""`tl.extra.cuda`: CUDA-specific language extras (Triton's module path)."""
from ....compiler.types import int32 as _int32
from ....compiler.types import int64 as _int64
from ...core import builtin as _builtin  # noqa: E402
from . import libdevice  # noqa: F401


@_builtin
def gdc_wait(_sem=None):
    """Wait for the grid this one depends on (programmatic dependent launch). kernellab launches grids in
    stream order, never as dependents, so everything before has finished: nothing to wait for."""
    return None


@_builtin
def gdc_launch_dependents(_sem=None):
    """Allow a dependent grid to start early (programmatic dependent launch); with stream-ordered launches
    there is no dependent grid waiting, so this is a no-op."""
    return None


@_builtin
def globaltimer(_sem=None):
    """The GPU's global nanosecond timer (PTX `%globaltimer`), as an int64. GPU only; not pure, so two
    readings stay two."""
    return _sem.inline_asm("mov.u64 $0, %globaltimer;", "=l", [], [_int64], False, 1)[0]


@_builtin
def smid(_sem=None):
    """The index of the SM running this program (PTX `%smid`), as an int32. GPU only."""
    return _sem.inline_asm("mov.u32 $0, %smid;", "=r", [], [_int32], True, 1)[0]
