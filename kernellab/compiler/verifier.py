"""Structural checks on the IR, run after the frontend and after every pass.

A failure here is a compiler bug, not a user error: the message names the pass that broke the IR.
"""
from __future__ import annotations

from .ir import Block, Function, Module
from .ops import OPS, info, is_structured
from .types import int1


class VerificationError(AssertionError):
    pass


def verify(module: Module, after: str = "frontend"):
    for fn in module.functions:
        _verify_function(fn, after)


def _verify_function(fn: Function, after: str):
    defined = set()

    def fail(op, why):
        raise VerificationError(f"IR invalid after {after} in @{fn.name}: {op.name} at {op.loc}: {why}")

    users: dict[int, set] = {}  # id(value) -> ids of the ops in its use list, built once per value

    def recorded(v, op) -> bool:
        ids = users.get(id(v))
        if ids is None:
            ids = users[id(v)] = {id(u) for u in v.uses}
        return id(op) in ids

    def walk(block: Block, scope: set):
        # one scope set for the whole function: a region adds its names and takes them out again when
        # done, so deep nesting or thousands of regions stay linear
        added = [id(a) for a in block.args if id(a) not in scope]
        scope.update(added)
        for i, op in enumerate(block.ops):
            if op.name not in OPS:
                fail(op, "unknown op")
            for v in op.operands:
                if id(v) not in scope:
                    fail(op, f"operand {v} is not defined before its use")
                if not recorded(v, op):
                    fail(op, f"use list of {v} does not record this op")
            if info(op.name).terminator and i != len(block.ops) - 1:
                fail(op, "terminator in the middle of a block")
            if info(op.name).same_types:
                types = {str(v.type) for v in op.operands} | {str(r.type) for r in op.results}
                if len(types) != 1:
                    fail(op, f"operand and result types differ: {sorted(types)}")
            if op.name in ("arith.cmpi", "arith.cmpf") and op.results[0].type.scalar != int1:
                fail(op, "comparison must produce i1")
            for r in op.regions:
                if r.parent is not op:
                    fail(op, "region parent link is broken")
                walk(r, scope)
                if is_structured(op.name) and (not r.ops or not info(r.ops[-1].name).terminator):
                    fail(op, "region does not end in a terminator")
            if op.name == "scf.for":
                n = len(op.results)
                body = op.regions[0]
                if len(body.args) != n + 1 or len(op.operands) != n + 3:
                    fail(op, "iter_args, block arguments and results disagree")
                if len(body.ops[-1].operands) != n:
                    fail(op, "scf.yield count differs from results")
            for r in op.results:
                if id(r) not in scope:
                    scope.add(id(r))
                    added.append(id(r))
        if block is not fn.body:
            scope.difference_update(added)
        return scope

    walk(fn.body, defined)
    if not fn.body.ops or fn.body.ops[-1].name != "tt.return":
        raise VerificationError(f"IR invalid after {after} in @{fn.name}: function does not end in tt.return")
