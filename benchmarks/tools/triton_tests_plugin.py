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

Some tests start Python subprocesses (test_subprocess.py runs print_helper.py, which does `import triton`):
the plugin puts a one-file `triton` package first on PYTHONPATH, which installs kernellab.compat when imported,
so those processes get kernellab's `triton` too.
"""
import importlib.util
import os
import sys
import tempfile

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


def _serve_subprocesses():
    """A `triton` package for child processes: importing it installs kernellab.compat, which replaces the
    package in sys.modules with kernellab's (the import statement returns what sys.modules holds). One
    directory per kernellab checkout, rewritten on each run, so runs leave no litter."""
    import hashlib

    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # kernellab's root
    root = os.path.join(tempfile.gettempdir(), "kl_triton_shim_" + hashlib.sha256(here.encode()).hexdigest()[:12])
    os.makedirs(os.path.join(root, "triton"), exist_ok=True)
    text = ("import sys\n"
            "sys.modules[__name__].__kernellab__ = True  # lets install() replace this stand-in\n"
            "import kernellab.compat\n"
            "kernellab.compat.install()\n")
    init = os.path.join(root, "triton", "__init__.py")
    tmp = f"{init}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, init)  # atomic: a concurrent run never reads half a file
    paths = [root, here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)


_serve_subprocesses()
