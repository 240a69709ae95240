"""Every corpus kernel compiles through kernellab's backend to PTX that ptxas assembles for sm_80
and sm_90a (no GPU needed), and the trace records each GPU stage."""
import shutil

import pytest

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.backend import compile_to_cubin
from kernellab.compiler.codegen.target import Target
from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.runtime.jit import CompiledKernel

from .corpus import CASES, make_kernels

pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")

KERNELS = make_kernels(kl, tl)


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_assembles(case, arch, monkeypatch):
    compiled = []

    def compile_only(self, grid, args):
        out = compile_to_cubin(parse_module(self.asm["tile"]), self.trace, GpuOptions(num_warps=4), Target(arch))
        compiled.append((self, out))

    monkeypatch.setattr(CompiledKernel, "run", compile_only)
    case.run(KERNELS, "cpu", seed=0)
    assert compiled
    for ck, out in compiled:
        assert out["cubin"][:4] == b"\x7fELF"
        assert out["report"]["n_regs"] > 0
        assert ".entry" in out["ptx"] and "llvm.nvvm" not in out["ptx"]  # no unresolved intrinsic calls
        names = [p.name for p in ck.trace.passes]
        for stage in ("assign_layouts", "remove_layout_conversions", "allocate_shared", "insert_barriers",
                      "to_llvm", "to_ptx", "to_cubin"):
            assert stage in names
        assert "#blocked" in out["gpu"]
