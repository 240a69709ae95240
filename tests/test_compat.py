"""`import triton` served by kernellab (kernellab.compat): the module tree, the exception hierarchy code that
catches Triton's errors relies on, the driver queries, reinterpret, perf_report, and `python -m kernellab.run`."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import kernellab
import kernellab.compat
import kernellab.language as kl_tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"




def test_module_tree_is_kernellab(triton):
    import triton.language as tl
    from triton.compiler.errors import CompilationError
    from triton.language.extra import libdevice
    from triton.runtime.errors import InterpreterError, OutOfResources
    from triton.runtime.jit import TensorWrapper, reinterpret, type_canonicalisation_dict
    from triton.tools.tensor_descriptor import TensorDescriptor

    assert tl is kl_tl and triton.jit is kernellab.jit and triton.__version__.startswith("3.")
    assert CompilationError is kernellab.CompilationError and issubclass(kernellab.InterpreterError, InterpreterError)
    assert issubclass(OutOfResources, triton.TritonError) and issubclass(OutOfResources, kernellab.LaunchError)
    assert libdevice.tanh is kl_tl.extra.libdevice.tanh
    assert callable(reinterpret) and TensorWrapper is kernellab.TensorWrapper
    assert type_canonicalisation_dict["float32"] == "fp32" and type_canonicalisation_dict["bool"] == "u1"
    assert TensorDescriptor.from_tensor(torch.zeros(8, 16), [4, 8]).strides == [16, 1]
    with pytest.raises(ModuleNotFoundError):
        import triton.not_a_module  # noqa: F401


def test_uninstall_restores_the_import_system(triton):
    kernellab.compat.uninstall()
    assert "triton" not in sys.modules or not getattr(sys.modules["triton"], "__kernellab__", False)
    kernellab.compat.install()
    assert sys.modules["triton"].__kernellab__


def test_install_refuses_when_real_triton_is_loaded():
    saved = {k: v for k, v in sys.modules.items() if k == "triton" or k.startswith("triton.")}
    fake = type(sys)("triton")
    sys.modules["triton"] = fake
    try:
        with pytest.raises(kernellab.KernelLabError, match="already imported"):
            kernellab.compat.install()
    finally:
        del sys.modules["triton"]
        sys.modules.update(saved)


def test_triton_exceptions_catch_kernellab_compile_errors(triton):
    import triton.language as tl

    @triton.jit
    def bad(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + undefined_name)  # noqa: F821

    x = torch.zeros(16, device=DEVICE)
    with pytest.raises(triton.CompilationError):
        bad[(1,)](x, BLOCK=16)
    with pytest.raises(triton.TritonError):
        bad[(1,)](x, BLOCK=16)


def test_a_triton_kernel_runs_unchanged(triton):
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    n = 1000
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = torch.full((n,), float("nan"), device=DEVICE)
    axpy[(triton.cdiv(n, 256),)](x, y, out, 2.5, n, BLOCK=256)
    torch.testing.assert_close(out.double(), 2.5 * x.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_driver_queries(triton):
    drv = triton.runtime.driver.active
    target = drv.get_current_target()
    assert target.backend == "cuda" and target.warp_size == 32 and target.arch >= 80
    props = drv.utils.get_device_properties(drv.get_current_device())
    for key in ("multiprocessor_count", "max_shared_mem", "max_num_regs", "warpSize"):
        assert isinstance(props[key], int) and props[key] > 0
    assert drv.get_active_torch_device().type == DEVICE


def test_reinterpret_gives_kernels_unsigned_views(triton):
    import triton.language as tl

    @triton.jit
    def shift_right(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) >> 28)

    rs = np.random.RandomState(0)
    bits = rs.randint(-2**31, 2**31, size=64, dtype=np.int64).astype(np.int32)
    bits[:3] = [-1, -2**31, 2**31 - 1]
    x = triton.reinterpret(torch.tensor(bits, device=DEVICE), tl.uint32)
    out = triton.reinterpret(torch.full((64,), -7, dtype=torch.int32, device=DEVICE), tl.uint32)
    shift_right[(1,)](x, out, BLOCK=64)
    want = (bits.view(np.uint32) >> 28).astype(np.int64)
    assert np.array_equal(out.base.cpu().numpy().view(np.uint32).astype(np.int64), want)
    assert triton.reinterpret(out, torch.int32) is out.base or torch.equal(triton.reinterpret(out, torch.int32), out.base)
    with pytest.raises(kernellab.LaunchError, match="same width"):
        triton.reinterpret(torch.zeros(4, dtype=torch.int32), tl.uint8)


def test_dtype_names_are_tritons(triton):
    import triton.language as tl

    assert [t.name for t in (tl.int1, tl.int8, tl.uint32, tl.float16, tl.bfloat16, tl.float32, tl.float64)] == \
        ["int1", "int8", "uint32", "fp16", "bf16", "fp32", "fp64"]
    assert tl.dtype("int32") is tl.int32 and tl.dtype("fp8e4nv") is tl.float8e4nv
    assert tl.float32.fp_mantissa_width == 23 and tl.float8e5.exponent_bias == 15
    assert tl.int8.is_int8() and not tl.int8.is_uint8() and tl.float8e4nv.is_fp8e4nv()
    assert tl.int16.get_int_max_value() == 2**15 - 1 and tl.uint16.get_int_min_value() == 0


def test_perf_report_runs_a_sweep(triton, capsys):
    calls = []

    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["size"], x_vals=[128, 256], line_arg="provider", line_vals=["a", "b"], line_names=["A", "B"],
        ylabel="GB/s", plot_name="demo", args={"scale": 2}))
    def bench(size, provider, scale):
        calls.append((size, provider, scale))
        return (size * scale, size, size * 3) if provider == "a" else float(size)

    bench.run(print_data=True)
    assert calls == [(128, "a", 2), (128, "b", 2), (256, "a", 2), (256, "b", 2)]
    out = capsys.readouterr().out
    assert "demo:" in out and "A (GB/s)" in out and "512" in out


def test_kernellab_run_serves_triton_to_a_script(tmp_path):
    script = tmp_path / "uses_triton.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def double(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

        x = torch.arange(8, dtype=torch.float32)
        double[(1,)](x, BLOCK=8)
        print("sum", int(x.sum()), "served by", type(triton).__name__, triton.jit.__module__, sys.argv[1:])
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), env_path]) if (env_path := os.environ.get(
        "PYTHONPATH")) else os.getcwd())
    out = subprocess.run([sys.executable, "-m", "kernellab.run", str(script), "extra"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "sum 56" in out.stdout and "kernellab.runtime.jit" in out.stdout and "['extra']" in out.stdout


def test_served_modules_satisfy_torchs_triton_probes(triton):
    """torch (dynamo, inductor) probes `triton` whenever it is importable, and liger_kernel imports torch._dynamo:
    the served modules need specs (importlib.util.find_spec), `triton.compiler.compiler` and
    `triton.backends.backends` (no "cpu" plugin, so torch does not pick Triton for the CPU; one active "nvidia"
    driver, which libraries such as vLLM count before they use Triton)."""
    import importlib.util

    import triton.backends
    import triton.compiler.compiler

    assert importlib.util.find_spec("triton").name == "triton"
    assert importlib.util.find_spec("triton.compiler.compiler") is not None
    assert "cpu" not in triton.backends.backends and triton.compiler.compiler.CompilationError is kernellab.CompilationError
    assert [name for name, b in triton.backends.backends.items() if b.driver.is_active()] == ["nvidia"]


def test_torch_dynamo_imports_under_install():
    """A fresh process: install() first, then what liger_kernel's import does (import torch._dynamo) and torch's
    own Triton checks."""
    code = textwrap.dedent("""
        import kernellab.compat
        kernellab.compat.install()
        import torch._dynamo
        from torch.utils._triton import has_triton, has_triton_package
        import torch
        print("ok", has_triton_package(), has_triton() if not torch.cuda.is_available() else False)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), env_path]) if (env_path := os.environ.get(
        "PYTHONPATH")) else os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ok True False" in out.stdout


def test_tutorial_host_surface(triton):
    """What Triton's tutorials touch besides kernels: warmup + _init_handles + n_regs / metadata.shared (02),
    extern_libs and launch_pdl launch options (07, 11), gdc_wait (11), triton.profiler (09, 10)."""
    import triton.language as tl
    import triton.profiler as proton
    from triton.language.extra import cuda

    @triton.jit
    def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, USE_GDC: tl.constexpr):
        if USE_GDC:
            cuda.gdc_wait()
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)
        if USE_GDC:
            cuda.gdc_launch_dependents()

    x = torch.randn(300, device=DEVICE)
    y = torch.full_like(x, float("nan"))
    k = copy.warmup(x, y, 300, BLOCK=128, USE_GDC=True, grid=(1,))
    k._init_handles()
    assert k.metadata.shared >= 0 and k.metadata.num_warps == 4 and (k.n_regs is None or k.n_regs > 0)
    with pytest.warns(UserWarning, match="records nothing"):
        proton.start("copy", hook="triton")
    with proton.scope("copy"):
        copy[(3,)](x, y, 300, BLOCK=128, USE_GDC=True, launch_pdl=True, extern_libs={"libdevice": "x"})
    proton.finalize()
    assert torch.equal(y, x)


def test_compiled_kernel_takes_every_argument_as_tritons_does(triton):
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, FACTOR: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * FACTOR, mask=m)

    x = torch.randn(100, device=DEVICE)
    y = torch.full_like(x, float("nan"))
    k = scale.warmup(x, y, 100, BLOCK=128, FACTOR=3, grid=(1,))
    k[(1, 1, 1)](x, y, 100, 128, 3)  # Triton's form: constexprs included
    assert torch.equal(y, x * 3)
    y.fill_(float("nan"))
    k[(1,)](x, y, 100)  # kernellab's form: runtime arguments only
    assert torch.equal(y, x * 3)


def test_autotune_pre_hook_runs_before_each_config_compiles(triton):
    """Triton's attention tutorial makes descriptors with a placeholder block shape and lets each config's
    pre_hook set the real one; compiling a config must see the hook's change."""
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    def set_block(nargs):
        nargs["desc"].block_shape = [nargs["BLOCK"], 16]

    @triton.autotune([triton.Config({"BLOCK": 16}, pre_hook=set_block), triton.Config({"BLOCK": 32}, pre_hook=set_block)],
                     key=["n"])
    @triton.jit
    def copy_rows(desc, out_ptr, n, BLOCK: tl.constexpr):
        tile = desc.load([tl.program_id(0) * BLOCK, 0])
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + rows[:, None] * 16 + tl.arange(0, 16)[None, :], tile, mask=rows[:, None] < n)

    x = torch.randn(64, 16, device=DEVICE)
    out = torch.full_like(x, float("nan"))
    desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1])  # placeholder, as the tutorial does
    copy_rows[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](desc, out, 64)
    assert torch.equal(out, x)


def test_unsafe_update_src_recompiles_a_template(triton):
    """Triton's test suite (on a GPU) stamps expressions into template kernels with _unsafe_update_src."""
    import triton.language as tl

    @triton.jit
    def template(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)  # noqa: F841 - used by the stamped expression
        tl.store(y_ptr + offs, GENERATE_HERE)  # noqa: F821

    kernel = triton.JITFunction(template.fn)
    kernel._unsafe_update_src(kernel.src.replace("GENERATE_HERE", "x * x + 1"))
    x = torch.randn(64, device=DEVICE)
    y = torch.full_like(x, float("nan"))
    kernel[(1,)](x, y, BLOCK=64)
    torch.testing.assert_close(y, x * x + 1)


def test_globaltimer_and_smid_reach_the_ptx():
    """tl.extra.cuda.globaltimer() / smid(): PTX special registers; two timer readings stay two."""
    from kernellab.language.extra import cuda

    @kernellab.jit
    def timed(out1, out2):
        start = cuda.globaltimer()
        off = kl_tl.arange(0, 128)
        for _ in range(100):
            kl_tl.store(out1 + off, kl_tl.load(out1 + off) + 1)
        end = cuda.globaltimer()
        kl_tl.store(out2, start)
        kl_tl.store(out2 + 1, end)
        kl_tl.store(out2 + 2, cuda.smid().to(kl_tl.int64))

    o1, o2 = torch.zeros(128, dtype=torch.int64, device=DEVICE), torch.zeros(3, dtype=torch.int64, device=DEVICE)
    ck = timed.warmup(o1, o2, grid=(1,))
    ck.build_gpu()
    assert ck.asm["ptx"].count("%globaltimer") == 2 and "%smid" in ck.asm["ptx"] and "cubin" in ck.asm
    if DEVICE == "cuda":
        timed[(1,)](o1, o2)
        assert o2[1] > o2[0] and 0 <= o2[2] < 1024 and torch.all(o1 == 100)


def _mul_add_kernel(triton):
    import triton.language as tl

    @triton.jit
    def mul_add(data):
        ptrs = data + tl.arange(0, 128)
        tl.store(ptrs, tl.load(ptrs) * 1.5 + 1.0)

    return mul_add


@pytest.mark.parametrize("fusion", [False, True])
def test_knob_default_fp_fusion_is_the_launch_default(triton, fusion):
    """`triton.knobs.language.default_fp_fusion` decides `enable_fp_fusion` when a launch does not say."""
    import re

    mul_add = _mul_add_kernel(triton)
    data = torch.randn(128)
    with triton.knobs.language.scope():
        triton.knobs.language.default_fp_fusion = fusion
        ck = mul_add.warmup(data, grid=(1,))
        assert (re.search(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32", ck.asm["ptx"]) is not None) == fusion
        explicit = mul_add.warmup(data, grid=(1,), enable_fp_fusion=not fusion)
        assert (re.search(r"(mad|fma)\.r[nzmp]\.(ftz\.)?f32", explicit.asm["ptx"]) is not None) == (not fusion)


@pytest.mark.gpu
def test_knob_default_fp_fusion_gpu(triton):
    """Without fusion the GPU rounds the product and the sum separately, as torch's two ops do."""
    mul_add = _mul_add_kernel(triton)
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(128, generator=g) * 1e3).cuda()
    with triton.knobs.language.scope():
        triton.knobs.language.default_fp_fusion = False
        y = x.clone()
        mul_add[(1,)](y)
        assert torch.equal(y, x * 1.5 + 1.0)
        triton.knobs.language.default_fp_fusion = True
        z = x.clone()
        mul_add[(1,)](z)  # a new compile (the knob is part of the launch's key)
        torch.testing.assert_close(z.double(), x.double() * 1.5 + 1.0, rtol=1e-7, atol=0)


def test_interpreter_error_catches_compile_errors_when_interpreting(triton, monkeypatch):
    """Under TRITON_INTERPRET=1 Triton reports a kernel's compile-time errors as InterpreterError (it never
    compiles); kernellab's CompilationError is one there, and only there. Its runtime errors always are."""
    import triton.language as tl
    from triton.runtime.errors import InterpreterError

    @triton.jit
    def narrow_block(ptr):
        desc = tl.make_tensor_descriptor(ptr, [16, 16], [16, 1], [1, 2])  # 8 bytes < TMA's 16
        desc.load([0, 0])

    x = torch.zeros(16, 16, dtype=torch.int32)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(InterpreterError) as e:
        narrow_block[(1,)](x)
    assert "at least 16 bytes" in str(e.value.__cause__)
    assert isinstance(e.value, triton.CompilationError)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(triton.CompilationError) as e:
        narrow_block.warmup(x, grid=(1,))
    assert not isinstance(e.value, InterpreterError)
    assert issubclass(kernellab.errors.InterpreterError, InterpreterError)  # the interpreter's own errors


def test_bad_num_warps_is_an_assertion_error_as_tritons(triton):
    @triton.jit
    def k(dst):
        pass

    dst = torch.empty(8, device=DEVICE)
    with pytest.raises(AssertionError, match="must be a power of 2"):
        k.warmup(dst, grid=(1,), num_warps=3)
    with pytest.raises(kernellab.errors.LaunchError):
        k.warmup(dst, grid=(1,), num_warps=64)
    assert k.warmup(dst, grid=(1,), num_warps=2) is not None


def test_subprocess_shim_serves_triton(tmp_path):
    """The test plugin's stand-in `triton` package: a child Python that imports triton gets kernellab's."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "child.py"
    script.write_text("import sys\nsys.path.insert(0, sys.argv[1])\nimport triton_tests_plugin  # noqa\n"
                      "import os, subprocess\n"
                      "code = 'import triton, triton.language as tl; print(triton.jit.__module__, tl.int8)'\n"
                      "subprocess.run([sys.executable, '-c', code], check=True, env=dict(os.environ))\n")
    (tmp_path / "_internal_testing.py").write_text("")  # the plugin loads Triton's test helper from here
    env = dict(os.environ, PYTHONPATH=root, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, str(script), os.path.join(root, "benchmarks", "tools")],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0].startswith("kernellab") and out.stderr == ""


def test_dtype_repr_is_tritons_under_install(triton):
    """repr(tl.X) is Triton's evaluatable `triton.language.X` while compat is installed; str stays the IR
    spelling kernellab prints, and uninstall() gives the plain repr back."""
    import triton.language as tl

    names = ["int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
             "bfloat16", "float32", "float64", "float8e4nv", "float8e5", "float8e4b15"]
    for n in names:
        t = getattr(tl, n)
        assert repr(t) == f"triton.language.{n}" and eval(repr(t), {"triton": triton}) is t
    assert str(tl.float32) == "f32"
    kernellab.compat.uninstall()
    try:
        assert repr(kl_tl.float32) == "f32"
    finally:
        kernellab.compat.install()


def test_jit_cache_hook_and_preload(triton):
    """knobs.runtime.jit_cache_hook sees each compile with its specialization data; `preload` of that data
    (here in a fresh process's stead: the cache cleared) compiles the same kernel, which launches without
    another compile and gives NumPy's result; a hook returning True takes the compile over."""
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, out_ptr, pair, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(out_ptr + o, tl.load(x_ptr + o) * pair[0] + pair[1][0])

    seen = []
    knobs = triton.knobs
    with knobs.runtime.scope():
        knobs.runtime.jit_cache_hook = lambda **kw: seen.append(kw) and False
        x = torch.randn(32, dtype=torch.float32)
        out = torch.full((32,), float("nan"))
        pair = (3.0, (tl.constexpr(-2.0),))
        warm = scale.warmup(x, out, pair, N=32, grid=(1,))
        assert len(seen) == 1 and seen[0]["is_manual_warmup"] and "scale[" in seen[0]["repr"]
        data = seen[0]["compile"]["specialization_data"]
        scale.device_caches[0][0].clear()
        pre = scale.preload(data)
        assert pre.hash == warm.hash and len(seen) == 1
        scale[(1,)](x, out, pair, N=32)
        assert len(seen) == 1  # the preloaded kernel served the launch
        # x*3 - 2 cancels near x = 2/3: an absolute bound of fp32's rounding of x*3 as well
        np.testing.assert_allclose(out.double().numpy(), x.double().numpy() * 3.0 - 2.0, rtol=1e-6, atol=1e-6)
        knobs.runtime.jit_cache_hook = lambda **kw: True
        assert scale.warmup(x, out, pair, N=16, grid=(1,)) is None
    with pytest.raises(kernellab.LaunchError, match="specialization data"):
        scale.preload('{"name": "other", "kernellab": ""}')


def test_compile_astsource_builds_a_kernel_for_a_signature(triton):
    """triton.compile(ASTSource(...)) compiles for Triton's type strings, without arguments or a launch."""
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * s, mask=offs < n)

    src = triton.compiler.ASTSource(fn=scale, signature={"x_ptr": "*fp16", "out_ptr": "*fp32", "n": "i32",
                                                         "s": "fp32", "BLOCK": "constexpr"},
                                    constexprs={(4,): 64})
    ck = triton.compile(src)
    assert ck.name == "scale" and "tt.load" in ck.asm["ttir"]
    assert "f16" in ck.signature and "f32" in ck.signature and "i32" in ck.signature
    assert ck.arg_names == ["x_ptr", "out_ptr", "n", "s"]
    x = torch.linspace(-2, 3, 50, dtype=torch.float16)
    out = torch.full((64,), float("nan"))
    ck[(1,)](x, out, 50, 1.5)  # what it compiled runs like a warmed-up kernel
    np.testing.assert_allclose(out[:50].numpy(), x.double().numpy() * 1.5, rtol=1e-6)
    assert torch.isnan(out[50:]).all()
    with pytest.raises(kernellab.KernelLabError, match="unknown type 'q7'"):
        triton.compile(triton.compiler.ASTSource(fn=scale, signature={"x_ptr": "q7"}, constexprs={}))


def test_compile_astsource_raises_tritons_compilation_error(triton):
    import triton.language as tl
    from triton.compiler.errors import CompilationError

    @triton.jit
    def bad():
        tl.store(undefined_name, 1)  # noqa: F821

    with pytest.raises(CompilationError, match="undefined_name"):
        triton.compile(triton.compiler.ASTSource(fn=bad, signature={}, constexprs={}))

    @triton.jit(do_not_specialize=["N"])
    def both(N: tl.constexpr):
        pass

    for compile_it in (lambda: triton.compile(triton.compiler.ASTSource(fn=both, signature={}, constexprs={"N": 5})),
                       lambda: both[(1,)](5)):
        with pytest.raises(triton.TritonError, match="N marked as constexpr and listed in do_not_specialize"):
            compile_it()


def test_must_use_result_refuses_a_dropped_result(triton):
    import triton.language as tl

    @triton.must_use_result("Assign it.")
    @triton.jit
    def twice(x):
        return x * 2

    @triton.jit
    def drops():
        twice(tl.full((16,), 1.0, tl.float32))

    @triton.jit
    def keeps():
        a = twice(tl.full((16,), 1.0, tl.float32))  # noqa: F841

    triton.compile(triton.compiler.ASTSource(fn=keeps, signature={}, constexprs={}))
    with pytest.raises(triton.CompilationError, match=r"The result of twice is not being used\. Assign it\."):
        triton.compile(triton.compiler.ASTSource(fn=drops, signature={}, constexprs={}))


def test_autotune_and_heuristics_expose_base_fn(triton):
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"B": 16})], key=["n"])
    @triton.heuristics({"E": lambda a: a["n"] % 2 == 0})
    @triton.jit
    def k(x, n, B: tl.constexpr, E: tl.constexpr):
        pass

    assert k.base_fn.__name__ == "k" and k.fn.base_fn is k.base_fn


def _aggregate_kernel(triton):
    import triton.language as tl

    @tl.core._aggregate
    class Scaled:
        """A tile with a compile-time scale: the struct crosses a helper call and a loop."""
        x: tl.tensor
        k: tl.constexpr

        def __init__(self, x, k):
            self.x = x
            self.k = k

        @triton.jit
        def value(self):
            return self.x * self.k

        @triton.jit
        def add(self, y):
            return Scaled(self.x + y, self.k)

    @triton.jit
    def bump(s):
        return s.add(1.0)

    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        s = Scaled(tl.load(x_ptr + offs, mask=offs < n), 3)
        for _ in range(n // 16):  # a runtime loop carries the aggregate
            s = bump(s)
        tl.store(out_ptr + offs, s.value(), mask=offs < n)

    return kernel, Scaled


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_aggregate_values_cross_calls_and_loops(triton, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    kernel, _ = _aggregate_kernel(triton)
    n = 50
    x = torch.randn(n, dtype=torch.float64).float().to(device)
    out = torch.full((n,), float("nan"), device=device)
    kernel[(1,)](x, out, n, BLOCK=64)
    np.testing.assert_allclose(out.cpu().numpy(), (x.cpu().double().numpy() + n // 16) * 3, rtol=1e-6)


def test_aggregate_fields_are_checked(triton):
    import triton.language as tl

    kernel, Scaled = _aggregate_kernel(triton)
    ck = triton.compile(triton.compiler.ASTSource(fn=kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32",
                                                                        "n": "i32"}, constexprs={"BLOCK": 64}))
    assert "tt.call" in ck.asm["ttir"] or "scf.for" in ck.asm["ttir"]

    @tl.core._aggregate
    class Half:
        a: tl.constexpr
        b: tl.constexpr

        def __init__(self, a, set_b=False):
            self.a = a
            if set_b:
                self.b = a

    with pytest.raises(AttributeError, match="no field 'c'"):
        Half(1, set_b=True).c = 2
    with pytest.raises(AttributeError, match="did not set field 'b'"):
        Half(1)
    with pytest.raises(TypeError, match="Scaled.x is annotated tensor, got int"):
        Scaled(3, 2)


def test_fp8_dot_refuses_more_imprecise_accumulations_than_k(triton):
    import triton.language as tl

    @triton.jit
    def k(LIMIT: tl.constexpr):
        a = tl.full((64, 32), 1.0, tl.float8e5)
        b = tl.full((32, 64), 1.0, tl.float8e5)
        tl.dot(a, b, max_num_imprecise_acc=LIMIT)

    triton.compile(triton.compiler.ASTSource(fn=k, signature={}, constexprs={"LIMIT": 32}))
    with pytest.raises(triton.CompilationError, match=r"max_num_imprecise_acc \(64\) must be <= K \(32\)"):
        triton.compile(triton.compiler.ASTSource(fn=k, signature={}, constexprs={"LIMIT": 64}))


def test_where_warns_on_a_non_boolean_condition(triton):
    import warnings

    import triton.language as tl

    @triton.jit
    def k(INT: tl.constexpr):
        a = tl.full((64,), 0, tl.uint32)
        c = a if INT else a != 0
        tl.where(c, 1.0, 2.0)

    with pytest.warns(UserWarning, match="non-boolean condition is deprecated; got uint32"):
        triton.compile(triton.compiler.ASTSource(fn=k, signature={}, constexprs={"INT": True}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        triton.compile(triton.compiler.ASTSource(fn=k, signature={}, constexprs={"INT": False}))


def test_cublas_reference_binding(triton):
    """Tutorial 09 and test_warp_specialization take `triton._C.libtriton.nvidia.cublas.CublasLt` as their
    reference: c = a @ b.T, b given as [N, K]."""
    import torch
    from triton._C.libtriton import nvidia

    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(6, 10, generator=g, dtype=torch.float64), torch.randn(7, 10, generator=g, dtype=torch.float64)
    c = torch.full((6, 7), float("nan"), dtype=torch.float64)
    blas = nvidia.cublas.CublasLt(torch.empty(16, dtype=torch.uint8))
    assert blas.matmul(a, b, c) is c
    torch.testing.assert_close(c, a @ b.T)
    with pytest.raises(ValueError, match="a @ b.T"):
        blas.matmul(a, a, c)
    with pytest.raises(NotImplementedError, match="not served"):
        blas.block_scaled_matmul_mxfp8(a, b, c, a, b)
