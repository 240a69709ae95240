"""What Triton libraries kernellab had not run before needed (FlagGems, flash-linear-attention; see
benchmarks/tools/unseen_libraries.py), one test per feature, each with a small kernel of our own that uses the
feature the way those libraries do: the autotuner and launch interfaces they subclass, JITFunction attributes
their code generators read, language corners (`x: tl.constexpr = <run-time value>`, `.value` of a dtype,
`core.*`), block-pointer element types, tensor-like pointer arguments, pointers that reach past a view into its
storage, and the torch modules that import triton internals."""
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.language import core as tl_core
from kernellab.language import standard as tl_standard

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def _rand(*shape, device="cpu"):
    x = torch.randn(*shape, dtype=torch.float64)
    return torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x).float().to(device)


@kl.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


# ------------------------------------------------------------------------------------- autotuner subclasses

def test_autotuner_subclass_written_for_triton(triton):
    """FlagGems' LibTuner: a subclass of triton.runtime.Autotuner built with Triton's constructor signature,
    whose own `run` prunes, benchmarks each config with `_bench`, and launches `self.fn.run` with the winner."""
    calls = []

    class MyTuner(triton.runtime.Autotuner):
        def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook=None,
                     post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False):
            super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, pre_hook, post_hook,
                             prune_configs_by, warmup, rep, use_cuda_graph)
            self.keys = key

        def run(self, *args, **kwargs):
            self.nargs = dict(zip(self.arg_names, args))
            key = tuple(self.nargs[k] for k in self.keys)
            if key not in self.cache:
                timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
                calls.append({str(c.kwargs): t for c, t in timings.items()})
                self.cache[key] = min(timings, key=timings.get)
                self.pre_hook({**self.nargs, **kwargs}, reset_only=True)
            cfg = self.best_config = self.cache[key]
            return self.fn.run(*args, **kwargs, **cfg.all_kwargs())

    bad, good = triton.Config({"BLOCK": 100}), triton.Config({"BLOCK": 64})  # 100: not a power of 2
    tuner = MyTuner(add_one, add_one.arg_names, [bad, good], ["n"], None, None,
                    prune_configs_by={"early_config_prune": lambda cfgs, nargs, **kw: cfgs})
    assert isinstance(tuner, triton.KernelInterface) and tuner.base_fn.__name__ == "add_one"
    x, y = _rand(300), torch.full((300,), float("nan"))
    tuner[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, y, 300)
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)
    assert tuner.best_config is good
    assert calls[0]["{'BLOCK': 100}"][0] == float("inf")  # a config that does not compile loses
    assert tuner.keys == ["n"] and tuner.nargs["n"] == 300


def test_autotune_pre_and_post_hooks_wrap_each_benchmark_run(triton, monkeypatch):
    """Triton's `autotune(pre_hook=, post_hook=)`: a user's hooks replace the reset/restore of the named
    tensors around every benchmark run (here the benchmarking path runs on CPU tensors)."""
    from kernellab.runtime import autotuner as A

    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)
    seen = []
    tuned = triton.autotune([triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})], key=["n"],
                            pre_hook=lambda nargs, reset_only=False: seen.append(("pre", nargs["BLOCK"])),
                            post_hook=lambda nargs, exception: seen.append(("post", nargs["BLOCK"])),
                            do_bench=lambda fn, quantiles=None: (fn(), 1.0)[1])(add_one)
    x, y = _rand(1000), torch.zeros(1000)
    tuned[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, y, 1000)
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)
    assert seen == [("pre", 128), ("post", 128), ("pre", 256), ("post", 256)]


@kl.jit
def fill_one(src, dst, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if src is not None:
        tl.store(src + offs, tl.full([BLOCK], 1, dtype=src.dtype.element_ty), mask=offs < N)
    else:
        tl.store(dst + offs, tl.full([BLOCK], 1, dtype=dst.dtype.element_ty), mask=offs < N)


def test_reset_and_restore_skip_arguments_passed_as_none(triton, monkeypatch):
    """An optional tensor argument passed as None may still be named in reset_to_zero/restore_value (one call
    site mutates it, another passes None); tuning skips it, as Triton's default hooks do."""
    from kernellab.runtime import autotuner as A

    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)
    configs = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 128})]
    for kw in ({"reset_to_zero": ["src"]}, {"restore_value": ["src"]}):
        tuned = triton.autotune(configs, key=["N"], do_bench=lambda fn, quantiles=None: (fn(), 1.0)[1], **kw)(
            fill_one)
        dst = torch.full((300,), 2.0)
        tuned[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](None, dst, 300)
        torch.testing.assert_close(dst, torch.ones(300))


def test_post_hook_sees_a_failing_benchmark_run(triton, monkeypatch):
    from kernellab.runtime import autotuner as A

    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)
    seen = []

    def boom(*a, **k):
        raise RuntimeError("launch failed")

    tuned = triton.autotune([triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"],
                            pre_hook=lambda nargs, reset_only=False: seen.append("pre"),
                            post_hook=lambda nargs, exception: seen.append(type(exception).__name__),
                            do_bench=lambda fn, quantiles=None: (fn(), 1.0)[1])(add_one)
    monkeypatch.setattr(add_one, "run", boom)
    with pytest.raises(RuntimeError, match="launch failed"):
        tuned[(1,)](torch.zeros(8), torch.zeros(8), 8)
    assert seen == ["pre", "RuntimeError"]


def test_cpu_tuning_skips_the_perf_model_and_compiles_until_one_works(triton, monkeypatch):
    """xformers' tiled matmul: 100+ configs, an early prune and a perf model that asks nvidia-smi for clocks. On
    the CPU interpreter the early prune still runs (it can drop configs that are wrong for the shapes), the perf
    model (GPU time, GPU queries) does not, and configs are compiled only until one compiles."""
    def perf_model(**kw):
        raise AssertionError("the perf model ran on the CPU")

    configs = [triton.Config({"BLOCK": b}) for b in (2**21, 100, 64, 128, 256)]  # the first two do not compile
    tuned = triton.autotune(configs, key=["n"], prune_configs_by={
        "early_config_prune": lambda cfgs, nargs, **kw: [c for c in cfgs if c.kwargs["BLOCK"] != 64],
        "perf_model": perf_model, "top_k": 2})(add_one)
    compiled = []
    warmup = add_one.warmup
    monkeypatch.setattr(add_one, "warmup", lambda *a, **k: (compiled.append(k["BLOCK"]), warmup(*a, **k))[1])
    x, y = _rand(300), torch.zeros(300)
    tuned[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, y, 300)
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)
    assert tuned.best_config.kwargs["BLOCK"] == 128 and compiled == [2**21, 100, 128]
    assert "first config that compiles" in tuned.best_config_reason


def test_gpu_model_helpers_are_served(triton):
    """xformers' matmul perf model imports these from triton.testing (they query the GPU when called)."""
    from triton.testing import get_dram_gbps, get_max_simd_tflops, get_max_tensorcore_tflops, nvsmi

    assert all(callable(f) for f in (get_dram_gbps, get_max_simd_tflops, get_max_tensorcore_tflops, nvsmi))
    if shutil.which("nvidia-smi") is None:
        with pytest.raises(RuntimeError, match="nvidia-smi"):
            nvsmi(["clocks.max.sm"])


def test_heuristics_takes_triton_constructor(triton):
    h = triton.runtime.Heuristics(add_one, add_one.arg_names, {"BLOCK": lambda a: 128})
    x, y = _rand(200), torch.zeros(200)
    h[(2,)](x, y, 200)
    torch.testing.assert_close(y, x + 1, rtol=0, atol=0)


# ------------------------------------------------------------------------------ launch wrappers of libraries

@kl.jit
def scale_rows(x_ptr, y_ptr, n, alpha, ADD: tl.constexpr, BLOCK: tl.constexpr = 32):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * alpha + ADD, mask=m)


def test_kernel_interface_subclass_relaunches_the_compiled_kernel(triton):
    """FlagGems' LibEntry: a triton.KernelInterface subclass with its own `run` that reads `params` (number,
    name, constexpr-ness, default) and `signature`, compiles once through `fn.run` and then launches the
    returned compiled kernel with every argument, constexprs included."""

    class Entry(triton.KernelInterface):
        def __init__(self, fn):
            self.fn, self.arg_names, self.signature = fn, fn.arg_names, fn.signature
            self.const = [p.name for p in fn.params if p.is_constexpr]
            self.defaults = {p.name: p.default for p in fn.params if p.has_default}
            self.kernel = None

        def run(self, *args, grid, warmup, **kwargs):
            assert warmup is False  # passed by name, as Triton's KernelInterface passes it
            if self.kernel is None:
                self.kernel = self.fn.run(*args, grid=grid, **kwargs)
                return self.kernel
            every = {**dict(zip(self.arg_names, args)), **self.defaults, **kwargs}
            self.kernel[grid](*[every[n] for n in self.signature.parameters])
            return self.kernel

    entry = Entry(scale_rows)
    assert entry.const == ["ADD", "BLOCK"] and entry.defaults == {"BLOCK": 32}
    assert [p.num for p in scale_rows.params] == list(range(6))
    for alpha in (2.0, -0.5):  # the first launch compiles, the second goes through the compiled kernel
        x, y = _rand(100), torch.full((100,), float("nan"))
        entry[(4,)](x, y, 100, alpha, ADD=1.5)
        torch.testing.assert_close(y, x * alpha + 1.5)


def test_jit_function_attributes_code_generators_read(triton, tmp_path):
    """FlagGems' pointwise_dynamic pastes `fn.src` into a generated module whose globals are `fn.__globals__`:
    src starts at the `def` (decorators left out, as Triton's); `cache_key` follows the text."""
    import importlib.util

    path = tmp_path / "gen_f.py"
    path.write_text(textwrap.dedent('''
        import triton


        @triton.jit(do_not_specialize=["y"])
        def f(x, y):
            return x + y
    '''))
    spec = importlib.util.spec_from_file_location("gen_f", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = mod.f
    assert f.src.startswith("def f(x, y):") and "@" not in f.src
    assert f.__globals__ is mod.__dict__ and len(f.cache_key) == 64
    assert [(p.name, p.do_not_specialize) for p in f.params] == [("x", False), ("y", True)]
    before = f.cache_key
    f._unsafe_update_src("def f(x, y):\n    return x - y\n")
    assert f.cache_key != before


# ------------------------------------------------------------------------------------------ language corners

@kl.jit
def _lowest(dtype):
    d = dtype.value  # Triton boxes a dtype argument in a constexpr; `.value` is the dtype
    if d.is_floating():
        v: tl.constexpr = float("-inf")
        return v
    w: tl.constexpr = d.int_bitwidth
    v: tl.constexpr = -1 * 2 ** (w - 1)
    return v


@kl.jit
def masked_max(x_ptr, o_ptr, n, tiles, TILE: tl.constexpr, N: tl.constexpr):
    tl_core.static_assert(N >= TILE)
    span: tl.constexpr = TILE * tiles  # annotated constexpr, but `tiles` is a run-time argument (FlagGems' sort)
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    keep = (offs < span) & (offs < n)
    bits = tl_core.get_int_dtype(x.dtype.primitive_bitwidth, True)
    m = tl.max(tl_core.where(keep, x, _lowest(x.dtype)), 0)
    tl.store(o_ptr, m + tl_standard.zeros_like(m).to(bits).to(x.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16])
def test_constexpr_corners_libraries_use(triton, dtype):
    x = (torch.randn(64) * 100).to(dtype)
    x[:10] = -5  # the max over the first 24 elements
    o = torch.zeros(1, dtype=dtype)
    masked_max[(1,)](x, o, 50, 3, TILE=8, N=64)
    assert o.item() == x[:24].max().item()
    assert tl_core.CONSTEXPR_0 == 0 and tl_core._unwrap_if_constexpr(tl.constexpr(3)) == 3


def test_missing_attribute_is_named_in_the_error(triton):
    @triton.jit
    def bad(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr).type.no_such_thing)

    with pytest.raises(kl.CompilationError) as ei:
        bad[(1,)](torch.zeros(1))
    assert "`tl.load(x_ptr).type.no_such_thing`" in str(ei.value) and "'no_such_thing'" in str(ei.value)


@kl.jit
def bp_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    src = tl.make_block_ptr(x_ptr, (n,), (1,), (tl.program_id(0) * BLOCK,), (BLOCK,), (0,))
    dst = tl.make_block_ptr(y_ptr, (n,), (1,), (tl.program_id(0) * BLOCK,), (BLOCK,), (0,))
    v = tl.load(src, boundary_check=(0,)).to(tl.float32) * 2.0
    tl.store(dst, v.to(dst.type.element_ty), boundary_check=(0,))  # FlagGems' pointwise stores


def test_block_pointer_element_type_casts_to_the_pointee(triton):
    x, y = _rand(100).half(), torch.full((100,), float("nan"), dtype=torch.bfloat16)
    bp_copy[(2,)](x, y, 100, BLOCK=64)
    torch.testing.assert_close(y, (x.float() * 2).bfloat16(), rtol=0, atol=0)


# ----------------------------------------------------------------------------------------- pointer arguments

@kl.jit
def gather_cols(inp_ptr, idx_ptr, out_ptr, n_rows, n_idx, stride_row, stride_col, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    j = tl.arange(0, BLOCK)
    m = j < n_idx
    cols = tl.load(idx_ptr + r * n_idx + j, mask=m, other=0)
    v = tl.load(inp_ptr + r * stride_row + cols * stride_col, mask=m)
    tl.store(out_ptr + r * n_idx + j, v, mask=m)


def test_pointer_reaches_past_its_view_into_the_storage(triton):
    """FlagGems' gather passes the source restrided to the index's shape and steps along the gathered dimension
    past that view: inside the tensor's storage, which Triton (raw pointers) allows. Under compat the CPU
    interpreter lets a pointer reach its storage; kernellab's own default keeps to the view."""
    x = _rand(6, 20)
    idx = torch.randint(0, 20, (6, 5))
    view = x.as_strided((6, 5), x.stride())  # a (6, 5) view of the (6, 20) storage
    out = torch.full((6, 5), float("nan"))
    gather_cols[(6,)](view, idx, out, 6, 5, x.stride(0), x.stride(1), BLOCK=8)
    torch.testing.assert_close(out, x.gather(1, idx), rtol=0, atol=0)
    ck = gather_cols.warmup(view, idx, out, 6, 5, x.stride(0), x.stride(1), BLOCK=8, grid=(6,))
    out.fill_(float("nan"))
    ck[(6,)](view, idx, out, 6, 5, x.stride(0), x.stride(1))  # a compiled kernel relaunched (FlagGems' LibEntry)
    torch.testing.assert_close(out, x.gather(1, idx), rtol=0, atol=0)
    idx[0, 0] = 19
    with pytest.raises(kl.InterpreterError, match="bounds='storage'"):  # asked for per launch, the view still rules
        gather_cols[(6,)](view, idx, out, 6, 5, x.stride(0), x.stride(1), BLOCK=8, bounds="view")
    import kernellab.compat

    kernellab.compat.uninstall()
    try:
        idx[0, 0] = 19
        with pytest.raises(kl.InterpreterError, match="bounds='storage'"):
            gather_cols[(6,)](view, idx, out, 6, 5, x.stride(0), x.stride(1), BLOCK=8)
    finally:
        kernellab.compat.install()


class StridedView:
    """A tensor-like pointer argument as libraries make them (FlagGems' StridedBuffer): data_ptr(), dtype,
    shape, stride(), device; here with a negative stride, which torch views cannot have."""

    def __init__(self, base, shape, strides, offset):
        self.base, self.shape, self._strides, self.offset = base, tuple(shape), tuple(strides), offset
        self.dtype, self.device = base.dtype, base.device

    def data_ptr(self):
        return self.base.data_ptr() + self.offset * self.base.element_size()

    def stride(self):
        return self._strides


@kl.jit
def copy_strided(x_ptr, y_ptr, n, sx, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i * sx, mask=m), mask=m)


def test_tensor_like_pointer_argument(triton):
    x = _rand(37)
    rev = StridedView(x, (37,), (-1,), offset=36)  # x reversed
    y = torch.full((37,), float("nan"))
    copy_strided[(1,)](rev, y, 37, -1, BLOCK=64)
    torch.testing.assert_close(y, x.flip(0), rtol=0, atol=0)
    with pytest.raises(kl.InterpreterError, match="out of bounds"):  # it spans its shape and strides, no more
        copy_strided[(1,)](StridedView(x, (10,), (-1,), offset=9), y, 37, -1, BLOCK=64)


def test_object_with_data_ptr_but_no_shape_is_refused_with_a_reason(triton):
    class Raw:
        dtype = torch.float32

        def __init__(self, t):
            self.t = t

        def data_ptr(self):
            return self.t.data_ptr()

    with pytest.raises(kl.LaunchError, match="also needs `dtype`, `shape`"):
        copy_strided[(1,)](Raw(torch.zeros(4)), torch.zeros(4), 4, 1, BLOCK=4)


# ------------------------------------------------------------------------------------------- torch modules

def test_torch_inductor_imports_under_compat():
    """torch._dynamo (fla, unsloth, anything using torch.compile) imports torch._inductor's triton_compat
    whenever `triton` is importable; it reads CompiledKernel, triton_key, OutOfResources, PTXASError."""
    code = ("import kernellab.compat; kernellab.compat.install()\n"
            "from torch._inductor.runtime import triton_compat as tc\n"
            "import triton\n"
            "assert tc.HAS_TRITON and tc.CompiledKernel is triton.compiler.CompiledKernel\n"
            "assert tc.triton_key().startswith('kernellab-')\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_library_triton_probes_find_one_active_driver_and_gluon(triton):
    """vLLM's triton_utils uses Triton only when `triton.backends.backends` has exactly one active driver, and
    imports `triton.experimental.gluon` beside the tile language: Gluon kernels import, and say at launch that
    kernellab does not compile them."""
    from triton.backends import backends
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    assert [n for n, b in backends.items() if b.driver.is_active()] == ["nvidia"] and "cpu" not in backends

    @gluon.jit
    def k(x_ptr, BLOCK: gl.constexpr):
        pass

    with pytest.raises(kl.KernelLabError, match="Gluon kernel"):
        k[(1,)](torch.zeros(4), BLOCK=4)
    with pytest.raises(kl.KernelLabError, match="not served"):
        gl.BlockedLayout([1], [32], [4], [0])
    assert gluon.constexpr_function is triton.constexpr_function


@kl.jit
def rebind_after_return(out_ptr, x_ptr, n_rows, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        TWO_D: tl.constexpr):
    """flash-attn's rotary kernel: pointers move by a scalar, an `if ...: return` follows, and then the live path
    rebinds the same names to blocks of pointers (and `scale` from a number to a block)."""
    x_ptr = x_ptr + tl.program_id(1) * stride * BLOCK_M
    out_ptr = out_ptr + tl.program_id(1) * stride * BLOCK_M
    scale = 2.0
    if tl.program_id(0) * BLOCK_N >= n_cols:
        return
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    if not TWO_D:
        x_ptr = x_ptr + rn
        out_ptr = out_ptr + rn
        mask = (rn < n_cols) & (tl.program_id(1) * BLOCK_M < n_rows)
    else:
        x_ptr = x_ptr + (rm - tl.program_id(1) * BLOCK_M)[:, None] * stride + rn[None, :]
        out_ptr = out_ptr + (rm - tl.program_id(1) * BLOCK_M)[:, None] * stride + rn[None, :]
        mask = (rm[:, None] < n_rows) & (rn[None, :] < n_cols)
    scale = scale + tl.zeros_like(rn).to(tl.float32)
    tl.store(out_ptr, tl.load(x_ptr, mask=mask) * scale, mask=mask)


@pytest.mark.parametrize("two_d", [False, True])
def test_variable_rebound_with_another_type_after_an_early_return(two_d):
    x = _rand(10, 24)
    y = torch.full_like(x, float("nan"))
    rebind_after_return[(4, 10 if not two_d else 3)](y, x, 10, 24, 24, BLOCK_M=1 if not two_d else 4, BLOCK_N=8,
                                                     TWO_D=two_d)
    torch.testing.assert_close(y, x * 2, rtol=0, atol=0)


@kl.jit
def asm_unary(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """mamba-3's helpers: one PTX f32 instruction each through inline asm (evaluated by the interpreter)."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", constraints="=f,f", args=[x], dtype=tl.float32,
                                  is_pure=True, pack=1)
    c = tl.inline_asm_elementwise("cos.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
    e = tl.inline_asm_elementwise("ex2.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, t + 2 * c + 3 * e, mask=offs < n)


def test_single_instruction_f32_inline_asm_runs_on_the_interpreter():
    x = _rand(50, device=DEVICE)
    y = torch.full_like(x, float("nan"))
    asm_unary[(1,)](x, y, 50, BLOCK=64)
    xd = x.double()
    tol = 1e-6 if DEVICE == "cpu" else 3e-3  # exact on the CPU; tanh.approx.f32 is good to 2^-11 on a GPU
    torch.testing.assert_close(y.double(), xd.tanh() + 2 * xd.cos() + 3 * xd.exp2(), rtol=tol, atol=tol)


def test_other_inline_asm_still_refuses_on_the_interpreter():
    @kl.jit
    def two_in(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(y_ptr + offs, tl.inline_asm_elementwise("add.f32 $0, $1, $2;", "=f,f,f", [x, x], dtype=tl.float32,
                                                         is_pure=True, pack=1))

    if DEVICE == "cpu":
        with pytest.raises(kl.InterpreterError, match="inline_asm_elementwise"):
            two_in[(1,)](torch.ones(8), torch.zeros(8), BLOCK=8)


# -------------------------------------------------------------------------------------------- GPU and PTX

@needs_ptxas
def test_block_pointer_element_type_cast_assembles():
    ck = bp_copy.warmup(torch.empty(128, dtype=torch.float16), torch.empty(128, dtype=torch.bfloat16), 128,
                        BLOCK=64, grid=(1,))
    ck.build_gpu()
    assert "cvt.rn.bf16.f32" in ck.asm["ptx"] or "cvt.rn.bf16x2.f32" in ck.asm["ptx"]


@needs_ptxas
def test_variable_rebound_after_an_early_return_assembles():
    ck = rebind_after_return.warmup(torch.empty(240), torch.empty(240), 10, 24, 24, BLOCK_M=4, BLOCK_N=8,
                                    TWO_D=True, grid=(1,))
    ck.build_gpu()
    assert ck.n_regs > 0


@pytest.mark.gpu
def test_gpu_variable_rebound_after_an_early_return():
    x = _rand(10, 24, device="cuda")
    for two_d, bm, gm in ((False, 1, 10), (True, 4, 3)):
        y = torch.full_like(x, float("nan"))
        rebind_after_return[(4, gm)](y, x, 10, 24, 24, BLOCK_M=bm, BLOCK_N=8, TWO_D=two_d)
        torch.testing.assert_close(y, x * 2, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_library_features(triton):
    x = _rand(100, device="cuda").half()
    y = torch.full((100,), float("nan"), dtype=torch.bfloat16, device="cuda")
    bp_copy[(2,)](x, y, 100, BLOCK=64)
    torch.testing.assert_close(y, (x.float() * 2).bfloat16(), rtol=0, atol=0)
    xs = _rand(37, device="cuda")
    ys = torch.full((37,), float("nan"), device="cuda")
    copy_strided[(1,)](StridedView(xs, (37,), (-1,), offset=36), ys, 37, -1, BLOCK=64)
    torch.testing.assert_close(ys, xs.flip(0), rtol=0, atol=0)
    o = torch.zeros(1, device="cuda")
    xm = (torch.randn(64) * 100).cuda()
    masked_max[(1,)](xm, o, 50, 3, TILE=8, N=64)
    assert o.item() == xm[:24].max().item()
