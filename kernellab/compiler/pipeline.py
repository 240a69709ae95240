"""The ordered pass list, and the CompileTrace that records what each pass did.

The trace is the seam between the compiler and everything that shows it (widgets, CLI, tests):
for every stage it keeps the IR text after it, the time it took and what it changed.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from .ir import Module, batched_erase
from .printer import print_module
from .verifier import verify


@dataclass
class PassRecord:
    name: str
    description: str
    ir: str
    seconds: float
    changed: bool
    stats: dict = field(default_factory=dict)


@dataclass
class CompileTrace:
    """Everything the compiler did for one specialization of one kernel."""

    kernel: str
    passes: list = field(default_factory=list)
    key: str = ""
    signature: str = ""
    notes: list = field(default_factory=list)

    def record(self, name, description, ir, seconds, changed, stats=None):
        self.passes.append(PassRecord(name, description, ir, seconds, changed, dict(stats or {})))

    def ir_after(self, name: str) -> str:
        for p in reversed(self.passes):
            if p.name == name:
                return p.ir
        raise KeyError(f"no pass named {name!r} in the trace of {self.kernel}")

    @property
    def final_ir(self) -> str:
        return self.passes[-1].ir

    def summary(self) -> str:
        """A table of the passes: name, changed or not, time, what it found."""
        rows = [f"{'pass':<18} {'changed':<8} {'ms':>8}  details"]
        for p in self.passes:
            details = ", ".join(f"{k}={v}" for k, v in p.stats.items() if v)
            rows.append(f"{p.name:<18} {'yes' if p.changed else 'no':<8} {p.seconds * 1e3:8.2f}  {details}")
        return "\n".join(rows)


def tile_passes():
    from .passes import TILE_PASSES

    return list(TILE_PASSES)


# Passes that erase or fold op by op over a snapshot of the IR: run with list updates batched (ir.batched_erase)
# so a kernel unrolled to thousands of ops compiles in linear time.
_BATCHED_PASSES = {"constant_fold", "cse"}


def run_passes(module: Module, trace: CompileTrace, passes, options=None, check=True) -> Module:
    """Run `passes` in order, verifying and recording the IR after each. Tile passes take the module
    alone; GPU passes also take the options (warps, architecture)."""
    before = print_module(module)
    for p in passes:
        t0 = time.perf_counter()
        with batched_erase() if p.NAME in _BATCHED_PASSES else contextlib.nullcontext():
            stats = (p.run(module) if options is None else p.run(module, options)) or {}
        dt = time.perf_counter() - t0
        if check:
            verify(module, after=p.NAME)
        text = print_module(module)
        trace.record(p.NAME, p.DESCRIPTION, text, dt, text != before, stats)
        before = text
    return module


def run_tile_pipeline(module: Module, trace: CompileTrace, passes=None, check=True) -> Module:
    """The tile-level passes (inlining ... DCE)."""
    return run_passes(module, trace, tile_passes() if passes is None else passes, check=check)


def gpu_passes():
    from .passes import (
        accelerate_matmul,
        allocate_shared,
        assign_layouts,
        decompose_batched_dot,
        fill_stages_with_tma,
        insert_barriers,
        pipeline_dot_operands,
        remove_layout_conversions,
        share_uniform_runs,
        stage_invariant_dot_operands,
        upcast_fp8_dot,
        warpgroup_turns,
    )

    return [upcast_fp8_dot, decompose_batched_dot, accelerate_matmul, assign_layouts, remove_layout_conversions,
            share_uniform_runs, stage_invariant_dot_operands, pipeline_dot_operands, fill_stages_with_tma,
            warpgroup_turns, allocate_shared, insert_barriers]


def run_gpu_pipeline(module: Module, trace: CompileTrace, options) -> Module:
    """Tile IR -> GPU IR: layouts, conversions, shared-memory plan, barriers (recorded per pass)."""
    run_passes(module, trace, gpu_passes(), options)
    trace.shared_plan = getattr(module, "shared_plan", [])
    return module
