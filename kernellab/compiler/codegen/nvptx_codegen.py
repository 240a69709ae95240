"""The NVPTX code generator in a child process, for kernels whose code generation skips passes.

LLVM's pass gate (`-opt-disable`) is process-wide and only grows: once a pass is disabled, every later compile
of the process runs without it. `llvm_to_ptx` runs the code generator here instead, in a fresh interpreter, when
one compile needs a pass off (straight-line strength reduction on kernels where it is quadratic). This file
imports nothing of kernellab (the package's import costs a second; llvmlite alone 0.1 s).

Protocol: stdin holds one JSON line {"triple", "cpu", "features", "options": [cl options]} and then the optimized
LLVM IR; stdout gets the PTX.
"""
from __future__ import annotations

import json
import sys


def emit(ir_text: str, triple: str, cpu: str, features: str, options: list[str]) -> str:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    for opt in options:
        llvm.set_option("kernellab-codegen", opt)
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3,
                                                               codemodel="default")
    mod = llvm.parse_assembly(ir_text)
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    return tm.emit_assembly(mod)


def main() -> None:
    header = json.loads(sys.stdin.readline())
    sys.stdout.write(emit(sys.stdin.read(), header["triple"], header["cpu"], header["features"], header["options"]))


if __name__ == "__main__":
    main()
