"""MLIR-like text for the tile IR: what the lab shows and what the parser reads back.

    %offs = arith.addi %0, %1 : tensor<1024xi32> loc(4:11)

Values are named after the Python variable they came from where there is one.
"""
from __future__ import annotations

import json
import math
import re

from .ir import Block, Function, Module, Op, Value


def format_attr(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    raise TypeError(f"unprintable attribute {v!r}")


def format_attrs(attrs: dict) -> str:
    if not attrs:
        return ""
    return "{" + ", ".join(f"{k} = {format_attr(attrs[k])}" for k in sorted(attrs)) + "}"


class Namer:
    """Gives each value a unique printable name, preferring its source-variable hint."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counter = 0
        # per hint, the last suffix tried: names are never released, so the search resumes there and an
        # unrolled loop's thousand `acc`s cost linear, not quadratic, time
        self.suffix: dict[str, int] = {}

    def define(self, v: Value) -> str:
        if v.hint and v.hint.isidentifier():
            base, name = v.hint, v.hint
            n = self.suffix.get(base, 0)
            if n:
                name = f"{base}_{n}"
            while name in self.taken:
                n += 1
                name = f"{base}_{n}"
            self.suffix[base] = n
        else:
            while str(self.counter) in self.taken:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.taken.add(name)
        self.names[id(v)] = name
        return "%" + name

    def __getitem__(self, v: Value) -> str:
        try:
            return "%" + self.names[id(v)]
        except KeyError:
            return f"%<undefined {v.type}>"


def print_op(op: Op, namer: Namer, indent: int, lines: list, with_locs: bool):
    pad = "  " * indent
    operands = ", ".join(namer[v] for v in op.operands)
    results = ", ".join(namer.define(r) for r in op.results)
    text = pad + (f"{results} = " if results else "") + op.name
    if op.attrs.get("callee") is not None and op.name == "tt.call":
        attrs = dict(op.attrs)
        text += f" @{attrs.pop('callee')}"
    else:
        attrs = op.attrs
    if operands:
        text += " " + operands
    if attrs:
        text += " " + format_attrs(attrs)
    if op.results:
        text += " : " + ", ".join(str(r.type) for r in op.results)
    if op.regions:
        lines.append(text + " {")
        for i, region in enumerate(op.regions):
            if i:
                lines.append(pad + "} {")
            print_block(region, namer, indent + 1, lines, with_locs, show_args=True)
        text = pad + "}"
    if with_locs and op.loc is not None:
        text += f" loc({op.loc})"
    lines.append(text)


def print_block(block: Block, namer: Namer, indent: int, lines: list, with_locs: bool, show_args: bool):
    if show_args and block.args:
        args = ", ".join(f"{namer.define(a)}: {a.type}" for a in block.args)
        lines.append("  " * (indent - 1) + f"^bb({args}):")
    for op in block.ops:
        print_op(op, namer, indent, lines, with_locs)


def print_function(fn: Function, with_locs: bool = True) -> str:
    namer = Namer()
    params = []
    for i, a in enumerate(fn.args):
        p = f"{namer.define(a)}: {a.type}"
        attrs = fn.arg_attrs[i] if i < len(fn.arg_attrs) else {}
        if attrs:
            p += " " + format_attrs(attrs)
        params.append(p)
    head = f"tt.func @{fn.name}({', '.join(params)})"
    if fn.result_types:
        head += " -> " + ", ".join(map(str, fn.result_types))
    if with_locs:
        head += f" loc({json.dumps(fn.source_file)}:{fn.first_line})"
    lines = [head + " {"]
    print_block(fn.body, namer, 1, lines, with_locs, show_args=False)
    lines.append("}")
    return "\n".join(lines)


def print_module(module: Module, with_locs: bool = True) -> str:
    return alias_layouts("\n\n".join(print_function(f, with_locs) for f in module.functions) + "\n")


_LAYOUT_START = re.compile(r"#(?:blocked|slice|mma)<")


def _layout_spans(text: str):
    """(start, end) of every outermost `#blocked<...>` / `#slice<...>` / `#mma<...>` in `text`: one
    left-to-right scan (searching each prefix separately from every span rescanned the text: quadratic)."""
    spans, end = [], 0
    for m in _LAYOUT_START.finditer(text):
        j = m.start()
        if j < end:
            continue  # nested inside the span just taken
        k, depth = m.end() - 1, 0
        while True:
            c = text[k]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        spans.append((j, k + 1))
        end = k + 1
    return spans


def alias_layouts(text: str) -> str:
    """Name each distinct layout once at the top (`#L0 = #blocked<...>`) and use the alias below."""
    spans = _layout_spans(text)
    if not spans:
        return text
    names: dict[str, str] = {}
    out, prev = [], 0
    for a, b in spans:
        lay = text[a:b]
        names.setdefault(lay, f"#L{len(names)}")
        out.append(text[prev:a])
        out.append(names[lay])
        prev = b
    out.append(text[prev:])
    header = "".join(f"{alias} = {lay}\n" for lay, alias in names.items())
    return header + "\n" + "".join(out)
