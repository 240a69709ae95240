"""Inline every `tt.call`, then keep only the kernel.

Each callee is first made call-free itself (memoized, so a helper called from many places is
flattened once), then its body is cloned in front of the call with the parameters bound to the
call's operands; the values of its `tt.return` replace the call's results. Calls nested in regions
(loop bodies, reduce combine regions, ...) are inlined in place. Recursion is a compile error:
structured tile code cannot express it.
"""
from __future__ import annotations

from ...errors import CompilationError
from ..ir import Function, Module, Op
from ..rewrite import insert_before, replace_op

NAME = "inline"
DESCRIPTION = "inline every tt.call into the kernel and drop the helper functions"


def _calls(fn: Function) -> list[Op]:
    return [op for op in fn.walk() if op.name == "tt.call"]


def _fail(fn: Function, reason: str, op: Op | None = None):
    line = op.loc.line if op is not None and op.loc is not None else None
    raise CompilationError(fn.name, reason, fn.source_file, line)


def _inline_call(call: Op, callee: Function, caller: Function):
    body = callee.body
    if len(call.operands) != len(body.args):
        _fail(caller, f"call to {callee.name} passes {len(call.operands)} arguments, "
                      f"it takes {len(body.args)}", call)
    ret = body.terminator
    if ret is None or ret.name != "tt.return":
        _fail(callee, "function body does not end in tt.return")
    if any(op.name == "tt.return" and op is not ret for op in callee.walk()):
        _fail(callee, "tt.return may only end the function body")
    if len(ret.operands) != len(call.results):
        _fail(caller, f"call to {callee.name} expects {len(call.results)} results, "
                      f"it returns {len(ret.operands)}", call)
    mapping = {id(a): v for a, v in zip(body.args, call.operands)}
    for op in body.ops[:-1]:
        insert_before(call, op.clone(mapping))
    outs = [mapping.get(id(v), v) for v in ret.operands]
    for r, v in zip(call.results, outs):
        # A value computed by the inlined body takes the name the caller gave the call's result.
        if r.hint and not any(v is a for a in call.operands):
            v.hint = r.hint
    replace_op(call, outs)


def run(module: Module) -> dict:
    stats = {"inlined": 0, "functions_removed": 0}
    done: set[str] = set()

    def flatten(fn: Function, stack: list[str]):
        if fn.name in done:
            return
        stack = stack + [fn.name]
        for call in _calls(fn):
            name = call.attrs.get("callee")
            try:
                callee = module.lookup(name)
            except KeyError:
                _fail(fn, f"call to unknown function {name!r}", call)
            if callee.name in stack:
                _fail(fn, "recursive call chain " + " -> ".join(stack + [callee.name]), call)
            flatten(callee, stack)
            _inline_call(call, callee, fn)
            stats["inlined"] += 1
        done.add(fn.name)

    if module.functions:
        flatten(module.kernel, [])
        stats["functions_removed"] = len(module.functions) - 1
        del module.functions[1:]
    return stats
