"""`python -m kernellab.run script.py [args]` / `python -m kernellab.run -m module [args]`: run existing Triton
code unchanged, with `import triton` served by kernellab (see kernellab.compat)."""
from __future__ import annotations

import runpy
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    from . import compat

    compat.install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print("kernellab.run: -m needs a module name", file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(argv[0])))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
