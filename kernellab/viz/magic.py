"""The ``%%kernel`` cell magic: write kernels in a cell, compile them, see every pass, run, check, time.

    %load_ext kernellab

    %%kernel --args "x, y, z, n" -c BLOCK=1024 --grid "(cdiv(n, BLOCK),)" --run --check "torch.allclose(z, x + y)"
    def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
        ...

The cell is compiled under a unique file name registered in ``linecache`` (line 1 is the ``%%kernel``
line, so line numbers are the ones the notebook shows): kernellab finds each kernel's source there and
its errors point at cell lines. Whatever goes wrong — a bad option, a compile error, a failed check, a
benchmark on a machine with no GPU — becomes a message in the cell's output; the magic never raises
and returns None. The last compiled kernel is left in the user namespace as ``_kl_last``.
"""
from __future__ import annotations

import ast
import html
import itertools
import linecache
import os
import re
import shlex
import time
import traceback
import types
import warnings

from IPython.core import magic_arguments
from IPython.core.magic import Magics, cell_magic, magics_class, no_var_expand
from IPython.display import display

VIEWS = ("passes", "linked", "layout", "smem", "code", "graph", "perf")
DEFAULT_VIEWS = "passes,linked,layout,smem,code"
_ALIASES = {"shared": "smem", "shared_memory": "smem", "roofline": "perf", "ptx": "code", "ir": "code",
            "pass": "passes", "layouts": "layout", "source": "linked"}
_GPU_VIEWS = {"linked", "layout", "smem", "code", "graph"}
_COUNTER = itertools.count(1)
# A message's colours: a translucent tint of its kind over whatever the theme's background is, and the theme's
# text colour (inherit). Not JupyterLab's --jp-*-color3: its dark theme keeps those light (#ffcdd2) under white
# text. Every style here that sets a background sets a colour too (tests/viz/test_magic.py checks).
_STYLES = {
    "error": "border-left:4px solid var(--jp-error-color1, #c62828);background:rgba(198,40,40,.12);color:inherit",
    "warning": "border-left:4px solid var(--jp-warn-color1, #ef6c00);background:rgba(239,108,0,.12);color:inherit",
    "ok": "border-left:4px solid var(--jp-success-color1, #2e7d32);background:rgba(46,125,50,.12);color:inherit",
    "info": "border-left:4px solid var(--jp-brand-color1, #1565c0);background:rgba(21,101,192,.10);color:inherit",
}
# JupyterLab breaks an output <pre> anywhere (word-break: break-all): a message's prose wraps at words
_PRE_STYLE = ("margin:4px 0 0 0;white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;font-size:12px;"
              "background:transparent;color:inherit")


class Message:
    """A block of text in the cell's output: HTML in a notebook, plain text in a terminal."""

    def __init__(self, kind: str, title: str, text: str = ""):
        self.kind, self.title, self.text = kind, title, text

    def __repr__(self):
        return self.title + (f"\n{self.text}" if self.text else "")

    def _repr_mimebundle_(self, include=None, exclude=None):
        style = _STYLES.get(self.kind, _STYLES["info"])
        body = f'<pre style="{_PRE_STYLE}">{html.escape(self.text)}</pre>' if self.text else ""
        return {"text/plain": repr(self),
                "text/html": f'<div class="kl-msg kl-{self.kind}" style="{style};padding:6px 10px;margin:4px 0">'
                             f'<b>{html.escape(self.title)}</b>{body}</div>'}


class _Stop(Exception):
    """Raised inside the magic once a message explains why it stops; caught by the magic itself (`shown`: the
    message is on screen already)."""

    def __init__(self, message: Message, shown: bool = False):
        super().__init__(message.title)
        self.message = message
        self.shown = shown


def _stop(kind, title, text=""):
    return _Stop(Message(kind, title, text))


def _show_access_map(report):
    from .access_map import AccessMapView

    display(AccessMapView(report))


# --------------------------------------------------------------------------------------------- the magic
@magics_class
class KernelMagics(Magics):
    """The ``%%kernel`` cell magic (``%load_ext kernellab``)."""

    @no_var_expand
    @magic_arguments.magic_arguments(name="%kernel")
    @magic_arguments.argument("--args", metavar="EXPR", default=None,
                              help='the example arguments: a Python argument list evaluated in the notebook, e.g. '
                                   '"x, y, z, x.numel()" (keywords allowed: "x, y, n=n"). Without it the cell only '
                                   'defines its kernels.')
    @magic_arguments.argument("--grid", metavar="EXPR", default=None,
                              help='the launch grid: a tuple, e.g. "(cdiv(n, BLOCK),)", or a lambda of meta, e.g. '
                                   '"lambda meta: (cdiv(n, meta[\'BLOCK\']),)". Evaluated with the notebook\'s names, '
                                   'cdiv, next_power_of_2, the constexprs and the kernel\'s parameters bound to --args')
    @magic_arguments.argument("-c", "--const", metavar="NAME=VALUE", action="append", default=[],
                              help="a constexpr (or any keyword argument) of the kernel, VALUE a Python expression; "
                                   "repeat for several: -c BLOCK=1024 -c DTYPE=tl.float16")
    @magic_arguments.argument("--num-warps", type=int, default=None, help="warps per program (default 4)")
    @magic_arguments.argument("--num-stages", type=int, default=None, help="software-pipelining stages (default 3)")
    @magic_arguments.argument("--kernel", metavar="NAME", default=None,
                              help="which kernel to compile when the cell defines several (default: the last one)")
    @magic_arguments.argument("--run", action="store_true",
                              help="launch the kernel on --args (CPU tensors: the CPU interpreter; CUDA tensors: the "
                                   "GPU). --check and --bench imply it")
    @magic_arguments.argument("--sanitize", action="store_true",
                              help="run on the CPU interpreter with sanitize=True: report races between programs, "
                                   "duplicate stores and uninitialized reads (needs CPU tensors; implies --run)")
    @magic_arguments.argument("--check", metavar="EXPR", default=None,
                              help='evaluated after the run: true (or None, e.g. from an assert_close) passes, e.g. '
                                   '"torch.allclose(z, x + y)". With --out, EXPR is a reference the output must match')
    @magic_arguments.argument("--out", metavar="NAME", default=None,
                              help="the output tensor (an expression) that --check's reference is compared with, "
                                   "through torch.testing.assert_close")
    @magic_arguments.argument("--atol", type=float, default=None, help="absolute tolerance for --check with --out")
    @magic_arguments.argument("--rtol", type=float, default=None, help="relative tolerance for --check with --out")
    @magic_arguments.argument("--bench", metavar="TORCH_EXPR", default=None,
                              help='time the kernel against this PyTorch expression with kl.testing.do_bench, e.g. '
                                   '"x + y" (GPU only: without a GPU the cell says so and shows recorded H200 results)')
    @magic_arguments.argument("--sizes", metavar="NAME=EXPR", default=None,
                              help='sweep --bench over sizes, e.g. "n=[2**k for k in range(10, 24)]"; needs --setup')
    @magic_arguments.argument("--setup", metavar="CODE", default=None,
                              help="Python statements run for each size of the sweep with NAME set, building what "
                                   "--args, --grid and --bench use, e.g. \"x = torch.rand(n, device='cuda'); "
                                   "y = torch.rand_like(x); z = torch.empty_like(x)\"")
    @magic_arguments.argument("--bytes", metavar="EXPR", default=None,
                              help="bytes the kernel moves, per size (default: the sum of the tensor arguments' sizes)")
    @magic_arguments.argument("--flops", metavar="EXPR", default=None,
                              help='FLOPs the kernel does, per size, e.g. "n" for a vector add: places the runs on a '
                                   "roofline. Without it the FLOPs (and, without --bytes, the bytes) are estimated "
                                   "from the kernel's tile IR, the grid and the arguments, and labelled estimated")
    @magic_arguments.argument("--compare", metavar="OPTIONS", nargs=2, default=None,
                              help='compile twice and show the two compiles side by side with their differences '
                                   '(layouts, shared memory, registers, PTX, passes; time on a GPU): two keyword '
                                   'lists, e.g. --compare "BLOCK=64, num_warps=4" "BLOCK=128, num_warps=8"; also '
                                   'target=\'sm_80\', kernel=other_kernel (a before/after edit), label=\'...\'')
    @magic_arguments.argument("--views", metavar="LIST", default=DEFAULT_VIEWS,
                              help=f"comma-separated views among {', '.join(VIEWS)}; 'all' or 'none' "
                                   f"(default {DEFAULT_VIEWS})")
    @magic_arguments.argument("--target", metavar="SM", default=None,
                              help="the GPU the GPU stages are built for, without needing that GPU: sm_90a (H100/H200 "
                                   "with Hopper-only instructions), sm_90, sm_80, ... (default: this machine's GPU, "
                                   "else sm_90a)")
    @magic_arguments.argument("--strict", action="store_true",
                              help="a failed --check, or any error the cell shows, also raises (a failed check: "
                                   "kernellab.errors.CheckFailedError, an AssertionError) so Run All, nbclient and CI "
                                   "stop there. KERNELLAB_STRICT=1 in the environment turns it on for every cell")
    @magic_arguments.argument("-q", "--quiet", action="store_true",
                              help="no views and no progress notes: only errors, --check and --bench results")
    @cell_magic
    def kernel(self, line, cell):
        """Compile the kernels written in this cell with kernellab and show what every pass did.

        The cell holds one or more kernels written in the tile language (``kl``/``tl`` are
        ``kernellab``/``kernellab.language``; they are added to the namespace when missing). ``@kl.jit``
        is optional: a plain ``def`` is wrapped with ``kernellab.jit``. The kernels are defined in the
        notebook's namespace. With ``--args``, the chosen kernel is compiled for those arguments and the
        views show its passes, layouts, shared memory and code; ``_kl_last`` holds the compiled kernel.

        Example::

            %%kernel --args "x, y, z, n" -c BLOCK=1024 --grid "(cdiv(n, BLOCK),)" --run --check "z.eq(x + y).all()"
            def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = offs < n
                tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

        Errors (bad options, compile errors with the cell line and a caret, failed checks, no GPU for
        --bench) are shown in the cell; the magic does not raise (the notebook goes on) unless --strict or
        KERNELLAB_STRICT=1 asks it to, and returns None.
        """
        strict = os.environ.get("KERNELLAB_STRICT", "").strip().lower() not in ("", "0", "false", "no")
        try:
            try:
                # POSIX splitting: quotes group an expression and are removed (IPython's own arg_split keeps them)
                opts = self.kernel.parser.parse_args(shlex.split(line))
            except Exception as e:  # UsageError, or ValueError from unbalanced quotes
                raise _stop("error", "%%kernel: bad options", f"{e}\n\nSee %%kernel? for the options.") from None
            strict = strict or opts.strict
            _KernelCell(self.shell, opts, line, cell).run()
        except _Stop as s:
            if not s.shown:
                display(s.message)
            if strict and s.message.kind == "error":
                raise _strict_error(s.message) from None
        except Exception as e:  # a bug of ours or of a view: say so, keep the notebook's kernel alive
            display(Message("error", f"%%kernel: internal error ({type(e).__name__})",
                            "".join(traceback.format_exception(type(e), e, e.__traceback__))))
            if strict:
                raise
        return None


def _strict_error(message: Message) -> Exception:
    """What --strict raises for an error the cell showed: CheckFailedError for a failed check, else a
    KernelLabError with the same title and text (the cell already displayed them in full)."""
    from ..errors import CheckFailedError, KernelLabError

    cls = CheckFailedError if message.title.startswith("check failed") else KernelLabError
    return cls(message.title + (f"\n{message.text}" if message.text else ""))


def register(ipython) -> None:
    """Register the ``%%kernel`` cell magic with an IPython shell (what ``%load_ext kernellab`` does)."""
    ipython.register_magics(KernelMagics)


# --------------------------------------------------------------------------------------------- one cell
class _KernelCell:
    def __init__(self, shell, opts, line, cell):
        self.shell, self.opts, self.line, self.cell = shell, opts, line, cell
        self.ns = shell.user_ns
        self.filename = f"<kernel-cell-{next(_COUNTER)}>"
        self.compiled = None

    def say(self, kind, title, text=""):
        if kind in ("error", "warning") or not self.opts.quiet:
            display(Message(kind, title, text))

    # ------------------------------------------------------------------ steps
    def run(self):
        o = self.opts
        views = parse_views(o.views)
        target = parse_target(o.target) if o.target else None
        consts = self.parse_consts()
        if o.sizes and not o.bench:
            raise _stop("error", "%%kernel: --sizes needs --bench", "--sizes sweeps the --bench timing over sizes.")
        if o.sizes and not o.setup:
            raise _stop("error", "%%kernel: --sizes needs --setup",
                        "--setup CODE builds the arguments for each size (it runs with the size's name set), e.g.\n"
                        "--sizes \"n=[2**k for k in range(10, 24)]\" --setup \"x = torch.rand(n, device='cuda'); "
                        "y = torch.rand_like(x); z = torch.empty_like(x)\"")
        if o.out and not o.check:
            raise _stop("error", "%%kernel: --out needs --check",
                        "--check gives the reference that --out is compared with")
        kernels = self.define()
        names = ", ".join(kernels)
        kernel = self._kernel = self.choose(kernels)
        wants_run = o.run or o.sanitize or o.check is not None or o.bench is not None
        if o.args is None:
            if wants_run:
                raise _stop("error", "%%kernel: --run, --check and --bench need --args",
                            f"Give the example arguments of {kernel.__name__}, e.g. --args \"x, y, z, n\".")
            self.say("info", f"defined {names}", f"Give --args (and -c for constexprs) to compile "
                     f"{kernel.__name__} and see its passes.")
            return
        args, kwargs = self.eval_args(o.args, self.scope())
        kwargs.update(consts)
        launch = {k: v for k, v in (("num_warps", o.num_warps), ("num_stages", o.num_stages)) if v is not None}
        if o.compare:
            self.compare(kernel, args, kwargs, launch, target)
            return
        self.compiled = self.compile(kernel, args, {**kwargs, **launch})
        if wants_run:
            grid = self.eval_grid(kernel, args, kwargs)
            run_opts = {"sanitize": True} if o.sanitize else {}
            self.compiled = self.launch(kernel, grid, args, {**kwargs, **launch, **run_opts}) or self.compiled
            if o.sanitize:
                self.say("ok", "the sanitizer found no races, duplicate stores or uninitialized reads")
                report = getattr(self.compiled, "sanitizer_report", None)
                if report is not None and not o.quiet:
                    _show_access_map(report)
        self.ns["_kl_last"] = self.compiled
        if o.check is not None:
            self.check()
        bench = self.bench(kernel, args, kwargs, launch) if o.bench is not None else None
        if o.quiet:
            return
        gpu_views = [v for v in views if v in _GPU_VIEWS]
        if gpu_views or target is not None:
            self.build_gpu(target)
        shown = [v for v in views if v != "perf"]
        if shown:
            show_views(self.compiled, shown)
        if "perf" in views and bench is None and not getattr(self, "_recorded_shown", False):  # --bench showed it
            self.show_recorded("the perf view shows --bench results; this cell ran no benchmark, so here are "
                               "the recorded ones", placed=self.placed(kernel, args, kwargs))

    def compare(self, kernel, args, kwargs, launch, target):
        """--compare A B: both option sets compiled (GPU stages too), shown side by side (kernellab.viz.compare)."""
        from ..errors import KernelLabError
        from .compare_view import compare

        sides = []
        for k, spec in enumerate(self.opts.compare):
            extra, side = self.eval_args(spec, self.scope())
            if extra:
                raise _stop("error", f"%%kernel: --compare takes NAME=VALUE pairs, got {spec!r}",
                            'e.g. --compare "BLOCK=64, num_warps=4" "BLOCK=128, num_warps=8"')
            side.setdefault("label", "AB"[k])
            if self.opts.grid is not None:
                side["grid"] = self.eval_grid(kernel, args, {**kwargs, **launch, **side})
            sides.append(side)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                view = compare(kernel, *args, a=sides[0], b=sides[1], target=target, **{**kwargs, **launch})
        except KernelLabError as e:
            raise _Stop(self.error_message(e)) from None
        self.ns["_kl_compare"] = view
        self.ns["_kl_last"] = self.compiled = view.compiled[1]
        display(view)

    def estimated(self, compiled, args, kwargs, scope=None) -> dict | None:
        """FLOPs and bytes of one launch estimated from the tile IR (kernellab.viz.cost), with the --grid;
        None without a grid or when the estimate fails."""
        from .cost import estimate, runtime_args

        if self.opts.grid is None or compiled is None:
            return None
        try:
            grid = self.eval_grid(self._kernel, args, kwargs, scope)
            if callable(grid):
                meta = dict(zip(getattr(self._kernel, "arg_names", []), args))
                meta.update(kwargs)
                grid = grid(meta)
            grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
            return estimate(compiled, runtime_args(compiled, args, kwargs), grid)
        except Exception:
            return None

    def scope(self, extra=None) -> dict:
        """The notebook's names plus kl, tl, cdiv, next_power_of_2 and torch (a copy: evaluating never leaks).
        torch is there because --check, --bench and --setup are written in it even where the notebook did not
        import it under that name."""
        import kernellab
        import kernellab.language

        g = dict(self.ns)
        if "torch" not in g:
            try:
                import torch

                g["torch"] = torch
            except ImportError:
                pass
        g.setdefault("kl", kernellab)
        g.setdefault("tl", kernellab.language)
        g.setdefault("cdiv", kernellab.cdiv)
        g.setdefault("next_power_of_2", kernellab.next_power_of_2)
        if extra:
            g.update(extra)
        return g

    def parse_consts(self) -> dict:
        out = {}
        for item in self.opts.const:
            name, eq, value = item.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier():
                raise _stop("error", f"%%kernel: bad -c/--const {item!r}", "Write -c NAME=VALUE, e.g. -c BLOCK=1024.")
            out[name] = self.evaluate(value.strip(), self.scope(), f"-c {name}")
        return out

    def evaluate(self, expr: str, scope: dict, what: str):
        try:
            return eval(compile(expr, f"<{what}>", "eval"), scope)
        except SyntaxError as e:
            raise _stop("error", f"%%kernel: {what} is not a Python expression", _syntax_text(e, expr)) from None
        except Exception as e:
            raise _stop("error", f"%%kernel: evaluating {what} failed", f"{what} = {expr}\n"
                        f"{type(e).__name__}: {e}") from None

    def eval_args(self, expr: str, scope: dict):
        scope["__kl_args__"] = lambda *a, **k: (a, k)
        return self.evaluate(f"__kl_args__({expr})", scope, "--args")

    def define(self) -> dict:
        """Run the cell in the notebook's namespace; wrap plain defs with kl.jit; the kernels by name."""
        import kernellab
        import kernellab.language

        text = f"#%%kernel {self.line}\n{self.cell}"
        linecache.cache[self.filename] = (len(text), None, text.splitlines(keepends=True), self.filename)
        try:
            code = compile(text, self.filename, "exec")
            tree = ast.parse(text, self.filename)
        except SyntaxError as e:
            raise _stop("error", f"SyntaxError in the cell at cell line {e.lineno}", _syntax_text(e)) from None
        self.ns.setdefault("kl", kernellab)
        self.ns.setdefault("tl", kernellab.language)
        try:
            exec(code, self.ns)
        except Exception as e:
            line = _cell_line(e.__traceback__, self.filename)
            where = f" at cell line {line}" if line else ""
            src = linecache.getline(self.filename, line).rstrip() if line else ""
            raise _stop("error", f"{type(e).__name__} while running the cell{where}",
                        (f"    {src.strip()}\n" if src else "") + f"{type(e).__name__}: {e}") from None
        kernels = {}
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            obj = self.ns.get(node.name)
            if isinstance(obj, types.FunctionType) and not node.decorator_list \
                    and obj.__code__.co_filename == self.filename:
                obj = self.ns[node.name] = kernellab.jit(obj)
            if _is_kernel(obj):
                kernels[node.name] = obj
        if not kernels:
            raise _stop("error", "%%kernel: the cell defines no kernel",
                        "Write one or more `def` kernels in the cell (with or without @kl.jit).")
        return kernels

    def choose(self, kernels: dict):
        name = self.opts.kernel
        if name is None:
            return list(kernels.values())[-1]
        if name in kernels:
            return kernels[name]
        if _is_kernel(self.ns.get(name)):
            return self.ns[name]
        raise _stop("error", f"%%kernel: no kernel named {name!r}", f"The cell defines: {', '.join(kernels)}")

    def compile(self, kernel, args, kwargs):
        from ..errors import KernelLabError

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if hasattr(kernel, "warmup"):
                    return kernel.warmup(*args, **kwargs)
                cfg = getattr(kernel, "best_config", None) or kernel.configs[0]  # an autotuner
                return kernel.fn.warmup(*args, **{**kwargs, **cfg.all_kwargs()})
        except KernelLabError as e:
            raise _Stop(self.error_message(e)) from None

    def error_message(self, e) -> Message:
        from ..errors import CompilationError

        if isinstance(e, CompilationError):
            where = f"cell line {e.line}" if e.filename == self.filename else f"{e.filename}:{e.line}"
            src = e.source_line if e.source_line is not None else (
                linecache.getline(e.filename, e.line) if e.line else "")
            text = ""
            if src:
                stripped = src.rstrip()
                text = f"    {stripped}\n    {' ' * max(0, e.col or 0)}^\n"
            return Message("error", f"CompilationError in kernel '{e.kernel}' at {where}", text + e.reason)
        return Message("error", f"{type(e).__name__}", str(e))

    def eval_grid(self, kernel, args, kwargs, scope=None):
        if self.opts.grid is None:
            raise _stop("error", "%%kernel: --run needs --grid", 'e.g. --grid "(cdiv(n, BLOCK),)" or '
                        '--grid "lambda meta: (cdiv(n, meta[\'BLOCK\']),)"')
        bound = dict(zip(getattr(kernel, "arg_names", []), args))
        bound.update(kwargs)
        scope = dict(scope) if scope is not None else self.scope()
        for k, v in bound.items():
            scope.setdefault(k, v)
        return self.evaluate(self.opts.grid, scope, "--grid")

    def launch(self, kernel, grid, args, kwargs):
        from ..errors import KernelCrashError, KernelLabError
        from ..runtime.jit import InterpreterNotice

        on_gpu = any(getattr(a, "is_cuda", False) for a in list(args) + list(kwargs.values()))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InterpreterNotice)
                t0 = time.perf_counter()
                ck = kernel[grid](*args, **kwargs)
                if on_gpu:
                    import kernellab

                    kernellab.synchronize()
                dt = time.perf_counter() - t0
        except KernelCrashError as e:
            raise _stop("error", "the kernel crashed on the GPU", f"{e}\nRestart the notebook's kernel: the CUDA "
                        "context is unusable after a fault.") from None
        except KernelLabError as e:
            message = self.error_message(e)
            if getattr(e, "report", None) is not None:  # a SanitizerError: the message, then who touched what
                display(message)
                _show_access_map(e.report)
                raise _Stop(message, shown=True) from None
            raise _Stop(message) from None
        except Exception as e:
            raise _stop("error", f"launching {kernel.__name__} failed ({type(e).__name__})", str(e)) from None
        where = "on the GPU" if on_gpu else "on the CPU interpreter"
        shape = grid if not callable(grid) else "lambda meta"
        self.say("info", f"ran {kernel.__name__}[{shape}] {where} in {dt * 1e3:.1f} ms"
                 + (" (first launch: includes compile and load)" if on_gpu else ""))
        return ck if hasattr(ck, "trace") else None

    def check(self):
        o = self.opts
        scope = self.scope()
        value = self.evaluate(o.check, scope, "--check")
        if o.out:
            out = self.evaluate(o.out, scope, "--out")
            try:
                import torch

                ref = torch.as_tensor(value).to(device=out.device, dtype=out.dtype)
                tol = {} if o.atol is None and o.rtol is None else {"atol": o.atol or 0.0, "rtol": o.rtol or 0.0}
                torch.testing.assert_close(out, ref, **tol)
            except AssertionError as e:
                raise _stop("error", f"check failed: {o.out} does not match {o.check}", str(e)) from None
            except Exception as e:
                raise _stop("error", f"check could not compare {o.out} with {o.check}",
                            f"{type(e).__name__}: {e}") from None
            err = (out.double() - ref.double()).abs().max().item() if out.numel() else 0.0
            display(Message("ok", f"check passed: {o.out} matches {o.check}", f"max |error| = {err:.3g}"))
            return
        passed = _truthy(value)
        if passed is None:
            raise _stop("error", f"check: cannot tell whether {o.check} passed",
                        f"It evaluated to {type(value).__name__}; write an expression that is True when the "
                        "output is right, or pass --out NAME to compare NAME with a reference.")
        if not passed:
            raise _stop("error", f"check failed: {o.check}", explain_failed_check(o.check, value, scope))
        display(Message("ok", f"check passed: {o.check}"))

    def build_gpu(self, target):
        from ..errors import KernelLabError
        from ..runtime.targets import native_target

        target = target or native_target()
        try:
            self.compiled.build_gpu(target)
        except KernelLabError as e:
            self.say("warning", f"GPU stages for {target.cpu} could not be built; showing the tile-level stages",
                     str(e))

    # ------------------------------------------------------------------ benchmarks
    def bench(self, kernel, args, kwargs, launch):
        from ..testing import do_bench

        o = self.opts
        if not _has_gpu():
            self.say("warning", "--bench needs a CUDA GPU, and this machine has none",
                     "kernellab runs kernels on the CPU interpreter here: correct results, but CPU timings say "
                     "nothing about a GPU. Run this cell on a GPU machine to time the kernel against "
                     f"`{o.bench}`. Nothing was timed. Below: results recorded on a GPU (benchmarks/results), "
                     "with this kernel placed by its arithmetic intensity (FLOPs from --flops, else estimated "
                     "from its tile IR), untimed.")
            self.show_recorded(None, placed=self.placed(kernel, args, kwargs))
            return None
        sweep = [(None, None)]
        if o.sizes:
            name, eq, expr = o.sizes.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier():
                raise _stop("error", f"%%kernel: bad --sizes {o.sizes!r}", 'Write NAME=EXPR, e.g. '
                            '"n=[2**k for k in range(10, 24)]".')
            values = self.evaluate(expr.strip(), self.scope(), "--sizes")
            try:
                sweep = [(name, v) for v in values]
            except TypeError:
                raise _stop("error", "%%kernel: --sizes must give a list of sizes", f"got {_short(values)}") from None
        try:
            torch_code = compile(o.bench, "<--bench>", "eval")
        except SyntaxError as e:
            raise _stop("error", "%%kernel: --bench is not a Python expression", _syntax_text(e, o.bench)) from None
        from ..errors import KernelLabError

        rows = []
        for name, value in sweep:
            scope = self.scope({name: value} if name else None)
            if o.setup:
                try:
                    exec(compile(o.setup, "<--setup>", "exec"), scope)
                except Exception as e:
                    raise _stop("error", f"--setup failed{f' for {name}={value}' if name else ''}",
                                f"{type(e).__name__}: {e}") from None
            if name:
                a, kw = self.eval_args(o.args, dict(scope))
                kw.update(self.consts_in(scope))
            else:
                a, kw = args, dict(kwargs)
            if not all(getattr(t, "is_cuda", True) for t in list(a) + list(kw.values()) if hasattr(t, "data_ptr")):
                raise _stop("error", "--bench needs CUDA tensors", "Make the --args tensors with device='cuda' "
                            "(in --setup for a sweep); CPU tensors run on the interpreter.")
            grid = self.eval_grid(kernel, a, kw, scope)
            call = kernel[grid]
            try:
                t_kernel = do_bench(lambda: call(*a, **kw, **launch)) / 1e3
                t_torch = do_bench(lambda: eval(torch_code, scope)) / 1e3
            except KernelLabError as e:
                raise _Stop(self.error_message(e)) from None
            except Exception as e:
                raise _stop("error", f"--bench failed ({type(e).__name__})", str(e)) from None
            est = None if o.flops else self.estimated(self.compiled, a, kw, scope)
            nbytes = self.evaluate(o.bytes, scope, "--bytes") if o.bytes else \
                est["bytes"] if est and est["bytes"] else _tensor_bytes(list(a) + list(kw.values()))
            flops = self.evaluate(o.flops, scope, "--flops") if o.flops else (est["flops"] or None) if est else None
            row = {"case": f"{kernel.__name__}" + (f" {name}={value}" if name else ""), "bytes": nbytes,
                   "flops": flops, "kernellab": {"seconds": t_kernel}, "torch": {"seconds": t_torch}}
            if est and flops:
                row["flops_estimated"], row["flops_how"] = True, "the kernel's tile IR"
            if name:
                row["size"] = {name: value}
            for impl in ("kernellab", "torch"):
                if nbytes:
                    row[impl]["gbps"] = nbytes / row[impl]["seconds"] / 1e9
            rows.append(row)
        return self.report(kernel, rows)

    def report(self, kernel, rows):
        """Show the timings of `rows`, then the roofline against this GPU's peaks, or why there is no point."""
        import datetime

        from .roofline import PerformanceView, gpu_name

        o = self.opts
        result = {"gpu": gpu_name(), "date": datetime.date.today().isoformat(), "rows": rows, "recorded": False,
                  "source": "this notebook"}
        lines = [f"{'case':<40}{'kernellab µs':>14}{'torch µs':>12}{'kl GB/s':>10}{'torch GB/s':>12}{'speedup':>9}"]
        for r in rows:
            k, t = r["kernellab"], r["torch"]
            lines.append(f"{r['case'][:40]:<40}{k['seconds'] * 1e6:14.2f}{t['seconds'] * 1e6:12.2f}"
                         f"{k.get('gbps', 0):10.0f}{t.get('gbps', 0):12.0f}{t['seconds'] / k['seconds']:9.2f}")
        display(Message("info", f"benchmark on {result['gpu']}: {kernel.__name__} vs `{o.bench}`", "\n".join(lines)))
        note = no_point_note(rows)
        if note is not None:
            display(note)
        if note is None or sum(1 for r in rows if r.get("size")) >= 2:  # else nothing to draw: the note says why
            display(PerformanceView(result, peaks=self.peaks(), title=f"{kernel.__name__} vs {o.bench}"))
        return result

    def peaks(self):
        """This GPU's peaks for the roofline: cached, else measured now (once) and cached. A failed measurement
        costs the measured roofs (recorded ones for this GPU, if any, stand in), not the timings."""
        from . import roofline

        if roofline.gpu_name() is not None and roofline.cached_peaks() is None:
            self.say("info", "measuring this GPU's peaks for the roofline (a copy and a matmul, a few seconds); "
                     "cached for next time")
        try:
            return roofline.machine_peaks()
        except Exception as e:
            self.say("warning", "measuring this GPU's peaks failed; the roofline uses recorded peaks, if any",
                     f"{type(e).__name__}: {e}")
            return None

    def consts_in(self, scope):
        out = {}
        for item in self.opts.const:
            name, _, value = item.partition("=")
            out[name.strip()] = self.evaluate(value.strip(), dict(scope), f"-c {name.strip()}")
        return out

    def placed(self, kernel, args, kwargs) -> list:
        """This kernel as a roofline point without a time (no GPU): its FLOPs (--flops) over the bytes it moves
        (--bytes, else the tensor arguments' sizes). None without --flops (a note says how to add it)."""
        from .roofline import Placed

        o = self.opts
        scope = self.scope()
        if not o.flops:
            est = self.estimated(self.compiled, args, kwargs)
            if not est or not est["flops"] or not est["bytes"]:
                self.say("info", "your kernel is not on the roofline: no --flops, and no estimate without --grid",
                         "A kernel sits on a roofline at its arithmetic intensity, FLOPs / bytes. Give --grid (the "
                         "FLOPs are then estimated from the IR) or --flops EXPR (the FLOPs of one run, e.g. --flops "
                         "\"2*M*N*K\") to place it by intensity on the recorded one.")
                return []
            nbytes = self.evaluate(o.bytes, dict(scope), "--bytes") if o.bytes else est["bytes"]
            self.say("info", f"{kernel.__name__}: {est['flops']:.4g} FLOPs and {nbytes:.4g} bytes, estimated from "
                     "its tile IR (--flops / --bytes override)", "; ".join(est["notes"]))
            return [Placed(f"{kernel.__name__} (estimated)", float(est["flops"]), float(nbytes))]
        flops = self.evaluate(o.flops, dict(scope), "--flops")
        nbytes = self.evaluate(o.bytes, dict(scope), "--bytes") if o.bytes else \
            _tensor_bytes(list(args) + list(kwargs.values()))
        if not flops or not nbytes:
            return []
        return [Placed(kernel.__name__, float(flops), float(nbytes))]

    def show_recorded(self, note, placed=()):
        """The recorded roofline (once per cell: --bench on a CPU and the perf view share it), with `placed`
        kernels drawn on it by their intensity."""
        from .roofline import PerformanceView, recorded_results

        if getattr(self, "_recorded_shown", False):
            return
        self._recorded_shown = True
        results = recorded_results()
        if not results:
            self.say("info", "no recorded GPU results found (benchmarks/results/*.json in the repository)")
            return
        if note:
            self.say("info", note)
        title = f"{placed[0].label} on the recorded roofline" if placed else None
        display(PerformanceView(pick_recorded(results, self._kernel, self.compiled), placed=placed, title=title))


# --------------------------------------------------------------------------------------------- helpers
def pick_recorded(results: list, kernel=None, compiled=None) -> dict:
    """The recorded results a cell's roofline shows: those of the benchmark like the cell's kernel (attention, a
    matmul: a tl.dot; else the memory-bound set), with points to draw, an H200's first; else the newest with
    points. (The newest file of all may be one whose rows make no point.)"""
    from .roofline import points_from_rows

    name = (getattr(kernel, "__name__", "") or "").lower()
    tile = (getattr(compiled, "asm", None) or {}).get("ttir", "") if compiled is not None else ""
    kind = ("attention" if "attn" in name or "attention" in name else
            "matmul" if "matmul" in name or "gemm" in name or "tt.dot" in tile else "memory_bound")
    drawable = [r for r in results if points_from_rows(r["rows"])]
    like = [r for r in drawable if r.get("file", "").endswith(f"-{kind}.json")]
    return next((r for r in like if r.get("gpu") == "NVIDIA H200"), None) or (like or drawable or results)[0]


def parse_views(text: str) -> list[str]:
    """"passes,layout" -> ["passes", "layout"]; 'all', 'none'; unknown names stop the magic with a message."""
    text = (text or "").strip().lower()
    if text in ("", "none"):
        return []
    if text == "all":
        return list(VIEWS)
    out = []
    for part in re.split(r"[,\s]+", text):
        if not part:
            continue
        name = _ALIASES.get(part, part)
        if name not in VIEWS:
            raise _stop("error", f"%%kernel: unknown view {part!r}",
                        f"--views takes a comma-separated list of: {', '.join(VIEWS)} (or 'all', 'none')")
        if name not in out:
            out.append(name)
    return out


def parse_target(text: str):
    """"sm_90a" / "sm_90" / "90" / "sm_80" -> Target; a bad name stops the magic with a message."""
    from ..runtime.targets import Target

    m = re.fullmatch(r"\s*(?:sm_?)?(\d{2,3})(a?)\s*", text or "", re.IGNORECASE)
    if not m:
        raise _stop("error", f"%%kernel: bad --target {text!r}", "Write sm_90a (H100/H200), sm_90, sm_80, sm_89, ...")
    try:
        return Target(int(m.group(1)), arch_specific=bool(m.group(2)))
    except ValueError as e:
        raise _stop("error", f"%%kernel: bad --target {text!r}", str(e)) from None


def find_show():
    """``kernellab.viz.show``, looked up when needed; None while it does not exist or cannot be imported
    (ipywidgets missing): the magic then shows the pass summary."""
    import importlib

    try:
        return getattr(importlib.import_module("kernellab.viz"), "show", None)
    except Exception:
        return None


def show_views(compiled, names) -> None:
    """Show `names` through ``kernellab.viz.show``; without it (or if it fails), the pass summary."""
    show = find_show()
    if show is not None:
        try:
            out = show(compiled, views=tuple(names))
            if out is not None:
                display(out)
            return
        except Exception as e:
            display(Message("warning", f"the views failed ({type(e).__name__}: {e}); the pass summary instead"))
    display(Message("info", f"{compiled.name}: passes", compiled.trace.summary()))


def no_point_note(rows) -> Message | None:
    """Why the --bench runs have no roofline point (none has both FLOPs and bytes), and the option that adds
    one; None when some run has a point. FLOPs are not guessed: the arguments' sizes say what a kernel moves,
    not what it computes."""
    if any(r.get("flops") and r.get("bytes") for r in rows):
        return None
    if not any(r.get("flops") for r in rows):
        return Message("info", "no roofline point: --flops was not given",
                       "A roofline point is the kernel's FLOPs over the bytes it moves. The bytes default to the "
                       "sizes of the tensor arguments;\nthe FLOPs cannot be read off the arguments. Add --flops "
                       "EXPR, the FLOPs of one run, e.g. --flops n for a vector add of n elements.")
    return Message("info", "no roofline point: no bytes moved",
                   "The arguments hold no tensors to count the bytes of. Add --bytes EXPR, the bytes one run "
                   "reads and writes, e.g. --bytes 12*n for a float32 vector add.")


def _is_kernel(obj) -> bool:
    from ..runtime.jit import JITFunction

    if isinstance(obj, JITFunction):
        return True
    return hasattr(obj, "arg_names") and hasattr(obj, "run") and _is_kernel(getattr(obj, "fn", None))


def _has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _tensor_bytes(values) -> int:
    return sum(v.numel() * v.element_size() for v in values if hasattr(v, "element_size") and hasattr(v, "numel"))


def _truthy(value):
    """True / False for bools, numbers and tensors (all elements); None (an assert_close) passes;
    None for anything else."""
    if value is None:
        return True
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if hasattr(value, "all") and hasattr(value, "numel"):
        return bool(value.all())
    if hasattr(value, "all") and hasattr(value, "shape"):  # numpy
        return bool(value.all())
    return None



# functions and methods whose first two operands (or receiver and argument) --check compares
_COMPARERS = {"allclose", "isclose", "equal", "eq", "array_equal", "assert_close", "assert_allclose",
              "assert_equal", "ne"}
_CLOSE_DEFAULTS = {"allclose": (1e-8, 1e-5), "isclose": (1e-8, 1e-5)}  # (atol, rtol) of torch and numpy


def _compared(tree: ast.AST):
    """The first comparison in a --check expression (outermost first): (left, right, how, keywords) where how
    names the function or operator, or None when the expression compares nothing we can take apart."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name not in _COMPARERS:
                continue
            if len(node.args) >= 2:
                return node.args[0], node.args[1], name, node.keywords
            if len(node.args) == 1 and isinstance(f, ast.Attribute):
                return f.value, node.args[0], name, node.keywords
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            op = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}.get(
                type(node.ops[0]))
            if op:
                return node.left, node.comparators[0], op, []
    return None


def _as_float64(value):
    """A CPU float64 torch tensor of a tensor, array or number; None for anything else (modules, strings...)."""
    import types as _types

    if isinstance(value, (str, bytes, _types.ModuleType)) or callable(value) and not hasattr(value, "shape"):
        return None
    try:
        import torch

        if isinstance(value, torch.Tensor):
            return None if value.is_complex() else value.detach().to("cpu", torch.float64)
        import numpy as np

        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            return None
        return torch.as_tensor(arr.astype(np.float64))
    except Exception:
        return None


def explain_failed_check(expr: str, value, scope: dict) -> str:
    """What a failed --check compared, for the message: the two operands of its comparison (torch.allclose(a, b),
    a.eq(b).all(), a == b, ...) evaluated again with the largest error, where it is, how many elements differ and
    the NaNs — instead of only "evaluated to False". Falls back to the value when the expression has no operands
    we can take apart."""
    tail = f"evaluated to {_short(value)}"
    try:
        tree = ast.parse(expr, mode="eval")
        found = _compared(tree)
        if found is None:
            return tail + "\n(write the check as torch.allclose(out, ref) or use --out NAME to see the error)"
        left, right, how, keywords = found
        ltext, rtext = ast.unparse(left), ast.unparse(right)
        a = _as_float64(eval(compile(ast.Expression(left), "<--check>", "eval"), dict(scope)))
        b = _as_float64(eval(compile(ast.Expression(right), "<--check>", "eval"), dict(scope)))
        if a is None or b is None:
            return tail
        lines = [f"compared {ltext} with {rtext} ({how})"]
        if a.numel() <= 1 and b.numel() <= 1:
            lines.append(f"  {ltext} = {a.item() if a.numel() else a.tolist()}, "
                         f"{rtext} = {b.item() if b.numel() else b.tolist()}")
            return "\n".join(lines + [tail])
        try:
            a2, b2 = (a.expand_as(b) if a.numel() == 1 else a), (b.expand_as(a) if b.numel() == 1 else b)
            import torch

            a2, b2 = torch.broadcast_tensors(a2, b2)
        except RuntimeError:
            lines.append(f"  shapes differ: {ltext} is {tuple(a.shape)}, {rtext} is {tuple(b.shape)}")
            return "\n".join(lines + [tail])
        if tuple(a.shape) != tuple(b.shape):
            lines.append(f"  shapes: {ltext} is {tuple(a.shape)}, {rtext} is {tuple(b.shape)} (broadcast)")
        import torch

        diff = (a2 - b2).abs()
        nan_a, nan_b = int(torch.isnan(a2).sum()), int(torch.isnan(b2).sum())
        both_nan = torch.isnan(a2) & torch.isnan(b2)
        diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)  # NaN on one side only
        flat = int(torch.argmax(diff))
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), diff.shape))
        worst = float(diff.reshape(-1)[flat])
        rel = diff / b2.abs()
        rel = rel[torch.isfinite(rel)]
        lines.append(f"  max |{ltext} - ({rtext})| = {worst:.4g} at index {idx}: {ltext} = "
                     f"{float(a2[idx]):.6g}, {rtext} = {float(b2[idx]):.6g}")
        if rel.numel():
            lines.append(f"  max relative error = {float(rel.max()):.4g}")
        if how in _CLOSE_DEFAULTS:
            kw = {k.arg: k.value for k in keywords if k.arg in ("atol", "rtol")}
            atol, rtol = _CLOSE_DEFAULTS[how]
            atol = float(eval(compile(ast.Expression(kw["atol"]), "<--check>", "eval"), dict(scope))) \
                if "atol" in kw else atol
            rtol = float(eval(compile(ast.Expression(kw["rtol"]), "<--check>", "eval"), dict(scope))) \
                if "rtol" in kw else rtol
            bad = int((diff > atol + rtol * b2.abs()).sum())
            lines.append(f"  {bad} of {diff.numel()} elements differ by more than atol + rtol * |{rtext}| "
                         f"(atol={atol:g}, rtol={rtol:g})")
        else:
            lines.append(f"  {int((diff != 0).sum())} of {diff.numel()} elements differ")
        if nan_a or nan_b:
            lines.append(f"  NaN: {nan_a} in {ltext}, {nan_b} in {rtext}")
        return "\n".join(lines + [tail])
    except Exception:  # explaining must never hide the failure itself
        return tail


def _short(value, limit=200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _syntax_text(e: SyntaxError, expr: str | None = None) -> str:
    src = (e.text or expr or "").rstrip("\n")
    caret = " " * max(0, (e.offset or 1) - 1) + "^"
    return f"    {src}\n    {caret}\n{e.msg}"


def _cell_line(tb, filename):
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
