"""The ordered pass list; running it records the CompileTrace (kernellab.compiler.trace).

Every pass's record holds the IR text after it, the time it took, whether it changed anything, what it
found, and where the printer put each line's source location. Every pass that changed the IR keeps a Snapshot of
it as records (the lab's graph view draws the dataflow after any pass); the last pass of the tile stage and of
the GPU stage always keep one, the GPU one with the accesses, the shared-memory plan and the barriers.
"""
from __future__ import annotations

import contextlib
import time

from . import snapshot
from .ir import Module, batched_erase, creating_pass
from .printer import Printed, print_positions
from .trace import CompileTrace, PassRecord  # noqa: F401  (the trace's home is trace.py; imported from here too)
from .verifier import verify


def tile_passes(split_k: bool = False, persistent: bool = False):
    """The tile passes in order; `split_k`: with passes/split_k.py after LICM (the split variant a launch with
    too few programs asks for: kernellab/runtime/split_k.py); `persistent`: with passes/make_persistent.py last
    (the persistent variant: kernellab/runtime/persistent.py), on the kernel the other passes made of one tile."""
    from .passes import TILE_PASSES, licm, make_persistent
    from .passes import split_k as split

    passes = list(TILE_PASSES)
    if split_k:
        passes.insert(passes.index(licm) + 1, split)
    if persistent:
        passes.append(make_persistent)
    return passes


# Passes that erase or fold op by op over a snapshot of the IR: run with list updates batched (ir.batched_erase)
# so a kernel unrolled to thousands of ops compiles in linear time.
_BATCHED_PASSES = {"constant_fold", "cse"}


def record_module(trace: CompileTrace, name: str, description: str, module: Module, seconds: float,
                  stats=None, stage: str = "tile", changed: bool = True, with_snapshot: bool = False) -> Printed:
    """Print `module` and record it as the result of stage `name` (the frontend records itself this way)."""
    printed = print_positions(module)
    rec = trace.record(name, description, printed.text, seconds, changed, stats, stage, snapshot.positions(printed))
    if with_snapshot:
        rec.snapshot = snapshot.build(module, printed)
    return printed


def _run(module: Module, trace: CompileTrace, passes, options, check: bool, stage: str, on_pass=None):
    """Run `passes` in order, verifying and recording the IR after each; the Printed of the last state."""
    printed = print_positions(module)
    before = printed.text
    for p in passes:
        t0 = time.perf_counter()
        with creating_pass(p.NAME), batched_erase() if p.NAME in _BATCHED_PASSES else contextlib.nullcontext():
            stats = (p.run(module) if options is None else p.run(module, options)) or {}
        dt = time.perf_counter() - t0
        if on_pass is not None:
            on_pass(p.NAME)
        if check:
            verify(module, after=p.NAME)
        printed = print_positions(module)
        changed = printed.text != before
        rec = trace.record(p.NAME, p.DESCRIPTION, printed.text, dt, changed, stats, stage, snapshot.positions(printed))
        if changed:  # cheap (a few ms): the graph view reads the IR after each pass from these records
            rec.snapshot = snapshot.build(module, printed, default_origin="frontend" if stage == "tile" else "tile IR")
        before = printed.text
    return printed


def run_passes(module: Module, trace: CompileTrace, passes, options=None, check=True, stage=None) -> Module:
    """Run `passes` in order, verifying and recording the IR after each. Tile passes take the module
    alone; GPU passes also take the options (warps, architecture)."""
    _run(module, trace, passes, options, check, stage or ("tile" if options is None else "gpu"))
    return module


def run_tile_pipeline(module: Module, trace: CompileTrace, passes=None, check=True) -> Module:
    """The tile-level passes (inlining ... DCE); the last record keeps a Snapshot of the tile IR."""
    printed = _run(module, trace, tile_passes() if passes is None else passes, None, check, "tile")
    if trace.passes:
        trace.passes[-1].snapshot = snapshot.build(module, printed)
    return module


def gpu_passes():
    from .passes import (
        accelerate_matmul,
        allocate_shared,
        assign_layouts,
        decompose_batched_dot,
        fill_stages_with_tma,
        flatten_loops,
        insert_barriers,
        issue_loads_early,
        merge_conversions,
        overlap_softmax,
        pingpong,
        pipeline_dot_operands,
        prefetch_fma_dot_loads,
        register_dot_operand,
        remove_layout_conversions,
        reuse_conversions,
        share_uniform_runs,
        sink_conversions,
        stage_invariant_dot_operands,
        store_in_value_layout,
        strip_mine_tiles,
        tma_pointer_store,
        tma_store,
        upcast_fp8_dot,
        warp_specialize,
        warpgroup_turns,
    )

    return [tma_pointer_store, flatten_loops, strip_mine_tiles, upcast_fp8_dot, decompose_batched_dot,
            accelerate_matmul, prefetch_fma_dot_loads, assign_layouts, remove_layout_conversions, store_in_value_layout,
            merge_conversions, reuse_conversions, share_uniform_runs, stage_invariant_dot_operands,
            pipeline_dot_operands, register_dot_operand, fill_stages_with_tma, warpgroup_turns, warp_specialize,
            overlap_softmax, pingpong, tma_store, issue_loads_early, sink_conversions, allocate_shared,
            insert_barriers]


def _restore_origins(module: Module, tile) -> None:
    """A module parsed back from the tile IR text: give its ops the defining passes the tile Snapshot recorded
    (same ops in the same order), so the GPU Snapshot still says which tile pass made each value."""
    if tile is None:
        return
    ops = [op for fn in module.functions for op in fn.walk()]
    if len(ops) != len(tile.ops) or any(op.name != rec.name for op, rec in zip(ops, tile.ops)):
        return
    for op, rec in zip(ops, tile.ops):
        if op.origin is None:
            op.origin = rec.defined_by


def run_gpu_pipeline(module: Module, trace: CompileTrace, options) -> Module:
    """Tile IR -> GPU IR: layouts, conversions, shared-memory plan, barriers (recorded per pass); the last
    record keeps a Snapshot with the accesses, the plan and the barriers at allocate_shared's program points."""
    _restore_origins(module, trace.snapshot("tile"))
    points: dict = {}

    def on_pass(name):
        if name == "allocate_shared":  # its op numbering: the plan's live ranges are in these points
            points.clear()
            points.update({id(op): (i, op) for i, op in enumerate(module.kernel.walk())})

    printed = _run(module, trace, gpu_passes(), options, True, "gpu", on_pass)
    trace.passes[-1].snapshot = snapshot.build(module, printed, default_origin="tile IR",
                                               num_warps=options.num_warps, points=points)
    return module
