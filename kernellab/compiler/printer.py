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


class Printed:
    """Text of a module and where everything in it was printed, so a reader maps a line back to its op or
    value without parsing the text. Per line of `text`, `rows` holds (kind, object, region):
    "layout" (an alias line at the top; object = alias), "blank", "func" (the function header; a Function),
    "op" (an op, or a region op's header line), "args" (a region's `^bb(...)` line; the op, region number),
    "next" (the `} {` between two regions of an op), "end" (a region op's closing `}`), "func_end".
    `loc_spans` per line: the (start, end) characters of its ` loc(...)` text, or None; `names` maps id(value)
    to its printed name; `aliases` maps layout text to its alias."""

    __slots__ = ("text", "rows", "loc_spans", "names", "aliases", "with_locs")

    def __init__(self, text, rows, loc_spans, names, aliases, with_locs):
        self.text, self.rows, self.loc_spans, self.names, self.aliases = text, rows, loc_spans, names, aliases
        self.with_locs = with_locs

    def source_lines(self) -> tuple:
        """Per line: the kernel source line it came from, or None. A region op's header line carries the loc
        printed on its closing line; a function header its `def` line."""
        out = []
        for kind, obj, _ in self.rows:
            if not self.with_locs:
                out.append(None)
            elif kind == "func":
                out.append(obj.first_line)
            elif kind in ("op", "end"):
                out.append(obj.loc.line if obj.loc is not None else None)
            else:
                out.append(None)
        return tuple(out)

    def source_files(self) -> tuple:
        """Per line: the file of its source line when it is not the kernel's (the first function's) file: an
        @jit helper from another module, inlined or (before inlining) printed as its own function; else None;
        () when there is none such."""
        out, kernel_file, any_other = [], None, False
        for kind, obj, _ in self.rows:
            f = None
            if kind == "func":
                kernel_file = obj.source_file if kernel_file is None else kernel_file
                f = obj.source_file if self.with_locs and obj.source_file != kernel_file else None
            elif kind in ("op", "end") and self.with_locs and obj.loc is not None and obj.loc.file:
                f = obj.loc.file if obj.loc.file != kernel_file else None
            any_other = any_other or f is not None
            out.append(f)
        return tuple(out) if any_other else ()


class _Out:
    """Lines being printed, what each one shows, and the lengths of its loc and of the text after it."""

    __slots__ = ("lines", "rows", "locs")

    def __init__(self):
        self.lines, self.rows, self.locs = [], [], []

    def add(self, text: str, kind: str, obj=None, region: int = 0, loc: str = "", tail: str = ""):
        self.lines.append(text + loc + tail)
        self.rows.append((kind, obj, region))
        self.locs.append((len(loc), len(tail)) if loc else None)


def _loc(op, with_locs: bool) -> str:
    return f" loc({op.loc})" if with_locs and op.loc is not None else ""


def print_op(op: Op, namer: Namer, indent: int, out: _Out, with_locs: bool):
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
    if not op.regions:
        out.add(text, "op", op, loc=_loc(op, with_locs))
        return
    out.add(text + " {", "op", op)
    for i, region in enumerate(op.regions):
        if i:
            out.add(pad + "} {", "next", op, i)
        print_block(region, namer, indent + 1, out, with_locs, show_args=True, owner=(op, i))
    out.add(pad + "}", "end", op, loc=_loc(op, with_locs))


def print_block(block: Block, namer: Namer, indent: int, out: _Out, with_locs: bool, show_args: bool,
                owner=(None, 0)):
    if show_args and block.args:
        args = ", ".join(f"{namer.define(a)}: {a.type}" for a in block.args)
        out.add("  " * (indent - 1) + f"^bb({args}):", "args", *owner)
    for op in block.ops:
        print_op(op, namer, indent, out, with_locs)


def _print_function(fn: Function, namer: Namer, out: _Out, with_locs: bool):
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
    loc = f" loc({json.dumps(fn.source_file)}:{fn.first_line})" if with_locs else ""
    out.add(head, "func", fn, loc=loc, tail=" {") if loc else out.add(head + " {", "func", fn)
    print_block(fn.body, namer, 1, out, with_locs, show_args=False)
    out.add("}", "func_end", fn)


def print_function(fn: Function, with_locs: bool = True) -> str:
    out = _Out()
    _print_function(fn, Namer(), out, with_locs)
    return "\n".join(out.lines)


def print_positions(module: Module, with_locs: bool = True) -> Printed:
    """The module's text (as `print_module`) with the position of every op, region and value in it."""
    out = _Out()
    names: dict = {}
    for k, f in enumerate(module.functions):
        if k:
            out.add("", "blank")
        namer = Namer()
        _print_function(f, namer, out, with_locs)
        names.update(namer.names)
    text, aliases = _alias("\n".join(out.lines) + "\n")
    rows, locs = out.rows, out.locs
    if aliases:  # the alias lines and a blank line above the functions
        head = [("layout", alias, 0) for alias in aliases.values()] + [("blank", None, 0)]
        rows, locs = head + rows, [None] * len(head) + locs
    lines = text.split("\n")
    spans = []
    for line, lt in zip(lines, locs):
        if lt is None:
            spans.append(None)
        else:  # aliasing shortened the text before the loc, never the loc or what follows it
            end = len(line) - lt[1]
            spans.append((end - lt[0], end))
    return Printed(text, rows, spans, names, aliases, with_locs)


def print_module(module: Module, with_locs: bool = True) -> str:
    return print_positions(module, with_locs).text


_LAYOUT_START = re.compile(r"#(?:blocked|slice|mma|bits)<")


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
    return _alias(text)[0]


def _alias(text: str) -> tuple[str, dict]:
    """(`alias_layouts(text)`, {layout text: its alias})."""
    spans = _layout_spans(text)
    if not spans:
        return text, {}
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
    return header + "\n" + "".join(out), names
