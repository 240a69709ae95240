"""`@kl.jit`: specialization, compilation with a recorded trace, caching and launching.

On a machine without a GPU (or with CPU tensors) a launch runs the compiled tile IR on the CPU
interpreter, so every kernel and notebook works on a laptop.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import weakref
from dataclasses import dataclass, field

from ..compiler.frontend import FunctionSource, ModuleCompiler, RuntimeArg, runtime_leaves
from ..compiler.passes import strip_mine_tiles
from ..compiler.pipeline import CompileTrace
from ..compiler.pytree import is_node, map_leaves, rebuild_like
from ..compiler.types import DTYPES, DType, PointerType
from ..errors import (
    ArgumentOverflowError,
    CompilationError,
    LaunchError,
    LaunchOptionError,
    SanitizerError,
    SharedBudgetExceeded,
    ToolchainError,
)
from ..language.core import _DescriptorLayout, constexpr, tensor_descriptor, unwrap
from . import cache as _cache  # noqa: F401 (takes the compiler's hash now, with the compiler loaded)
from . import codegen_env
from .codegen_env import CODEGEN_ENV  # noqa: F401 (the knobs' list, long read from here)
from .source import get_source
from .targets import current_target  # the autotuner reads it here (tests patch it here)

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "enable_wgmma", "enable_tma",
                  "enable_reflect_ftz", "debug", "launch_cooperative_grid", "stream", "warmup",
                  # the CPU interpreter's: how far pointers may reach, and the race / uninitialized-read checks
                  "bounds", "sanitize",
                  # libdevice is always linked (extern_libs: accepted, without effect); launch_pdl: a
                  # programmatic dependent launch on sm_90+ (gdc_wait / gdc_launch_dependents in the kernel)
                  "extern_libs", "launch_pdl")

_TORCH_DTYPES = {
    "torch.bool": "i1", "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64",
    "torch.uint8": "u8", "torch.uint16": "u16", "torch.uint32": "u32", "torch.uint64": "u64",
    "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float64": "f64",
    # fp8 as Triton maps torch's formats (the fnuz ones are AMD's; the GPU backend rejects them)
    "torch.float8_e4m3fn": "f8e4nv", "torch.float8_e5m2": "f8e5", "torch.float8_e4m3fnuz": "f8e4b8",
    "torch.float8_e5m2fnuz": "f8e5b16",
}


def dtype_of_array(a) -> DType | None:
    """The element dtype of a torch tensor or NumPy array; None for anything else."""
    if hasattr(a, "data_ptr") and isinstance(getattr(a, "dtype", None), DType):
        return a.dtype  # a TensorWrapper (kl.reinterpret): the kernel sees the wrapper's dtype
    if hasattr(a, "data_ptr") and hasattr(a, "dtype"):
        name = _TORCH_DTYPES.get(str(a.dtype))
        if name is None:
            raise LaunchError(f"tensors of dtype {a.dtype} are not supported")
        return DTYPES[name]
    if hasattr(a, "__array_interface__") and hasattr(a, "dtype") and hasattr(a, "ndim"):
        import numpy as np

        for name, d in DTYPES.items():
            if name != "bf16" and not name.startswith("f8") and d.np == np.dtype(a.dtype):
                return d
        raise LaunchError(f"arrays of dtype {a.dtype} are not supported")
    return None


def _is_torch_dtype(a) -> bool:
    return type(a).__name__ == "dtype" and type(a).__module__ == "torch"


class _PointerStandIn:
    """A tensor argument with a dtype and no memory, for warmup (Triton's MockTensor)."""

    def __init__(self, dtype):
        self.dtype = dtype

    @staticmethod
    def data_ptr() -> int:
        return 0


def data_ptr(a) -> int:
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    return a.__array_interface__["data"][0]


def _tensor_of(a):
    """The tensor an argument stands for: a host TensorDescriptor's `base` (the binder's own test of what is one),
    else the argument itself."""
    return a.base if _is_host_descriptor(a) else a


def is_cuda(a) -> bool:
    """Whether an argument lives on a GPU: a CUDA tensor (or a host TensorDescriptor over one), or a tensor-like
    object (data_ptr() and dtype, which Triton accepts as a pointer) whose `device` is a CUDA device (FlagGems'
    StridedBuffer has no `is_cuda`)."""
    a = _tensor_of(a)
    flag = getattr(a, "is_cuda", None)
    if flag is not None:
        return bool(flag)
    return hasattr(a, "data_ptr") and getattr(getattr(a, "device", None), "type", None) == "cuda"


def launches_on_gpu(values, sanitize=False) -> bool:
    """Where a launch runs: on the GPU when its tensors are CUDA tensors, and, as in Triton, when it has no
    tensor at all and a GPU is there (a kernel of scalars and prints); else on the CPU interpreter."""
    if any(is_cuda(v) for v in values):
        return True
    if sanitize or any(hasattr(_tensor_of(v), "data_ptr") for v in values):
        return False
    torch = sys.modules.get("torch")  # only if the user has it: no import on the launch path
    return bool(torch is not None and torch.cuda.is_available())


class _Stages(dict):
    """`CompiledKernel.asm`: reading a GPU stage that was not built yet (`asm["ptx"]`, as Triton's tests do after
    `warmup`) builds it, on any machine (no GPU needed). `in` and `.get` only look."""

    GPU_STAGES = ("gpu", "llir", "ptx", "cubin")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.owner = None

    def __missing__(self, key):
        owner = self.owner
        if key in self.GPU_STAGES and owner is not None and "tile" in self:
            self.owner = None  # once: a failed build raises its own error, then a plain KeyError
            try:
                owner.build_gpu()
            finally:
                self.owner = owner
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)
        raise KeyError(key)


@dataclass
class CompiledKernel:
    """One specialization: IR of every stage, the trace, and how to run it."""

    name: str
    module: object
    trace: CompileTrace
    arg_names: list
    source_lines: list
    options: dict = field(default_factory=dict)
    asm: dict = field(default_factory=_Stages)
    _interpreter: object = None
    _loaded: object = None
    shared: int = 0
    n_regs: int | None = None
    n_spills: int = 0
    shared_plan: list = field(default_factory=list)
    report: dict = field(default_factory=dict)
    num_warps: int = 4
    launch_warps: int | None = None  # warps launched: num_warps, plus a producer warpgroup when warp-specialized
    arg_kinds: list = field(default_factory=list)
    _built_for: str | None = None
    param_names: list = field(default_factory=list)  # every parameter of the @jit function, constexprs too
    sanitizer_report: object = None  # the last sanitized interpreter launch's SanitizerReport
    default_target: object = None  # what build_gpu() builds for when not told (triton.compile(..., target=))
    over_budget: str | None = None  # why the options as asked did not fit the shared memory (the ladder was taken)

    def __post_init__(self):
        if isinstance(self.asm, _Stages):
            self.asm.owner = self

    @property
    def signature(self):
        return self.trace.signature

    # Triton's CompiledKernel surface that host code reads (tutorial 02 sizes its grid from these).
    def _init_handles(self):
        """Build the GPU stages (and load the cubin where a GPU is present), as Triton's lazy handle init."""
        self.build_gpu()
        if self._loaded is None and "cubin" in self.asm and _can_load():
            self.gpu(None)
        return self

    @property
    def hash(self) -> str:
        """A digest of what was compiled (argument types, constants, options), equal for equal compiles."""
        return hashlib.sha256(repr((self.trace.key, sorted(self.options.items(), key=str))).encode()).hexdigest()

    @property
    def metadata(self):
        from types import SimpleNamespace

        return SimpleNamespace(shared=self.shared, num_warps=self.options.get("num_warps", self.num_warps),
                               num_stages=self.options.get("num_stages", 3), name=self.name, target=self._built_for)

    def __repr__(self):
        """One line (the dataclass repr printed the whole module and trace: screens of text in a notebook)."""
        stages = "tile IR" + (f" + PTX for {self._built_for}" if self._built_for and "ptx" in self.asm else "")
        warps = self.options.get("num_warps", self.num_warps)
        parts = [f"{len(self.trace.passes)} passes", stages, f"num_warps={warps}"]
        if "num_stages" in self.options:
            parts.append(f"num_stages={self.options['num_stages']}")
        if self.n_regs is not None:
            parts.append(f"{self.n_regs} regs" + (f", {self.n_spills} spills" if self.n_spills else ""))
        if "gpu" in self.asm:
            parts.append(f"{self.shared} B shared")
        sig = str(self.signature)
        sig = sig if len(sig) <= 60 else sig[:57] + "..."
        return f"<CompiledKernel {self.name}({sig}): {', '.join(parts)}>"

    def interpreter(self):
        if self._interpreter is None:
            from .interpreter import Interpreter

            self._interpreter = Interpreter(self.module, self.name, self.source_lines, arg_names=self.arg_names)
        return self._interpreter

    def run(self, grid, args, bounds=None, sanitize=False):
        """Run on the GPU when the tensor arguments are CUDA tensors, else on the CPU interpreter (`bounds` and
        `sanitize`: see `Interpreter.run`; bounds None: `default_bounds`, as for a launch through the kernel)."""
        bounds = bounds or default_bounds
        if launches_on_gpu(args):
            if sanitize:
                raise LaunchError(f"kernel '{self.name}': sanitize runs on the CPU interpreter; pass CPU tensors "
                                  "(a GPU launch can be checked with `compute-sanitizer python ...`)")
            self.run_gpu(grid, list(args))
            return
        try:
            report = self.interpreter().run(grid, args, bounds=bounds, sanitize=sanitize)
        except SanitizerError as e:
            self.sanitizer_report = e.report
            raise
        if sanitize:
            self.sanitizer_report = report

    def run_gpu(self, grid, args, pdl=False):
        """Build (once) for the current device's target, load, and launch on torch's current stream (`pdl`: as a
        programmatic dependent launch, Triton's `launch_pdl=True`)."""
        import torch

        self.gpu(current_target())
        self.launch_gpu(grid, args, torch.cuda.current_stream().cuda_stream, pdl)

    # ------------------------------------------------------------------ GPU
    def build_gpu(self, target=None, ladder: bool = True):
        """Run the GPU stages (layouts, shared memory, LLVM, PTX, cubin) for `target` without loading
        anything: works on a machine with no GPU, so the lab can show layouts and PTX anywhere.
        `target` defaults to `default_target`, else sm_90 (the H200). Returns self; the stages land in `asm` and
        the trace. A plan over the GPU's shared memory is rebuilt with less staging (the "ladder" below); with
        `ladder=False`, a plan that fits only with fewer pipeline stages than asked raises SharedBudgetExceeded
        instead, having run only the GPU passes (the autotuner tries such configs last: Triton refuses them)."""
        from ..compiler.codegen.target import Target

        target = target or self.default_target or Target(90)
        if "ptx" in self.asm and self._built_for == target.cpu:
            if not ladder and self.over_budget:
                raise SharedBudgetExceeded(self.over_budget)
            return self
        self._check_register_budget(self.options.get("num_warps", 4))
        opts = self.gpu_options(target)
        limit = _max_shared(target.arch)
        why, n_notes = None, len(self.trace.notes)
        while True:
            start = len(self.trace.passes)
            # a rung over the limit that has a rung below it stops after the GPU passes (no LLVM, no ptxas)
            out = self._build_for(opts, target, shared_limit=limit if opts.num_stages > 1 or not ladder else None)
            if out["shared"] <= limit or opts.num_stages <= 1 and ladder:
                break
            fused = any(rec.name == "flatten_loops" and rec.stats.get("flattened") for rec in self.trace.passes[start:])
            del self.trace.passes[start:]
            if fused:
                # a fused tile loop keeps its stages through the epilogue's buffers: the nest at num_stages first
                self.trace.notes.append(f"shared memory: {out['shared']} bytes with the flatten=True nest fused is "
                                        f"over sm_{target.arch}'s {limit}; built with the nest kept")
                opts = dataclasses.replace(opts, flatten=False)
                continue
            if (out.get("launch_warps") or opts.num_warps) > opts.num_warps:
                # warp-specialized: its stage buffers cannot share the epilogue's shared memory (the producer fills
                # the next tile's stages meanwhile); the same stages without the producer come before fewer stages
                self.trace.notes.append(f"shared memory: {out['shared']} bytes warp-specialized is over sm_"
                                        f"{target.arch}'s {limit}; built without warp specialization")
                opts = dataclasses.replace(opts, warp_specialize=False)
                continue
            # Too many pipeline buffers for this GPU: fewer stages (down to one) rather than a kernel that
            # cannot launch; the trace keeps the build that was used and says why. (The rungs above undo choices
            # of kernellab's own; this one changes what the launch asked for, which Triton would refuse.)
            why = why or (f"kernel '{self.name}': {out['shared']} bytes of shared memory with num_stages="
                          f"{opts.num_stages}, over sm_{target.arch}'s {limit}; use fewer stages or smaller blocks")
            if not ladder:
                del self.trace.notes[n_notes:]
                raise SharedBudgetExceeded(why, out["shared"], limit)
            self.trace.notes.append(f"shared memory: {out['shared']} bytes with num_stages={opts.num_stages} is "
                                    f"over sm_{target.arch}'s {limit}; built with num_stages={opts.num_stages - 1}")
            opts = dataclasses.replace(opts, num_stages=opts.num_stages - 1)
        for k in ("gpu", "llir", "ptx", "cubin"):
            if k in out:
                self.asm[k] = out[k]
        self.shared = out["shared"]
        self.shared_plan = out["shared_plan"]
        self.report = out["report"]
        for line in (self.report.get("log") or "").splitlines():
            # e.g. C7514: ptxas serialized the wgmmas; the trace should say so, not only a log nobody reads
            note = "ptxas: " + line.split(":", 1)[-1].strip()
            if "Performance Loss" in line and note not in self.trace.notes:
                self.trace.notes.append(note)
        self.n_regs = out["report"].get("n_regs")
        self.n_spills = out["report"].get("n_spills", 0)
        self.num_warps = opts.num_warps
        self.launch_warps = out.get("launch_warps") or opts.num_warps
        self.arg_kinds = out["arg_kinds"]
        self._built_for = target.cpu
        self.over_budget = why
        return self

    def gpu_options(self, target):
        """The GpuOptions the GPU build starts from for `target` (launch options as asked; the shared-memory ladder
        may then lower num_stages)."""
        from ..compiler.gpu.options import GpuOptions

        return GpuOptions(num_warps=self.options.get("num_warps", 4),
                          num_stages=self.options.get("num_stages", 3), arch=target.arch,
                          fp_fusion=bool(self.options.get("enable_fp_fusion", True)),
                          reflect_ftz=bool(self.options.get("enable_reflect_ftz", True)),
                          maxnreg=self.options.get("maxnreg"),
                          wgmma=bool(self.options.get("enable_wgmma", True)),
                          tma=bool(self.options.get("enable_tma", True)),
                          line_info=_line_info_on())

    def _build_for(self, opts, target, shared_limit=None) -> dict:
        """The GPU stages for one option set (from the cache when it has them); with `shared_limit`, only the GPU
        passes when their plan is over it (see compile_to_cubin: such a build is neither used nor cached)."""
        from ..compiler.backend import compile_to_cubin, paused_gc

        key = _gpu_cache_key(self.asm["tile"], opts, target)
        probe = self.__dict__.get("_shared_probes", {}).get(key)
        if probe is not None and shared_limit is not None and probe["shared"] > shared_limit:
            # a compile worker ran these GPU passes (runtime/compile_pool.py): over the limit, no flatten_loops
            # fusion to undo; what they would return here, without running them again
            return {"shared": probe["shared"], "launch_warps": probe["launch_warps"], "over_shared": True}
        pre = self.__dict__.get("_prebuilt", {}).pop(key, None)
        if pre is not None:  # built by a compile worker (runtime/compile_pool.py), also filed in the disk cache
            self.trace.passes.extend(pre[1])
            self.trace.notes.append("GPU stages built by a compile worker (runtime/compile_pool.py)")
            return pre[0]
        out = _load_cached(key, self.trace)
        if out is None:
            with paused_gc():  # the stages and the trace's JSON for the cache (see paused_gc)
                return self._compile_and_store(key, opts, target, shared_limit, compile_to_cubin)
        return out

    def _compile_and_store(self, key, opts, target, shared_limit, compile_to_cubin) -> dict:
        """_build_for on a cache miss: the GPU stages, stored in the disk cache."""
        module = self.module.clone()  # the GPU passes rewrite it; the interpreter keeps the tile IR
        start = len(self.trace.passes)
        assemble = _can_assemble()
        try:
            out = compile_to_cubin(module, self.trace, opts, target, assemble=assemble, shared_limit=shared_limit)
            if out.get("over_shared"):
                return out
        except ToolchainError as e:
            # the error sends the user to compiled.asm['ptx']: keep the stages made before ptxas failed
            self.asm.update(getattr(e, "stages", {}))
            self.asm.pop("cubin", None)
            self._built_for = None
            raise
        if assemble:
            _store_cached(key, out, self.trace.passes[start:])
        else:
            self.trace.notes.append("no ptxas or nvJitLink here: stopped at PTX (no cubin, no register report)")
            out["report"] = {}
        return out

    def _check_register_budget(self, num_warps: int):
        """Refuse, before LLVM sees it, a tile that gives each thread more than GPU_TILE_BYTES_PER_THREAD bytes
        of one value: it cannot live in registers (255 x 4 bytes), spills to local memory, and LLVM's time
        grows faster than linearly with it (BLOCK=2**24 never finished). A tile computed element by element
        passes: the GPU pass strip_mine_tiles computes it in chunks of rows. The interpreter runs either."""
        threads = 32 * num_warps
        worst, where = 0, None
        for fn in self.module.functions:
            size, op = strip_mine_tiles.worst_tile(fn)
            if size > worst:
                worst, where = size, op
        per_thread = worst // threads
        if per_thread <= GPU_TILE_BYTES_PER_THREAD:
            return
        try:
            if strip_mine_tiles.plan(self.module.kernel, num_warps) is not None:
                return
            why = ""
        except strip_mine_tiles.Refusal as r:
            why = (f"; kernellab computes such a tile in chunks of rows only when every op on it works element by "
                   f"element (loads, stores, arithmetic, broadcasts), but here {r.reason}")
            if r.op is not None and r.op.loc is not None:
                where = r.op
        line = where.loc.line if where is not None and where.loc is not None else None
        text = self.source_lines[line - 1] if line and line <= len(self.source_lines) else None
        raise CompilationError(self.name, f"a tile of {worst} bytes gives each of the {threads} threads "
                               f"({num_warps} warps) {per_thread} bytes, over the GPU budget of "
                               f"{GPU_TILE_BYTES_PER_THREAD}{why}; use a smaller BLOCK (loop over the data) or more "
                               "warps", "<gpu>" if line is None else self.trace_filename(), line,
                               max(0, where.loc.col - 1) if line else 0, text)

    def trace_filename(self) -> str:
        return getattr(self.module.kernel, "source_file", "<unknown>")

    def gpu(self, target):
        """Compile (once) for `target` through our own backend, and load the cubin."""
        if self._loaded is None:
            from .driver import load_kernel

            self.build_gpu(target)
            self._loaded = load_kernel(self.asm["cubin"], self.name, self.shared, self.arg_kinds)
        return self._loaded

    def launch_gpu(self, grid, args, stream, pdl=False):
        self._loaded.launch(grid, self.launch_warps or self.num_warps, self.shared, stream, args, pdl)

    def __getitem__(self, grid):
        """`compiled[grid](*args)`: the runtime arguments, or (as Triton's compiled kernels take them) every
        argument of the function, constexprs included, which are then dropped."""
        def launch(*args):
            args = list(args)
            if len(args) == len(self.param_names) != len(self.arg_names):
                by_name = dict(zip(self.param_names, args))
                if all(n in by_name for n in self.arg_names):
                    args = [by_name[n] for n in self.arg_names]
            return self.run(_normalize_grid(self.name, grid), args)

        return launch




# Bytes of one tile value per thread beyond which the GPU build splits the tile (strip_mine_tiles) or refuses it
# (registers hold ~1 KiB per thread).
GPU_TILE_BYTES_PER_THREAD = strip_mine_tiles.TILE_BYTES_PER_THREAD


def _can_assemble() -> bool:
    """Whether PTX can become a cubin here (ptxas, or nvJitLink through cuda-python)."""
    try:
        from ..compiler.codegen.ptx_to_cubin import find_ptxas

        find_ptxas()
        return True
    except Exception:
        try:
            from cuda.bindings import nvjitlink  # noqa: F401

            return True
        except Exception:
            return False
_NOTICE = []


def _notice_interpreter(kernel_name: str):
    """Say once per process that launches run on the CPU interpreter, and why: no GPU can be used, or (on a
    GPU machine) the kernel was given CPU tensors, which is easy to do by mistake."""
    if _NOTICE:
        return
    _NOTICE.append(True)
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:
        gpu = False
    import warnings

    if not gpu:
        warnings.warn("kernellab: no CUDA GPU or driver is available, so kernels run on the CPU interpreter "
                      "(correct results, CPU speed). On a GPU machine, pass CUDA tensors to run compiled code.",
                      InterpreterNotice, stacklevel=3)
    else:
        warnings.warn(f"kernellab: kernel '{kernel_name}' was given CPU tensors, so it runs on the CPU interpreter "
                      "(correct results, CPU speed), not on the GPU. Move the tensors to the GPU (x.cuda()) to run "
                      "compiled code. (Said once per process.)", InterpreterNotice, stacklevel=3)


class InterpreterNotice(UserWarning):
    """The one-time notice that launches run on the CPU interpreter."""
_VERSIONS: list = []


def _toolchain_versions() -> str:
    """Everything besides the IR that decides the cubin: our version, LLVM's, ptxas'."""
    if not _VERSIONS:
        import llvmlite

        from .. import __version__

        try:
            from ..compiler.codegen.ptx_to_cubin import find_ptxas, ptxas_version

            ptxas = ptxas_version(find_ptxas())
        except Exception:  # nvJitLink fallback or no toolchain: the compile itself will say
            ptxas = "no-ptxas"
        _VERSIONS.append(f"kernellab {__version__} ({_compiler_source_hash()}); llvmlite {llvmlite.__version__}; "
                         f"{ptxas}")
    return _VERSIONS[0]


def _compiler_source_hash() -> str:
    """A hash of the compiler's own code, so a fixed or changed compiler never reuses old cubins."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "compiler"
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _can_load() -> bool:
    """A CUDA GPU and driver are present (loading a cubin is possible)."""
    try:
        from .driver import driver_available

        return driver_available()
    except Exception:
        return False


def _max_shared(arch: int) -> int:
    """Shared memory one block may opt into (bytes): H100/H200, A100, consumer Ampere/Ada."""
    return 232448 if arch >= 90 else 166912 if arch == 80 else 101376


def _line_info_on() -> bool:
    """Source lines in the PTX and SASS (GpuOptions.line_info) unless KERNELLAB_DISABLE_LINE_INFO (or Triton's
    TRITON_DISABLE_LINE_INFO) is set to something other than 0."""
    return not any(os.environ.get(v, "0") not in ("", "0")
                   for v in ("KERNELLAB_DISABLE_LINE_INFO", "TRITON_DISABLE_LINE_INFO"))


def _gpu_cache_key(tile_ir: str, opts, target) -> str:
    """The disk-cache key of a GPU compile. The tile IR already encodes the source, the constexprs and
    the argument specialization (like Triton's key); options, target, the compiler's own source and the
    toolchain versions complete it."""
    from .cache import cache_key, compiler_hash

    return cache_key("gpu", tile_ir, repr(opts), target.cpu, target.ptx_version, compiler_hash(),
                     _toolchain_versions(), *codegen_env.current())


def _load_cached(key, trace):
    import json

    from ..compiler.trace import TRACE_SCHEMA, PassRecord, from_json
    from .cache import ELF_MAGIC, DiskCache

    try:
        files = DiskCache().get(key)
    except OSError:
        return None
    if not files:
        return None
    n_before = len(trace.passes)
    try:
        if files["cubin"][:4] != ELF_MAGIC:
            raise ValueError("the cached cubin is not an ELF file")
        meta = json.loads(files["meta.json"])
        if meta.get("trace_schema") != TRACE_SCHEMA:
            raise ValueError("the cached trace has another schema")
        for rec in meta["passes"]:
            trace.passes.append(from_json(PassRecord, rec))
        trace.notes.append("GPU stages loaded from the disk cache (times are from the original compile)")
        return {"gpu": files["gpu"].decode(), "llir": files["llir"].decode(), "ptx": files["ptx"].decode(),
                "cubin": files["cubin"], "arg_kinds": meta["arg_kinds"], "shared": meta["shared"],
                "shared_plan": meta["shared_plan"], "report": meta["report"], "launch_warps": meta.get("launch_warps")}
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        # a broken meta: drop the entry so this compile's store repairs it (else every process recompiles)
        del trace.passes[n_before:]
        trace.notes[:] = [n for n in trace.notes if "loaded from the disk cache" not in n]
        try:
            DiskCache().remove(key)
        except (OSError, ValueError):
            pass
        return None


def _store_cached(key, out, records):
    import json

    from ..compiler.trace import TRACE_SCHEMA, to_json
    from .cache import DiskCache

    meta = {"arg_kinds": out["arg_kinds"], "shared": out["shared"], "shared_plan": out["shared_plan"],
            "report": out["report"], "launch_warps": out.get("launch_warps"), "trace_schema": TRACE_SCHEMA,
            "passes": [to_json(r) for r in records]}
    try:
        DiskCache().put(key, {"gpu": out["gpu"].encode(), "llir": out["llir"].encode(), "ptx": out["ptx"].encode(),
                              "cubin": out["cubin"], "meta.json": json.dumps(meta, default=str).encode()})
    except OSError:
        pass  # a read-only or full disk only costs the next process a recompile


# Called before each compile by a settings layer (kernellab.compat serves Triton's
# `knobs.runtime.jit_cache_hook` so): None, or hook(jit_function, (spec, key, runtime_names, options), is_warmup);
# a true result skips the compile (the launch or warmup then returns None), as Triton's hook can.
compile_hook = None

# Defaults of launch options set by a settings layer (kernellab.compat serves Triton's
# `knobs.language.default_fp_fusion` so): None, or a function returning {option: value} for options a launch
# did not give.
option_defaults = None

# How far a pointer may reach on the CPU interpreter when neither the kernel (`@jit(bounds=...)`) nor the launch
# says: "view" (kernellab's default: an argument's own elements), "storage" (its whole underlying storage) or
# "allocation" (below).
# kernellab.compat sets "allocation": Triton programs address a tensor's storage through restrided views on purpose
# (FlagGems' gather/scatter pass a view of the index's shape and step along the source's dimension), and some load
# one element past a tensor's end, which a GPU reads from the caching allocator's padding (SageAttention's causal
# kernels load the K scale of the block after the last one and mask its scores): "storage" whose loads may read
# past the end within the allocation unit (as zeros; interp_memory.ALLOCATION_UNIT).
default_bounds = "view"

# Launch options that can change the compiled code, with their defaults: the in-memory cache keys on all of
# them (a launch that spells out a default shares the entry); stream, warmup, launch_cooperative_grid do not.
_COMPILE_OPTIONS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None, "enable_fp_fusion": True,
                    "enable_wgmma": True, "enable_tma": True, "enable_reflect_ftz": True, "debug": None}


def _options_key(options: dict) -> tuple:
    """The compile options part of a cache key, so `enable_fp_fusion=False` never reuses the default kernel."""
    return tuple(options.get(k, d) for k, d in _COMPILE_OPTIONS.items())


# Launch options the GPU build reads but the frontend reads only through tl.extra.cuda.num_warps() and the like:
# compiles that differ only in these share the tile IR when the frontend did not read them (_OptionsRead).
_TUNING_OPTIONS = ("num_warps", "num_stages")


def _frontend_key(key, options: dict, env: tuple) -> tuple:
    return key, tuple(options.get(k, d) for k, d in _COMPILE_OPTIONS.items() if k not in _TUNING_OPTIONS), env


class _OptionsRead(dict):
    """The launch options as the frontend sees them, recording which it read ("*": all of them)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read = set()

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def __contains__(self, k):
        self.read.add(k)
        return super().__contains__(k)

    def __iter__(self):
        self.read.add("*")
        return super().__iter__()

    def keys(self):
        self.read.add("*")
        return super().keys()

    def values(self):
        self.read.add("*")
        return super().values()

    def items(self):
        self.read.add("*")
        return super().items()

    def copy(self):
        self.read.add("*")
        return dict(self)


# CUDA's limits on a grid (blocks per dimension): x up to 2^31 - 1, y and z up to 65535. Checked for the
# interpreter too, so a launch that works on a laptop does not fail on the GPU.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


def _normalize_grid(name, grid):
    if grid is None:
        raise LaunchError(f"kernel '{name}': no grid given; launch it as {name}[grid](...), where grid is a tuple "
                          f"of 1 to 3 ints or a function meta -> tuple (e.g. {name}[(n_blocks,)](...))")
    if _is_int(grid):
        grid = (grid,)
    try:
        grid = tuple(unwrap(g) for g in grid)
    except TypeError:
        raise LaunchError(f"kernel '{name}': the grid must be a tuple of 1 to 3 ints or a function meta -> tuple, "
                          f"got {type(grid).__name__} {_short_repr(grid)}") from None
    if not 1 <= len(grid) <= 3:
        raise LaunchError(f"kernel '{name}': the grid must have 1 to 3 dimensions, got {_short_repr(grid)}")
    out = []
    for axis, g in enumerate(grid):
        if not _is_int(g):
            hint = " (use triton.cdiv or // for a whole number of programs)" if isinstance(g, float) else ""
            raise LaunchError(f"kernel '{name}': grid dimension {axis} must be a non-negative int, got "
                              f"{type(g).__name__} {_short_repr(g)}{hint}")
        g = int(g)
        if g < 0:
            raise LaunchError(f"kernel '{name}': grid dimension {axis} is negative ({g})")
        if g > GRID_LIMITS[axis]:
            raise LaunchError(f"kernel '{name}': grid dimension {'xyz'[axis]} = {g} exceeds CUDA's limit of "
                              f"{GRID_LIMITS[axis]} programs; give each program more work (a larger BLOCK) "
                              + ("or loop inside the kernel" if axis == 0 else "or move work to grid axis 0"))
        out.append(g)
    return tuple(out) + (1,) * (3 - len(out))


def _is_int(v) -> bool:
    """A Python or NumPy integer (a bool is not a count)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    import numpy as np

    return isinstance(v, np.integer)


def _short_repr(v, limit: int = 60) -> str:
    """A value for a message: never a whole tensor's contents."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"<{type(v).__name__} shape={tuple(v.shape)} dtype={v.dtype}>"
    try:
        text = repr(v)
    except Exception:
        text = f"<{type(v).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_options(name: str, options: dict) -> None:
    """Launch options in the ranges the GPU backend supports (like Triton's): a bad value would otherwise
    build a kernel whose tile has elements no thread owns (num_warps=3) or a 2048-thread block."""
    w = options.get("num_warps", 4)
    if not _is_int(w) or not 1 <= w <= 32 or w & (w - 1):
        raise LaunchOptionError(f"kernel '{name}': num_warps must be a power of 2 from 1 to 32 (a block of at most "
                                f"1024 threads), got {_short_repr(w)}")
    st = options.get("num_stages", 3)
    if not _is_int(st) or st < 1:
        raise LaunchOptionError(f"kernel '{name}': num_stages must be an int >= 1 (1 = no software pipelining), "
                          f"got {_short_repr(st)}")
    c = options.get("num_ctas", 1)
    if not _is_int(c) or c < 1:
        raise LaunchOptionError(f"kernel '{name}': num_ctas must be an int >= 1, got {_short_repr(c)}")
    r = options.get("maxnreg")
    if r is not None and (not _is_int(r) or not 16 <= r <= 255):
        raise LaunchOptionError(f"kernel '{name}': maxnreg must be None or an int from 16 to 255 registers per thread, "
                          f"got {_short_repr(r)}")


class KernelInterface:
    """What can be launched as `obj[grid](*args, **kwargs)`: it calls `obj.run(*args, grid=grid, **kwargs)`.
    The base of JITFunction, Autotuner and Heuristics, as Triton's KernelInterface is of its own; libraries
    subclass it (`triton.KernelInterface`) for launch wrappers of their own that define `run`."""

    def __getitem__(self, grid):
        # warmup=False as Triton's passes it: subclasses' run methods may take it by name
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class KernelParam:
    """A kernel parameter as Triton describes it (`JITFunction.params`): position, name, constexpr-ness."""

    def __init__(self, num, param, is_constexpr, do_not_specialize):
        self.num, self._param, self.name = num, param, param.name
        self.is_constexpr, self.do_not_specialize = is_constexpr, do_not_specialize
        self.do_not_specialize_on_alignment = False
        ann = param.annotation
        self.annotation = "" if ann is param.empty else ann if isinstance(ann, str) else getattr(ann, "__name__",
                                                                                                  str(ann))
        self.is_const = False

    @property
    def default(self):
        return self._param.default

    @property
    def has_default(self):
        return self._param.default is not self._param.empty

    def __repr__(self):
        return f"KernelParam({self.num}, {self.name!r}{', constexpr' if self.is_constexpr else ''})"


# Every JITFunction made. The warm-launch fast path reads no environment variable (a warm launch is ~1.4 µs);
# instead a change of the codegen knobs (codegen_env.py watches os.environ) switches every kernel's entries to
# those made under the new values (none yet: the next launch takes the slow path, whose caches key on the knobs).
# Entries made under other values are kept, so launches that set a knob around each launch (benchmarks/matmul.py's
# --also-env column: a kernel of its own, timed with the knob set, next to one timed without) stay warm.
_KERNELS: weakref.WeakSet = weakref.WeakSet()


@codegen_env.on_change
def _switch_fast_entries(old, new):
    for kernel in list(_KERNELS):
        if kernel._fast and old is not None:
            kernel._fast_other[old] = kernel._fast
        kernel._fast = kernel._fast_other.pop(new, {})


class JITFunction(KernelInterface):
    """A kernel or device function written in the language; call it as `kernel[grid](*args)`."""

    def __init__(self, fn, do_not_specialize=(), debug=None, noinline=None, repr=None, launch_metadata=None,
                 sanitize=False, bounds=None):
        self.fn = fn
        self.sanitize, self.bounds = sanitize, bounds  # the interpreter's defaults for this kernel's launches
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__globals__ = fn.__globals__  # Triton's attribute: code generators build modules with these globals
        self.__wrapped__ = fn
        self.do_not_specialize = set(do_not_specialize or ())
        self.repr = repr  # Triton's: specialization -> the compiled kernel's name
        self.cache: dict = {}
        self._source = None
        found = get_source(fn)  # now, while the defining frames (exec) are still alive
        self._found = found
        self.arg_names = list(__import__("inspect").signature(fn).parameters)
        self._fast: dict = {}  # the warm-launch entries under the codegen knobs' values now
        self._fast_other: dict = {}  # {knobs' fingerprint: entries made under it}
        _KERNELS.add(self)  # (see _switch_fast_entries)
        self._binder = None  # (binder, meta, tensor type) of the warm-launch fast path, made on first use
        self.do_not_specialize = {self.arg_names[i] if isinstance(i, int) else i for i in self.do_not_specialize}

    def __repr__(self):
        return f"JITFunction({self.fn.__module__}:{self.fn.__qualname__})"

    def _kl_source(self) -> FunctionSource:
        if self._source is None:
            if self._found is None:
                raise CompilationError(self.__name__, "cannot find the source code of this function; define it "
                                       "in a file, a notebook cell, or a string passed to exec()",
                                       self.fn.__code__.co_filename, self.fn.__code__.co_firstlineno)
            text, filename, first = self._found
            self._source = FunctionSource(self.fn, text, filename, first)
        return self._source

    @property
    def src(self) -> str:
        """The function's text from its `def` on, decorators left out, as Triton's `JITFunction.src` is:
        libraries that generate code paste it into new modules (FlagGems' pointwise_dynamic)."""
        import re
        import textwrap

        text = textwrap.dedent(self._kl_source().source)
        m = re.search(r"^(async\s+)?def\s+\w+\s*\(", text, re.MULTILINE)
        return text[m.start():] if m else text

    @property
    def signature(self):
        """The Python function's `inspect.Signature` (Triton's attribute)."""
        return self._kl_source().signature

    @property
    def params(self) -> list:
        """One `KernelParam` per parameter, in order (Triton's attribute: launch wrappers in libraries such as
        FlagGems' LibEntry read `.num`, `.name`, `.is_constexpr`, `.do_not_specialize`, `.default` from it)."""
        src = self._kl_source()
        return [KernelParam(i, p, p.name in src.constexpr_params, p.name in self.do_not_specialize)
                for i, p in enumerate(src.signature.parameters.values())]

    @property
    def cache_key(self) -> str:
        """A hash of the function's text and name (Triton's attribute; libraries key their tuning caches on
        it). Unlike Triton's it leaves out the called @jit helpers' texts."""
        return hashlib.sha256(f"{self.__name__}\n{self.src}".encode()).hexdigest()

    @property
    def def_line(self) -> int:
        """The file line of the `def` statement (below any decorators)."""
        src = self._kl_source()
        return src.first_line + src.node.lineno - 1

    @property
    def rewriter(self):
        """Where the function is defined, as Triton's interpreter reports it (`.filename`, `.def_file_lineno`:
        the `def` line): tools that map kernel lines back to the file read it."""
        from types import SimpleNamespace

        return SimpleNamespace(filename=self._kl_source().filename, def_file_lineno=self.def_line)

    def rewrite(self):
        """Triton's interpreter rewrites the function's AST before running it; kernellab compiles it instead, so
        this returns the Python function unchanged."""
        return self.fn

    def _unsafe_update_src(self, new_src: str) -> None:
        """Compile `new_src` instead of the function's own text (same name, globals and signature): Triton's
        hook, which its test suite uses to stamp expressions into a template kernel. Drops every compile."""
        import textwrap

        filename, first = (self._found[1], self._found[2]) if self._found else ("<string>", 1)
        new_src = textwrap.dedent(new_src)
        self._found = (new_src, filename, first)
        self._source = FunctionSource(self.fn, new_src, filename, first)
        self.cache.clear()
        self._clear_fast()
        self.__dict__.pop("_frontends", None)
        self._binder = None

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a @kernellab.jit function: launch it as {self.__name__}[grid](...) "
                           "or call it from another @jit function")

    def __getitem__(self, grid):
        if type(self).run is not _JIT_RUN or "run" in self.__dict__:  # a run of its own (or patched): through it
            return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

        def launch(*args, **kwargs):
            # the warm-launch fast path first, without run's re-packing of the arguments (a launch-bound loop
            # pays for every copy of a long argument list)
            ck = self._fast_launch(args, kwargs, grid)
            return ck if ck is not _SLOW else self.run(*args, grid=grid, **kwargs)

        return launch

    # ------------------------------------------------------------------ binding and specialization
    def bind(self, args, kwargs):
        src = self._kl_source()
        options = {k: kwargs[k] for k in list(kwargs) if k in LAUNCH_OPTIONS}
        check_options(self.__name__, options)
        for k in options:  # a kernel parameter named like an option (num_stages) gets the value too
            if k not in self.arg_names:
                del kwargs[k]
        if option_defaults is not None:
            for k, v in option_defaults().items():
                options.setdefault(k, v)
        for p in src.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                star = "*" if p.kind == p.VAR_POSITIONAL else "**"
                raise self._param_error(src, p.name, f"`{star}{p.name}` parameters are not supported in @jit "
                                        "functions; name each parameter")
        unknown = [k for k in kwargs if k not in src.signature.parameters]
        if unknown:
            raise self._unknown_keyword_error(src, unknown)
        try:
            ba = src.signature.bind(*args, **kwargs)
        except TypeError as e:
            params = ", ".join(self.arg_names)
            given = set(self.arg_names[:len(args)]) | set(kwargs)
            missing = [n for n, p in src.signature.parameters.items() if n in src.constexpr_params
                       and n not in given and p.default is p.empty]
            if missing and "missing" in str(e):
                raise self._param_error(src, missing[0], f"missing constexpr argument(s) {', '.join(missing)} for "
                                        f"{self.__name__}({params}); pass e.g. {missing[0]}=... at launch") from None
            raise CompilationError(self.__name__, f"wrong arguments for {self.__name__}({params}): {e}",
                                   src.filename, src.first_line + src.node.lineno - 1,
                                   src.node.col_offset, src.line_text(src.node.lineno)) from None
        ba.apply_defaults()
        missing = [n for n in src.constexpr_params if n in ba.arguments and ba.arguments[n] is
                   __import__("inspect").Parameter.empty]
        if missing:
            raise self._param_error(src, missing[0], f"missing constexpr argument(s): {', '.join(missing)}")
        return dict(ba.arguments), options

    def _unknown_keyword_error(self, src, unknown) -> CompilationError:
        """A keyword the kernel has no parameter for, named, with the closest parameter as the likely fix
        (a misspelled constexpr otherwise shows up only as 'missing BLOCK')."""
        import difflib

        params = list(src.signature.parameters)
        parts = []
        for k in unknown:
            close = difflib.get_close_matches(k, params, n=1, cutoff=0.6)
            parts.append(f"'{k}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        options = ", ".join(LAUNCH_OPTIONS)
        reason = (f"{self.__name__}() has no parameter {', '.join(parts)}; its parameters are {', '.join(params)} "
                  f"(launch options: {options})")
        return CompilationError(self.__name__, reason, src.filename, src.first_line + src.node.lineno - 1,
                                src.node.col_offset, src.line_text(src.node.lineno))

    def _param_error(self, src, name: str, reason: str) -> CompilationError:
        """A CompilationError pointing at parameter `name` in the def (the def line if not found)."""
        a = src.node.args
        node = next((p for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg == name), src.node)
        return CompilationError(self.__name__, reason, src.filename, src.first_line + node.lineno - 1,
                                node.col_offset, src.line_text(node.lineno))

    def specialize(self, bound: dict):
        """Per argument: a RuntimeArg (stays a kernel parameter) or a Python value (compiled in). A tuple
        argument (plain or named, nested) is specialized leaf by leaf, like Triton: its runtime leaves
        become separate kernel parameters (named `arg[i][j]`), its other leaves are compiled in."""
        src = self._kl_source()
        spec, key, runtime_values, runtime_names = {}, [], [], []
        for name, value in bound.items():
            value = unwrap(value) if isinstance(value, constexpr) else value
            self.check_constexpr_param(name)
            if name in src.constexpr_params:
                value = map_leaves(value, unwrap)
                spec[name] = value
                key.append((name, "c", _const_key(value)))
                continue
            if _is_host_descriptor(value):
                value = self._descriptor_tree(name, value)
            if isinstance(value, tuple):  # like Triton: tuples (plain, named, torch.Size), not lists
                def walk(v, label):
                    if isinstance(v, constexpr):
                        return map_leaves(unwrap(v), unwrap)
                    if isinstance(v, tuple):
                        return rebuild_like(v, [walk(x, f"{label}[{i}]") for i, x in enumerate(v)])
                    return self._specialize_leaf(label, v, runtime_values, runtime_names)

                spec[name] = walk(value, name)
                key.append((name, "t", _tree_key(spec[name])))
                continue
            spec[name] = self._specialize_leaf(name, value, runtime_values, runtime_names)
            key.append((name, "r") + spec[name].key() if isinstance(spec[name], RuntimeArg)
                       else (name, "c", _const_key(spec[name])))
        return spec, tuple(key), runtime_values, runtime_names

    def check_constexpr_param(self, name):
        """A constexpr parameter cannot also be listed in do_not_specialize (Triton refuses it too)."""
        src = self._kl_source()
        if name in src.constexpr_params and name in self.do_not_specialize:
            raise self._param_error(src, name, f"{name} marked as constexpr and listed in do_not_specialize; "
                                    "drop it from one of the two")

    def _descriptor_tree(self, name, desc):
        """A host `TensorDescriptor` as the tree the kernel sees (a `tl.tensor_descriptor`): base, shape and
        strides become runtime leaves (kernel parameters), block shape and padding are compiled in."""
        from ..compiler.semantic import Semantic, SemanticError

        dt = self._dtype_of_argument(name, desc.base)
        if dt is None:
            raise LaunchError(f"kernel '{self.__name__}': TensorDescriptor argument '{name}' needs a tensor as base, "
                              f"got {type(desc.base).__name__}")
        try:
            Semantic._check_descriptor(dt, list(desc.block_shape), desc.strides[-1], desc.padding)
        except SemanticError as e:
            raise LaunchError(f"kernel '{self.__name__}': TensorDescriptor argument '{name}': {e}") from None
        return tensor_descriptor(desc.base, [int(s) for s in desc.shape], [int(s) for s in desc.strides],
                                 _DescriptorLayout(desc.block_shape, desc.padding))

    def _specialize_leaf(self, name, value, runtime_values, runtime_names):
        """One argument (or tuple leaf): a Python value compiled in, or a RuntimeArg recorded with its value."""
        value = unwrap(value) if isinstance(value, constexpr) else value
        if value is None or isinstance(value, (DType, PointerType, str, _DescriptorLayout)) \
                or callable(value) and not hasattr(value, "data_ptr"):
            return value  # compiled in; functions are keyed by name, everything else by value
        dt = self._dtype_of_argument(name, value)
        annotated = self._kl_source().scalar_types.get(name)
        if dt is None and annotated is not None and isinstance(value, (bool, int, float)):
            arg = self._annotated_scalar(name, value, annotated)
        elif dt is not None:
            ptr = data_ptr(value)
            attrs = {"tt.divisibility": 16} if ptr % 16 == 0 and name not in self.do_not_specialize else {}
            arg = RuntimeArg(PointerType(dt, const=name in self._kl_source().const_params), attrs)
        elif isinstance(value, bool):
            arg = RuntimeArg(DTYPES["i1"])
        elif isinstance(value, int):
            # as Triton types integer arguments: int32, else int64, else uint64 (no uint32 for arguments)
            if -2**31 <= value < 2**31:
                t = DTYPES["i32"]
            elif -2**63 <= value < 2**63:
                t = DTYPES["i64"]
            elif 0 <= value < 2**64:
                t = DTYPES["u64"]
            else:
                raise ArgumentOverflowError(f"kernel '{self.__name__}': argument '{name}' = {value} does not fit in "
                                            "64 bits (int64 or uint64)")
            attrs, one = {}, False
            if name not in self.do_not_specialize:
                if value == 1:
                    one = True
                elif value % 16 == 0:
                    attrs = {"tt.divisibility": 16}
            arg = RuntimeArg(t, attrs, one)
        elif isinstance(value, float):
            arg = RuntimeArg(DTYPES["f32"])
        else:
            raise LaunchError(f"kernel '{self.__name__}': argument '{name}' has unsupported type "
                              f"{type(value).__name__}; pass tensors, numbers, tuples of them or constexprs")
        runtime_values.append(value)
        runtime_names.append(name)
        return arg

    def _annotated_scalar(self, name, value, t):
        """A number passed for a parameter annotated with a dtype (`v: tl.uint8`): that type, never
        specialized to the constant 1 (the annotation fixes the type); integers must fit it."""
        if t.kind == "float":
            return RuntimeArg(t)
        if isinstance(value, float):
            raise LaunchError(f"kernel '{self.__name__}': argument '{name}' is annotated {t.name} but got the "
                              f"float {value!r}; pass an integer")
        lo, hi = (0, 2 ** t.bits - 1) if t.kind in ("uint", "bool") else (-2 ** (t.bits - 1), 2 ** (t.bits - 1) - 1)
        if t.bits == 1:
            lo, hi = 0, 1
        if not lo <= int(value) <= hi:
            raise ArgumentOverflowError(f"kernel '{self.__name__}': argument '{name}' = {value} does not fit its "
                                        f"annotated type {t.name} ({lo}..{hi})")
        attrs = {"tt.divisibility": 16} if name not in self.do_not_specialize and value and value % 16 == 0 else {}
        return RuntimeArg(t, attrs)

    def _dtype_of_argument(self, name, value):
        """The element dtype of a tensor argument, or a LaunchError naming the kernel and the argument
        for tensors a kernel cannot address (sparse, meta, unsupported dtypes)."""
        layout = getattr(value, "layout", None)
        if layout is not None and hasattr(value, "data_ptr") and str(layout) != "torch.strided":
            raise LaunchError(f"kernel '{self.__name__}': argument '{name}' is a {layout} tensor; kernels address "
                              f"dense memory: pass {name}.to_dense() (or the sparse tensor's values())")
        if getattr(value, "is_meta", False):
            raise LaunchError(f"kernel '{self.__name__}': argument '{name}' is a meta tensor (no memory); pass a "
                              "tensor on the CPU or a GPU")
        try:
            return dtype_of_array(value)
        except LaunchError as e:
            raise LaunchError(f"kernel '{self.__name__}': argument '{name}': {e}; convert it, e.g. "
                              f"{name}.to(torch.float32)") from None

    # ------------------------------------------------------------------ compile
    def compile(self, spec: dict, key, runtime_names, options, check_frontend=None, split_k=False,
                persistent=False) -> CompiledKernel:
        """`check_frontend(module)`, if given, sees the frontend's IR before the tile passes simplify it (what a
        target refuses must be refused even where the passes would drop it, as Triton's frontend refuses it).
        `split_k`: the split-K variant (runtime/split_k.py; `runtime_names` then end with its two buffers);
        `persistent`: the persistent variant (runtime/persistent.py; `runtime_names` then end with the tile count)."""
        from ..compiler.backend import Build, run_stages

        src = self._kl_source()
        trace = CompileTrace(self.__name__)
        name = self._specialized_name(spec) if self.repr is not None else self.__name__

        compiler = ModuleCompiler(options)
        compiler.options = read = _OptionsRead(compiler.options)

        def frontend():
            module = self._compile_frontend(compiler, spec, src)
            module.kernel.name = name
            if check_frontend is not None:
                check_frontend(module)
            return module

        build = Build(trace, make_module=frontend, split_k=split_k, persistent=persistent)
        module = run_stages(build, "frontend", "tile").module
        trace.key = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        trace.signature = ", ".join(f"{label}: {a.type}" for n, v in spec.items()
                                    for label, _, a in runtime_leaves(n, v))
        full_lines = _file_lines(src)
        ck = CompiledKernel(name, module, trace, runtime_names, full_lines, dict(options))
        ck.param_names = list(self.arg_names)
        ck.asm["tile"] = trace.final_ir
        ck.asm["ttir"] = ck.asm["tile"]
        ck._frontend_read = read.read
        return ck

    def _share_frontend(self, key, options, runtime_names, env):
        """A CompiledKernel for `options` over the tile IR of an earlier compile of the same specialization whose
        options differ only in num_warps / num_stages, when its frontend read neither (they matter to the GPU
        build only): an autotuner's configs often differ only there. None when there is no such compile (under
        the same codegen knobs `env`: some tile passes read them)."""
        entry = self.__dict__.setdefault("_frontends", {}).get(_frontend_key(key, options, env))
        if entry is None or self.cache.get(entry[0]) is not entry[1]:  # cleared since: compile afresh
            return None
        okey, first, passes, notes = entry
        trace = CompileTrace(first.trace.kernel, list(passes), first.trace.key, first.trace.signature, list(notes))
        ck = CompiledKernel(first.name, first.module, trace, runtime_names, first.source_lines, dict(options))
        ck.param_names = list(first.param_names)
        ck.asm["tile"] = ck.asm["ttir"] = first.asm["tile"]
        ck._frontend_read = first._frontend_read
        return ck

    def _remember_frontend(self, okey, ck, key, options):
        """Offer `ck`'s tile IR to later compiles that differ only in num_warps / num_stages (see _share_frontend)."""
        if not (getattr(ck, "_frontend_read", {"*"}) & {"*", *_TUNING_OPTIONS}):
            self.__dict__.setdefault("_frontends", {})[_frontend_key(key, options, okey[2])] = (
                okey, ck, list(ck.trace.passes), list(ck.trace.notes))

    def _specialized_name(self, spec: dict) -> str:
        """The name `repr(specialization)` gives this compile (Triton's `@jit(repr=...)`): the specialization
        has `.signature` (parameter -> Triton type string, e.g. "i32", "*fp32") and `.constants`
        (parameter -> value, for constexprs and integers specialized to 1)."""
        import re
        from types import SimpleNamespace

        from ..compiler.types import TYPE_CANONICAL_NAMES

        def type_str(t):
            if isinstance(t, PointerType):
                return "*" + type_str(t.elem)
            return TYPE_CANONICAL_NAMES.get(t.name, t.ir)

        signature, constants = {}, {}
        for n, v in spec.items():
            if isinstance(v, RuntimeArg):
                signature[n] = type_str(v.type)
                if v.equal_to_1:
                    constants[n] = 1
            else:
                constants[n] = v
                signature[n] = "constexpr"
        name = str(self.repr(SimpleNamespace(signature=signature, constants=constants)))
        return re.sub(r"\W", "_", name) or self.__name__

    def _compile_frontend(self, compiler, spec, src):
        """The frontend, with Python's own limits turned into errors that name the kernel: a very long
        expression nests the AST deeper than the default recursion limit allows."""
        import sys

        where = (src.filename, src.first_line + src.node.lineno - 1, src.node.col_offset,
                 src.line_text(src.node.lineno))
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20000))
        try:
            return compiler.compile_kernel(self, spec)
        except RecursionError:
            raise CompilationError(self.__name__, "an expression nests too deeply to compile (thousands of chained "
                                   "operators); split it into several statements", *where) from None
        except MemoryError:
            raise CompilationError(self.__name__, "ran out of memory while compiling (huge unrolled loops or "
                                   "constants?); make tl.static_range loops or tiles smaller", *where) from None
        finally:
            sys.setrecursionlimit(limit)

    def _get_compiled(self, args, kwargs, warmup=False):
        bound, options = self.bind(args, kwargs)
        spec, key, runtime_values, runtime_names = self.specialize(bound)
        env = codegen_env.current()
        okey = (key, _options_key(options), env)
        ck = self.cache.get(okey)
        if ck is None:
            if compile_hook is not None and compile_hook(self, (spec, key, runtime_names, options), warmup):
                return None, bound, options, runtime_values  # the hook took the compile over (Triton's)
            ck = self._share_frontend(key, options, runtime_names, env)
            if ck is None:
                ck = self.compile(spec, key, runtime_names, options)
                self._remember_frontend(okey, ck, key, options)
            ck._codegen_env = env  # what the fast path's entry for it is valid under
            self.cache[okey] = ck
        if ck.__dict__.get("_split_inputs") is None:  # what a split-K variant of it compiles from
            ck._split_inputs = (spec, key, runtime_names, options)
        return ck, bound, options, runtime_values

    def warmup(self, *args, grid=None, **kwargs) -> CompiledKernel:
        """Compile for these arguments without running; returns the compiled kernel and its trace. A torch dtype
        passed for a positional argument stands for a tensor of that dtype (`warmup(torch.float32, ...)`, as in
        Triton), so a kernel can be built without allocating anything."""
        kwargs.pop("warmup", None)
        args = tuple(_PointerStandIn(a) if _is_torch_dtype(a) else a for a in args)
        ck, _, _, _ = self._get_compiled(args, kwargs, warmup=True)
        return ck

    # ------------------------------------------------------------------ specializations as data
    def specialization_data(self, specialization) -> str:
        """One compile's inputs (argument types and constants, options) as a JSON string that `preload`
        turns back into the same kernel, in this process or another (Triton's jit-cache-hook data)."""
        import base64
        import json
        import pickle

        blob = base64.b64encode(pickle.dumps(specialization)).decode()
        return json.dumps({"name": self.fn.__qualname__, "kernellab": blob})

    def preload(self, specialization_data: str) -> CompiledKernel:
        """Compile (or find in the cache) the kernel a `specialization_data` string describes, without
        arguments: warms a cache ahead of the first launch, as Triton's `preload`."""
        import base64
        import json
        import pickle

        data = json.loads(specialization_data)
        if data.get("name") != self.fn.__qualname__ or "kernellab" not in data:
            raise LaunchError(f"kernel '{self.__name__}': this specialization data is for "
                              f"{data.get('name')!r}, not {self.fn.__qualname__!r}")
        spec, key, runtime_names, options = pickle.loads(base64.b64decode(data["kernellab"]))
        env = codegen_env.current()
        okey = (key, _options_key(options), env)
        ck = self.cache.get(okey)
        if ck is None:
            ck = self.cache[okey] = self.compile(spec, key, runtime_names, options)
            ck._codegen_env = env
        return ck

    @property
    def device_caches(self):
        """Triton's per-device cache table, whose entry [0] is the compile cache (kernellab keeps one cache
        for all devices, keyed by specialization and options; Triton's other entries are not kept)."""
        fn = self

        class _PerDevice:
            def __getitem__(self, device):
                return (fn.cache, None, None, None, None)

            def clear(self):  # Triton's way to force a recompile (its tests then change an environment knob)
                fn.cache.clear()
                fn._clear_fast()
                fn.__dict__.pop("_frontends", None)

        return _PerDevice()

    def run(self, *args, grid, **kwargs):
        fast = self._fast_launch(args, kwargs, grid)
        if fast is not _SLOW:
            return fast
        ck, bound, options, runtime_values = self._get_compiled(args, dict(kwargs))
        if ck is None:  # a compile hook took it over
            return None
        if callable(grid):
            meta = {k: unwrap(v) for k, v in bound.items()}
            meta.update({"num_warps": options.get("num_warps", 4), "num_stages": options.get("num_stages", 3)})
            grid = grid(meta)
        grid = _normalize_grid(self.__name__, grid)
        if 0 in grid:
            return ck
        if launches_on_gpu(runtime_values, options.get("sanitize", self.sanitize)):
            devices = {str(v.device) for v in runtime_values if hasattr(v, "device")}
            if len(devices) > 1:
                raise LaunchError(f"kernel '{self.__name__}': tensors are on different devices {sorted(devices)}; "
                                  "move them all to one device (a kernel runs on one GPU)")
            if any(hasattr(v, "data_ptr") and not is_cuda(v) for v in runtime_values):
                raise LaunchError(f"kernel '{self.__name__}': some tensors are on the CPU and some on the GPU; "
                                  "move them all to the GPU (or all to the CPU to use the interpreter)")
            if options.get("sanitize", self.sanitize):
                raise LaunchError(f"kernel '{self.__name__}': sanitize runs on the CPU interpreter; pass CPU "
                                  "tensors (a GPU launch can be checked with `compute-sanitizer python ...`)")
            pdl = bool(options.get("launch_pdl"))
            split = self._split(ck, grid, runtime_values, True, pdl) or self._persist(ck, grid, runtime_values, True,
                                                                                      pdl)
            if split is not None:
                self._run_gpu(split[0], split[1], split[2])
            else:
                self._run_gpu(ck, grid, runtime_values, bool(options.get("launch_pdl")))
            self._remember_fast(args, kwargs, ck, runtime_values, bool(options.get("launch_pdl")))
            return ck
        _notice_interpreter(self.__name__)
        bounds = options.get("bounds", self.bounds or default_bounds)
        sanitize = options.get("sanitize", self.sanitize)
        extra = {**({"bounds": bounds} if bounds != default_bounds else {}),
                 **({"sanitize": sanitize} if sanitize else {})}
        split = None if sanitize else (self._split(ck, grid, runtime_values, False)
                                       or self._persist(ck, grid, runtime_values, False))
        if split is not None:
            split[0].run(split[1], split[2], **extra)
            return ck
        ck.run(grid, runtime_values, **extra)  # (only what is not the default: tests replace CompiledKernel.run)
        return ck

    def _split(self, ck, grid, runtime_values, on_gpu, pdl=False):
        """(split variant, grid (x, y, S), arguments + workspace) when this launch splits its dot loop over grid z
        (runtime/split_k.py), else None."""
        from . import split_k

        if pdl or grid[2] != 1:
            return None
        st = split_k.state(self, ck)
        if st is None:
            return None
        device = next((v.get_device() for v in runtime_values if hasattr(v, "get_device")), 0) if on_gpu else None
        s = st.last = st.splits(grid, runtime_values, on_gpu, device or 0)
        if s <= 1:
            return None
        ws, counters = st.buffers(s, grid, device=f"cuda:{device}" if on_gpu else None,
                                  stream=_current_stream(device) if on_gpu else 0)
        return st.variant, (grid[0], grid[1], s), list(runtime_values) + [ws, counters]

    def _persist(self, ck, grid, runtime_values, on_gpu, pdl=False):
        """(persistent variant, grid (P, 1, 1), arguments + tile count) when this launch runs persistent
        (runtime/persistent.py; split-K, asked first, did not split it), else None."""
        from . import persistent

        if pdl or grid[1] != 1 or grid[2] != 1 or persistent.mode() == "off":
            return None
        st = persistent.state(self, ck)
        if st is None:
            return None
        device = next((v.get_device() for v in runtime_values if hasattr(v, "get_device")), 0) if on_gpu else None
        p = st.last = st.programs(grid, runtime_values, on_gpu, device or 0)
        if not p:
            return None
        return st.variant, (p, 1, 1), list(runtime_values) + [grid[0]]

    def _run_gpu(self, ck, grid, runtime_values, pdl=False):
        ck.run_gpu(grid, runtime_values, pdl)
        return ck

    # ------------------------------------------------------------------ the warm-launch fast path
    # A launch whose arguments look like an earlier GPU launch's (same dtypes, alignment classes, integer classes,
    # constexpr values and launch options) skips binding, specialization and the compile cache: a generated binder
    # (one per kernel, see `_make_binder`) binds the call with Python's own argument binding and returns the
    # specialization key and the argument values (tensors as their addresses); one dict lookup finds the entry,
    # whose `pick` selects the kernel's parameters; then pack and cuLaunchKernel.
    def _fast_sig(self, args, kwargs):
        """The fast path's key for a call (None when the call must take the slow path)."""
        try:
            got = self._get_binder()[0](*args, **kwargs)
        except Exception:
            return None
        return None if got is None else got[0]

    def _get_binder(self, hint_args=(), hint_kwargs=None):
        """(binder, meta, tensor type) for this kernel, generated on first use (see `_make_binder`; the hint: a
        launch's arguments) and again once torch is imported (a binder made before keys tensors on its slower
        generic branch)."""
        if self._binder is None or self._binder[2] is not _tensor_type():
            self._clear_fast()
            self._binder = _make_binder(self, hint_args, hint_kwargs) + (_tensor_type(),)
        return self._binder

    def _clear_fast(self):
        """Forget every warm-launch entry (under any codegen knobs' values)."""
        self._fast.clear()
        self.__dict__.setdefault("_fast_other", {}).clear()

    def _fast_launch(self, args, kwargs, grid):
        fast = self._fast
        if not fast:
            return _SLOW
        try:
            got = self._binder[0](*args, **kwargs)
            if got is None:
                return _SLOW
            entry = fast.get(got[0])
        except Exception:  # wrong arguments, an unhashable constexpr ...: the slow path binds (and explains)
            return _SLOW
        if entry is None:
            return _SLOW
        ck, pick, go, device, meta_options = entry
        if type(grid) is not tuple:
            if callable(grid):
                meta = self._binder[1](*args, **kwargs)
                meta.update(meta_options)
                grid = grid(meta)
            if type(grid) is not tuple:
                grid = _normalize_grid(self.__name__, grid)
        go(grid, _current_stream(device), got[1] if pick is None else pick(got[1]))
        return ck

    def _remember_fast(self, args, kwargs, ck, runtime_values, pdl=False):
        """After a GPU launch through the slow path: the entry that lets the next such launch skip it (while the
        codegen knobs keep the values `ck` compiled under: see _switch_fast_entries)."""
        if ck.__dict__.get("_codegen_env") is not codegen_env.NOW[0]:  # changed meanwhile, or not watched
            return
        try:
            binder = self._get_binder(args, kwargs)[0]  # (made before the first entry: _fast_launch needs it)
            got = binder(*args, **kwargs) if binder is not None else None
            if got is None:
                return
            hash(got[0])
        except Exception:
            return
        pick = _make_pick(self, ck.arg_names, got[1])
        if pick is False:
            return
        device = next((v.get_device() for v in runtime_values if hasattr(v, "get_device")), 0)
        meta_options = {"num_warps": ck.options.get("num_warps", 4), "num_stages": ck.options.get("num_stages", 3)}
        if len(self._fast) >= _FAST_ENTRIES:  # keys that never repeat (a new function object per call): start over
            self._fast.clear()
        from . import persistent, split_k, variant

        st = None if pdl else split_k.state(self, ck)
        split = st is not None and st.refused is None
        # persistent only where the knob is on now (off, the default, leaves the warm path as it was; a change of the
        # knob drops this entry: it is a codegen knob)
        pst = None if pdl or persistent.mode() == "off" else persistent.state(self, ck)
        pers = pst is not None and pst.refused is None
        try:
            if (split or pers) and ck._loaded is None:  # the launch ran a variant: load this one when first needed
                go = variant.lazy_launcher(ck)
            else:
                go = ck._loaded.warm_launcher(ck.launch_warps or ck.num_warps, ck.shared, bool(pdl))
        except Exception:  # (the launch that just ran checked the same: not expected)
            return
        if pers:
            go = persistent.fast_wrapper(pst, go, device)
        if split:  # split-K decides first; a launch it leaves alone may run persistent
            go = split_k.fast_wrapper(st, go, device)
        self._fast[got[0]] = (ck, pick, go, device, meta_options)


_JIT_RUN = JITFunction.run  # `kernel[grid]` skips run only while run is this one (not a subclass's, not patched)
# At most this many warm-launch entries per kernel (each is one specialization seen on a GPU launch).
_FAST_ENTRIES = 1024


_NO_HINT = object()


def _hint_kind(value) -> str:
    """Which of the binder's inline branches a value takes (the one to test first for its parameter)."""
    t = type(value)
    return "int" if t is int else "float" if t is float else "none" if value is None else "tensor"


def _make_binder(fn, hint_args=(), hint_kwargs=None):
    """(binder, meta) for a JITFunction, generated from its signature, or (None, None) where the fast path cannot
    bind (a `*args` parameter, a parameter named like a launch option, names that clash with the generated code).

    `binder(*args, **kwargs)` binds a call as `inspect.Signature.bind` + `apply_defaults` would (Python does it:
    positional, keyword and default arguments alike) and returns (key, values), or None when only the slow path
    can launch it (a CPU tensor, an unknown keyword, a type it does not key). The key holds what specialization
    decides on, per parameter, unrolled (no loop over parameters, no per-parameter function call in the common
    cases): a tensor's dtype and 16-byte alignment, an int's type class and its == 1 and % 16 classes, a float,
    a constexpr's type and value, None; then the launch options and `option_defaults()`. `values` holds every
    runtime (not constexpr) parameter's value, CUDA tensors replaced by their addresses (read once, for the key
    and the launch): most often exactly the kernel's parameters, which then go to the packer as they are.
    `meta(*args, **kwargs)`: the bound arguments as a dict (constexprs unwrapped), for a grid function."""
    import inspect

    src = fn._kl_source()
    params = list(src.signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in LAUNCH_OPTIONS or p.name.startswith("_kl_")
           for p in params):
        return None, None
    env = {"_kl_T": _tensor_type(), "_kl_M": sys.modules[__name__], "_kl_wide": _wide_int_key,
           "_kl_ckey": _constexpr_key,
           "_kl_rkey": _runtime_key, "_kl_CE": constexpr, "_kl_OPTIONS": frozenset(LAUNCH_OPTIONS),
           # builtins under names no parameter has (a kernel may name a parameter `type` or `input`)
           "_kl_type": type, "_kl_int": int, "_kl_float": float, "_kl_tuple": tuple, "_kl_isinstance": isinstance}
    try:  # the arguments of the launch that made the binder: each parameter's type then is tested first
        names = {p.name for p in params}
        hints = src.signature.bind_partial(*hint_args, **{k: v for k, v in (hint_kwargs or {}).items()
                                                          if k in names}).arguments
    except TypeError:
        hints = {}
    sig_parts, seen_kw = [], False
    for i, p in enumerate(params):
        if p.kind == p.KEYWORD_ONLY and not seen_kw:
            sig_parts.append("*")
            seen_kw = True
        if p.default is inspect.Parameter.empty:
            sig_parts.append(p.name)
        else:
            env[f"_kl_d{i}"] = p.default
            sig_parts.append(f"{p.name}=_kl_d{i}")
        if p.kind == p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind != p.POSITIONAL_ONLY):
            sig_parts.append("/")
    sig_parts.append("**_kl_o")
    head = ", ".join(sig_parts)
    body, keys, vals = [], [], []
    for i, p in enumerate(params):
        a, k, v = p.name, f"_kl_k{i}", f"_kl_v{i}"
        if a in src.constexpr_params:
            body.append(f"    {k} = {a} if _kl_type({a}) is _kl_int else _kl_ckey({a})")
            keys.append(k)
            continue
        spec = a not in fn.do_not_specialize
        int_key = f"1 if {a} == 1 else 16 if not {a} & 15 else 0" if spec else "0"
        branches = {
            "tensor": f"""_kl_t is _kl_T:
        if not {a}.is_cuda:
            return None
        {v} = {a}.data_ptr()
        {k} = {f"{a}.dtype if not {v} & 15 else ({a}.dtype, 0)" if spec else f"{a}.dtype"}""",
            "int": f"""_kl_t is _kl_int:
        {k} = ({int_key}) if -2147483648 <= {a} < 2147483648 else _kl_wide({a}, {spec})
        {v} = {a}""",
            "float": f"""_kl_t is _kl_float:
        {k} = 'f'
        {v} = {a}""",
            "none": f"""{a} is None:
        {k} = {v} = None""",
        }
        first = _hint_kind(hints.get(a, _NO_HINT))  # the type the first launch passed is tested first
        order = [first] + [b for b in branches if b != first]
        body.append(f"    _kl_t = _kl_type({a})\n" + "\n".join(("    if " if j == 0 else "    elif ") + branches[b]
                                                             for j, b in enumerate(order)) + f"""
    else:
        {k} = _kl_rkey({a}, {spec})
        if {k} is None:
            return None
        {k}, {v} = {k}""")
        keys.append(k)
        vals.append(v)
    body.append("""    if _kl_o:
        if not _kl_OPTIONS.issuperset(_kl_o):
            return None
        _kl_opts = _kl_tuple(_kl_o.items())
    else:
        _kl_opts = ()
    _kl_od = _kl_M.option_defaults
    if _kl_od is not None:
        _kl_opts = (_kl_opts, _kl_tuple(_kl_od().items()))""")
    key = "(" + "".join(k + ", " for k in keys) + "_kl_opts)"
    values = "(" + "".join(v + ", " for v in vals) + ")"
    text = f"def binder({head}):\n" + "\n".join(body) + f"\n    return {key}, {values}\n"
    metas = ", ".join(f"{p.name!r}: {p.name}.value if _kl_isinstance({p.name}, _kl_CE) else {p.name}"
                      if p.name in src.constexpr_params else f"{p.name!r}: {p.name}" for p in params)
    text += f"def meta({head}):\n    return {{{metas}}}\n"
    exec(compile(text, f"<kernellab binder {fn.__name__}>", "exec"), env)
    return env["binder"], env["meta"]


def _make_pick(fn, runtime_names, values):
    """A function of the binder's values (the runtime parameters', in order) that returns the compiled kernel's
    parameters in order: a parameter, or for a host TensorDescriptor (several kernel parameters, named "d[0]"
    (base), "d[1][j]" (shape), "d[2][j]" (strides)) its parts. None where they are the values as they are (no
    argument compiled in as None, no descriptor); False when a name cannot be placed (the slow path keeps
    launching it)."""
    import operator

    src = fn._kl_source()
    runtime = [n for n in fn.arg_names if n not in src.constexpr_params]
    if list(runtime_names) == runtime:
        return None
    index = {n: i for i, n in enumerate(runtime)}
    parts, plain = [], True
    for rn in runtime_names:
        name, _, rest = rn.partition("[")
        i = index.get(name)
        if i is None:
            return False
        if not rest:
            parts.append(f"v[{i}]")
            continue
        plain = False
        if not _is_host_descriptor(values[i]):
            return False
        try:
            path = tuple(int(x) for x in rest.rstrip("]").split("]["))
        except ValueError:
            return False
        if path == (0,):
            parts.append(f"v[{i}].base.data_ptr()")  # (a CUDA tensor: the key checked it)
        elif len(path) == 2 and path[0] in (1, 2):
            parts.append(f"v[{i}].{'shape' if path[0] == 1 else 'strides'}[{path[1]}]")
        else:
            return False
    if plain and len(parts) >= 2:
        return operator.itemgetter(*(index[n] for n in runtime_names))
    env: dict = {}
    exec(compile(f"def pick(v):\n    return ({''.join(p + ', ' for p in parts)})\n", "<kernellab pick>", "exec"), env)
    return env["pick"]


def _constexpr_key(v):
    """A constexpr argument's part of a fast-path key: its type and value (True, 1 and 1.0 compile apart), tuples
    element by element, kl.constexpr unwrapped; an unhashable value makes the key unhashable (slow path)."""
    if isinstance(v, constexpr):
        v = v.value
        if type(v) is int:  # as the binder keys a plain int
            return v
    if isinstance(v, tuple):
        return (type(v), tuple(_constexpr_key(x) for x in v))
    return (type(v), v)


def _runtime_key(a, specialize: bool):
    """(key part, value) of a runtime argument the binder does not key inline, None for the slow path: a bool, a
    str (compiled in or a 1-bit parameter: the value is the key), a host TensorDescriptor, a tensor-like
    object with a data pointer on a CUDA device (a tensor subclass, a kl.reinterpret wrapper)."""
    t = type(a)
    if t is bool or t is str:
        return (t, a), a
    if t.__name__ == "TensorDescriptor" and specialize:
        key = _descriptor_sig(a)
        return None if key is None else (key, a)
    dp = getattr(a, "data_ptr", None)
    if dp is None or not getattr(a, "is_cuda", False):
        return None
    p = dp()
    return (a.dtype, not specialize or not p & 15), p


_SLOW = object()
_TENSOR_TYPE: list = []


class _NotATensor:
    pass


def _tensor_type():
    """torch.Tensor once torch is imported (a launch with tensors has imported it), else a type nothing is."""
    if not _TENSOR_TYPE:
        torch = sys.modules.get("torch")
        if torch is None:
            return _NotATensor
        _TENSOR_TYPE.append(torch.Tensor)
    return _TENSOR_TYPE[0]


def _wide_int_key(v: int, specialize: bool) -> tuple:
    """An integer's part of a fast-path key: its type class (i32 / i64 / u64, as binding decides; finer is
    harmless), plus the == 1 and % 16 specializations unless the parameter is do_not_specialize."""
    width = (-2**31 <= v < 2**31) + 2 * (0 <= v < 2**32) + 4 * (-2**63 <= v < 2**63)
    return ("i", width, v == 1, not v & 15) if specialize else ("i", width)


def _descriptor_sig(d):
    """A host TensorDescriptor's part of a fast-path key: what binding it specializes on (the base's dtype and
    16-byte alignment, each shape and stride's integer class, == 1 and % 16) plus what is compiled in (block
    shape, padding). None when the base is not a CUDA tensor (the slow path explains)."""
    base = d.base
    dp = getattr(base, "data_ptr", None)
    if dp is None or not getattr(base, "is_cuda", False):
        return None
    ints = []
    for v in (*d.shape, *d.strides):
        if type(v) is not int:
            return None
        ints.append((1 if v == 1 else 16 if not v & 15 else 0) if -2147483648 <= v < 2147483648
                    else _wide_int_key(v, True))
    return ("desc", base.dtype, not dp() & 15, len(d.shape), tuple(ints), tuple(d.block_shape), d.padding)


_STREAM_FN = []


def _current_stream(device):
    if not _STREAM_FN:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _STREAM_FN.append(raw if raw is not None else (lambda d: torch.cuda.current_stream(d).cuda_stream))
    return _STREAM_FN[0](device)


def _is_host_descriptor(value) -> bool:
    """kernellab's (= triton.tools') TensorDescriptor, or another with its fields (a real Triton's)."""
    return type(value).__name__ == "TensorDescriptor" and all(
        hasattr(value, f) for f in ("base", "shape", "strides", "block_shape"))


def _const_key(value):
    """The cache-key part of a compiled-in value: functions by name, everything else by repr."""
    if is_node(value):
        return (type(value).__name__,) + tuple(_const_key(v) for v in value)
    simple = value is None or isinstance(value, (DType, PointerType, int, float, bool, str))
    return repr(value) if simple else getattr(value, "__name__", repr(value))


def _tree_key(tree):
    """The cache-key part of a specialized tuple argument."""
    if is_node(tree):
        return (type(tree).__name__,) + tuple(_tree_key(v) for v in tree)
    return ("r",) + tree.key() if isinstance(tree, RuntimeArg) else ("c", _const_key(tree))


def _file_lines(src: FunctionSource) -> list:
    """Lines of the kernel's file indexed by file line number (padding before the function)."""
    return [""] * (src.first_line - 1) + src.lines


def jit(fn=None, *, do_not_specialize=(), debug=None, noinline=None, repr=None, launch_metadata=None,
        sanitize=False, bounds=None, **_):
    """Decorator: `@kl.jit` or `@kl.jit(do_not_specialize=["n"])`.

    On the CPU interpreter, `sanitize=True` checks every launch for races, duplicate stores and uninitialized
    reads, and `bounds="storage"` lets pointers reach a view's whole storage (launch options of the same names
    override these; without either, `default_bounds` decides: "view", or "allocation" under kernellab.compat)."""
    def wrap(f):
        return JITFunction(f, do_not_specialize=do_not_specialize, debug=debug, noinline=noinline, repr=repr,
                           sanitize=sanitize, bounds=bounds)

    return wrap(fn) if fn is not None else wrap
