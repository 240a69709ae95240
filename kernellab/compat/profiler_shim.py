"""`triton.profiler` (proton): the calls tutorials make around their benchmarks. kernellab has no proton
backend; the calls run without recording anything and say so once, so the surrounding code keeps working."""
from __future__ import annotations

import contextlib
import warnings

_said = []


def _notice():
    if not _said:
        _said.append(True)
        warnings.warn("triton.profiler under kernellab records nothing (no proton backend); time kernels with "
                      "triton.testing.do_bench or the lab's --bench", UserWarning, stacklevel=3)


def start(*args, **kwargs):
    _notice()
    return 0


def finalize(*args, **kwargs):
    return None


def activate(*args, **kwargs):
    return None


def deactivate(*args, **kwargs):
    return None


def enter_scope(*args, **kwargs):
    return None


def exit_scope(*args, **kwargs):
    return None


@contextlib.contextmanager
def scope(*args, **kwargs):
    yield


def module(make_module):
    return make_module("triton.profiler", __doc__, package=False, start=start, finalize=finalize, activate=activate,
                       deactivate=deactivate, enter_scope=enter_scope, exit_scope=exit_scope, scope=scope)
