"""The tile IR: SSA values, ops with nested single-block regions, functions and modules.

Control flow is structured (scf.for / scf.if / scf.while own their bodies as regions), so every
pass can walk the IR as a tree and the interpreter never needs a CFG.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .types import Type


@dataclass(frozen=True)
class Loc:
    """A source position: line and column, and the file (or notebook cell) they are in: an @jit helper
    inlined into the kernel may come from another file. `file` None: the kernel's own (IR parsed from text)."""

    line: int
    col: int = 0
    file: str | None = None

    def __str__(self):
        return f"{self.line}:{self.col}"


class Value:
    """An SSA value: an op result or a block argument."""

    __slots__ = ("type", "hint", "owner", "index", "uses")

    def __init__(self, type: Type, hint: str | None = None, owner=None, index: int = 0):
        self.type, self.hint, self.owner, self.index = type, hint, owner, index
        self.uses: list[Op] = []

    @property
    def defining_op(self) -> Op | None:
        return self.owner if isinstance(self.owner, Op) else None

    def replace_all_uses_with(self, new: Value):
        """Point every use at `new`; `uses` holds one entry per operand slot."""
        if new is self:
            return
        for op in {id(o): o for o in self.uses}.values():
            op.operands = [new if v is self else v for v in op.operands]
        new.uses.extend(self.uses)
        self.uses = []

    def __repr__(self):
        return f"<Value {self.hint or ''}: {self.type}>"


class Block:
    """A straight-line list of ops with arguments (loop induction variables, iter args...)."""

    def __init__(self, arg_types=(), arg_hints=None):
        hints = arg_hints or [None] * len(arg_types)
        self.args = [Value(t, h, self, i) for i, (t, h) in enumerate(zip(arg_types, hints))]
        self.ops: list[Op] = []
        self.parent: Op | None = None

    def add_arg(self, type: Type, hint=None) -> Value:
        v = Value(type, hint, self, len(self.args))
        self.args.append(v)
        return v

    def append(self, op: Op) -> Op:
        op.block = self
        self.ops.append(op)
        return op

    def insert(self, index: int, op: Op) -> Op:
        op.block = self
        self.ops.insert(index, op)
        return op

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops else None

    def clone(self, mapping: dict) -> Block:
        """A detached copy of this block and everything nested in it; `mapping` (keyed by `id(value)`) maps
        values defined outside to their stand-ins and learns the copy's arguments and results."""
        new = Block([a.type for a in self.args], [a.hint for a in self.args])
        for a, na in zip(self.args, new.args):
            mapping[id(a)] = na
        for op in self.ops:
            new.append(op.clone(mapping))
        return new


# The pass creating ops now (pipeline.run_passes sets it): each op remembers it as `origin`, which the trace
# reports as the value's defining pass. None outside a pass (the frontend, the parser).
_CREATING_PASS: list = [None]


class creating_pass:
    """Within this context every new op records `name` as its origin."""

    def __init__(self, name: str | None):
        self.name = name

    def __enter__(self):
        _CREATING_PASS.append(self.name)
        return self

    def __exit__(self, *exc):
        _CREATING_PASS.pop()
        return False


class Op:
    """One operation: name, operands, results, attributes, regions, source location, and the pass that made it."""

    def __init__(self, name: str, operands=(), result_types=(), attrs=None, regions=(), loc=None,
                 result_hints=None):
        self.origin: str | None = _CREATING_PASS[-1]
        self.name = name
        self.operands: list[Value] = list(operands)
        for v in self.operands:
            v.uses.append(self)
        hints = result_hints or [None] * len(result_types)
        self.results = [Value(t, h, self, i) for i, (t, h) in enumerate(zip(result_types, hints))]
        self.attrs: dict = dict(attrs or {})
        self.regions: list[Block] = list(regions)
        for r in self.regions:
            r.parent = self
        self.loc: Loc | None = loc
        self.block: Block | None = None

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]

    def clone(self, mapping: dict) -> Op:
        """A detached copy of this op and everything nested in it. Operands are looked up in `mapping` (keyed
        by `id(value)`; values not in it are used as they are) and `mapping` learns the copy's results and
        block arguments. Attributes are copied (lists too); types and locations are immutable and shared."""
        regions = [r.clone(mapping) for r in self.regions]
        new = Op(self.name, [mapping.get(id(v), v) for v in self.operands], [r.type for r in self.results],
                 copy_attrs(self.attrs), regions, self.loc, [r.hint for r in self.results])
        new.origin = self.origin  # a copy was made by the pass that made the original
        for r, nr in zip(self.results, new.results):
            mapping[id(r)] = nr
        return new

    def set_operand(self, i: int, v: Value):
        self.operands[i].uses.remove(self)
        self.operands[i] = v
        v.uses.append(self)

    def erase(self):
        """Remove from its block and drop the uses it holds (results must be dead)."""
        for v in self.operands:
            if self in v.uses:
                v.uses.remove(self)
        for r in self.regions:
            for op in list(r.ops):
                op.erase()
        if self.block is not None:
            _remove_from(self.block, self)
            self.block = None

    def walk(self):
        """This op, then every op nested in its regions, in order."""
        yield self
        for r in self.regions:
            for op in r.ops:
                yield from op.walk()

    def __repr__(self):
        return f"<Op {self.name} at {self.loc}>"


def copy_attrs(attrs: dict) -> dict:
    """A copy of an attribute dict that shares no list with it (attribute values are numbers, strings, None and
    lists or tuples of them)."""
    return {k: _copy_attr(v) for k, v in attrs.items()}


def _copy_attr(v):
    if isinstance(v, (list, tuple)):
        return type(v)(_copy_attr(x) for x in v)
    return v


def _remove_from(block: Block, op: Op):
    """Drop `op` from `block.ops`. Ops just built (a literal the frontend replaces) sit at the end, so look
    there first; a batch of erasures (`batched_erase`) defers the list work to one sweep per block."""
    ops = block.ops
    if _BATCH:
        _BATCH[-1][id(block)] = block
        return
    for i in range(len(ops) - 1, max(len(ops) - 9, -1), -1):
        if ops[i] is op:
            del ops[i]
            return
    ops.remove(op)


_BATCH: list = []  # stack of {id(block): block} whose ops lists are out of date (see batched_erase)
_PENDING: list = []  # parallel stack of {id(anchor): [ops to insert before anchor]}


def defer_insert_before(anchor: Op, op: Op) -> bool:
    """Within `batched_erase`, queue `op` to go right before `anchor` at the sweep; False outside one."""
    if not _BATCH:
        return False
    op.block = anchor.block
    _BATCH[-1][id(anchor.block)] = anchor.block
    _PENDING[-1].setdefault(id(anchor), []).append(op)
    return True


def _sweep():
    """Bring every touched block's ops list up to date: queued ops in, erased ops out, one pass each."""
    blocks, pending = _BATCH[-1], _PENDING[-1]
    _BATCH[-1], _PENDING[-1] = {}, {}

    def emit(o, block, out):
        for q in pending.pop(id(o), ()):
            emit(q, block, out)
        if o.block is block:
            out.append(o)

    for block in blocks.values():
        out: list = []
        for o in block.ops:
            emit(o, block, out)
        block.ops = out


class batched_erase:
    """Within this context `Op.erase` unlinks an op at once (uses, `op.block = None`) but leaves it in its
    block's list, and `rewrite.insert_before` queues the new op; when the context ends each touched block
    is rebuilt in one sweep. Erasing or inserting k ops in a block of n then costs O(n + k), not O(n k).
    For passes that walk a snapshot of the ops and skip detached ones (`is_attached`); a Builder
    positioned with `set_insertion_point_before` sweeps first, so it always sees the real list."""

    def __enter__(self):
        _BATCH.append({})
        _PENDING.append({})
        return self

    def __exit__(self, *exc):
        try:
            _sweep()
        finally:
            _BATCH.pop()
            _PENDING.pop()
        return False


@dataclass
class Function:
    """A `@jit` function after the frontend: a body block whose arguments are the parameters."""

    name: str
    body: Block
    result_types: list = field(default_factory=list)
    arg_attrs: list = field(default_factory=list)  # one dict per argument (divisibility, ...)
    source_file: str = "<unknown>"
    first_line: int = 1

    @property
    def args(self):
        return self.body.args

    def walk(self):
        for op in self.body.ops:
            yield from op.walk()

    def clone(self) -> Function:
        return Function(self.name, self.body.clone({}), list(self.result_types),
                        [copy_attrs(a) for a in self.arg_attrs], self.source_file, self.first_line)


@dataclass
class Module:
    """A kernel plus the `@jit` functions it calls (until the inliner folds them in). `shared_plan` (one dict per
    buffer: op, line, offset, size, live range, reason ...) and `shared_bytes` are allocate_shared's results.
    Its text comes from `printer.print_module` (the IR knows nothing of printing)."""

    functions: list
    shared_plan: list = field(default_factory=list)
    shared_bytes: int = 0

    @property
    def kernel(self) -> Function:
        return self.functions[0]

    def clone(self) -> Module:
        """A copy with its own ops, blocks and values, so passes run on it leave this module as it was: what
        printing and parsing the text back gave, without the text. It copies the IR only; facts the GPU passes
        attach to a module (its shared-memory plan) stay behind."""
        return Module([f.clone() for f in self.functions])

    def lookup(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def __repr__(self):
        return f"<Module {', '.join(f.name for f in self.functions)}>"


class Builder:
    """Appends ops at an insertion point; the frontend's and the passes' only way to make ops."""

    def __init__(self, block: Block | None = None):
        self.block = block
        self.index: int | None = None  # None = append at the end
        self.loc: Loc | None = None

    def set_insertion_point_to_end(self, block: Block):
        self.block, self.index = block, None

    def set_insertion_point_before(self, op: Op):
        if _BATCH:
            _sweep()
        self.block, self.index = op.block, op.block.ops.index(op)

    def create(self, name, operands=(), result_types=(), attrs=None, regions=(), loc=None, hints=None) -> Op:
        op = Op(name, operands, result_types, attrs, regions, loc or self.loc, hints)
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op
