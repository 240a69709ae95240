"""`tl.extra.cuda`: CUDA-specific language extras (Triton's module path)."""
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
