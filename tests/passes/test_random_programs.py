"""Differential test: random scalar programs with loops and ifs must print the same values after
every tile pass (and the whole pipeline) as before, evaluated by a tiny reference evaluator."""
from __future__ import annotations

import random

import pytest

from kernellab.compiler import passes
from kernellab.compiler.parser import parse_module
from kernellab.compiler.printer import print_module
from kernellab.compiler.verifier import verify


class Trap(Exception):
    pass


def _i32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _tdiv(a, b):
    if b == 0 or (a == -(1 << 31) and b == -1):
        raise Trap
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


_BIN = {
    "arith.addi": lambda a, b: _i32(a + b),
    "arith.subi": lambda a, b: _i32(a - b),
    "arith.muli": lambda a, b: _i32(a * b),
    "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b,
    "arith.maxsi": max,
    "arith.minsi": min,
    "arith.divsi": _tdiv,
    "arith.remsi": lambda a, b: _i32(a - _tdiv(a, b) * b),
}
_CMP = {"slt": lambda a, b: a < b, "eq": lambda a, b: a == b, "sge": lambda a, b: a >= b,
        "ne": lambda a, b: a != b}


def evaluate(module, args):
    fn = module.kernel
    env = {id(a): v for a, v in zip(fn.args, args)}
    out = []

    def run_block(block, vals):
        for a, v in zip(block.args, vals):
            env[id(a)] = v
        for op in block.ops:
            ins = [env[id(v)] for v in op.operands]
            n = op.name
            if n in ("scf.yield", "tt.return"):
                return ins
            if n == "arith.constant":
                res = [int(op.attrs["value"])]
            elif n in _BIN:
                res = [_BIN[n](*ins)]
            elif n == "arith.cmpi":
                res = [int(_CMP[op.attrs["predicate"]](*ins))]
            elif n == "arith.select":
                res = [ins[1] if ins[0] else ins[2]]
            elif n == "tt.print":
                out.append(tuple(ins))
                res = []
            elif n == "scf.if":
                region = op.regions[0] if ins[0] else op.regions[1]
                res = run_block(region, []) if region.ops else []
            elif n == "scf.for":
                lb, ub, step, *carried = ins
                i = lb
                while i < ub:
                    carried = run_block(op.regions[0], [i] + carried)
                    i = _i32(i + step)
                res = carried
            else:
                raise AssertionError(n)
            for r, v in zip(op.results, res):
                env[id(r)] = v
        return []

    run_block(fn.body, [])
    return out


class Gen:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lines = []
        self.n = 0

    def name(self):
        self.n += 1
        return f"%v{self.n}"

    def emit(self, depth, text):
        self.lines.append("  " * depth + text)

    def block(self, depth, scope, n_ops, loop_depth):
        scope = list(scope)
        bools = []
        rng = self.rng
        for _ in range(n_ops):
            r = rng.random()
            v = self.name()
            if r < 0.15:
                self.emit(depth, f"{v} = arith.constant {{value = {rng.choice([0, 1, -1, 2, 3, 7, -8])}}} : i32")
                scope.append(v)
            elif r < 0.65:
                op = rng.choice(list(_BIN))
                self.emit(depth, f"{v} = {op} {rng.choice(scope)}, {rng.choice(scope)} : i32")
                scope.append(v)
            elif r < 0.75:
                pred = rng.choice(list(_CMP))
                self.emit(depth, f"{v} = arith.cmpi {rng.choice(scope)}, {rng.choice(scope)} "
                                 f"{{predicate = \"{pred}\"}} : i1")
                bools.append(v)
            elif r < 0.82 and bools:
                self.emit(depth, f"{v} = arith.select {rng.choice(bools)}, {rng.choice(scope)}, "
                                 f"{rng.choice(scope)} : i32")
                scope.append(v)
            elif r < 0.9 and bools and depth < 4:
                self.emit(depth, f"{v} = scf.if {rng.choice(bools)} : i32 {{")
                inner = self.block(depth + 1, scope, rng.randint(0, 4), loop_depth)
                self.emit(depth + 1, f"scf.yield {rng.choice(inner)}")
                self.emit(depth, "} {")
                inner = self.block(depth + 1, scope, rng.randint(0, 4), loop_depth)
                self.emit(depth + 1, f"scf.yield {rng.choice(inner)}")
                self.emit(depth, "}")
                scope.append(v)
            elif r < 0.97 and loop_depth < 2:
                k = rng.randint(0, 3)
                results = [self.name() for _ in range(k)] if k else []
                lb = self.name()
                ub = self.name()
                st = self.name()
                self.emit(depth, f"{lb} = arith.constant {{value = {rng.choice([0, 1, 2])}}} : i32")
                self.emit(depth, f"{ub} = arith.constant {{value = {rng.choice([0, 1, 3, 4])}}} : i32")
                self.emit(depth, f"{st} = arith.constant {{value = {rng.choice([1, 2, 5])}}} : i32")
                inits = [rng.choice(scope) for _ in range(k)]
                head = f"{', '.join(results)} = " if k else ""
                types = f" : {', '.join(['i32'] * k)}" if k else ""
                self.emit(depth, f"{head}scf.for {', '.join([lb, ub, st] + inits)}{types} {{")
                iv = self.name()
                iters = [self.name() for _ in range(k)]
                self.emit(depth, "^bb(" + ", ".join(f"{a}: i32" for a in [iv] + iters) + "):")
                inner = self.block(depth + 1, scope + [iv] + iters, rng.randint(0, 6), loop_depth + 1)
                ys = [rng.choice(inner + iters) for _ in range(k)]
                self.emit(depth + 1, "scf.yield" + (" " + ", ".join(ys) if ys else ""))
                self.emit(depth, "}")
                scope.extend(results)
            else:
                self.emit(depth, f"tt.print {rng.choice(scope)}")
        return scope

    def program(self):
        self.lines = ["tt.func @k(%a: i32, %b: i32) {"]
        scope = self.block(1, ["%a", "%b"], self.rng.randint(5, 25), 0)
        self.emit(1, "tt.print " + ", ".join(scope[-3:]))
        self.emit(1, "tt.return")
        self.lines.append("}")
        return "\n".join(self.lines)


ARGS = [(0, 0), (5, -3), (-7, 2), (2147483647, -2147483648), (1, 1)]


def _outcome(module, args):
    try:
        return evaluate(module, args)
    except Trap:
        return "trap"


@pytest.mark.parametrize("seed", range(300))
def test_passes_preserve_semantics(seed):
    text = Gen(seed).program()
    want = [_outcome(parse_module(text), a) for a in ARGS]
    singles = [[p] for p in {id(p): p for p in passes.TILE_PASSES}.values()]
    for pipeline in singles + [passes.TILE_PASSES]:
        m = parse_module(text)
        for p in pipeline:
            p.run(m)
            verify(m, after=p.NAME)
        got = [_outcome(m, a) for a in ARGS]
        for w, g, a in zip(want, got, ARGS):
            # Removing a dead trapping op is allowed; introducing a trap or a difference is not.
            if w != "trap":
                assert g == w, (f"{[p.NAME for p in pipeline]} changed the result for {a}\n{text}\n---\n"
                                + print_module(m, with_locs=False))
