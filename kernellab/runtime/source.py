"""Finding a kernel's source text: from its file, a notebook cell, or the string given to `exec`.

`inspect.getsource` fails for functions defined through `exec` (no file to read), which is where
Triton's `jit` gives up. We also look through the defining frames for the string that was executed,
and accept it only if compiling it reproduces the function's own bytecode.
"""
from __future__ import annotations

import inspect
import linecache
import sys
import textwrap
import types


def _find_code(code: types.CodeType, name: str, firstlineno: int):
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == firstlineno:
                return const
            found = _find_code(const, name, firstlineno)
            if found is not None:
                return found
    return None


def _slice_def(text: str, firstlineno: int) -> tuple[str, int] | None:
    """The decorators + def starting at `firstlineno` (1-based) in `text`, and its first line."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if start == firstlineno or node.lineno == firstlineno:
                lines = text.splitlines(keepends=True)[start - 1:node.end_lineno]
                return "".join(lines), start
    return None


def source_from_frames(fn, max_depth: int = 12) -> tuple[str, int] | None:
    code = fn.__code__
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        for ns in (frame.f_locals, frame.f_globals):
            for value in list(ns.values()):
                if isinstance(value, str) and f"def {fn.__name__}" in value:
                    try:
                        compiled = compile(value, code.co_filename, "exec")
                    except (SyntaxError, ValueError):
                        continue
                    match = _find_code(compiled, code.co_name, code.co_firstlineno)
                    if match is not None and match.co_code == code.co_code:
                        found = _slice_def(value, code.co_firstlineno)
                        if found:
                            return found
        frame = frame.f_back
    return None


def get_source(fn) -> tuple[str, str, int] | None:
    """(dedented source, filename, first line number) or None when it cannot be found."""
    filename = fn.__code__.co_filename
    try:
        lines, lnum = inspect.getsourcelines(fn)
        return textwrap.dedent("".join(lines)), filename, max(lnum, 1)
    except (OSError, TypeError):
        pass
    text = "".join(linecache.getlines(filename))
    if text:
        found = _slice_def(text, fn.__code__.co_firstlineno)
        if found:
            return textwrap.dedent(found[0]), filename, found[1]
    found = source_from_frames(fn)
    if found:
        return textwrap.dedent(found[0]), filename, found[1]
    return None
