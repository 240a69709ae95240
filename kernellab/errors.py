"""Exceptions a user can cause. Each names the kernel, the source line and what to do."""
from __future__ import annotations


class KernelLabError(Exception):
    """Base of every error kernellab raises on purpose."""


class CompilationError(KernelLabError):
    """The kernel's source cannot be compiled; points at the offending line with a caret."""

    def __init__(self, kernel: str, reason: str, filename: str = "<unknown>", line: int | None = None,
                 col: int = 0, source_line: str | None = None, def_line: int | None = None):
        self.kernel, self.reason, self.filename = kernel, reason, filename
        self.line, self.col, self.source_line = line, col, source_line
        # the line counted from the function's `def` (1): where Triton's messages point ("at 2:4:"), and the
        # only position that means something for a kernel defined in a string or a notebook cell
        self.def_line = def_line
        self.error_message = reason  # Triton's attribute name for the bare reason
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.filename}:{self.line}" if self.line else self.filename
        text = f"in kernel '{self.kernel}' at {where}: {self.reason}"
        if self.source_line is not None:
            stripped = self.source_line.rstrip()
            text += f"\n    {stripped}\n    {' ' * max(0, self.col)}^"
        if self.def_line is not None:
            text += (f"\n    (at {self.def_line}:{self.col}: line {self.def_line} of '{self.kernel}' counting its def "
                     "line as 1)")
        return text

    def __reduce__(self):  # picklable (autotuners and test runners send errors between processes)
        return type(self), (self.kernel, self.reason, self.filename, self.line, self.col, self.source_line,
                             self.def_line)


class StaticAssertionError(CompilationError):
    """A `tl.static_assert` failed while compiling (Triton's CompileTimeAssertionFailure)."""


class SemanticError(Exception):
    """A user error found while typing a kernel (`tl.arange(0, 3)`, `float_tensor << 1`). It carries only the
    reason: the frontend re-raises it as a CompilationError with the kernel's name and source line. `triton`, where
    given, is Triton's own wording of the reason: it becomes the CompilationError's `__cause__` (code written
    against Triton compares that whole), while the message keeps kernellab's wording."""

    def __init__(self, *args, triton: str | None = None):
        super().__init__(*args)
        self.triton = triton


class StaticAssertFailed(SemanticError, AssertionError):
    """Raised by `tl.static_assert` while typing; the frontend reports it as a StaticAssertionError."""


class InterpreterError(KernelLabError):
    """A kernel did something illegal while running on the CPU interpreter (out-of-bounds access,
    failed device_assert). Names the kernel, the source line and the program id."""


class SanitizerError(InterpreterError):
    """A launch with `sanitize=True` raced, stored twice to one address, or read uninitialized memory.
    `.report` is the SanitizerReport: every finding with both accesses (program, lane, line)."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class LaunchError(KernelLabError):
    """Bad launch arguments: wrong count, wrong types, a bad grid."""


class ArgumentOverflowError(LaunchError, OverflowError):
    """An integer argument beyond 64 bits; an OverflowError too, as Triton raises."""


class LaunchOptionError(LaunchError, AssertionError):
    """A launch option out of range (num_warps=3); an AssertionError too, as Triton asserts its options."""


class ToolchainError(KernelLabError):
    """A piece of the GPU toolchain is missing or failed: libdevice or ptxas not found, LLVM left an unresolved
    call in the PTX, ptxas rejected the PTX. Names the kernel (when there is one) and what to install or check."""


class KernelCrashError(KernelLabError):
    """A kernel faulted on the GPU (illegal address, trap, failed assert ...). The CUDA context is unusable
    afterwards: the Python process / notebook kernel must be restarted."""


class OutOfResources(LaunchError):
    """A kernel needs more shared memory or registers than the GPU has. Smaller blocks or fewer stages help."""


class SharedBudgetExceeded(OutOfResources):
    """A build asked not to fall back to fewer pipeline stages (`build_gpu(ladder=False)`, as the autotuner asks
    first) needs more shared memory than the GPU has: `required` and `limit` in bytes."""

    def __init__(self, message, required=None, limit=None):
        super().__init__(message)
        self.required, self.limit = required, limit


class CheckFailedError(KernelLabError, AssertionError):
    """A `%%kernel --check` failed in a cell run with --strict (or KERNELLAB_STRICT=1): raised so Run All and
    notebook runners (nbclient, CI) stop at it. An AssertionError too, like a failed assert in a check cell."""
