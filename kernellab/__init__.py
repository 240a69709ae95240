"""kernellab: a GPU kernel compiler for Triton's tile language, with a lab that shows every pass.

    import kernellab as kl
    import kernellab.language as tl

`import kernellab as triton` works for the kernels of Triton's tutorials.
"""
from . import language  # noqa: F401
from .errors import (  # noqa: F401
    CompilationError,
    InterpreterError,
    KernelCrashError,
    KernelLabError,
    LaunchError,
    OutOfResources,
    SanitizerError,
    ToolchainError,
)
from .language.builtins import constexpr_function  # noqa: F401
from .runtime.jit import CompiledKernel, JITFunction, jit  # noqa: F401
from .runtime.sanitizer import SanitizerReport, SanitizerWarning, empty, uninitialized  # noqa: F401
from .runtime.scratch import set_allocator  # noqa: F401
from .runtime.wrappers import TensorWrapper, reinterpret  # noqa: F401

__version__ = "0.1.0"


def cdiv(x, y):
    """Ceiling division: the number of blocks of size y that cover x."""
    return (x + y - 1) // y


def synchronize():
    """Wait for every launched kernel; a kernel that crashed raises KernelCrashError here, naming it."""
    from .runtime.driver import synchronize as _sync

    _sync()


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


from . import testing, tools  # noqa: E402,F401
from .runtime.autotuner import Config, autotune, heuristics  # noqa: E402,F401
from .tools import TensorDescriptor  # noqa: E402,F401


def load_ipython_extension(ipython):
    """`%load_ext kernellab` registers the `%%kernel` cell magic."""
    from .viz import load_ipython_extension as _load

    _load(ipython)
