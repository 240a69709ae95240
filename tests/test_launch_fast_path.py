"""The warm-launch fast path (a generated binder per kernel, one dict lookup) launches exactly what the slow path
(binding, specialization, the compile cache) would: the same compiled kernel and the same packed arguments, and it
never serves a launch that specializes differently (an int from 16 to 17 or to 1, a misaligned pointer, another
dtype, another constexpr value or type, None for a tensor, a descriptor of another stride class, launch options).
On the CPU the tensors are stand-ins that say they are CUDA tensors and cuLaunchKernel is a stub
(benchmarks/tools/launch_overhead.py's fake_gpu); the GPU test checks results against torch."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import kernellab
import kernellab.language as tl
from kernellab.errors import CompilationError, LaunchError

torch = pytest.importorskip("torch")

_TOOL = Path(__file__).resolve().parents[1] / "benchmarks" / "tools" / "launch_overhead.py"
_spec = importlib.util.spec_from_file_location("launch_overhead_under_test", _TOOL)
lo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lo)
T = lo.FakeCudaTensor


@kernellab.jit
def many(out, x, n, alpha, m, OPT, y=None, beta=2.0, BLOCK: tl.constexpr = 64, FLAG: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n) * alpha + m * beta
    if OPT is not None:
        v += tl.load(OPT + offs, mask=offs < n)
    if y is not None:
        v += tl.load(y + offs, mask=offs < n)
    if FLAG:
        v = -v
    tl.store(out + offs, v, mask=offs < n)


@kernellab.jit(do_not_specialize=["n"])
def nospec(out, x, n, BLOCK: tl.constexpr = 64):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)


@kernellab.jit
def with_desc(d, out, ld, BM: tl.constexpr = 16):
    tile = d.load([0, 0])
    r = tl.arange(0, BM)[:, None]
    c = tl.arange(0, BM)[None, :]
    tl.store(out + r * ld + c, tile)


@pytest.fixture
def gpu(monkeypatch):
    """Fake GPU launches; `gpu.slow` counts launches that went through binding and specialization."""
    launches = []
    with lo.fake_gpu(launches):
        slow = []
        orig = type(many)._get_compiled

        def counted(self, *a, **k):
            slow.append(self.__name__)
            return orig(self, *a, **k)

        monkeypatch.setattr(type(many), "_get_compiled", counted)
        yield type("G", (), {"launches": launches, "slow": slow})
    # what was compiled and loaded here holds stub launchers: no later (GPU) test may find it
    for k in (many, nospec, with_desc, shadowing, with_fn):
        k.cache.clear()
        k._fast.clear()
        k._binder = None


def both_ways(gpu, k, *args, grid=(2,), **kwargs):
    """Launch warm (fast path if an entry matches), then the same call again with the fast path emptied (the slow
    path): the same compiled kernel and the same packed bytes. Returns (compiled kernel, went through slow path)."""
    n_slow = len(gpu.slow)
    ck = k[grid](*args, **kwargs)
    took_slow = len(gpu.slow) > n_slow
    packed = gpu.launches[-1]
    saved = dict(k._fast)
    k._fast.clear()
    ck2 = k[grid](*args, **kwargs)
    assert ck2 is ck, "the fast path launched another compiled kernel than binding picks"
    assert gpu.launches[-1] == packed, "the fast path packed other arguments than binding"
    k._fast.update(saved)
    return ck, took_slow


def test_warm_launch_skips_binding_and_matches_it(gpu):
    x, out = T(), T(ptr=0x7F0000010000)
    ck, slow = both_ways(gpu, many, out, x, 100, 1.5, 7, None)
    ck2, slow2 = both_ways(gpu, many, out, x, 100, 1.5, 7, None)
    assert ck2 is ck and not slow2
    # new values of the same classes: the warm kernel, new bytes
    ck3, slow3 = both_ways(gpu, many, T(ptr=0x7F0000020000), T(ptr=0x7F0000030000), 200, -3.0, 9, None)
    assert ck3 is ck and not slow3


@pytest.mark.parametrize("change", ["int16to17", "int_to_1", "misaligned", "dtype", "constexpr", "constexpr_type",
                                    "none_to_tensor", "option", "wide_int", "bool_for_int"])
def test_what_specializes_differently_never_shares_the_warm_kernel(gpu, change):
    x, out = T(), T(ptr=0x7F0000010000)
    base = dict(out=out, x=x, n=96, alpha=1.5, m=32, OPT=None)
    kw = {}
    ck, _ = both_ways(gpu, many, **base)
    both_ways(gpu, many, **base)
    new = dict(base)
    if change == "int16to17":
        new["m"] = 33
    elif change == "int_to_1":
        new["m"] = 1
    elif change == "misaligned":
        new["x"] = T(ptr=0x7F0000000004)
    elif change == "dtype":
        new["x"] = T(dtype=torch.float16)
    elif change == "constexpr":
        kw["BLOCK"] = 128
    elif change == "constexpr_type":
        kw["FLAG"] = False  # 0 and False compile apart (as Triton's key tells them apart)
    elif change == "none_to_tensor":
        new["OPT"] = T(ptr=0x7F0000040000)
    elif change == "option":
        kw["num_warps"] = 2
    elif change == "wide_int":
        new["n"] = 2**31 + 16
    elif change == "bool_for_int":
        new["m"] = True
    ck2, slow = both_ways(gpu, many, **new, **kw)
    assert slow and ck2 is not ck
    again, slow_again = both_ways(gpu, many, **new, **kw)  # and that one is warm now
    assert again is ck2 and not slow_again


def test_positional_keyword_and_default_arguments_share_one_entry(gpu):
    x, out = T(), T(ptr=0x7F0000010000)
    ck, _ = both_ways(gpu, many, out, x, 100, 1.5, 7, None)
    for args, kwargs in [((out, x), dict(n=100, alpha=1.5, m=7, OPT=None)),
                         ((), dict(m=7, OPT=None, alpha=1.5, n=100, x=x, out=out)),
                         ((out, x, 100, 1.5, 7, None, None, 2.0, 64), {}),
                         ((out, x, 100, 1.5, 7, None), dict(beta=2.0, FLAG=0)),
                         ((out, x, 100, 1.5, 7, None), dict(BLOCK=kernellab.language.constexpr(64)))]:
        ck2, slow = both_ways(gpu, many, *args, **kwargs)
        assert ck2 is ck and not slow, (args, kwargs)
    # a default given another value is another launch: beta is a float either way (the same kernel, other bytes)
    ck3, _ = both_ways(gpu, many, out, x, 100, 1.5, 7, None, beta=3.0)
    assert ck3 is ck and gpu.launches[-1] != gpu.launches[0]


def test_bad_calls_still_get_the_slow_paths_errors(gpu):
    x, out = T(), T(ptr=0x7F0000010000)
    many[(1,)](out, x, 100, 1.5, 7, None)
    with pytest.raises(CompilationError, match="no parameter 'BLOK'"):
        many[(1,)](out, x, 100, 1.5, 7, None, BLOK=32)
    with pytest.raises(CompilationError, match="wrong arguments"):
        many[(1,)](out, x, 100, 1.5)
    with pytest.raises(CompilationError, match="wrong arguments"):
        many[(1,)](out, x, 100, 1.5, 7, None, x=x)
    cpu = torch.zeros(4)
    with pytest.raises(LaunchError, match="different devices"):
        many[(1,)](out, cpu, 100, 1.5, 7, None)


def test_do_not_specialize_shares_one_kernel_across_int_classes(gpu):
    x, out = T(), T(ptr=0x7F0000010000)
    ck, _ = both_ways(gpu, nospec, out, x, 16)
    for n in (17, 1, 0, 48):
        ck2, slow = both_ways(gpu, nospec, out, x, n)
        assert ck2 is ck and not slow
    ck3, slow = both_ways(gpu, nospec, out, T(ptr=0x7F0000000004), 16)  # x is specialized: its alignment decides
    assert slow and ck3 is not ck


def test_descriptor_shapes_and_strides_key_by_class(gpu):
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    def desc(rows, cols, stride, ptr=0x7F0000100000):
        return TensorDescriptor(T(ptr=ptr, shape=(rows, stride)), [rows, cols], [stride, 1], [16, 16])

    out = T(ptr=0x7F0000010000)
    ck, _ = both_ways(gpu, with_desc, desc(64, 64, 64), out, 16)
    ck2, slow = both_ways(gpu, with_desc, desc(128, 32, 96, ptr=0x7F0000200000), out, 16)
    assert ck2 is ck and not slow  # the same classes (multiples of 16): warm, other shape and stride bytes
    ck3, slow = both_ways(gpu, with_desc, desc(64, 60, 72), out, 16)  # 60, 72: not multiples of 16
    assert slow and ck3 is not ck


def test_grid_function_sees_the_bound_arguments(gpu):
    x, out = T(), T(ptr=0x7F0000010000)
    seen = []

    def grid(meta):
        seen.append(meta)
        return (meta["n"] // meta["BLOCK"],)

    many[grid](out, x, 256, 1.5, 7, None, BLOCK=kernellab.language.constexpr(32))
    many[grid](out, x, 256, 1.5, 7, None, BLOCK=kernellab.language.constexpr(32))
    assert len(seen) == 2 and gpu.launches[-1][0] == 8
    slow_meta, fast_meta = seen
    assert fast_meta == slow_meta and fast_meta["BLOCK"] == 32 and fast_meta["num_warps"] == 4


def test_autotuner_warm_path_is_one_lookup_and_follows_the_cache(gpu):
    calls = []

    def bench(fn, **_):
        fn()
        calls.append(1)
        return float(len(calls))

    tuned = kernellab.autotune([kernellab.Config({"BLOCK": 64}), kernellab.Config({"BLOCK": 128}, num_warps=2)],
                               key=["n"], do_bench=bench)(many)
    x, out = T(), T(ptr=0x7F0000010000)
    tuned[(1,)](out, x, 100, 1.5, 7, None)
    assert len(calls) == 2 and tuned.best_config.kwargs == {"BLOCK": 64}
    n_slow = len(gpu.slow)
    tuned[(1,)](out, x, 100, 1.5, 7, None)
    tuned[(1,)](out, x, n=100, alpha=1.5, m=7, OPT=None)
    assert len(calls) == 2 and len(gpu.slow) == n_slow  # neither retuned nor bound
    tuned[(1,)](out, x, 101, 1.5, 7, None)  # another key value: tuned again
    assert len(calls) == 4
    tuned[(1,)](out, x, True, 1.5, 7, None)  # True is not 1 (the cache's key tells them apart)
    assert len(calls) == 6
    tuned.cache.clear()  # a cleared cache retunes, as before
    tuned[(1,)](out, x, 100, 1.5, 7, None)
    assert len(calls) == 8


# the same text as `many`, as a JITFunction of its own: the GPU test's fast-path entries start empty
many_gpu = kernellab.jit(many.fn)


@pytest.mark.gpu
def test_many_argument_kernel_repeated_launches_on_the_gpu():
    """A 12-argument kernel launched back to back with changing values (ints across 16/17/1, floats, None and a
    tensor for OPT, constexpr FLAG): each result matches torch."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for it in range(40):
        n = [1000, 1024, 17, 16, 1][it % 5]
        m = [16, 17, 1, 3][it % 4]
        x = torch.randn(n + it % 3, device="cuda", generator=gen)[it % 3:]  # misaligned views too
        y = torch.randn(n, device="cuda", generator=gen)
        opt = torch.randn(n, device="cuda", generator=gen) if it % 2 else None
        out = torch.full((n,), float("nan"), device="cuda")
        alpha, beta, flag = 0.5 + it, -1.25 * it, it % 3 == 0
        kw = dict(FLAG=flag) if it % 4 else dict(FLAG=flag, beta=beta)
        b = beta if "beta" in kw else 2.0
        many_gpu[(triton_cdiv(n, 64),)](out, x, n, alpha, m, opt, y, **kw)
        want = x.double() * alpha + m * b + y.double() + (opt.double() if opt is not None else 0)
        want = -want if flag else want
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-4)
    assert len(many_gpu._fast) >= 2


@pytest.mark.gpu
def test_autotuned_many_argument_kernel_on_the_gpu():
    """The same kernel autotuned over BLOCK: warm launches (the autotuner's one lookup, then the fast path) with
    changing values give torch's results."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    tuned = kernellab.autotune([kernellab.Config({"BLOCK": 32}, num_warps=1), kernellab.Config({"BLOCK": 128})],
                               key=["n"])(many_gpu)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for it in range(12):
        n = [1000, 77][it % 2]
        x, y = torch.randn(n, device="cuda", generator=gen), torch.randn(n, device="cuda", generator=gen)
        out = torch.full((n,), float("nan"), device="cuda")
        alpha, m = 0.25 * it, [16, 17, 1][it % 3]
        tuned[lambda meta: (triton_cdiv(n, meta["BLOCK"]),)](out, x, n, alpha, m, None, y=y, FLAG=it % 2 == 1)
        want = x.double() * alpha + m * 2.0 + y.double()
        torch.testing.assert_close(out.double(), -want if it % 2 else want, rtol=1e-5, atol=1e-5)
    assert len(tuned.cache) == 2


def triton_cdiv(a, b):
    return (a + b - 1) // b


@kernellab.jit
def shadowing(out, input, type, int, BLOCK: tl.constexpr = 16):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(input + offs) * type + int)


def test_parameters_named_like_builtins(gpu):
    """The generated binder uses no name a parameter can shadow (`type`, `int`, `input` are parameter names)."""
    out, x = T(ptr=0x7F0000010000), T()
    ck, _ = both_ways(gpu, shadowing, out, x, 2.0, 16)
    ck2, slow = both_ways(gpu, shadowing, out, x, 3.0, 32)
    assert ck2 is ck and not slow
    ck3, slow = both_ways(gpu, shadowing, out, x, 3.0, 33)
    assert slow and ck3 is not ck


def test_raw_packing_matches_converting_packing():
    """pack_raw (what the fast path uses: pointers already addresses) writes the bytes pack writes for tensors;
    a signature with a scalar that needs converting (bf16) packs through the converting packer."""
    from kernellab.runtime.driver import ArgPacker

    p = ArgPacker(["ptr", "i32", "f32", "i1", "u64", "i8", "f16"])
    t = T(ptr=0x7F0000001230)
    p.pack([t, -5, 1.25, True, 2**63 + 7, -3, 0.5])
    want = p.as_bytes()
    p.pack_raw((0x7F0000001230, -5, 1.25, True, 2**63 + 7, -3, 0.5))
    assert p.as_bytes() == want
    q = ArgPacker(["ptr", "bf16"])
    assert q.pack_raw is q.pack


def test_a_patched_run_still_sees_every_launch(gpu, monkeypatch):
    """kernel[grid] goes straight to the fast path only while JITFunction.run is kernellab's own: a run patched
    (tests counting launches) or overridden by a subclass sees every launch."""
    x, out = T(), T(ptr=0x7F0000010000)
    many[(1,)](out, x, 100, 1.5, 7, None)
    seen = []
    orig = type(many).run
    monkeypatch.setattr(type(many), "run", lambda self, *a, **k: seen.append(1) or orig(self, *a, **k))
    many[(1,)](out, x, 100, 1.5, 7, None)
    assert seen == [1]


@kernellab.jit
def _relu(x):
    return tl.maximum(x, 0.0)


@kernellab.jit
def _neg(x):
    return -x


@kernellab.jit
def with_fn(out, x, ACT: tl.constexpr, DT: tl.constexpr = tl.float32):
    offs = tl.arange(0, 16)
    tl.store(out + offs, ACT(tl.load(x + offs)).to(DT))


def test_function_and_dtype_constexprs_are_keyed_by_what_they_are(gpu):
    """An activation passed as a constexpr (Liger, attorch) or a dtype: warm launches take the fast path, another
    function or dtype is another kernel."""
    out, x = T(ptr=0x7F0000010000), T()
    ck, _ = both_ways(gpu, with_fn, out, x, _relu)
    ck2, slow = both_ways(gpu, with_fn, out, x, ACT=_relu, DT=tl.float32)
    assert ck2 is ck and not slow
    ck3, slow = both_ways(gpu, with_fn, out, x, _neg)
    assert slow and ck3 is not ck
    ck4, slow = both_ways(gpu, with_fn, out, x, _relu, tl.float16)
    assert slow and ck4 not in (ck, ck3)


def test_warm_launcher_checks_grids_as_launch_does():
    """LoadedKernel.warm_launcher: the grid forms launch takes (1 to 3 dims, a zero dim launches nothing, over the
    device limit or negative is an error), from any thread."""
    import threading

    from kernellab.runtime.driver import LoadedKernel

    calls = []
    ld = LoadedKernel("k", "F", ["ptr", "i32"], device_index=0, props=lo._PROPS, attributes={},
                      launch_fn=lambda *a: calls.append(a[1:4]) or (0,))
    go = ld.warm_launcher(4, 0)
    for grid in [(3,), (3, 2), (3, 2, 5)]:
        go(grid, 0, (0x1000, 7))
    assert calls == [(3, 1, 1), (3, 2, 1), (3, 2, 5)]
    go((0, 4), 0, (0x1000, 7))
    assert len(calls) == 3
    with pytest.raises(LaunchError, match="over the device limit"):
        go((1, 70000), 0, (0x1000, 7))
    with pytest.raises(LaunchError, match="negative"):
        go((-1,), 0, (0x1000, 7))
    with pytest.raises(LaunchError, match="does not fit"):
        go((1,), 0, (0x1000, 2**40))
    t = threading.Thread(target=go, args=((2,), 0, (0x1000, 7)))
    t.start()
    t.join()
    assert calls[-1] == (2, 1, 1)
    with pytest.raises(LaunchError, match="num_warps=64 is out of range"):
        ld.warm_launcher(64, 0)
