"""`triton._filecheck`: the frontend-test helpers Triton's own tests import (test_frontend, test_line_info).

`run_parser(kernel, args)` runs kernellab's frontend on a @jit function for those arguments, without a launch:
a bad kernel raises the CompilationError that code catching Triton's expects. The FileCheck half does not carry
over: Triton's CHECK lines spell its TTIR (`tt.make_range`, `arith.constant dense<...>`), and kernellab's tile
IR is spelled its own way (docs/tile-ir.md), so `run_filecheck` says so instead of matching."""
from __future__ import annotations

import functools

from ..errors import KernelLabError


class ParsedModule:
    """What `run_parser` returns: the kernel's tile IR after the frontend, as text."""

    def __init__(self, compiled):
        self.compiled = compiled

    def str_nodebug(self) -> str:
        return str(self.compiled.asm["ttir"])

    def __str__(self) -> str:
        return self.str_nodebug()


def run_parser(kernel_fn, args=(), kwargs=None, target=None):
    """Compile `kernel_fn` for `args`/`kwargs` (values as a launch would pass them) through the frontend and
    tile passes; raises CompilationError for a kernel that does not compile."""
    if not hasattr(kernel_fn, "_kl_source"):
        raise KernelLabError(f"run_parser takes a @triton.jit function, got {type(kernel_fn).__name__}")
    kwargs = {k: v for k, v in (kwargs or {}).items() if k != "sanitize_overflow"}  # Triton's option, no effect
    bound, options = kernel_fn.bind(list(args), kwargs)
    spec, key, _, names = kernel_fn.specialize(bound)
    return ParsedModule(kernel_fn.compile(spec, ("run_parser",) + tuple(key), names, options))


def run_filecheck(name, module_str, check_template):
    raise KernelLabError(f"{name}: FileCheck patterns are written against Triton's TTIR text; kernellab's tile IR "
                         "is spelled differently (see docs/tile-ir.md), so these checks are not served under "
                         "kernellab.compat")


def run_filecheck_test(kernel_fn):
    """Compiles the kernel (a compile error surfaces as such), then refuses the TTIR text check."""
    module = run_parser(kernel_fn)
    run_filecheck(getattr(kernel_fn, "__name__", "kernel"), module.str_nodebug(), "")


def filecheck_test(fn):
    @functools.wraps(fn)
    def test_fn():
        run_filecheck_test(fn)

    return test_fn


def module(make_module):
    return make_module("triton._filecheck", __doc__, package=False, run_parser=run_parser,
                       run_filecheck=run_filecheck, run_filecheck_test=run_filecheck_test,
                       filecheck_test=filecheck_test, ParsedModule=ParsedModule)
