"""Python AST -> tile IR.

Walks a `@jit` function's syntax tree with the argument types of one specialization, evaluating
compile-time values (constexprs, Python numbers, dtypes, tuples) in Python and emitting IR for
runtime values. Structured control flow becomes region ops; `return` inside `if` is handled by
moving the statements after the `if` into the branch that falls through.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import re

from ..errors import CompilationError, StaticAssertFailed, StaticAssertionError
from ..language import core as lcore
from ..language.aggregate import BoundJitMethod, is_aggregate
from ..language.core import constexpr, tensor, unwrap
from .ir import Block, Builder, Function, Loc, Module
from .pytree import fill, is_node, leaves, map_leaves, same_structure
from .semantic import Semantic, SemanticError
from .types import Type, int1, int32, int64

_PY_BUILTINS = {n: getattr(builtins, n) for n in [
    "range", "len", "min", "max", "int", "float", "bool", "str", "tuple", "list", "zip", "enumerate",
    "isinstance", "getattr", "hasattr", "abs", "print", "round", "sum", "any", "all", "reversed", "dict",
    "ValueError", "TypeError", "AssertionError", "RuntimeError", "NotImplementedError", "type"]}


# Set by kernellab.compat.install(): a callable, True while @jit functions may read only the globals Triton lets
# them read (Triton refuses a plain `N = 42` module global or closure variable; kernellab alone reads it as a
# compile-time value). None: no such rule.
strict_globals = None


def _global_allowed(val) -> bool:
    """Triton's list of globals a kernel may read: modules, constexpr values, @jit / builtin / constexpr_function
    callables, aggregates and NamedTuple classes, and the language's own objects (dtypes, types, functions)."""
    import types as _types

    if isinstance(val, (_types.ModuleType, constexpr)) or hasattr(val, "_kl_source"):
        return True
    if any(getattr(val, a, False) for a in ("__kl_builtin__", "__kl_constexpr_fn__", "__kl_aggregate__",
                                            "__triton_builtin__", "__triton_aggregate__")):
        return True
    if isinstance(val, type) and issubclass(val, tuple) and hasattr(val, "_fields"):
        return True
    module = getattr(val, "__module__", None) or ""
    return isinstance(module, str) and module.startswith(("kernellab.", "triton.language"))


_RETURN_IN_LOOP = ("Cannot have `return` statements inside `while` or `for` statements in triton (nor in "
                   "kernellab): a runtime loop cannot be left early; keep a flag or a mask and return after the loop")


def _check_constexpr_minmax(name: str, args) -> None:
    """Python's min/max of floats is order-dependent for NaN and for 0.0 vs -0.0 (`min(1.0, nan)` is 1.0,
    `min(nan, 1.0)` is nan), and agrees with neither tl.minimum's nor IEEE's answer: refused at compile time,
    as Triton refuses them."""
    import math

    vals = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
    for v in vals:
        if isinstance(v, float) and (math.isnan(v) or (v == 0.0 and math.copysign(1.0, v) < 0)):
            raise ValueError(f"{name}() of compile-time values got {v!r}: with NaN or -0.0 Python's answer depends "
                             f"on the argument order; compare explicitly, or use tl.{name}imum on tensors")


class _Return(Exception):
    """Unwinds statement visiting once a `return` has been generated."""


def _assigned_names(stmts) -> list[str]:
    names = []
    for s in stmts:
        for node in ast.walk(s):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in names:
                names.append(node.id)
    return names


def _ends_in_return(stmts) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return _ends_in_return(last.body) and _ends_in_return(last.orelse)
    return False


def _contains_return(stmts) -> bool:
    return any(isinstance(n, ast.Return) for s in stmts for n in ast.walk(s))


def _contains_value_return(stmts) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for s in stmts for n in ast.walk(s))


def _first_node(stmts, types):
    """The first node of one of `types` inside `stmts` (source order), or None."""
    found = [n for s in stmts for n in ast.walk(s) if isinstance(n, types)]
    return min(found, key=lambda n: (n.lineno, n.col_offset)) if found else None


def _jump_reason(node, hint: str) -> str:
    word = "break" if isinstance(node, ast.Break) else "continue"
    return f"`{word}` is not supported in kernels{hint}"


def mangle(name: str, parts) -> str:
    text = "_".join(str(p) for p in parts)
    return name + ("__" + re.sub(r"[^A-Za-z0-9_]", "", text.replace("!ptr<", "p"))
                   if parts else "")


def _annotated_dtype(ann):
    """The dtype a parameter annotation names (a dtype object, or "tl.int8" / "triton.language.float16" /
    "uint8" text), else None: other annotations (`int`, `torch.Tensor`, pointers) leave the argument alone."""
    from ..compiler.types import DType

    if isinstance(ann, DType):
        return ann
    if not isinstance(ann, str):
        return None
    text = ann.strip().strip("'\"")  # `x: "tl.int8"` under `from __future__ import annotations`
    for prefix in ("triton.language.", "tl.", "kl.", "kernellab.language."):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    else:
        if text in ("int", "float", "bool"):  # Python's own types: no annotation for Triton either
            return None
    t = getattr(lcore, text, None) if text.isidentifier() else None
    if t is None:
        import kernellab.language as tl

        t = getattr(tl, text, None) if text.isidentifier() else None
    return t if isinstance(t, DType) else None


class FunctionSource:
    """What the frontend needs to know about a Python function: its parsed source and globals."""

    def __init__(self, fn, source: str, filename: str, first_line: int):
        self.fn, self.source, self.filename, self.first_line = fn, source, filename, first_line
        self.name = fn.__name__
        tree = ast.parse(source)
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        adefs = [n for n in tree.body if isinstance(n, ast.AsyncFunctionDef)]
        if not defs and adefs:
            lines = source.splitlines()
            raise CompilationError(self.name, "`async def` cannot be a @jit function (a kernel is not a coroutine); "
                                   "write it with plain `def`", filename, first_line + adefs[0].lineno - 1,
                                   adefs[0].col_offset, lines[adefs[0].lineno - 1])
        if not defs:
            raise CompilationError(self.name, "could not find the function definition in its source", filename)
        self.node: ast.FunctionDef = defs[0]
        self.lines = source.splitlines()
        self.signature = inspect.signature(fn)
        self.constexpr_params, self.const_params = set(), set()
        for p in self.params:
            ann = p.annotation
            if ann is not None:
                text = ast.unparse(ann)
                if text.endswith("constexpr"):
                    self.constexpr_params.add(p.arg)
                elif text == "const" or text.endswith(".const"):  # `ptr: tl.const`: a pointer to constant data
                    self.const_params.add(p.arg)
        for name, p in self.signature.parameters.items():
            if p.annotation is constexpr or p.annotation is lcore.constexpr:
                self.constexpr_params.add(name)
        # `x: tl.float16`, `n: tl.uint8` (an object, or text such as "tl.int64"): a number passed for the
        # parameter has that type, as in Triton, rather than the type its Python value would give
        self.scalar_types = {}
        for name, p in self.signature.parameters.items():
            t = _annotated_dtype(p.annotation)
            if t is not None and name not in self.constexpr_params:
                self.scalar_types[name] = t

    @property
    def params(self) -> list[ast.arg]:
        """Named parameters in signature order (positional-only, ordinary, keyword-only), the order
        in which `inspect.signature(...).bind` lists them and so the order of runtime arguments."""
        a = self.node.args
        return a.posonlyargs + a.args + a.kwonlyargs

    @property
    def globals(self):
        g = dict(self.fn.__globals__)
        if self.fn.__closure__:
            for name, cell in zip(self.fn.__code__.co_freevars, self.fn.__closure__):
                try:
                    g[name] = cell.cell_contents
                except ValueError:
                    pass
        return g

    def line_text(self, lineno_in_source: int) -> str | None:
        if 1 <= lineno_in_source <= len(self.lines):
            return self.lines[lineno_in_source - 1]
        return None


class CodeGenerator(ast.NodeVisitor):
    def __init__(self, src: FunctionSource, module: Module, compiler, fn_name: str, is_kernel: bool):
        self.src, self.module, self.compiler = src, module, compiler
        self.fn_name, self.is_kernel = fn_name, is_kernel
        self.builder = Builder()
        self.sem = Semantic(self.builder)
        self.sem.call_jit = self.call_jit
        self.sem.options = getattr(compiler, "options", {})
        self.callees: dict = {}  # Call node -> the callee it evaluated to
        self.scope: dict = {}
        self.undefined: dict[str, str] = {}
        self.returned = None  # ("ret", runtime values, template) once a `return` was generated
        self.ret_template = None  # the returned value's shape with runtime leaves as _RT (pytree)
        self.return_node = None  # the first `return value` of a kernel, for the error that refuses it
        self.node = None
        self.globals = src.globals
        self.assigned_bools: set[str] = set()  # names a plain `x = True/False` assigned (a tensor in Triton)

    # ------------------------------------------------------------------ errors and locations
    def file_line(self, node) -> int:
        return self.src.first_line + getattr(node, "lineno", 1) - 1

    def error(self, node, reason: str, cls=CompilationError) -> CompilationError:
        line = getattr(node, "lineno", None)
        return cls(self.src.name, reason, self.src.filename,
                   self.file_line(node) if line else None, getattr(node, "col_offset", 0),
                   self.src.line_text(line) if line else None,
                   line - self.src.node.lineno + 1 if line else None)

    def visit(self, node):
        prev_loc, prev_node = self.builder.loc, self.node
        if hasattr(node, "lineno"):
            self.builder.loc = Loc(self.file_line(node), node.col_offset + 1, self.src.filename)
            self.node = node
        try:
            return super().visit(node)
        except (CompilationError, _Return):
            raise
        except lcore.CalledOutsideKernel as e:
            raise self.error(node, str(e)) from None
        except StaticAssertFailed as e:
            raise self.error(node, str(e), StaticAssertionError) from None
        except (SemanticError, TypeError, ValueError, AssertionError, IndexError, KeyError, AttributeError,
                NotImplementedError, ZeroDivisionError, OverflowError) as e:
            msg = str(e) if not isinstance(e, KeyError) else f"key {e} not found"
            if isinstance(e, AssertionError) and not msg:
                msg = "assertion failed"
            if not isinstance(node, ast.Call):
                raise self.error(node, msg) from None
            # A builtin that refused its arguments: the cause carries the bare reason (Triton's tests read it
            # from __cause__, which Triton sets for calls only), without the compiler's own frames.
            theirs = getattr(e, "triton", None)
            raise self.error(node, msg) from (SemanticError(theirs) if theirs else e.with_traceback(None))
        finally:
            self.builder.loc, self.node = prev_loc, prev_node

    def generic_visit(self, node):
        raise self.error(node, f"unsupported Python construct in a kernel: {type(node).__name__} "
                               f"(`{ast.unparse(node).splitlines()[0] if isinstance(node, ast.AST) else node}`)")

    # ------------------------------------------------------------------ function
    def generate(self, bound_args: dict) -> Function:
        """`bound_args` maps parameter name -> Type (runtime) or a Python value (compile-time)."""
        node = self.src.node
        star = node.args.vararg or node.args.kwarg
        if star is not None:
            prefix = "*" if star is node.args.vararg else "**"
            raise self.error(star, f"`{prefix}{star.arg}` parameters are not supported in @jit functions; "
                                   "name each parameter")
        params = [a.arg for a in self.src.params]
        runtime = [leaf for n in params for leaf in runtime_leaves(n, bound_args[n])]
        body = Block([r.type for _, _, r in runtime], [hint for _, hint, _ in runtime])
        fn = Function(self.fn_name, body, [], [r.attrs for _, _, r in runtime], self.src.filename,
                      self.src.first_line + node.lineno - 1)
        self.builder.set_insertion_point_to_end(body)
        self.builder.loc = Loc(fn.first_line, 1, self.src.filename)
        args = iter(body.args)

        def bind(v, hint):
            if not isinstance(v, _RuntimeArg):
                return v
            arg = next(args)
            if v.equal_to_1:  # as in Triton, an integer argument equal to 1 is the compile-time constant 1
                return constexpr(1)
            return tensor(arg, arg.type)

        for n in params:
            hints = iter(h for _, h, _ in runtime_leaves(n, bound_args[n]))
            self.scope[n] = map_leaves(bound_args[n], lambda v: bind(v, next(hints)) if isinstance(v, _RuntimeArg)
                                       else v)
        prev = tensor._sem
        tensor._sem = self.sem
        try:
            try:
                self.visit_stmts(node.body)
            except _Return:
                pass
            ret = self.returned[1] if self.returned else []
            self.ret_template = self.returned[2] if self.returned else None
            ret_vals = [self.sem.to_tensor(v) for v in ret]
            fn.result_types = [v.type for v in ret_vals]
            self.builder.set_insertion_point_to_end(body)
            self.builder.create("tt.return", [v.handle for v in ret_vals], [])
        finally:
            tensor._sem = prev
        if self.is_kernel and fn.result_types:
            raise self.error(self.return_node or node, "a kernel cannot return values; store results through a "
                                                       "pointer (tl.store) instead")
        return fn

    # ------------------------------------------------------------------ statements
    def visit_stmts(self, stmts):
        stmts = list(stmts)
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, ast.If) and i + 1 < len(stmts) and _contains_return(s.body + s.orelse):
                # An early return: what follows the `if` runs only on paths that did not return, so it
                # moves into both branches (dead after a `return`), and the `if` ends the list.
                rest = stmts[i + 1:]
                s = ast.If(test=s.test, body=s.body + rest, orelse=s.orelse + rest)
                ast.copy_location(s, stmts[i])
                stmts = stmts[:i] + [s]
            self.visit(s)
            if self.returned is not None:
                raise _Return()
            i += 1

    def visit_Pass(self, node):
        pass

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)
        must = getattr(self.callees.get(node.value), "__kl_must_use__", None) if isinstance(node.value, ast.Call) \
            else None
        if must:
            extra = f" {must}" if isinstance(must, str) else ""
            raise self.error(node, f"The result of {ast.unparse(node.value.func)} is not being used.{extra}")

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            if isinstance(value, tensor) and value.handle.hint is None:
                value.handle.hint = target.id
            self.scope[target.id] = value
            self.undefined.pop(target.id, None)
        elif isinstance(target, (ast.Tuple, ast.List)):
            value = unwrap(value)
            if not isinstance(value, (tuple, list)):
                raise self.error(node, f"cannot unpack a {type(value).__name__} into {len(target.elts)} names")
            if len(value) != len(target.elts):
                raise self.error(node, f"cannot unpack {len(value)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        else:
            raise self.error(node, f"cannot assign to `{ast.unparse(target)}`: kernels assign to names only "
                                   "(store to memory with tl.store)")

    def visit_Assign(self, node):
        value = map_leaves(unwrap(self.visit(node.value)), lambda v: lcore.as_assigned(unwrap(v)))
        for t in node.targets:
            self.assign(t, value, node)
            if isinstance(t, ast.Name):
                (self.assigned_bools.add if type(value) is bool else self.assigned_bools.discard)(t.id)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return
        # `x: tl.constexpr = <run-time value>` is accepted, as Triton accepts it (its constexpr then wraps the
        # tensor, which acts as a run-time value): libraries rely on it (FlagGems' sort: a tile count from an
        # argument). A Python number keeps its weak type either way.
        self.assign(node.target, self.visit(node.value), node)

    def visit_AugAssign(self, node):
        cur = self.visit(ast.Name(id=node.target.id, ctx=ast.Load(), lineno=node.lineno,
                                  col_offset=node.col_offset)) if isinstance(node.target, ast.Name) else None
        if cur is None:
            raise self.error(node, "augmented assignment works on names only")
        value = self.binop(node, node.op, cur, self.visit(node.value))
        self.assign(node.target, lcore.as_assigned(unwrap(value)), node)

    def visit_Return(self, node):
        """A returned value may be a (nested, named) tuple: its tensors and numbers become the function's
        results (numbers decay to scalars, as in Triton); None and other compile-time leaves stay in the
        template the caller rebuilds the value from."""
        v = None if node.value is None else unwrap(self.visit(node.value))
        vals = []

        def leaf(x):
            x = unwrap(x)
            if isinstance(x, tensor) or _is_num(x):
                vals.append(x)
                return _RT
            return x

        template = map_leaves(v, leaf)
        self.returned = ("ret", vals, template)
        if self.is_kernel and vals and self.return_node is None:
            self.return_node = node

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        msg = unwrap(self.visit(node.msg)) if node.msg is not None else ast.unparse(node.test)
        if isinstance(cond, tensor):
            from ..language import builtins as B

            B.device_assert(cond, str(msg), _sem=self.sem)
        elif not cond:
            raise self.error(node, f"assertion failed at compile time: {msg}")

    def visit_If(self, node):
        cond = unwrap(self.visit(node.test))
        if not isinstance(cond, tensor):
            if self._assigned_value(node.test, cond) and _contains_value_return(node.body + node.orelse):
                # Triton makes an assigned literal (`a = False`) a scalar tensor, so this is a runtime `if` there:
                # its `return` sets the function's result type even if never taken (the other path gives poison)
                self.runtime_if(node, self.sem.to_tensor(cond))
                return
            self.visit_stmts(node.body if cond else node.orelse)
            return
        self.runtime_if(node, cond)

    def _assigned_value(self, test, cond) -> bool:
        """Whether `if test` tests a value the kernel assigned (`a = 1` / `a = False`), not a constexpr."""
        if isinstance(cond, lcore._AssignedScalar):
            return True
        return isinstance(test, ast.Name) and test.id in self.assigned_bools and type(cond) is bool

    def _poison_like(self, block: Block, vals) -> list:
        """Values of the types of `vals` (tensors or numbers) with undefined contents (`ub.poison`), made at the
        end of `block`: what a path that falls off a function returns when others return values (Triton's
        rule). None if a value has a type that cannot be poisoned (block pointers, descriptors)."""
        from .semantic import literal_dtype
        from .types import DType, PointerType

        types = []
        for v in vals:
            t = v.type if isinstance(v, tensor) else v.dtype if isinstance(v, lcore._AssignedScalar) \
                else literal_dtype(v)
            if not isinstance(t.scalar, (DType, PointerType)) or t.is_block_ptr():
                return None
            types.append(t)
        saved = (self.builder.block, self.builder.index)
        self.builder.set_insertion_point_to_end(block)
        try:
            out = []
            for t in types:
                p = self.sem.emit("ub.poison", [], t.scalar)
                out.append(self.sem.splat(p, t.shape) if t.shape else p)
            return out
        finally:
            self.builder.block, self.builder.index = saved

    def _cond_scalar(self, node, cond):
        if cond.shape and cond.numel == 1:  # a 1-element tensor decides like its element (Triton unsplats it)
            cond = self.sem.item(cond)
        if cond.shape:
            raise self.error(node.test if hasattr(node, "test") else node,
                             f"the condition is a tensor of shape {list(cond.shape)}; `if`/`while` need a "
                             "scalar (use tl.where for elementwise choice)")
        return self.sem.cast(cond, int1)

    def _gen_region(self, block: Block, stmts, scope: dict):
        """Generate `stmts` into `block` with `scope`; returns (scope after, returned)."""
        saved = (self.builder.block, self.builder.index, self.scope, self.returned, dict(self.undefined))
        self.builder.set_insertion_point_to_end(block)
        self.scope, self.returned = scope, None
        try:
            try:
                self.visit_stmts(stmts)
            except _Return:
                pass
            return self.scope, self.returned
        finally:
            self.builder.block, self.builder.index, self.scope, self.returned, self.undefined = \
                saved[0], saved[1], saved[2], saved[3], saved[4]

    def runtime_if(self, node, cond):
        cond = self._cond_scalar(node, cond)
        outer = self.builder.block
        before = self.scope
        then_block, else_block = Block(), Block()
        then_scope, then_ret = self._gen_region(then_block, node.body, dict(before))
        else_scope, else_ret = self._gen_region(else_block, node.orelse, dict(before))
        exits = (then_ret is not None, else_ret is not None)  # a path that returned: its variables are dead
        names, then_vals, else_vals, trees = [], [], [], []
        for name in list(dict.fromkeys(list(then_scope) + list(else_scope))):
            in_then, in_else = name in then_scope, name in else_scope
            tv, ev = then_scope.get(name), else_scope.get(name)
            if in_then and in_else:
                if tv is before.get(name, object()) and ev is before.get(name, object()):
                    continue
                if is_node(unwrap(tv)) and is_node(unwrap(ev)) and tv is not ev:
                    # a tuple (or tensor descriptor): merge leaf by leaf, compile-time leaves must agree
                    tt, et = _runtime_template(tv), _runtime_template(ev)
                    if not _same_template(tt, et):
                        raise self.error(node, f"`{name}` gets tuples of different structure or compile-time "
                                               "values on the two branches of a runtime `if`")
                    tl_, el_ = _runtime_leaves(tv), _runtime_leaves(ev)
                    trees.append((name, tt, len(names), len(tl_)))
                    names += [f"{name}_{i}" for i in range(len(tl_))]
                    then_vals += tl_
                    else_vals += el_
                    continue
                if not isinstance(tv, tensor) and not isinstance(ev, tensor):
                    if _same_py(tv, ev):
                        self.scope[name] = tv
                        continue
                    if not (_is_num(tv) and _is_num(ev)):
                        raise self.error(node, f"`{name}` gets different compile-time values on the two "
                                               "branches of a runtime `if`")
                names.append(name)
                then_vals.append(tv)
                else_vals.append(ev)
            elif name not in before:
                where = "then" if in_then else "else"
                self.undefined[name] = (f"variable '{name}' is defined on only one branch of the `if` at line "
                                        f"{self.file_line(node)} (the {where}-branch); define it before the "
                                        "`if` or assign it on both branches")
        if (then_ret is None) != (else_ret is None) and self.returns_void(then_ret or else_ret):
            # after the early-return rewrite nothing follows this `if`: falling off a branch returns
            then_ret, else_ret = then_ret or ("ret", [], None), else_ret or ("ret", [], None)
        elif (then_ret is None) != (else_ret is None) and not self.is_kernel:
            # falling off returns values of the other path's types, undefined (Triton's ub.poison)
            live = then_ret or else_ret
            poison = self._poison_like(then_block if then_ret is None else else_block, live[1])
            if poison is not None:
                then_ret, else_ret = then_ret or ("ret", poison, live[2]), else_ret or ("ret", poison, live[2])
        returns = then_ret is not None and else_ret is not None
        if (then_ret is None) != (else_ret is None):
            raise self.error(node, "one branch of this `if` returns a value and the other does not; return "
                                   "from both branches (or only at the end of the function)")
        n_ret = 0
        if returns:
            if len(then_ret[1]) != len(else_ret[1]) or not _same_template(then_ret[2], else_ret[2]):
                raise self.error(node, "the two branches return different numbers of values")
            n_ret = len(then_ret[1])
            then_vals = list(then_ret[1]) + then_vals
            else_vals = list(else_ret[1]) + else_vals
        then_t = self._yield_values(then_block, then_vals)
        else_t = self._yield_values(else_block, else_vals)
        types = []
        for i, (a, b) in enumerate(zip(then_t, else_t)):
            if a.type != b.type and i >= n_ret and any(exits):
                # a variable rebound with another type on the path that goes on (Triton allows it: after
                # `if c: return`, `X = X + offs` makes a pointer scalar a block): the returned path's value is
                # never read, so it yields an undefined value of the live path's type
                dead, live_t = (then_t, else_t) if exits[0] else (else_t, then_t)
                poison = self._poison_like(then_block if exits[0] else else_block, [live_t[i]])
                if poison is not None:
                    dead[i] = poison[0]
                    a, b = then_t[i], else_t[i]
            if a.type != b.type:
                if self._unify(a, b, then_block, else_block, then_t, else_t, i)[0] is None:
                    label = f"return value {i}" if i < n_ret else f"`{names[i - n_ret]}`"
                    what = "Inconsistent return types: " if i < n_ret else f"Mismatched type for {names[i - n_ret]}: "
                    raise self.error(node, f"{what}{label} has type {a.type} on the then-branch but {b.type} on the "
                                           "else-branch; make them match (e.g. with .to())")
            types.append(then_t[i].type)
        for blk, vals in ((then_block, then_t), (else_block, else_t)):
            self.builder.set_insertion_point_to_end(blk)
            self.builder.create("scf.yield", [v.handle for v in vals], [])
        self.builder.set_insertion_point_to_end(outer)
        op = self.builder.create("scf.if", [cond.handle], types, None, [then_block, else_block],
                                 hints=[None] * n_ret + names)
        results = [tensor(r, r.type) for r in op.results]
        leaf_names = {i for _, _, start, k in trees for i in range(start, start + k)}
        for i, (name, r) in enumerate(zip(names, results[n_ret:])):
            if i not in leaf_names:
                self.scope[name] = r
        for name, t, start, k in trees:
            it = iter(results[n_ret + start:n_ret + start + k])
            self.scope[name] = map_leaves(t, lambda x: next(it) if x is _RT else x)
        if returns:
            self.returned = ("ret", results[:n_ret], then_ret[2])

    def returns_void(self, ret) -> bool:
        return ret is not None and not ret[1] and ret[2] is None

    def _yield_values(self, block, vals):
        saved = (self.builder.block, self.builder.index)
        self.builder.set_insertion_point_to_end(block)
        out = [self.sem.to_tensor(v) for v in vals]
        self.builder.block, self.builder.index = saved
        return out

    def _unify(self, a, b, then_block, else_block, then_t, else_t, i):
        """Make two branch values one type when a safe conversion exists (scalar literal vs tensor)."""
        try:
            shape = self.sem.broadcast_shapes(a.shape, b.shape)
        except SemanticError:
            return None, None
        from .semantic import computation_type

        try:
            ct = computation_type(a.type.scalar, False, b.type.scalar, False, False) \
                if not (a.type.scalar.is_ptr() or b.type.scalar.is_ptr()) else None
        except SemanticError:
            return None, None
        if ct is None:
            return None, None
        saved = (self.builder.block, self.builder.index)
        for blk, lst in ((then_block, then_t), (else_block, else_t)):
            self.builder.set_insertion_point_to_end(blk)
            lst[i] = self.sem.broadcast_to(self.sem.cast(lst[i], ct), shape)
        self.builder.block, self.builder.index = saved
        return then_t[i], else_t[i]

    # ------------------------------------------------------------------ loops
    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported in kernels")
        it = node.iter
        if isinstance(it, ast.Call):
            fn = self.visit(it.func)
            args = [self.visit(a) for a in it.args]
            kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
            if fn is lcore.static_range:
                r = lcore.static_range(*args, **kwargs)
                return self.unrolled_for(node, builtins.range(unwrap(r.start), unwrap(r.end), unwrap(r.step)))
            if fn is builtins.range or fn is lcore.range:
                r = lcore.range(*args, **kwargs)
                return self.runtime_for(node, r.start, r.end, r.step, r.num_stages, r.flatten, r.warp_specialize,
                                        r.loop_unroll_factor, r.disable_licm)
            iterable = fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
        else:
            iterable = self.visit(it)
        iterable = unwrap(iterable)
        if isinstance(iterable, tensor):
            raise self.error(node, "cannot iterate over a tensor; use `for i in range(...)`")
        return self.unrolled_for(node, list(iterable))

    def unrolled_for(self, node, values):
        jump = _first_node(node.body, (ast.Break, ast.Continue))
        if jump is not None:
            raise self.error(jump, _jump_reason(jump, ""))
        for v in values:
            self.assign(node.target, v, node)
            self.visit_stmts(node.body)

    def _carried(self, node, stmts, extra=()):
        names = [n for n in _assigned_names(stmts) if n in self.scope]
        for n in extra:
            if n in self.scope and n not in names:
                names.append(n)
        out = []
        for n in names:
            v = self.scope[n]
            if isinstance(v, tensor) or _is_num(unwrap(v)):
                out.append(n)
            elif is_node(v) and any(isinstance(x, tensor) or _is_num(unwrap(x)) for x in leaves(v)):
                out.append(n)  # a tuple (or tensor descriptor): its runtime leaves are carried one by one
        return out

    def _flatten_carried(self, carried, scope):
        """(templates, flat IR-name hints, flat values) of loop-carried variables: a tuple contributes one
        carried value per runtime leaf; its compile-time leaves stay in the template."""
        templates, hints, flat = [], [], []
        for n in carried:
            vals = []

            def leaf(x):
                x = unwrap(x)
                if isinstance(x, tensor) or _is_num(x):
                    vals.append(self.sem.to_tensor(x))
                    return _RT
                return x

            templates.append(map_leaves(scope[n], leaf))
            hints += [n] if len(vals) == 1 and not is_node(scope[n]) else [f"{n}_{i}" for i in range(len(vals))]
            flat += vals
        return templates, hints, flat

    def _rebuild_carried(self, carried, templates, values) -> dict:
        """name -> value with the templates' runtime leaves taken, in order, from `values`."""
        it = iter(values)
        return {n: map_leaves(t, lambda x: next(it) if x is _RT else x) for n, t in zip(carried, templates)}

    def _carried_out(self, node, carried, templates, scope) -> list:
        """The runtime leaves of the carried variables after the body, checked against the templates."""
        out = []
        for n, t in zip(carried, templates):
            if not is_node(t):
                out.append(scope[n])
                continue
            tv = map_leaves(scope[n], lambda x: _RT if isinstance(unwrap(x), tensor) or _is_num(unwrap(x))
                            else unwrap(x))
            if not _same_template(t, tv):
                raise self.error(node, f"loop-carried variable `{n}` changes its structure or compile-time parts "
                                       "inside the loop")
            out += [unwrap(x) for x in leaves(scope[n]) if isinstance(unwrap(x), tensor) or _is_num(unwrap(x))]
        return out

    def runtime_for(self, node, start, end, step, num_stages=None, flatten=False, warp_specialize=None,
                    unroll=None, disable_licm=False):
        jump = _first_node(node.body, (ast.Break, ast.Continue))
        if jump is not None:
            raise self.error(jump, _jump_reason(jump, "; use a `while` loop with a condition"))
        if _contains_return(node.body):
            raise self.error(_first_node(node.body, ast.Return), _RETURN_IN_LOOP)
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "the loop variable must be a single name")
        bounds = [unwrap(start), unwrap(end), unwrap(step)]
        if isinstance(bounds[2], int) and bounds[2] == 0:
            raise self.error(node, "range() step must not be zero")
        for b in bounds:
            if isinstance(b, tensor) and (b.shape or not b.dtype.is_int()):
                raise self.error(node, f"loop bounds must be integer scalars, got {b.type}")
            if not isinstance(b, tensor) and not isinstance(b, int):
                raise self.error(node, f"loop bounds must be integers, got {b!r}")
        iv_type = int64 if any(isinstance(b, tensor) and b.dtype.bits == 64 for b in bounds) else int32
        if any(isinstance(b, int) and not -2**31 <= b < 2**31 for b in bounds):
            iv_type = int64
        carried = self._carried(node, node.body)
        carried = [n for n in carried if n != node.target.id]
        lb, ub, st = [self.sem.cast(self.sem.to_tensor(b), iv_type) for b in bounds]
        templates, hints, inits = self._flatten_carried(carried, self.scope)
        outer = self.builder.block
        for attempt in range(3):
            body = Block([iv_type] + [v.type for v in inits], [node.target.id] + hints)
            scope = dict(self.scope)
            scope[node.target.id] = tensor(body.args[0], iv_type)
            scope.update(self._rebuild_carried(carried, templates, [tensor(a, a.type) for a in body.args[1:]]))
            new_scope, _ = self._gen_region(body, node.body, scope)
            yields = self._yield_values(body, self._carried_out(node, carried, templates, new_scope))
            mismatch = [i for i, (y, v) in enumerate(zip(yields, inits)) if y.type != v.type]
            if not mismatch:
                break
            _discard(body)
            if attempt == 2:
                i = mismatch[0]
                raise self.error(node, f"loop-carried variable `{hints[i]}` has type {inits[i].type} before the "
                                       f"loop but {yields[i].type} inside it; initialise it with the loop's type "
                                       f"(e.g. tl.zeros(..., dtype))")
            for i in mismatch:
                inits[i] = self._widen(node, hints[i], inits[i], yields[i])
        self.builder.set_insertion_point_to_end(body)
        self.builder.create("scf.yield", [y.handle for y in yields], [])
        self.builder.set_insertion_point_to_end(outer)
        attrs = {"num_stages": num_stages} if num_stages is not None else {}
        if flatten:  # a hint for the GPU pipeline (passes/flatten_loops.py); the tile IR's meaning is unchanged
            attrs["flatten"] = True
        if warp_specialize is not None:  # sm_90: a producer warpgroup issues the loop's TMA copies
            attrs["warp_specialize"] = bool(warp_specialize)  # (passes/warp_specialize.py); False: never by default
        if unroll is not None:
            if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
                raise self.error(node, f"loop_unroll_factor must be a positive constexpr int, got {unroll!r}")
            if unroll > 1:  # k copies of the body per iteration (passes/unroll_loops.py)
                attrs["loop_unroll_factor"] = unroll
        if disable_licm:  # invariant code stays in the loop (passes/licm.py, LLVM's llvm.licm.disable)
            attrs["disable_licm"] = True
        op = self.builder.create("scf.for", [lb.handle, ub.handle, st.handle] + [v.handle for v in inits],
                                 [v.type for v in inits], attrs, [body], hints=hints)
        self.scope.update(self._rebuild_carried(carried, templates, [tensor(r, r.type) for r in op.results]))
        self._mark_loop_locals(node, node.body, carried + [node.target.id])

    def _mark_loop_locals(self, node, stmts, carried):
        for n in _assigned_names(stmts):
            if n not in carried and n not in self.scope:
                self.undefined[n] = (f"variable '{n}' is only defined inside the loop at line {self.file_line(node)}"
                                     "; define it before the loop to use it afterwards")

    def _widen(self, node, name, init, want):
        """Convert a loop's initial value to the type the loop body gives it (e.g. 0 -> zeros tensor)."""
        try:
            shape = self.sem.broadcast_shapes(init.shape, want.shape)
        except SemanticError:
            shape = None
        if shape != want.shape:
            raise self.error(node, f"loop-carried variable `{name}` has shape {list(init.shape)} before the loop "
                                   f"but {list(want.shape)} inside it")
        return self.sem.broadcast_to(self.sem.cast(init, want.type.scalar), want.shape)

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "`while ... else` is not supported in kernels")
        jump = _first_node(node.body, (ast.Break, ast.Continue))
        if jump is not None:
            raise self.error(jump, _jump_reason(jump, "; fold the exit into the `while` condition"))
        if _contains_return(node.body):
            raise self.error(_first_node(node.body, ast.Return), _RETURN_IN_LOOP)
        carried = self._carried(node, node.body)
        templates, hints, inits = self._flatten_carried(carried, self.scope)
        outer = self.builder.block
        for attempt in range(3):
            before = Block([v.type for v in inits], hints)
            scope = dict(self.scope)
            scope.update(self._rebuild_carried(carried, templates, [tensor(a, a.type) for a in before.args]))
            saved = (self.builder.block, self.builder.index, self.scope)
            self.builder.set_insertion_point_to_end(before)
            self.scope = scope
            try:
                self.sem.loop_hints.pop("disable_licm", None)
                cond = unwrap(self.visit(node.test))
                no_licm = self.sem.loop_hints.pop("disable_licm", False)  # `tl.condition(..., disable_licm=True)`
                if not isinstance(cond, tensor):
                    cond = self.sem.to_tensor(bool(cond))
                cond = self._cond_scalar(node, cond)
                self.builder.create("scf.condition", [cond.handle] + list(before.args), [])
            finally:
                self.builder.block, self.builder.index, self.scope = saved
            after = Block([v.type for v in inits], hints)
            scope = dict(self.scope)
            scope.update(self._rebuild_carried(carried, templates, [tensor(a, a.type) for a in after.args]))
            new_scope, _ = self._gen_region(after, node.body, scope)
            yields = self._yield_values(after, self._carried_out(node, carried, templates, new_scope))
            mismatch = [i for i, (y, v) in enumerate(zip(yields, inits)) if y.type != v.type]
            if not mismatch:
                break
            _discard(before)
            _discard(after)
            if attempt == 2:
                i = mismatch[0]
                raise self.error(node, f"loop-carried variable `{hints[i]}` has type {inits[i].type} before the "
                                       f"loop but {yields[i].type} inside it")
            for i in mismatch:
                inits[i] = self._widen(node, hints[i], inits[i], yields[i])
        self.builder.set_insertion_point_to_end(after)
        self.builder.create("scf.yield", [y.handle for y in yields], [])
        self.builder.set_insertion_point_to_end(outer)
        attrs = {"disable_licm": True} if no_licm else None
        op = self.builder.create("scf.while", [v.handle for v in inits], [v.type for v in inits], attrs,
                                 [before, after], hints=hints)
        self.scope.update(self._rebuild_carried(carried, templates, [tensor(r, r.type) for r in op.results]))
        self._mark_loop_locals(node, node.body, carried)

    def visit_Break(self, node):
        raise self.error(node, "`break` is not supported in kernels")

    visit_Continue = visit_Break

    # ------------------------------------------------------------------ expressions
    def visit_Constant(self, node):
        return node.value

    def visit_Name(self, node):
        name = node.id
        if name in self.scope:
            return self.scope[name]
        if name in self.undefined:
            raise self.error(node, self.undefined[name])
        if name in self.globals:
            val = self.globals[name]
            if strict_globals is not None and not _global_allowed(val) \
                    and not (self.src.fn.__module__ or "").startswith("kernellab.") and strict_globals():
                raise self.error(node, f"Cannot access global variable {name} from within a @jit function: it "
                                       f"holds a {type(val).__name__}, and under `import triton` kernels read "
                                       f"only constexpr globals, as in Triton; define it as {name} = "
                                       "tl.constexpr(...), pass it as an argument, or set "
                                       "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1")
            return unwrap(val) if isinstance(val, constexpr) else val
        if name in _PY_BUILTINS:
            return _PY_BUILTINS[name]
        raise self.error(node, f"name '{name}' is not defined")

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_Slice(self, node):
        return slice(*(None if p is None else unwrap(self.visit(p)) for p in (node.lower, node.upper, node.step)))

    def visit_Subscript(self, node):
        value = self.visit(node.value)
        index = self.visit(node.slice)
        if isinstance(value, tensor):
            return self.sem.subscript(value, index)
        value = unwrap(value)
        getitem = getattr(value, "__getitem__", None) if is_aggregate(value) else None
        if isinstance(getitem, BoundJitMethod):  # an aggregate's @jit __getitem__: a device call
            return self.call_jit(getitem.fn, [value, index], {}, node)
        return value[unwrap(index)]

    def visit_Attribute(self, node):
        value = unwrap(self.visit(node.value))
        if node.attr == "type" and not isinstance(value, (tensor, lcore._AssignedScalar)) and _compile_time(value):
            return lcore.constexpr_type(value)  # a compile-time value's type, as Triton reports it
        if _is_num(value) and not hasattr(value, node.attr):
            # a number used like a scalar tensor (`x = 1; x.to(tl.int8)`, `N.dtype`), as Triton allows
            return getattr(self.sem.to_tensor(value), node.attr)
        if node.attr == "value" and not isinstance(value, (tensor, lcore._AssignedScalar)) \
                and not hasattr(value, "value"):
            # Triton holds compile-time values (a dtype passed to a helper, a constexpr parameter) in
            # `constexpr` boxes whose `.value` is the value; kernellab holds the value itself
            return value
        try:
            return getattr(value, node.attr)
        except AttributeError:
            what = f"a {type(value).__name__}" if not isinstance(value, tensor) else "a tensor"
            raise self.error(node, f"`{ast.unparse(node)}`: {what} ({_short_repr(value)}) has no attribute "
                                   f"'{node.attr}'") from None

    def visit_BinOp(self, node):
        return self.binop(node, node.op, self.visit(node.left), self.visit(node.right))

    def binop(self, node, op, left, right):
        """`left op right` for a BinOp or an AugAssign (`x **= 2` folds like `x ** 2`)."""
        if isinstance(op, ast.Pow):
            return self.power(node, left, right)
        if type(op) not in _BINOPS:
            raise self.error(node, f"operator {_OP_TEXT.get(type(op), type(op).__name__)} is not supported in "
                                   "kernels" + ("; use tl.dot" if isinstance(op, ast.MatMult) else ""))
        return self.sem.binary(_BINOPS[type(op)], left, right)

    def power(self, node, base, exp):
        """`**` of compile-time values (`BLOCK ** 2`) folds in Python, like Triton's constexpr; there is
        no runtime power op, so a runtime operand gets a pointer to what to write instead."""
        base, exp = unwrap(base), unwrap(exp)
        if isinstance(base, tensor) or isinstance(exp, tensor):
            raise self.error(node, "operator ** needs compile-time (constexpr) operands; for runtime values "
                                   "multiply (x * x) or use tl.exp2(y * tl.log2(x))")
        try:
            out = base ** exp
        except Exception as e:  # e.g. None ** 2, 0 ** -1
            raise self.error(node, f"cannot compute {base!r} ** {exp!r}: {e}") from None
        if isinstance(out, complex):
            raise self.error(node, f"{base!r} ** {exp!r} is not a real number")
        return out

    def visit_UnaryOp(self, node):
        op = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}[type(node.op)]
        return self.sem.unary(op, self.visit(node.operand))

    def visit_BoolOp(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.visit(node.values[0])
        for v in node.values[1:]:
            if not isinstance(unwrap(result), tensor):
                r = unwrap(result)
                if (op == "and" and not r) or (op == "or" and r):
                    return r
                result = self.visit(v)
                continue
            result = self.sem.logical(op, result, self.visit(v))
        return result

    def visit_Compare(self, node):
        left = self.visit(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.visit(right_node)
            if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                lv, rv = unwrap(left), unwrap(right)
                r = {ast.Is: lambda: lv is rv, ast.IsNot: lambda: lv is not rv, ast.In: lambda: lv in rv,
                     ast.NotIn: lambda: lv not in rv}[type(op)]()
            else:
                r = self.sem.binary(_CMPOPS[type(op)], left, right)
            result = r if result is None else (self.sem.logical("and", result, r)
                                               if isinstance(r, tensor) or isinstance(result, tensor)
                                               else (result and r))
            left = right
        return result

    def visit_IfExp(self, node):
        """`a if c else b`: a compile-time `c` picks one side; a tensor `c` selects elementwise; a scalar `c`
        evaluates only the side it picks (an scf.if), as in Triton, unless both sides are side-effect free,
        when a select of both is cheaper. Both sides may give None (`f() if c else g()` for effects)."""
        cond = unwrap(self.visit(node.test))
        if not isinstance(cond, tensor):
            return self.visit(node.body if cond else node.orelse)
        if cond.shape and cond.numel != 1:
            return self.sem.where(cond, self.visit(node.body), self.visit(node.orelse))
        cond = self._cond_scalar(node, cond)
        then_block, else_block = Block(), Block()
        tv = self._gen_expr(then_block, node.body)
        ev = self._gen_expr(else_block, node.orelse)
        if (tv is None) != (ev is None):
            raise self.error(node, "one side of this conditional expression gives None and the other a value")
        if tv is not None and all(_speculatable(op) for b in (then_block, else_block) for op in _walk_block(b)):
            _discard(then_block)
            _discard(else_block)
            return self.sem.where(cond, self.visit(node.body), self.visit(node.orelse))
        tv, ev = unwrap(tv), unwrap(ev)
        if not same_structure(tv, ev):
            raise self.error(node, "the two sides of this conditional expression give differently shaped tuples")
        then_t = self._yield_values(then_block, leaves(tv) if tv is not None else [])
        else_t = self._yield_values(else_block, leaves(ev) if ev is not None else [])
        types = []
        for i, (a, b) in enumerate(zip(then_t, else_t)):
            if a.type != b.type and self._unify(a, b, then_block, else_block, then_t, else_t, i)[0] is None:
                raise self.error(node, f"Ternary expression with dynamic condition has inconsistent type: "
                                       f"{a.type} on one side and {b.type} on the other; make them match "
                                       "(e.g. with .to())")
            types.append(then_t[i].type)
        outer = self.builder.block
        for blk, vals in ((then_block, then_t), (else_block, else_t)):
            self.builder.set_insertion_point_to_end(blk)
            self.builder.create("scf.yield", [v.handle for v in vals], [])
        self.builder.set_insertion_point_to_end(outer)
        op = self.builder.create("scf.if", [cond.handle], types, None, [then_block, else_block])
        if tv is None:
            return None
        return fill(tv, [tensor(r, r.type) for r in op.results])

    def _gen_expr(self, block: Block, expr):
        """Evaluate `expr` with its ops emitted into `block`."""
        saved = (self.builder.block, self.builder.index)
        self.builder.set_insertion_point_to_end(block)
        try:
            return self.visit(expr)
        finally:
            self.builder.block, self.builder.index = saved

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = unwrap(self.visit(v.value))
                if isinstance(val, tensor):
                    raise self.error(node, "f-strings can only format compile-time values")
                spec = unwrap(self.visit(v.format_spec)) if v.format_spec else ""
                parts.append(format(val, spec))
        return "".join(parts)

    def visit_FormattedValue(self, node):
        return unwrap(self.visit(node.value))

    def visit_Call(self, node):
        fn = self.visit(node.func)
        self.callees[node] = fn  # visit_Expr checks whether an unused result was required (must_use_result)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(unwrap(self.visit(a.value)))
            else:
                args.append(self.visit(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(unwrap(self.visit(k.value)))
            else:
                kwargs[k.arg] = self.visit(k.value)
        if getattr(fn, "__kl_builtin__", False):
            return fn(*args, _sem=self.sem, **kwargs)
        if _is_jit(fn):
            return self.call_jit(fn, args, kwargs, node)
        if isinstance(fn, BoundJitMethod):  # `agg.method(...)`: a @jit method of an aggregate
            return self.call_jit(fn.fn, [fn.obj] + args, kwargs, node)
        if fn is lcore.static_range or fn is lcore.range:
            raise self.error(node, f"{fn.__name__} can only be used as a `for` loop's iterable")
        if isinstance(fn, type) and fn in (int, float, bool) and args and isinstance(args[0], tensor):
            raise self.error(node, f"{fn.__name__}() of a runtime tensor is not possible; use .to(tl.int32) etc.")
        if fn in (builtins.min, builtins.max) and any(isinstance(a, tensor) for a in args):
            from ..language import builtins as B

            f = B.minimum if fn is builtins.min else B.maximum
            out = args[0]
            for a in args[1:]:
                out = f(out, a, _sem=self.sem)
            return out
        if fn in (builtins.min, builtins.max):
            _check_constexpr_minmax(fn.__name__, [unwrap(a) for a in args])
        if fn is builtins.print:  # as in Triton: Python's print in a kernel is tl.device_print (runs on device)
            from ..language import builtins as B

            return B.device_print(*(args or ("",)), hex=kwargs.get("hex", False), _sem=self.sem)
        if callable(fn):
            # Plain Python helpers (kl.cdiv, constexpr functions, ...) run directly; operators on
            # tensors inside them go through the Semantic.
            foreign = _foreign_library(fn)
            if foreign and any(isinstance(unwrap(a), tensor) for a in list(args) + list(kwargs.values())):
                raise self.error(node, f"`{ast.unparse(node.func)}` is a {foreign} function: it runs in Python, not "
                                       f"in a kernel, and cannot take a kernel tensor; use the tl.* equivalent "
                                       f"(e.g. tl.{getattr(fn, '__name__', 'exp')})")
            try:
                return fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
            except (CompilationError, _Return):
                raise
            except (TypeError, AttributeError) as e:
                if not any(isinstance(unwrap(a), tensor) for a in list(args) + list(kwargs.values())):
                    raise
                raise self.error(node, f"calling the plain Python function `{ast.unparse(node.func)}` with kernel "
                                       f"tensors failed ({e}); decorate it with @kl.jit to make it a device "
                                       "function") from None
        raise self.error(node, f"`{ast.unparse(node.func)}` is not callable")

    def call_jit(self, jitfn, args, kwargs, node=None):
        node = node or self.node
        return self.compiler.call(self, jitfn, list(args), dict(kwargs), node)

    def visit_Lambda(self, node):
        raise self.error(node, "lambdas are not supported inside kernels; define a @jit function instead")

    def visit_ListComp(self, node):
        """`[f(v) for v in t]` over a tuple unrolls at compile time into a tl.tuple, as in Triton; a
        comprehension over anything else (a range, a tensor) is refused."""
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise self.error(node, "nested list comprehensions are not supported inside kernels")
        gen = node.generators[0]
        seq = unwrap(self.visit(gen.iter))
        if not isinstance(seq, (tuple, list)):
            raise self.error(node, f"list comprehensions are not supported inside kernels over a "
                                   f"{type(seq).__name__}, only over a tuple (`[f(v) for v in t]`); for a range, "
                                   "use a `for` loop with tl.static_range")
        saved = dict(self.scope)
        out = []
        try:
            for item in seq:
                self.assign(gen.target, item, node)
                if all(self._static_cond(c) for c in gen.ifs):
                    out.append(self.visit(node.elt))
        finally:
            self.scope = saved
        return lcore.tuple(out)

    visit_GeneratorExp = visit_ListComp

    def _static_cond(self, test) -> bool:
        cond = unwrap(self.visit(test))
        if isinstance(cond, tensor):
            raise self.error(test, "a comprehension's `if` must be a compile-time condition")
        return bool(cond)


_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}
_OP_TEXT = {ast.MatMult: "@"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def _foreign_library(fn) -> str | None:
    """'torch' / 'numpy' / 'math' when `fn` comes from a library whose functions cannot take kernel tensors."""
    mod = getattr(fn, "__module__", None) or getattr(getattr(fn, "__self__", None), "__name__", None) or ""
    if not mod and type(fn).__name__ in ("builtin_function_or_method", "ufunc"):
        mod = "numpy" if type(fn).__name__ == "ufunc" else ""
    root = mod.split(".")[0]
    return root if root in ("torch", "numpy", "math", "cmath", "scipy") else None


def _compile_time(value) -> bool:
    """None, a number, a string, or a tuple of such: what Triton holds in a `constexpr` box (a tuple of constants
    given as a constexpr argument or assigned to a constexpr-annotated name)."""
    if isinstance(value, tuple) and not is_aggregate(value):
        return all(_compile_time(v) for v in value)
    return value is None or (isinstance(value, (int, float, str))
                             and not isinstance(value, (tensor, lcore._AssignedScalar)))


def _short_repr(v) -> str:
    """A value's repr for an error message, cut to one short line."""
    text = " ".join(repr(v).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, tensor)


def _same_py(a, b):
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return a is b


class _RuntimeLeaf:
    """Marks, in a returned value's template, where a function result goes."""

    def __repr__(self):
        return "<runtime>"


_RT = _RuntimeLeaf()


def _is_runtime_leaf(x) -> bool:
    x = unwrap(x)
    return isinstance(x, tensor) or _is_num(x)


def _runtime_template(v):
    """`v` with its runtime leaves (tensors, numbers) replaced by the _RT marker."""
    return map_leaves(v, lambda x: _RT if _is_runtime_leaf(x) else unwrap(x))


def _runtime_leaves(v) -> list:
    return [unwrap(x) for x in leaves(v) if _is_runtime_leaf(x)]


def _same_template(a, b) -> bool:
    if not same_structure(a, b):
        return False
    return all(x is y or _same_py(x, y) for x, y in zip(leaves(a), leaves(b)))


def _is_jit(fn):
    return hasattr(fn, "_kl_source")


def _walk_block(block: Block):
    for op in block.ops:
        yield from op.walk()


def _speculatable(op) -> bool:
    """Whether `op` may run on a path that did not ask for it: pure and unable to trap."""
    from .ops import OPS

    info = OPS.get(op.name)
    return info is not None and info.pure and not info.traps


def _discard(block: Block):
    for op in list(block.ops):
        op.erase()


class _RuntimeArg:
    """A parameter that stays a function argument: its IR type and specialization attributes."""

    def __init__(self, type: Type, attrs: dict | None = None, equal_to_1: bool = False):
        self.type, self.attrs, self.equal_to_1 = type, attrs or {}, equal_to_1

    def key(self):
        return (str(self.type), tuple(sorted(self.attrs.items())), self.equal_to_1)


RuntimeArg = _RuntimeArg


def runtime_leaves(name: str, value) -> list:
    """(label for messages, IR name hint, RuntimeArg) of every runtime leaf of a bound argument, in the
    order they become function parameters: `t[1][0]` / `t_1_0` for a leaf of tuple argument `t`."""
    out = []

    def walk(v, label, hint):
        if is_node(v):
            for i, x in enumerate(v):
                walk(x, f"{label}[{i}]", f"{hint}_{i}")
        elif isinstance(v, _RuntimeArg):
            out.append((label, hint, v))

    walk(value, name, name)
    return out


def _call_key(value) -> str:
    """The specialization-key text of a helper's argument: runtime leaves by type, functions by name,
    other compile-time values by repr. Also the mangled name's part, so keep it short."""
    if is_node(value):
        kind = (type(value).__name__ + repr(value._kl_static()) if getattr(type(value), "__kl_aggregate__", False)
                else "")
        return kind + "T" + "_".join(_call_key(v) for v in value) + "T"
    if isinstance(value, _RuntimeArg):
        return str(value.type)
    return repr(value) if not callable(value) else getattr(value, "__name__", "fn")


class ModuleCompiler:
    """Builds a Module: the kernel plus every specialization of the @jit functions it calls."""

    def __init__(self, options: dict | None = None):
        self.module = Module([])
        self.cache: dict = {}
        self.stack: list = []  # the keys of the helpers being generated (the call chain)
        # the launch options (num_warps, ...): builtins such as tl.extra.cuda.num_warps() read them at trace
        # time, so the compile cache keys on them (jit._options_key)
        self.options = dict(options or {})

    def compile_kernel(self, jitfn, bound: dict) -> Module:
        src = jitfn._kl_source()
        gen = CodeGenerator(src, self.module, self, src.name, is_kernel=True)
        fn = gen.generate(bound)
        self.module.functions.insert(0, fn)
        return self.module

    def call(self, caller: CodeGenerator, jitfn, args, kwargs, node):
        src = jitfn._kl_source()
        try:
            ba = src.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise caller.error(node, f"bad call to {src.name}(): {e}") from None
        ba.apply_defaults()
        bound, key_parts, call_args, fn_ids = {}, [], [], []
        for name, value in ba.arguments.items():
            value = unwrap(value)

            def leaf(v, name=name):
                v = unwrap(v)
                if isinstance(v, tensor):
                    # a runtime value for a parameter annotated tl.constexpr: as in Triton, a helper's parameters
                    # are compile-time only when their values are (its attention tutorial passes offsets so)
                    call_args.append(v)
                    return _RuntimeArg(v.type)
                if callable(v):
                    fn_ids.append(id(v))
                return v

            bound[name] = map_leaves(value, leaf)
            key_parts.append(_call_key(bound[name]))
        key = (id(jitfn), tuple(key_parts), tuple(fn_ids))
        if key not in self.cache:
            if key in self.stack:  # the same specialization again: a runtime recursion
                raise caller.error(node, f"recursive call to {src.name}() with the same argument types and "
                                         "constants is not supported (a GPU function has no call stack); a "
                                         "recursion that changes a shape or a constexpr each level unrolls")
            name = mangle(src.name, key_parts)
            i = 0
            while any(f.name == name for f in self.module.functions):
                i += 1
                name = f"{mangle(src.name, key_parts)}_{i}"
            self.stack.append(key)
            gen = CodeGenerator(src, self.module, self, name, is_kernel=False)
            prev = tensor._sem
            try:
                fn = gen.generate(bound)
            finally:
                tensor._sem = prev
                self.stack.pop()
            self.module.functions.append(fn)
            self.cache[key] = (fn, gen.ret_template)
        fn, template = self.cache[key]
        op = caller.builder.create("tt.call", [a.handle for a in call_args], list(fn.result_types),
                                   {"callee": fn.name})
        results = iter(tensor(r, r.type) for r in op.results)
        return map_leaves(template, lambda x: next(results) if x is _RT else x)


__all__ = ["CodeGenerator", "FunctionSource", "ModuleCompiler", "RuntimeArg"]
