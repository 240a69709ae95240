"""pytest plugin: run Triton's own unit tests against kernellab, through kernellab.compat.

Triton's tests import `triton` and its test helper `triton._internal_testing`. This plugin serves `triton`
from kernellab (compat.install()) and loads the helper from the Triton checkout the tests come from, so
nothing of Triton's is copied here. With the language tests of a Triton 3.6 checkout in $TT
(python/test/unit/language and python/triton/_internal_testing.py):

    cd $TT/python/test/unit/language
    TRITON_INTERPRET=1 PYTHONPATH=<kernellab root>/benchmarks/tools:<kernellab root> \\
        python -m pytest -p triton_tests_plugin test_core.py -q --device cpu      # the CPU interpreter
    PYTHONPATH=... python -m pytest -p triton_tests_plugin test_core.py -n 16 --device cuda   # a GPU

The helper is found at ../../../triton/_internal_testing.py from the test directory, or at
$TRITON_INTERNAL_TESTING.
"""
import importlib.util
import os
import sys

import kernellab.compat

kernellab.compat.install()

_path = os.environ.get("TRITON_INTERNAL_TESTING") or os.path.join(
    os.getcwd(), "..", "..", "..", "triton", "_internal_testing.py")
if not os.path.exists(_path):
    _path = os.path.join(os.getcwd(), "_internal_testing.py")
_spec = importlib.util.spec_from_file_location("triton._internal_testing", _path)
_mod = importlib.util.module_from_spec(_spec)
sys.modules["triton._internal_testing"] = _mod
_spec.loader.exec_module(_mod)
sys.modules["triton"]._internal_testing = _mod
