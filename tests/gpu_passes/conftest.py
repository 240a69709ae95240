"""GPU pass tests in the MLIR style: IR text in, run one GPU pass with GpuOptions, compare the text."""
from __future__ import annotations

import pytest

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.parser import parse_module
from kernellab.compiler.printer import print_module
from kernellab.compiler.verifier import verify

OPTIONS = GpuOptions(num_warps=4)


def normalize(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines()]
    return "\n".join(ln for ln in lines if ln)


def run_gpu_pass(pass_module, text_in: str, options: GpuOptions = OPTIONS):
    """Parse `text_in`, run the pass, verify; returns (module, stats)."""
    m = parse_module(text_in)
    stats = pass_module.run(m, options) or {}
    verify(m, after=pass_module.NAME)
    return m, stats


def run_gpu_passes(pass_modules, text_in: str, options: GpuOptions = OPTIONS):
    """Parse `text_in` and run the passes in order, verifying after each; returns (module, [stats of each])."""
    m = parse_module(text_in)
    stats = []
    for p in pass_modules:
        stats.append(p.run(m, options) or {})
        verify(m, after=p.NAME)
    return m, stats


def printed(module) -> str:
    return print_module(module, with_locs=False)


def run_check(pass_module, text_in: str, text_expected: str, options: GpuOptions = OPTIONS):
    """Run the pass on `text_in` and compare the printed result with `text_expected`;
    returns (module, stats)."""
    m, stats = run_gpu_pass(pass_module, text_in, options)
    got = printed(m)
    assert normalize(got) == normalize(text_expected), "\n--- got ---\n" + got
    # The output (layout aliases included) is valid IR text: it parses and prints back identically.
    assert normalize(printed(parse_module(got))) == normalize(got)
    return m, stats


@pytest.fixture
def check():
    """`check(pass_module, text_in, text_expected, options=OPTIONS) -> (module, stats)`"""
    return run_check


@pytest.fixture
def run_pass():
    """`run_pass(pass_module, text_in, options=OPTIONS) -> (module, stats)` without a text comparison."""
    return run_gpu_pass


@pytest.fixture
def run_passes():
    """`run_passes([pass_module, ...], text_in, options=OPTIONS) -> (module, [stats, ...])`: passes in a row."""
    return run_gpu_passes
