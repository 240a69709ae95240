"""Tile-level passes. Each module has `NAME`, `DESCRIPTION` and `run(module) -> stats`, mutates the
module in place and reports what it changed (all-zero stats: nothing changed).

`TILE_PASSES` is the pipeline in order; canonicalize, CSE and DCE run a second time to clean up
after constant folding and loop-invariant code motion. `split_k` and `make_persistent` are not in the list: the
pipeline adds them for the variants a launch asks for (pipeline.tile_passes(split_k=True) / (persistent=True)).
"""
from __future__ import annotations

from . import (
    canonicalize,
    constant_fold,
    cse,
    dce,
    fold_dot_accumulator,
    inline,
    licm,
    make_persistent,
    pipeline_loads,
    split_k,
    strength_reduce_pointers,
    unroll_loops,
)

TILE_PASSES = [inline, canonicalize, constant_fold, canonicalize, fold_dot_accumulator, cse, dce, licm, unroll_loops,
               strength_reduce_pointers, pipeline_loads, cse, dce]

__all__ = ["TILE_PASSES", "canonicalize", "constant_fold", "cse", "dce", "fold_dot_accumulator", "inline", "licm",
           "make_persistent", "pipeline_loads", "split_k", "strength_reduce_pointers", "unroll_loops"]
