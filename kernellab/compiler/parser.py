"""Reads the printer's text back into IR, so pass tests can be written as IR text in, IR text out."""
from __future__ import annotations

import json
import re

from .ir import Block, Function, Loc, Module, Op
from .types import parse_type


class ParseError(ValueError):
    pass


class _Cursor:
    def __init__(self, text: str, lineno: int):
        self.s, self.i, self.lineno = text, 0, lineno

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def peek(self, tok: str) -> bool:
        self.ws()
        return self.s.startswith(tok, self.i)

    def eat(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def expect(self, tok: str):
        if not self.eat(tok):
            self.fail(f"expected {tok!r}")

    def fail(self, why: str):
        raise ParseError(f"line {self.lineno}: {why} at column {self.i + 1}: {self.s!r}")

    def regex(self, pattern: str) -> str:
        self.ws()
        m = re.compile(pattern).match(self.s, self.i)
        if not m:
            self.fail(f"expected /{pattern}/")
        self.i = m.end()
        return m.group(0)

    def value_name(self) -> str:
        return self.regex(r"%[A-Za-z0-9_.]+")[1:]

    def type(self) -> object:
        """A type runs until a top-level ',', ')', ' {', ' loc(' or the end."""
        self.ws()
        depth, j = 0, self.i
        while j < len(self.s):
            c = self.s[j]
            if c == "<":
                depth += 1
            elif c == ">":
                depth -= 1
            elif depth == 0 and (c in ",)" or self.s.startswith(" ", j)):
                break
            j += 1
        text, self.i = self.s[self.i:j], j
        try:
            return parse_type(text)
        except ValueError as e:
            self.fail(str(e))

    def attr_value(self):
        self.ws()
        if self.peek('"'):
            dec = json.JSONDecoder()
            v, end = dec.raw_decode(self.s, self.i)
            self.i = end
            return v
        if self.eat("["):
            out = []
            while not self.eat("]"):
                out.append(self.attr_value())
                self.eat(",")
            return out
        tok = self.regex(r"-?inf|nan|none|true|false|-?[0-9][0-9a-zA-Z_.+-]*")
        if tok == "none":
            return None
        if tok in ("true", "false"):
            return tok == "true"
        if tok in ("inf", "-inf", "nan"):
            return float(tok)
        return float(tok) if any(c in tok for c in ".eE") else int(tok)

    def attrs(self) -> dict:
        out = {}
        self.expect("{")
        while not self.eat("}"):
            key = self.regex(r"[A-Za-z_][A-Za-z0-9_.]*")
            self.expect("=")
            out[key] = self.attr_value()
            self.eat(",")
        return out

    def loc(self):
        if self.eat("loc("):
            text = self.regex(r"[^)]*")
            self.expect(")")
            return text
        return None


class Parser:
    def __init__(self, text: str):
        aliases = {}
        for ln in text.splitlines():
            m = re.match(r"\s*(#L[0-9]+) = (#.*)$", ln)
            if m:
                aliases[m.group(1)] = m.group(2).strip()
        if aliases:
            text = "\n".join(ln for ln in text.splitlines() if not re.match(r"\s*#L[0-9]+ = ", ln))
            text = re.sub(r"#L[0-9]+\b", lambda m: aliases[m.group(0)], text)
        self.lines = [(n + 1, ln.strip()) for n, ln in enumerate(text.splitlines())]
        self.lines = [(n, ln) for n, ln in self.lines if ln and not ln.startswith("//")]
        self.pos = 0
        self.scopes: list[dict] = []

    def lookup(self, name: str, cur: _Cursor):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        cur.fail(f"use of undefined value %{name}")

    def define(self, name: str, value):
        value.hint = None if name.isdigit() else name
        self.scopes[-1][name] = value

    def parse_module(self) -> Module:
        fns = []
        while self.pos < len(self.lines):
            fns.append(self.parse_function())
        return Module(fns)

    def parse_function(self) -> Function:
        lineno, line = self.lines[self.pos]
        self.pos += 1
        c = _Cursor(line, lineno)
        c.expect("tt.func")
        name = c.regex(r"@[A-Za-z_][A-Za-z0-9_]*")[1:]
        c.expect("(")
        params = []
        while not c.eat(")"):
            pname = c.value_name()
            c.expect(":")
            ty = c.type()
            attrs = c.attrs() if c.peek("{") else {}
            params.append((pname, ty, attrs))
            c.eat(",")
        results = []
        if c.eat("->"):
            while not (c.peek("loc(") or c.peek("{")):
                results.append(c.type())
                c.eat(",")
        src_file, first_line = "<unknown>", 1
        loc = c.loc()
        if loc:
            fname, _, ln = loc.rpartition(":")
            src_file, first_line = json.loads(fname), int(ln)
        c.expect("{")
        body = Block([t for _, t, _ in params])
        self.scopes.append({})
        for (pname, _, _), arg in zip(params, body.args):
            self.define(pname, arg)
        self.parse_ops(body)
        self.scopes.pop()
        lineno, line = self.lines[self.pos]
        if line != "}":
            raise ParseError(f"line {lineno}: expected '}}' closing @{name}")
        self.pos += 1
        return Function(name, body, results, [a for _, _, a in params], src_file, first_line)

    def parse_ops(self, block: Block):
        """Ops until a line that closes the region ('}' or '} {' or '} loc(..)')."""
        while self.pos < len(self.lines):
            lineno, line = self.lines[self.pos]
            if line.startswith("}"):
                return
            self.pos += 1
            block.append(self.parse_op(line, lineno))
        raise ParseError("unexpected end of input inside a region")

    def parse_op(self, line: str, lineno: int) -> Op:
        c = _Cursor(line, lineno)
        names = []
        if c.peek("%"):
            while True:
                names.append(c.value_name())
                if not c.eat(","):
                    break
            c.expect("=")
        opname = c.regex(r"[A-Za-z_][A-Za-z0-9_.]*")
        attrs = {}
        if c.peek("@"):
            attrs["callee"] = c.regex(r"@[A-Za-z_][A-Za-z0-9_]*")[1:]
        operands = []
        while c.peek("%"):
            operands.append(self.lookup(c.value_name(), c))
            c.eat(",")
        if c.peek("{") and c.s[c.i:].strip() != "{":
            attrs.update(c.attrs())
        types = []
        if c.eat(":"):
            while True:
                types.append(c.type())
                if not c.eat(","):
                    break
        has_region = c.eat("{")
        loc = c.loc()
        c.ws()
        if c.i != len(c.s):
            c.fail("unexpected trailing text")
        if len(types) != len(names):
            c.fail(f"{len(names)} results but {len(types)} result types")
        regions = []
        if has_region:
            while True:
                region = Block()
                self.scopes.append({})
                if self.pos < len(self.lines) and self.lines[self.pos][1].startswith("^bb("):
                    ln, header = self.lines[self.pos]
                    self.pos += 1
                    hc = _Cursor(header, ln)
                    hc.expect("^bb(")
                    while not hc.eat(")"):
                        aname = hc.value_name()
                        hc.expect(":")
                        self.define(aname, region.add_arg(hc.type()))
                        hc.eat(",")
                self.parse_ops(region)
                self.scopes.pop()
                regions.append(region)
                ln, closer = self.lines[self.pos]
                self.pos += 1
                if closer == "} {":
                    continue
                cc = _Cursor(closer, ln)
                cc.expect("}")
                loc = cc.loc()
                break
        op = Op(opname, operands, types, attrs, regions, _loc(loc))
        for n, r in zip(names, op.results):
            self.define(n, r)
        return op


def _loc(text):
    if not text:
        return None
    line, _, col = text.partition(":")
    return Loc(int(line), int(col or 0))


def parse_module(text: str) -> Module:
    return Parser(text).parse_module()
