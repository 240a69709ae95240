"""Merge layout conversions of one value into one layout: the later ones read the first's result.

remove_layout_conversions rebuilds each use's chain on its own, so a row vector broadcast into two products
(rotary's `cos` in `x0 * cos - x1 * sin` and `x0 * sin + x1 * cos`) is converted once per product: each a
shared-memory round trip with its barriers. A conversion is pure, so the first of two equal ones in a block (or
in a block enclosing the other's) serves both: the tile-level CSE, for conversions only. Nothing is hoisted.
"""
from __future__ import annotations

from ..ir import Module
from . import cse

NAME = "merge_conversions"
DESCRIPTION = "merge equal layout conversions of one value (the first one, where it dominates, serves all)"


def run(module: Module, options=None) -> dict:
    merged = cse.run(module, only=("ttg.convert_layout",))["merged"]  # CSE's dominance rule, conversions only
    return {"merged": merged} if merged else {}
