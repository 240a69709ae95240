"""The CPU interpreter: runs a tile-IR `Module` with NumPy, one program (grid point) at a time.

Each program executes on whole tiles (NumPy arrays), never element by element. The IR is compiled
once per Module into flat lists of Python closures, one list per block; an op's operands and results
are slots (list indices) in a per-frame environment `env`, with `env[0]` holding the launch context
(program id, grid, memory). Constants live in the frame template. In the kernel, ops that do not
depend on the program id (splats of arguments, ...) are hoisted into a prologue run once per launch.

Values: numpy arrays of the type's shape, or numpy scalars for shape () values. bf16 is carried as
float32 rounded to bf16 after every op producing it; i1 is bool; pointers are int64 byte addresses
(see `interp_memory`); block pointers are `BlockPtr` objects.
"""
from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np

from ..compiler import fp8, op_eval, ops
from ..compiler.ir import Function, Module, Op
from ..compiler.ops import is_pure
from ..compiler.print_format import host_lines
from ..compiler.types import BlockPtrType, DType, PointerType, float32
from ..errors import InterpreterError, LaunchError
from .interp_memory import BOUNDS, Fault, Memory, mem_kind, region_for, round_bf16

__all__ = ["Interpreter", "InterpreterError"]

_SIGNED = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_TERMINATORS = ("scf.yield", "scf.condition", "tt.reduce.return")


class _Return(Exception):
    """A `tt.return` nested inside a region: unwinds to the function's frame."""

    def __init__(self, values):
        super().__init__()
        self.values = values


# ---------------------------------------------------------------------------------------------
# Type helpers

# PTX instructions that compute one f32 from one f32, as a `tl.inline_asm_elementwise("<op> $0, $1;", "=f,f", ...)`
# helper writes them (an approximate instruction is evaluated exactly: its result is within its own error bound)
_PTX_UNARY_F32 = {"cos": np.cos, "sin": np.sin, "tanh": np.tanh, "ex2": np.exp2, "lg2": np.log2,
                  "rcp": lambda x: 1.0 / x, "rsqrt": lambda x: 1.0 / np.sqrt(x), "sqrt": np.sqrt,
                  "abs": np.abs, "neg": np.negative}


def _asm_unary_f32(op):
    """The numpy function for an inline asm that is one unary f32 PTX instruction (`tanh.approx.f32 $0, $1;`,
    modifiers .approx/.rn/.ftz), else None: such helpers then run on the CPU interpreter."""
    import re

    m = re.fullmatch(r"\s*([a-z0-9]+)((?:\.(?:approx|rn|ftz|full))*)\.f32\s+\$0\s*,\s*\$1\s*;?\s*",
                     op.attrs.get("asm", ""))
    if m is None or int(op.attrs.get("pack", 1)) != 1 or len(op.operands) != 1 or len(op.results) != 1:
        return None
    if op.attrs.get("constraints", "").replace(" ", "") != "=f,f":
        return None
    if any(t.type.scalar != float32 for t in (op.operands[0], op.results[0])):
        return None
    return _PTX_UNARY_F32.get(m.group(1))


def _np_of(ty) -> np.dtype:
    s = ty.scalar
    if isinstance(s, PointerType):
        return np.dtype(np.int64)
    if isinstance(s, DType):
        return s.np
    return np.dtype(object)


def _is_bf16(ty) -> bool:
    s = ty.scalar
    return isinstance(s, DType) and s.ir == "bf16"


def _typed_scalar(value, elem):
    """A Python value as a numpy scalar of `elem` (ints wrap, bf16 rounds)."""
    if isinstance(elem, PointerType):
        return np.int64(int(value))
    if elem.kind == "bool":
        return np.bool_(bool(value))
    if elem.kind in ("int", "uint"):
        if isinstance(value, float):
            if not math.isfinite(value):
                value = 0
            value = int(value)
        v = int(value) & ((1 << elem.bits) - 1)
        return np.array(v, dtype=_UNSIGNED[elem.itemsize]).view(elem.np)[()]
    if elem.ir in fp8.FORMATS:  # a constant of an fp8 type: rounded as a cast from f32 (Triton's scalar_constant)
        return np.float32(fp8.convert_to(elem.ir, "f32", np.float32(value))[()])
    v = elem.np.type(value)
    return round_bf16(v) if elem.ir == "bf16" else v


def _const(value, ty):
    with np.errstate(all="ignore"):
        s = _typed_scalar(value, ty.scalar)
    if ty.shape == ():
        return s
    arr = np.full(ty.shape, s, dtype=_np_of(ty))
    arr.flags.writeable = False
    return arr


def _view(x, dt):
    return x if x.dtype == dt else x.view(dt)


# Combine regions made of one op that NumPy can reduce/accumulate directly.
_FAST_COMBINE = {
    "arith.addf": ("add", np.add), "arith.addi": ("add", np.add), "arith.mulf": ("mul", np.multiply),
    "arith.muli": ("mul", np.multiply), "arith.maxnumf": ("ufunc", np.fmax), "arith.minnumf": ("ufunc", np.fmin),
    "arith.maximumf": ("ufunc", np.maximum), "arith.minimumf": ("ufunc", np.minimum),
    "arith.maxsi": ("s", np.maximum), "arith.minsi": ("s", np.minimum), "arith.maxui": ("u", np.maximum),
    "arith.minui": ("u", np.minimum), "arith.xori": ("ufunc", np.bitwise_xor),
    "arith.andi": ("ufunc", np.bitwise_and), "arith.ori": ("ufunc", np.bitwise_or),
}


def _int_view(dt: np.dtype, mode):
    if mode is None or dt.kind not in "iu":
        return None
    v = (_SIGNED if mode == "s" else _UNSIGNED)[dt.itemsize]
    return None if v == dt else v


def _wrap_view(fn, vt, back):
    """fn applied to operands viewed as `vt`, the result viewed back as `back` (None: leave it)."""
    if vt is None:
        return fn
    if back is None:
        return lambda *xs: fn(*[x.view(vt) for x in xs])
    return lambda *xs: fn(*[x.view(vt) for x in xs]).view(back)


def _ax(axis, sl):
    return (slice(None),) * axis + (sl,)


# ---------------------------------------------------------------------------------------------
# Block pointers

class BlockPtr:
    """A `tt.make_block_ptr` value: base address, tensor shape/strides (elements), current offsets."""

    __slots__ = ("base", "shape", "strides", "offsets", "block_shape", "isz")

    def __init__(self, base, shape, strides, offsets, block_shape, isz):
        self.base, self.shape, self.strides = base, shape, strides
        self.offsets, self.block_shape, self.isz = offsets, block_shape, isz

    def advance(self, deltas):
        return BlockPtr(self.base, self.shape, self.strides,
                        tuple(o + d for o, d in zip(self.offsets, deltas)), self.block_shape, self.isz)

    def tile(self, aranges, checked, verb):
        """Addresses of the block (int64 array) and the boundary mask (or None)."""
        total = None
        mask = None
        for d, ar in enumerate(aranges):
            off, size = self.offsets[d], self.shape[d]
            idx = ar + off
            term = idx * self.strides[d]
            total = term if total is None else total + term
            bs = self.block_shape[d]
            if d in checked:
                if off < 0 or off + bs > size:
                    md = (idx >= 0) & (idx < size)
                    mask = md if mask is None else mask & md
            elif off < 0 or off + bs > size:
                raise Fault(f"{verb} out of bounds through a block pointer: dimension {d} covers "
                            f"[{off}, {off + bs}) but the tensor's shape there is {size}; add {d} to "
                            f"boundary_check or fix the offsets")
        addr = total * self.isz + self.base
        if addr.shape != self.block_shape:
            addr = np.broadcast_to(addr, self.block_shape)
        if mask is not None:
            mask = np.broadcast_to(mask, self.block_shape)
        return addr, mask

    def __repr__(self):
        return f"BlockPtr(base={self.base:#x}, shape={self.shape}, strides={self.strides}, offsets={self.offsets})"


# ---------------------------------------------------------------------------------------------
# Pointer provenance

# Ops whose pointer result points into the same argument as these operands.
_PTR_FROM = {"tt.addptr": (0,), "tt.splat": (0,), "tt.broadcast": (0,), "tt.expand_dims": (0,), "tt.reshape": (0,),
             "tt.trans": (0,), "tt.split": (0,), "tt.join": (0, 1), "tt.cat": (0, 1), "tt.hint": (0,),
             "arith.select": (1, 2), "arith.bitcast": (0,), "tt.make_block_ptr": (0,), "tt.advance": (0,)}
_UNKNOWN = -1


def _is_pointer(v) -> bool:
    return isinstance(v.type, BlockPtrType) or isinstance(getattr(v.type, "scalar", None), PointerType)


def pointer_roots(fn: Function) -> dict:
    """id(value) -> index of the kernel argument every pointer in `value` derives from, for the pointer values
    of `fn` whose argument is known statically (arithmetic, reshapes, selects between pointers of one
    argument, loop-carried pointers); values whose pointers may come from elsewhere (loaded, made from
    integers, mixed) are absent. A fixpoint over the use-def graph, loop-carried values included."""
    roots: dict = {id(a): i for i, a in enumerate(fn.args) if _is_pointer(a)}
    incoming: dict = {}  # id(value) -> the values it may take (block arguments and region results)
    ops = list(fn.walk())
    for op in ops:
        if op.name in ("scf.for", "scf.while", "scf.if") and op.regions:
            ys = [(blk, blk.ops[-1].operands if blk.ops and blk.ops[-1].name in _TERMINATORS else [])
                  for blk in op.regions]
            if op.name == "scf.for":
                body, y = ys[0]
                for i, arg in enumerate(body.args[1:]):
                    incoming[id(arg)] = [op.operands[3 + i]] + ([y[i]] if i < len(y) else [])
                for i, r in enumerate(op.results):
                    incoming[id(r)] = [op.operands[3 + i]] + ([y[i]] if i < len(y) else [])
            elif op.name == "scf.while":
                (before, cond), (after, y) = ys[0], ys[1]
                for i, arg in enumerate(before.args):
                    incoming[id(arg)] = [op.operands[i]] + ([y[i]] if i < len(y) else [])
                for i, arg in enumerate(after.args):
                    incoming[id(arg)] = [cond[1 + i]] if 1 + i < len(cond) else []
                for i, r in enumerate(op.results):
                    incoming[id(r)] = [cond[1 + i]] if 1 + i < len(cond) else []
            else:
                for i, r in enumerate(op.results):
                    incoming[id(r)] = [y[i] for _, y in ys if i < len(y)]
    sources = {}  # id(value) -> values it derives from, for every pointer value that is not an argument
    for op in ops:
        for blk in op.regions:
            for a in blk.args:
                if _is_pointer(a):
                    sources[id(a)] = incoming.get(id(a))
        for r in op.results:
            if not _is_pointer(r):
                continue
            if id(r) in incoming:
                sources[id(r)] = incoming[id(r)]
            elif op.name in _PTR_FROM:
                sources[id(r)] = [op.operands[i] for i in _PTR_FROM[op.name] if i < len(op.operands)]
            else:
                sources[id(r)] = None  # loaded, made from an integer, returned by a call: unknown
    changed = True
    while changed:
        changed = False
        for vid, srcs in sources.items():
            old = roots.get(vid)
            if old == _UNKNOWN:
                continue
            if not srcs:
                new = _UNKNOWN
            else:
                known = {roots.get(id(s)) for s in srcs} - {None}
                if not known:
                    continue
                new = known.pop() if len(known) == 1 else _UNKNOWN
            if new != old:
                roots[vid] = new
                changed = True
    return {k: v for k, v in roots.items() if v != _UNKNOWN}

# ---------------------------------------------------------------------------------------------
# Execution

class _Ctx:
    """Per-launch state reachable from every frame as env[0]."""

    __slots__ = ("pid", "nprog", "mem", "kernel", "source_lines")

    def __init__(self, kernel, source_lines, mem, nprog):
        self.kernel, self.source_lines, self.mem, self.nprog = kernel, source_lines, mem, nprog
        self.pid = (np.int32(0), np.int32(0), np.int32(0))

    def where(self, op, fn_name) -> str:
        text = f"kernel '{self.kernel}'"
        if fn_name != self.kernel:
            text += f" (in function '{fn_name}')"
        loc = getattr(op, "loc", None)
        if loc is not None and loc.line:
            text += f" line {loc.line}"
            if self.source_lines and 0 < loc.line <= len(self.source_lines):
                src = self.source_lines[loc.line - 1].strip()
                if src:
                    text += f" `{src}`"
        x, y, z = (int(p) for p in self.pid)
        return f"{text}: program ({x}, {y}, {z})"

    def error(self, f, detail) -> InterpreterError:
        return InterpreterError(f"{self.where(getattr(f, '_op', None), getattr(f, '_fn', self.kernel))} {detail}")


def _run(ops, env):
    try:
        for f in ops:
            f(env)
    except (InterpreterError, _Return):
        raise
    except Fault as e:
        raise env[0].error(f, e.detail) from None
    except Exception as e:
        name = getattr(getattr(f, "_op", None), "name", "?")
        raise env[0].error(f, f"hit an internal interpreter error in {name}: {type(e).__name__}: {e}") from e


class _FnCode:
    """One function compiled to closures."""

    def __init__(self, name):
        self.name = name
        self.template: list = [None]
        self.arg_slots: list = []
        self.prologue: list = []
        self.ops: list = []
        self.ret_slots: list = []
        self.nested_return = False

    def execute(self, env):
        if self.nested_return:
            try:
                _run(self.ops, env)
            except _Return as r:
                return r.values
        else:
            _run(self.ops, env)
        return [env[s] for s in self.ret_slots]


class _Units:
    """The compiled functions of one Module, by (name, batched, hoist)."""

    def __init__(self, module: Module):
        self.module = module
        self.key = None
        self.codes: dict = {}
        self.ptr_casts = any(_makes_raw_pointer(op) for fn in module.functions for op in fn.walk())
        self.sites: list = []  # the memory ops of sanitizing compiles, by site id (sanitizer.Site)

    def get(self, name, batched=False, hoist=False, sanitize=False) -> _FnCode:
        key = (name, batched, hoist, sanitize)
        code = self.codes.get(key)
        if code is None:
            fn = self.module.lookup(name)
            code = _Compiler(self, fn, batched, hoist, sanitize).compile()
            self.codes[key] = code
        return code

    def getter(self, name, batched, sanitize=False):
        cell = []

        def get():
            if not cell:
                cell.append(self.get(name, batched, sanitize=sanitize))
            return cell[0]
        return get


def _makes_raw_pointer(op) -> bool:
    """Whether `op` can produce a pointer not of the form typed-argument + k * sizeof(elem)."""
    if op.name == "tt.int_to_ptr":
        return True
    if op.name.startswith("arith.") and op.operands and op.results:
        src, dst = op.operands[0].type.scalar, op.results[0].type.scalar
        return (isinstance(src, PointerType) or isinstance(dst, PointerType)) and src != dst
    if op.name in ("tt.load", "tt.atomic_rmw", "tt.atomic_cas", "tt.call"):
        return any(isinstance(r.type.scalar, PointerType) for r in op.results)
    return False


def _fingerprint(module: Module) -> int:
    """Changes when a pass rewrites the module in place, so a stale compilation is never reused."""
    parts = []
    for fn in module.functions:
        parts.append((fn.name, id(fn.body), tuple(map(id, fn.args))))
        for op in fn.walk():
            parts.append((op.name, id(op), tuple(map(id, op.operands)), tuple(map(id, op.results)),
                          tuple(r.type for r in op.results), repr(op.attrs) if op.attrs else None,
                          tuple((id(r), tuple(map(id, r.args))) for r in op.regions)))
    return hash(tuple(parts))


def _units(module: Module) -> _Units:
    """The compiled code of `module`, cached on the module object itself."""
    key = _fingerprint(module)
    u = module.__dict__.get("_kernellab_interp_units")
    if u is None or u.key != key:
        u = _Units(module)
        u.key = key
        module.__dict__["_kernellab_interp_units"] = u
    return u


_MEMORY_OPS = ("tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas")


class _Compiler:
    def __init__(self, units: _Units, fn: Function, batched: bool, hoist: bool, sanitize: bool = False):
        self.units, self.fn, self.batched, self.hoist, self.sanitize = units, fn, batched, hoist, sanitize
        self.code = _FnCode(fn.name)
        # Region id of each pointer value whose argument is known; only in the launched kernel (hoist), where
        # the function's arguments are the launch's: pointer argument j (in order) is region j + 1.
        self.rids: dict = {}
        if hoist:
            ptr_args = [i for i, a in enumerate(fn.args) if _is_pointer(a)]
            rid_of = {i: j + 1 for j, i in enumerate(ptr_args)}
            self.rids = {k: rid_of[i] for k, i in pointer_roots(fn).items()}
        self.slots: dict = {}
        # values some op reads (an atomic whose old values nobody reads can skip computing them)
        self.used = {id(v) for op in fn.walk() for v in op.operands}

    # -- slots -------------------------------------------------------------------------------
    def s(self, v) -> int:
        try:
            return self.slots[id(v)]
        except KeyError:
            raise InterpreterError(f"function '{self.fn.name}': value {v!r} used before its definition") from None

    def d(self, v, init=None) -> int:
        t = self.code.template
        self.slots[id(v)] = len(t)
        t.append(init)
        return len(t) - 1

    def alias(self, v, src):
        self.slots[id(v)] = self.s(src)

    def emit(self, f, op):
        if self.sanitize and op.name in _MEMORY_OPS:
            f = self._site(f, op)
        f._op = op
        f._fn = self.fn.name
        return f

    def _site(self, inner, op):
        """Sanitizing compiles only: tell the memory which op (site) the next access comes from."""
        from .sanitizer import Site

        site = Site(len(self.units.sites), op, self.fn.name)
        self.units.sites.append(site)

        def f(env):
            env[0].mem.site = site
            inner(env)
        return f

    def rid(self, v):
        return self.rids.get(id(v))

    # -- functions and blocks ----------------------------------------------------------------
    def compile(self) -> _FnCode:
        code = self.code
        code.arg_slots = [self.d(a) for a in self.fn.args]
        body = self.fn.body.ops
        term = body[-1] if body and body[-1].name == "tt.return" else None
        ops = body[:-1] if term is not None else body
        if self.hoist:
            invariant = set(code.arg_slots)
            for op in ops:
                f = self.op(op)
                if f is None:
                    # constants and aliases: invariant when their inputs are
                    if all(self.s(v) in invariant for v in op.operands) and not op.regions:
                        invariant.update(self.s(r) for r in op.results)
                    continue
                hoistable = (not op.regions and op.name != "tt.get_program_id" and is_pure(op)
                             and all(self.s(v) in invariant for v in op.operands))
                if hoistable:
                    code.prologue.append(f)
                    invariant.update(self.s(r) for r in op.results)
                else:
                    code.ops.append(f)
        else:
            code.ops = self.block_ops(ops)
        if term is not None:
            code.ret_slots = [self.s(v) for v in term.operands]
        return code

    def block_ops(self, ops) -> list:
        out = []
        for op in ops:
            f = self.op(op)
            if f is not None:
                out.append(f)
        return out

    def region(self, block, batched=None):
        """(arg slots, closures, terminator operand slots) of a region block."""
        saved = self.batched
        if batched is not None:
            self.batched = batched
        try:
            args = [self.d(a) for a in block.args]
            ops = block.ops
            term = ops[-1] if ops and ops[-1].name in _TERMINATORS else None
            body = ops[:-1] if term is not None else ops
            fs = self.block_ops(body)
            yields = [self.s(v) for v in term.operands] if term is not None else []
        finally:
            self.batched = saved
        return args, fs, yields

    # -- ops ---------------------------------------------------------------------------------
    def op(self, op: Op):
        name = op.name
        handler = _HANDLERS.get(name)
        if handler is None:
            if ops.info(name).evaluator is not None:
                handler = _Compiler.op_elementwise
            else:
                raise InterpreterError(f"function '{self.fn.name}': the interpreter does not support op {name}"
                                       + (f" (line {op.loc.line})" if op.loc else ""))
        f = handler(self, op)
        return None if f is None else self.emit(f, op)

    # creation / identity
    def op_constant(self, op):
        self.d(op.result, _const(op.attrs["value"], op.result.type))

    def op_poison(self, op):
        self.d(op.result, _const(op_eval.poison_value(op.result.type.scalar), op.result.type))

    def op_make_range(self, op):
        arr = np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)
        arr.flags.writeable = False
        self.d(op.result, arr)

    def op_alias(self, op):
        self.alias(op.result, op.operands[0])

    def op_pid(self, op):
        axis, o = int(op.attrs.get("axis", 0)), self.d(op.result)

        def f(env):
            env[o] = env[0].pid[axis]
        return f

    def op_nprog(self, op):
        axis, o = int(op.attrs.get("axis", 0)), self.d(op.result)

        def f(env):
            env[o] = env[0].nprog[axis]
        return f

    def op_nop(self, op):
        return None

    # shape ops
    def op_splat(self, op):
        a, o = self.s(op.operands[0]), self.d(op.result)
        shape, dt = op.result.type.shape, _np_of(op.result.type)
        if dt.kind == "O":
            def f(env):
                env[o] = env[a]
        else:
            def f(env):
                env[o] = np.full(shape, env[a], dt)
        return f

    def op_broadcast(self, op):
        shape = op.result.type.shape
        if op.operands[0].type.shape == shape:
            self.alias(op.result, op.operands[0])
            return None
        a, o = self.s(op.operands[0]), self.d(op.result)

        def f(env):
            env[o] = np.broadcast_to(env[a], shape)
        return f

    def op_reshape(self, op):
        a, o = self.s(op.operands[0]), self.d(op.result)
        shape = op.result.type.shape
        if shape == ():
            def f(env):
                env[o] = np.reshape(env[a], (1,))[0]
        else:
            def f(env):
                env[o] = np.reshape(env[a], shape)
        return f

    def op_trans(self, op):
        a, o = self.s(op.operands[0]), self.d(op.result)
        order = tuple(op.attrs.get("order") or reversed(range(len(op.operands[0].type.shape))))

        def f(env):
            env[o] = np.transpose(env[a], order)
        return f

    def op_join(self, op):
        a, b, o = self.s(op.operands[0]), self.s(op.operands[1]), self.d(op.result)

        def f(env):
            env[o] = np.stack((env[a], env[b]), axis=-1)
        return f

    def op_split(self, op):
        a = self.s(op.operands[0])
        o0, o1 = self.d(op.results[0]), self.d(op.results[1])

        def f(env):
            x = env[a]
            env[o0] = x[..., 0][()]
            env[o1] = x[..., 1][()]
        return f

    def op_cat(self, op):
        a, b, o = self.s(op.operands[0]), self.s(op.operands[1]), self.d(op.result)

        def f(env):
            env[o] = np.concatenate((env[a], env[b]), axis=0)
        return f

    def op_gather(self, op):
        a, i, o = self.s(op.operands[0]), self.s(op.operands[1]), self.d(op.result)
        axis = op.attrs["axis"]

        def f(env):
            env[o] = op_eval.gather(env[a], env[i], axis)
        return f

    def op_histogram(self, op):
        a, o = self.s(op.operands[0]), self.d(op.result)
        m = self.s(op.operands[1]) if len(op.operands) > 1 else None
        bins = op.attrs["num_bins"]

        def f(env):
            env[o] = op_eval.histogram(env[a], bins, None if m is None else env[m])
        return f

    # elementwise: the catalogue's evaluator (the same function the constant folder calls)
    def op_elementwise(self, op):
        name = op.name
        ins = [v.type.scalar for v in op.operands]
        out = op.result.type.scalar
        if len(ins) == 1 and any(isinstance(t, PointerType) for t in ins + [out]):
            self.alias(op.result, op.operands[0])  # pointer <-> pointer casts: the same address
            return None
        if name in ("arith.extf", "arith.truncf") and ins[0].np == out.np and not (out.ir == "bf16" != ins[0].ir):
            self.alias(op.result, op.operands[0])  # bf16 -> f32 is exact in the f32 carrier
            return None
        if name == "arith.bitcast" and ins[0] == out:
            self.alias(op.result, op.operands[0])
            return None
        fn = ops.evaluator(name, ins, out, op.attrs)
        args = [self.s(v) for v in op.operands]
        o = self.d(op.result)
        if len(args) == 1:
            a, = args

            def f(env):
                env[o] = fn(env[a])
        elif len(args) == 2:
            a, b = args

            def f(env):
                env[o] = fn(env[a], env[b])
        else:
            def f(env):
                env[o] = fn(*[env[x] for x in args])
        return f

    # memory
    def op_addptr(self, op):
        p, off, o = self.s(op.operands[0]), self.s(op.operands[1]), self.d(op.result)
        elem = op.operands[0].type.scalar.elem
        isz = 8 if isinstance(elem, PointerType) else elem.itemsize
        i64 = np.dtype(np.int64)
        if op.result.type.shape == ():
            def f(env):
                env[o] = np.int64(env[p] + np.int64(env[off]) * isz)
        elif isz == 1:
            def f(env):
                env[o] = np.add(env[p], env[off], dtype=i64, casting="unsafe")
        else:
            def f(env):
                env[o] = np.add(env[p], np.multiply(env[off], isz, dtype=i64, casting="unsafe"))
        return f

    def op_load(self, op):
        ptr_t = op.operands[0].type
        o = self.d(op.result)
        if isinstance(ptr_t, BlockPtrType):
            return self._blockptr_access(op, o, None)
        mk = mem_kind(ptr_t.scalar.elem)
        slots = [self.s(v) for v in op.operands]
        p = slots[0]
        m = slots[1] if len(slots) > 1 else None
        other = slots[2] if len(slots) > 2 else None
        rid = self.rid(op.operands[0])
        if ptr_t.shape == ():
            def f(env):
                mask = None if m is None else np.array([env[m]], bool)
                oth = None if other is None else env[other]
                env[o] = env[0].mem.load(np.array([env[p]], np.int64), mask, oth, mk, rid)[0]
        elif m is None:
            def f(env):
                env[o] = env[0].mem.load(env[p], None, None, mk, rid)
        elif other is None:
            def f(env):
                env[o] = env[0].mem.load(env[p], env[m], None, mk, rid)
        else:
            def f(env):
                env[o] = env[0].mem.load(env[p], env[m], env[other], mk, rid)
        return f

    def op_store(self, op):
        ptr_t = op.operands[0].type
        if isinstance(ptr_t, BlockPtrType):
            return self._blockptr_access(op, None, self.s(op.operands[1]))
        mk = mem_kind(ptr_t.scalar.elem)
        slots = [self.s(v) for v in op.operands]
        p, v = slots[0], slots[1]
        m = slots[2] if len(slots) > 2 else None
        rid = self.rid(op.operands[0])
        if ptr_t.shape == ():
            def f(env):
                mask = None if m is None else np.array([env[m]], bool)
                env[0].mem.store(np.array([env[p]], np.int64), np.array([env[v]]), mask, mk, rid)
        elif m is None:
            def f(env):
                env[0].mem.store(env[p], env[v], None, mk, rid)
        else:
            def f(env):
                env[0].mem.store(env[p], env[v], env[m], mk, rid)
        return f

    def _blockptr_access(self, op, o, v):
        bp_t = op.operands[0].type
        mk = mem_kind(bp_t.elem)
        p = self.s(op.operands[0])
        rid = self.rid(op.operands[0])
        checked = frozenset(int(d) for d in (op.attrs.get("boundary_check") or ()))
        nd = len(bp_t.block_shape)
        aranges = []
        for d, bs in enumerate(bp_t.block_shape):
            shape = [1] * nd
            shape[d] = bs
            ar = np.arange(bs, dtype=np.int64).reshape(shape)
            ar.flags.writeable = False
            aranges.append(ar)
        if o is not None:
            pad = op.attrs.get("padding")
            padv = mk.carrier.type(np.nan) if (pad in ("nan", "NAN", "PAD_NAN") and mk.is_float) else mk.zero

            def f(env):
                addr, mask = env[p].tile(aranges, checked, "reads")
                env[o] = env[0].mem.load(addr, mask, padv, mk, rid)
        else:
            def f(env):
                addr, mask = env[p].tile(aranges, checked, "writes")
                env[0].mem.store(addr, env[v], mask, mk, rid)
        return f

    def op_make_block_ptr(self, op):
        bp_t = op.result.type
        n = len(bp_t.block_shape)
        slots = [self.s(v) for v in op.operands]
        base, shp, strd, offs = slots[0], slots[1:1 + n], slots[1 + n:1 + 2 * n], slots[1 + 2 * n:1 + 3 * n]
        o = self.d(op.result)
        block_shape = tuple(bp_t.block_shape)
        isz = mem_kind(bp_t.elem).isz

        def f(env):
            env[o] = BlockPtr(int(env[base]), tuple(int(env[s]) for s in shp), tuple(int(env[s]) for s in strd),
                              tuple(int(env[s]) for s in offs), block_shape, isz)
        return f

    def op_advance(self, op):
        p = self.s(op.operands[0])
        deltas = [self.s(v) for v in op.operands[1:]]
        o = self.d(op.result)

        def f(env):
            env[o] = env[p].advance([int(env[s]) for s in deltas])
        return f

    def op_atomic_rmw(self, op):
        kind = op.attrs["kind"]
        ptr_t = op.operands[0].type
        elem = ptr_t.scalar.elem
        mk = mem_kind(elem)
        dt = mk.carrier
        at = None  # (ufunc, view dtype) updating memory in place when the old values are unused
        plain = mk.to_mem is None
        if kind in ("add", "fadd"):
            comb = np.logical_xor if dt == np.bool_ else np.add
            at = (np.add, None) if plain else None
            if isinstance(elem, DType) and elem.ir == "bf16":
                comb = lambda x, y: round_bf16(np.add(x, y))  # noqa: E731
        elif kind in ("max", "min", "umax", "umin"):
            base = np.maximum if kind.endswith("max") else np.minimum
            vt = _int_view(dt, "u" if kind[0] == "u" else "s") if dt.kind in "iu" else None
            comb = _wrap_view(base, vt, dt)
            at = (base, vt) if plain else None
        elif kind == "xchg":
            comb = lambda x, y: y  # noqa: E731
        elif kind in ("and", "or", "xor"):
            comb = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[kind]
            at = (comb, None) if plain else None
        else:
            raise InterpreterError(f"unsupported atomic kind {kind!r}")
        slots = [self.s(v) for v in op.operands]
        p, v = slots[0], slots[1]
        m = slots[2] if len(slots) > 2 else None
        need_old = bool(op.results) and id(op.results[0]) in self.used
        o = self.d(op.result) if op.results else None
        scalar = ptr_t.shape == ()
        rid = self.rid(op.operands[0])

        def f(env):
            ptr = env[p]
            mask = None if m is None else env[m]
            if scalar:
                ptr = np.array([ptr], np.int64)
                mask = None if mask is None else np.array([mask], bool)
            old = env[0].mem.atomic_rmw(kind, ptr, env[v], mask, mk, comb, need_old, at, rid)
            if o is not None:
                env[o] = old[0] if (scalar and old is not None) else old
        return f

    def op_atomic_cas(self, op):
        ptr_t = op.operands[0].type
        mk = mem_kind(ptr_t.scalar.elem)
        p, c, v = (self.s(x) for x in op.operands[:3])
        o = self.d(op.result)
        scalar = ptr_t.shape == ()
        rid = self.rid(op.operands[0])

        def f(env):
            if scalar:
                env[o] = env[0].mem.atomic_cas(np.array([env[p]], np.int64), env[c], env[v], mk, rid)[0]
            else:
                env[o] = env[0].mem.atomic_cas(env[p], env[c], env[v], mk, rid)
        return f

    # compute
    def op_dot(self, op):
        a, b, c = (self.s(v) for v in op.operands[:3])
        o = self.d(op.result)
        at = op.operands[0].type.scalar
        out_dt = _np_of(op.result.type)
        bf = _is_bf16(op.result.type)
        if at.kind in ("int", "uint", "bool"):
            if at.itemsize == 1:
                def f(env):
                    prod = np.matmul(env[a].astype(np.float64), env[b].astype(np.float64)).astype(np.int64)
                    env[o] = (prod + env[c].astype(np.int64)).astype(out_dt)
            else:
                def f(env):
                    prod = np.matmul(env[a].astype(np.int64), env[b].astype(np.int64))
                    env[o] = (prod + env[c].astype(np.int64)).astype(out_dt)
            return f
        ct = np.float64 if (at.ir == "f64" or out_dt == np.float64) else np.float32
        if out_dt == np.float16:
            # an fp16 accumulator, as Triton's interpreter has it: the product (summed in fp32) rounded to
            # fp16, then added to the accumulator in fp16 (one more rounding)
            def f(env):
                p = np.matmul(env[a].astype(ct, copy=False), env[b].astype(ct, copy=False)).astype(np.float16)
                env[o] = p + env[c].astype(np.float16, copy=False)
            return f

        def f(env):
            r = np.matmul(env[a].astype(ct, copy=False), env[b].astype(ct, copy=False)) + env[c]
            r = r.astype(out_dt, copy=False)
            env[o] = round_bf16(r) if bf else r
        return f

    def _fast_combine(self, block, n):
        if n != 1 or len(block.ops) != 2 or len(block.args) != 2:
            return None
        x, ret = block.ops
        if ret.name != "tt.reduce.return" or len(ret.operands) != 1 or ret.operands[0] is not x.results[0]:
            return None
        if x.name not in _FAST_COMBINE or len(x.operands) != 2 or x.regions:
            return None
        a0, a1 = block.args
        if not ((x.operands[0] is a0 and x.operands[1] is a1) or (x.operands[0] is a1 and x.operands[1] is a0)):
            return None
        if _np_of(x.results[0].type) == np.bool_:
            return None
        return _FAST_COMBINE[x.name]

    def _region_runner(self, op, n):
        rargs, rops, rrets = self.region(op.regions[0], batched=True)

        def apply(env, vals):
            for s, val in zip(rargs, vals):
                env[s] = val
            _run(rops, env)
            shape = vals[0].shape
            out = []
            for s in rrets:
                r = env[s]
                if np.shape(r) != shape:
                    r = np.broadcast_to(r, shape)
                out.append(r)
            return out
        return apply

    def op_reduce(self, op):
        n = len(op.operands)
        ins = [self.s(v) for v in op.operands]
        outs = [self.d(r) for r in op.results]
        axis = int(op.attrs.get("axis", 0))
        in_dt = _np_of(op.operands[0].type)
        bf = _is_bf16(op.operands[0].type)
        fast = self._fast_combine(op.regions[0], n)
        if fast is not None:
            kind, uf = fast
            o = outs[0]
            x = ins[0]
            if kind in ("add", "mul"):
                acc = np.float32 if in_dt == np.float16 else in_dt

                def f(env):
                    r = uf.reduce(env[x], axis=axis, dtype=acc)
                    if acc != in_dt:
                        r = r.astype(in_dt)[()]
                    env[o] = round_bf16(r) if bf else r
            else:
                vt = _int_view(in_dt, kind) if kind in ("s", "u") else None

                if vt is None:
                    def f(env):
                        env[o] = uf.reduce(env[x], axis=axis)
                else:
                    def f(env):
                        env[o] = uf.reduce(env[x].view(vt), axis=axis).view(in_dt)[()]
            return f
        apply = self._region_runner(op, n)

        def f(env):
            vals = [np.asarray(env[s]) for s in ins]
            length = vals[0].shape[axis]
            while length > 1:
                even = length - (length & 1)
                left = [v[_ax(axis, slice(0, even, 2))] for v in vals]
                right = [v[_ax(axis, slice(1, even, 2))] for v in vals]
                res = apply(env, left + right)
                if length & 1:
                    res = [np.concatenate((r, v[_ax(axis, slice(even, length))]), axis=axis)
                           for r, v in zip(res, vals)]
                vals = res
                length = (length + 1) // 2
            for s, v in zip(outs, vals):
                env[s] = np.take(v, 0, axis=axis)
        return f

    def op_scan(self, op):
        n = len(op.operands)
        ins = [self.s(v) for v in op.operands]
        outs = [self.d(r) for r in op.results]
        axis = int(op.attrs.get("axis", 0))
        reverse = bool(op.attrs.get("reverse", False))
        in_dt = _np_of(op.operands[0].type)
        bf = _is_bf16(op.operands[0].type)
        fast = self._fast_combine(op.regions[0], n)
        if fast is not None:
            kind, uf = fast
            o, x = outs[0], ins[0]
            acc = np.float32 if (kind in ("add", "mul") and in_dt == np.float16) else in_dt
            vt = _int_view(in_dt, kind) if kind in ("s", "u") else None

            def f(env):
                v = env[x]
                if reverse:
                    v = np.flip(v, axis)
                if vt is not None:
                    r = uf.accumulate(v.view(vt), axis=axis).view(in_dt)
                elif kind in ("add", "mul"):
                    r = uf.accumulate(v, axis=axis, dtype=acc)
                    if acc != in_dt:
                        r = r.astype(in_dt)
                else:
                    r = uf.accumulate(v, axis=axis)
                if bf:
                    r = round_bf16(r)
                env[o] = np.flip(r, axis) if reverse else r
            return f
        apply = self._region_runner(op, n)

        def f(env):
            vals = [np.asarray(env[s]) for s in ins]
            if reverse:
                vals = [np.flip(v, axis) for v in vals]
            length = vals[0].shape[axis]
            d = 1
            while d < length:
                lo = [v[_ax(axis, slice(0, length - d))] for v in vals]
                hi = [v[_ax(axis, slice(d, length))] for v in vals]
                comb = apply(env, lo + hi)
                vals = [np.concatenate((v[_ax(axis, slice(0, d))], c), axis=axis) for v, c in zip(vals, comb)]
                d *= 2
            if reverse:
                vals = [np.flip(v, axis) for v in vals]
            for s, v in zip(outs, vals):
                env[s] = v
        return f

    # debugging
    def op_print(self, op):
        slots = [self.s(v) for v in op.operands]
        types = [v.type for v in op.operands]
        prefix = str(op.attrs.get("prefix") or "")
        hex_ = bool(op.attrs.get("hex", False))

        def f(env):  # Triton's GPU format, one line per element (compiler/print_format.py)
            lines = host_lines(env[0].pid, prefix, [(env[s], t) for s, t in zip(slots, types)], hex_)
            sys.stdout.write("".join(line + "\n" for line in lines))
        return f

    def op_assert(self, op):
        c = self.s(op.operands[0])
        msg = str(op.attrs.get("message", "") or "")
        shape = op.operands[0].type.shape

        def f(env):
            cond = env[c]
            if shape == ():
                if not cond:
                    raise Fault(f"device assertion failed: {msg}")
            else:
                cond = np.asarray(cond)
                if not cond.all():
                    bad = ~cond.astype(bool)
                    idx = [int(i) for i in np.unravel_index(int(np.argmax(bad)), cond.shape)]
                    raise Fault(f"device assertion failed: {msg} (at tile index {idx}; "
                                f"{int(bad.sum())} of {cond.size} lanes false)")
        return f

    # control flow
    def op_for(self, op):
        lb, ub, st = (self.s(v) for v in op.operands[:3])
        inits = [self.s(v) for v in op.operands[3:]]
        args, body, yields = self.region(op.regions[0])
        iv, iter_slots = args[0], args[1:]
        ivtype = _np_of(op.regions[0].args[0].type).type
        outs = [self.d(r) for r in op.results]
        n = len(inits)

        def f(env):
            lo, hi, step = int(env[lb]), int(env[ub]), int(env[st])
            if step == 0:
                raise Fault("scf.for with step 0 never ends")
            vals = [env[s] for s in inits]
            for i in range(lo, hi, step):
                env[iv] = ivtype(i)
                for k in range(n):
                    env[iter_slots[k]] = vals[k]
                _run(body, env)
                vals = [env[s] for s in yields]
            for k in range(n):
                env[outs[k]] = vals[k]
        return f

    def op_if(self, op):
        c = self.s(op.operands[0])
        _, then_ops, then_y = self.region(op.regions[0])
        if len(op.regions) > 1:
            _, else_ops, else_y = self.region(op.regions[1])
        else:
            else_ops, else_y = [], []
        outs = [self.d(r) for r in op.results]
        batched = self.batched

        def f(env):
            cond = env[c]
            if batched and np.ndim(cond) > 0 and not (cond.all() or not cond.any()):
                _run(then_ops, env)
                tv = [env[s] for s in then_y]
                _run(else_ops, env)
                for o, t, s in zip(outs, tv, else_y):
                    env[o] = np.where(cond, t, env[s])
                return
            if (np.all(cond) if batched else cond):
                _run(then_ops, env)
                ys = then_y
            else:
                _run(else_ops, env)
                ys = else_y
            vals = [env[s] for s in ys]
            for o, val in zip(outs, vals):
                env[o] = val
        return f

    def op_while(self, op):
        inits = [self.s(v) for v in op.operands]
        before, after = op.regions[0], op.regions[1]
        bargs, bops, cond_vals = self.region(before)
        aargs, aops, yields = self.region(after)
        cslot, cvals = cond_vals[0], cond_vals[1:]
        outs = [self.d(r) for r in op.results]

        def f(env):
            vals = [env[s] for s in inits]
            while True:
                for s, val in zip(bargs, vals):
                    env[s] = val
                _run(bops, env)
                vals = [env[s] for s in cvals]
                if not env[cslot]:
                    break
                for s, val in zip(aargs, vals):
                    env[s] = val
                _run(aops, env)
                vals = [env[s] for s in yields]
            for s, val in zip(outs, vals):
                env[s] = val
        return f

    def op_call(self, op):
        get = self.units.getter(op.attrs["callee"], self.batched, self.sanitize)
        try:
            self.units.module.lookup(op.attrs["callee"])
        except KeyError:
            raise InterpreterError(f"function '{self.fn.name}' calls unknown function @{op.attrs['callee']}") from None
        args = [self.s(v) for v in op.operands]
        outs = [self.d(r) for r in op.results]

        def f(env):
            code = get()
            cenv = code.template.copy()
            cenv[0] = env[0]
            for s, a in zip(code.arg_slots, args):
                cenv[s] = env[a]
            vals = code.execute(cenv)
            for s, val in zip(outs, vals):
                env[s] = val
        return f

    def op_map_elementwise(self, op):
        """The region runs once, batched over every element (pack groups: operand i's element j of each group
        is argument i*pack + j; output k's element j is result k*pack + j)."""
        pack = int(op.attrs.get("pack", 1))
        ins = [self.s(v) for v in op.operands]
        outs = [self.d(r) for r in op.results]
        out_dts = [_np_of(r.type) for r in op.results]
        apply = self._region_runner(op, len(ins))

        def f(env):
            vals = [np.asarray(env[s]) for s in ins]
            shape = vals[0].shape
            flat = [v.reshape(-1) for v in vals]
            n = flat[0].size
            groups = -(-n // pack)
            if groups * pack != n:  # a short last group repeats the last element
                flat = [np.concatenate([v, np.repeat(v[-1:], groups * pack - n)]) for v in flat]
            args = [v[j::pack] for v in flat for j in range(pack)]
            res = apply(env, args)
            for k, (o, dt) in enumerate(zip(outs, out_dts)):
                full = np.empty(groups * pack, dtype=dt)
                for j in range(pack):
                    full[j::pack] = res[k * pack + j]
                env[o] = full[:n].reshape(shape)
        return f

    def op_inline_asm(self, op):
        fn = _asm_unary_f32(op)
        if fn is not None:  # one PTX math instruction on f32 (mamba-3's cos/sin/tanh.approx helpers)
            src, dst = self.s(op.operands[0]), self.d(op.results[0])

            def f(env):
                with np.errstate(all="ignore"):
                    env[dst] = fn(np.asarray(env[src], dtype=np.float32).astype(np.float64)).astype(np.float32)
            return f
        line = op.loc.line if op.loc else None
        where = f" (line {line})" if line else ""
        raise InterpreterError(f"kernel '{self.fn.name}'{where}: tl.inline_asm_elementwise runs PTX, which the CPU "
                               "interpreter cannot execute (Triton's interpreter cannot either); run the kernel on "
                               "a GPU (CUDA tensors), or give it a tl.* fallback when no GPU is present")

    def op_return(self, op):
        # A tt.return that is not the function's last op (inside a region): unwind.
        self.code.nested_return = True
        slots = [self.s(v) for v in op.operands]

        def f(env):
            raise _Return([env[s] for s in slots])
        return f


_HANDLERS = {
    "arith.constant": _Compiler.op_constant,
    "ub.poison": _Compiler.op_poison,
    "tt.make_range": _Compiler.op_make_range,
    "tt.hint": _Compiler.op_alias,
    "tt.int_to_ptr": _Compiler.op_alias,
    "tt.ptr_to_int": _Compiler.op_alias,
    "tt.get_program_id": _Compiler.op_pid,
    "tt.get_num_programs": _Compiler.op_nprog,
    "tt.debug_barrier": _Compiler.op_nop,
    "tt.grid_dependency": _Compiler.op_nop,  # one grid at a time: the previous one has finished
    "tt.splat": _Compiler.op_splat,
    "tt.broadcast": _Compiler.op_broadcast,
    "tt.expand_dims": _Compiler.op_reshape,
    "tt.reshape": _Compiler.op_reshape,
    "tt.trans": _Compiler.op_trans,
    "tt.join": _Compiler.op_join,
    "tt.split": _Compiler.op_split,
    "tt.cat": _Compiler.op_cat,
    "tt.gather": _Compiler.op_gather,
    "tt.histogram": _Compiler.op_histogram,
    "tt.addptr": _Compiler.op_addptr,
    "tt.load": _Compiler.op_load,
    "tt.store": _Compiler.op_store,
    "tt.make_block_ptr": _Compiler.op_make_block_ptr,
    "tt.advance": _Compiler.op_advance,
    "tt.atomic_rmw": _Compiler.op_atomic_rmw,
    "tt.atomic_cas": _Compiler.op_atomic_cas,
    "tt.dot": _Compiler.op_dot,
    "tt.reduce": _Compiler.op_reduce,
    "tt.scan": _Compiler.op_scan,
    "tt.print": _Compiler.op_print,
    "tt.assert": _Compiler.op_assert,
    "scf.for": _Compiler.op_for,
    "scf.if": _Compiler.op_if,
    "scf.while": _Compiler.op_while,
    "tt.call": _Compiler.op_call,
    "tt.return": _Compiler.op_return,
    "tt.inline_asm": _Compiler.op_inline_asm,
    "tt.map_elementwise": _Compiler.op_map_elementwise,
}


# ---------------------------------------------------------------------------------------------
# Public API

class Interpreter:
    """Runs `module`'s kernel (functions[0], or `kernel_name`) on the CPU.

    `source_lines`: the text of the file/cell the kernel came from (a list of lines, 1-based by
    `op.loc.line`) so errors can quote the offending line. `arg_names` overrides the parameter
    names used in messages (default: the IR's value names).
    """

    def __init__(self, module: Module, kernel_name: str | None = None, source_lines: list[str] | None = None,
                 arg_names: list[str] | None = None):
        self.module = module
        self.kernel = module.lookup(kernel_name) if kernel_name else module.kernel
        if isinstance(source_lines, str):
            source_lines = source_lines.splitlines()
        self.source_lines = source_lines
        names = list(arg_names or [])
        for i, a in enumerate(self.kernel.args):
            if i >= len(names) or not names[i]:
                names[i:i + 1] = [a.hint or f"arg{i}"]
        self.arg_names = names[:len(self.kernel.args)]
        self.units = _units(module)
        self.code = self.units.get(self.kernel.name, batched=False, hoist=True)

    def run(self, grid, args: list, bounds: str = "view", sanitize=False):
        """Run the kernel over `grid` on `args` (in place).

        `bounds`: "view" (default) faults on any access outside an argument's own view (its lowest to
        highest element byte); "storage" lets a pointer reach anywhere in the tensor's underlying storage,
        for kernels that address a view's parent on purpose; "allocation" (kernellab.compat's default) is
        "storage" whose loads may also read past the storage's end within its CUDA allocation unit, as zeros
        (interp_memory.ALLOCATION_UNIT: a GPU reads the allocator's padding there without faulting).
        `sanitize`: True (or "raise") / "warn" record every byte's accesses and report races, duplicate stores
        and uninitialized reads (runtime/sanitizer.py); returns the `SanitizerReport` then (None otherwise)."""
        grid = _normalize_grid(grid)
        name = self.kernel.name
        if bounds not in BOUNDS:
            raise LaunchError(f"kernel '{name}': bounds must be one of {', '.join(map(repr, BOUNDS))}, got {bounds!r}")
        if sanitize not in (True, False, None, "raise", "warn"):
            raise LaunchError(f"kernel '{name}': sanitize must be True, False, 'raise' or 'warn', got {sanitize!r}")
        params = self.kernel.args
        if len(args) != len(params):
            raise LaunchError(f"kernel '{name}' takes {len(params)} arguments, got {len(args)}")
        code = self.code if not sanitize else self.units.get(name, batched=False, hoist=True, sanitize=True)
        env = code.template.copy()
        regions = []
        for i, (param, arg, slot) in enumerate(zip(params, args, code.arg_slots)):
            arg_name = self.arg_names[i]
            ty = param.type
            if isinstance(ty, PointerType):
                try:
                    reg = region_for(len(regions) + 1, arg_name, arg, bounds)
                except TypeError as e:
                    raise LaunchError(f"kernel '{name}': {e}") from None
                regions.append(reg)
                env[slot] = np.int64(reg.base_addr)
            elif isinstance(ty, DType):
                env[slot] = _scalar_arg(name, arg_name, arg, ty)
            else:
                raise LaunchError(f"kernel '{name}': argument '{arg_name}' has unsupported type {ty}")
        if 0 in grid:
            return None
        check_align = self.units.ptr_casts or any(
            r.byte_offset % mem_kind(p.type.elem).isz for r, p in zip(regions, [p for p in params if p.type.is_ptr()]))
        if sanitize:
            from .sanitizer import SanitizingMemory

            mem = SanitizingMemory(regions, check_align, name, grid, self.source_lines, sanitize)
            mem._sites = self.units.sites
        else:
            mem = Memory(regions, check_align)
        ctx = _Ctx(name, self.source_lines, mem, tuple(np.int32(g) for g in grid))
        if sanitize:
            mem.ctx = ctx
        env[0] = ctx
        ops = code.ops
        gx, gy, gz = grid
        pids = [np.int32(i) for i in range(max(grid))]
        clock = _LaunchClock(name, gx * gy * gz)
        with np.errstate(all="ignore"):
            _run(code.prologue, env)
            for x in range(gx):
                px = pids[x]
                for y in range(gy):
                    py = pids[y]
                    for z in range(gz):
                        ctx.pid = (px, py, pids[z])
                        if code.nested_return:
                            try:
                                _run(ops, env)
                            except _Return:
                                pass
                        else:
                            _run(ops, env)
                        clock.tick()
        return mem.finish() if sanitize else None

    __call__ = run


class SlowLaunchWarning(UserWarning):
    """An interpreted launch will take minutes: said once, early, with the estimate."""


# Warn when an interpreted launch is estimated to take longer than this many seconds.
SLOW_LAUNCH_SECONDS = 60.0


class _LaunchClock:
    """Estimates an interpreted launch's duration from its first programs (checked at 1, 2, 4, ... programs
    and after 2 s) and warns once when the whole grid would take over SLOW_LAUNCH_SECONDS."""

    def __init__(self, name: str, programs: int):
        self.name, self.programs, self.done = name, programs, 0
        self.start = time.perf_counter()
        self.next_check = 1 if programs > 1 else programs + 1

    def tick(self):
        self.done += 1
        if self.done < self.next_check:
            return
        self.next_check = self.programs + 1  # unless an estimate is not yet trustworthy, below
        elapsed = time.perf_counter() - self.start
        if elapsed < 2.0 and self.done < 64:
            self.next_check = self.done * 2
            return
        total = elapsed / self.done * self.programs
        if total > SLOW_LAUNCH_SECONDS:
            warnings.warn(
                f"kernellab: kernel '{self.name}' runs {self.programs} programs on the CPU interpreter; at "
                f"{elapsed / self.done * 1e3:.0f} ms per program (measured over the first {self.done}) the launch "
                f"takes about {_duration(total)}. Shrink the grid while developing, or pass CUDA tensors to run on "
                "a GPU.", SlowLaunchWarning, stacklevel=4)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def _normalize_grid(grid):
    if isinstance(grid, (int, np.integer)):
        grid = (int(grid),)
    grid = tuple(int(g) for g in grid)
    if not 1 <= len(grid) <= 3:
        raise LaunchError(f"grid must have 1 to 3 dimensions, got {grid}")
    grid = grid + (1,) * (3 - len(grid))
    if any(g < 0 for g in grid):
        raise LaunchError(f"grid sizes must be >= 0, got {grid}")
    return grid


def _scalar_arg(kernel, name, arg, ty: DType):
    if hasattr(arg, "item") and not isinstance(arg, (int, float, bool)):
        arg = arg.item()
    if ty.kind == "float":
        if not isinstance(arg, (int, float, bool)):
            raise LaunchError(f"kernel '{kernel}': argument '{name}' expects a number, got {type(arg).__name__}")
        return _typed_scalar(float(arg), ty)
    if not isinstance(arg, (int, bool)):
        raise LaunchError(f"kernel '{kernel}': argument '{name}' expects an integer ({ty}), got {arg!r}")
    return _typed_scalar(arg, ty)
