"""MLIR-style pass tests: IR text in, run one pass, compare with the expected IR text."""
from __future__ import annotations

import pytest

from kernellab.compiler.parser import parse_module
from kernellab.compiler.printer import print_module
from kernellab.compiler.verifier import verify


def normalize(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines()]
    return "\n".join(ln for ln in lines if ln)


def check_uses(module):
    """Every value's use list holds exactly one entry per operand slot that reads it."""
    from collections import Counter

    expected: Counter = Counter()
    values = {}
    for fn in module.functions:
        for a in fn.args:
            values[id(a)] = a
        for op in fn.walk():
            for v in op.operands:
                expected[(id(v), id(op))] += 1
                values[id(v)] = v
            for r in op.results:
                values[id(r)] = r
            for reg in op.regions:
                for a in reg.args:
                    values[id(a)] = a
    for v in values.values():
        actual = Counter((id(v), id(u)) for u in v.uses)
        mine = Counter({k: n for k, n in expected.items() if k[0] == id(v)})
        assert actual == mine, f"use list of {v!r} is {v.uses}"


def run_check(pass_module, text_in: str, text_expected: str) -> dict:
    m = parse_module(text_in)
    stats = pass_module.run(m)
    check_uses(m)
    verify(m, after=pass_module.NAME)
    got = print_module(m, with_locs=False)
    assert normalize(got) == normalize(text_expected), "\n--- got ---\n" + got
    # The output is valid IR text: it parses and prints back identically.
    assert normalize(print_module(parse_module(got), with_locs=False)) == normalize(got)
    return stats


@pytest.fixture
def check():
    """`check(pass_module, text_in, text_expected) -> stats`"""
    return run_check


@pytest.fixture(name="check_uses")
def check_uses_fixture():
    return check_uses
