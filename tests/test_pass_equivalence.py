"""Every tile-level pass preserves results: the interpreter runs the IR recorded after the frontend
and after each pass (parsed back from the trace's text) on the corpus, and all outputs agree."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.parser import parse_module
from kernellab.runtime.interpreter import Interpreter
from kernellab.runtime.jit import CompiledKernel

from .corpus import CASES, check, make_kernels

KERNELS = make_kernels(kl, tl)


def _same(a, b):
    if a.is_floating_point():
        return torch.equal(torch.nan_to_num(a, nan=1e30), torch.nan_to_num(b, nan=1e30))
    return torch.equal(a, b)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_pass_preserves_results(case, monkeypatch):
    original = CompiledKernel.run
    stages_seen = []

    def run_every_stage(self, grid, args):
        outputs = []
        for rec in self.trace.passes:
            module = parse_module(rec.ir)
            cloned = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            Interpreter(module, self.name, self.source_lines, arg_names=self.arg_names).run(grid, cloned)
            outputs.append((rec.name, [c for c in cloned if isinstance(c, torch.Tensor)]))
        first_name, first = outputs[0]
        for name, outs in outputs[1:]:
            for i, (a, b) in enumerate(zip(first, outs)):
                assert _same(a, b), f"{self.name}: argument {i} differs between '{first_name}' and after '{name}'"
        stages_seen.append([n for n, _ in outputs])
        original(self, grid, args)

    monkeypatch.setattr(CompiledKernel, "run", run_every_stage)
    outs, refs, tol = case.run(KERNELS, "cpu", seed=3)
    check(outs, refs, tol)
    assert stages_seen and len(stages_seen[0]) >= 2
