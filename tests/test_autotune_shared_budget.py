"""The autotuner tries configs over the GPU's shared memory (which build only with fewer pipeline stages, where
Triton refuses them) only after every config that fits failed to run: they cost neither LLVM nor ptxas nor a
timing otherwise. Explicit launches keep the shared-memory ladder. CPU tests with a fake timer, GPU tests
against torch."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target
from kernellab.errors import LaunchError, SharedBudgetExceeded
from kernellab.runtime import autotuner as A
from kernellab.runtime import jit as J


@kl.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


# fp32, 64x64 tiles, BK=128: 64 KiB of operands per stage; 4 stages (256 KiB) are over sm_90's 227 KiB, 3 fit
OVER = dict(BM=64, BN=64, BK=128, num_warps=4, num_stages=4)
FIT_A = dict(BM=32, BN=32, BK=32, num_warps=4, num_stages=3)
FIT_B = dict(BM=32, BN=32, BK=64, num_warps=4, num_stages=2)


def _cfg(d):
    d = dict(d)
    return kl.Config({k: d.pop(k) for k in ("BM", "BN", "BK")}, **d)


def _args(device="cpu", M=64, N=64, K=256):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g).to(device)
    b = torch.randn(K, N, generator=g).to(device)
    c = torch.full((M, N), float("nan"), device=device)
    return a, b, c, M, N, K


def _grid(M, N):
    return lambda meta: (kl.cdiv(M, meta["BM"]), kl.cdiv(N, meta["BN"]))


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """The autotuner's GPU path on the CPU: launches count as GPU launches, the target is sm_90, and
    `_time_config` is a fake timer (config -> ms, or an exception) that records the order it was asked in."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)
    monkeypatch.setattr(J, "current_target", lambda: Target(90))
    timed, table = [], {}

    def fake_time(self, cfg, *a, **k):
        timed.append(cfg)
        t = table[cfg]
        if isinstance(t, Exception):
            raise t
        return t

    monkeypatch.setattr(A.Autotuner, "_time_config", fake_time)
    return timed, table


def _fresh():
    """A JITFunction of its own over _mm: an empty compile cache, whatever the other tests built."""
    return kl.jit(_mm.fn)


def _tune(kern, configs, table, times):
    tuned = kl.autotune(configs, key=["M", "N", "K"])(kern)
    table.update(zip(configs, times))
    a, b, c, M, N, K = _args()
    tuned[_grid(M, N)](a, b, c, M, N, K)  # the chosen config then runs on the CPU interpreter
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)
    return tuned


def test_over_budget_config_is_neither_built_nor_timed_when_others_fit(fake_gpu):
    timed, table = fake_gpu
    over, fa, fb = _cfg(OVER), _cfg(FIT_A), _cfg(FIT_B)
    # the over-budget config would win the timing (as in Liger's mlp, where its fewer stages are 3-10x slower
    # on the GPU, it need not): it is still not tried while a config that fits runs
    kern = _fresh()
    tuned = _tune(kern, [over, fa, fb], table, [0.1, 2.0, 1.0])
    assert timed == [fa, fb]
    assert tuned.best_config is fb
    assert set(tuned.deferred_configs) == {over} and "num_stages=4" in tuned.deferred_configs[over]
    assert tuned.configs_timings[over] == float("inf")
    assert "fastest of 2 configs" in tuned.best_config_reason and "1 over the shared" in tuned.best_config_reason
    # only the GPU passes ran for it: no LLVM IR, no PTX, and no trace records of the probe
    ck = kern.warmup(*_args(), **OVER, grid=(1,))
    assert "ptx" not in ck.asm and not any(r.stage in ("gpu", "llir") for r in ck.trace.passes)
    # the configs that fit were built once, for the target, by the split (the timing launch reuses the build)
    assert "ptx" in kern.warmup(*_args(), **FIT_A, grid=(1,)).asm


def test_over_budget_configs_are_timed_when_no_other_runs(fake_gpu):
    timed, table = fake_gpu
    over, fa = _cfg(OVER), _cfg(FIT_A)
    tuned = _tune(_fresh(), [fa, over], table, [LaunchError("cannot launch"), 3.0])
    assert timed == [fa, over]
    assert tuned.best_config is over and fa in tuned.failed_configs


def test_only_over_budget_configs_are_all_timed(fake_gpu):
    timed, table = fake_gpu
    over, over3 = _cfg(OVER), _cfg(dict(OVER, num_warps=8))
    tuned = _tune(_fresh(), [over, over3], table, [2.0, 1.0])
    assert timed == [over, over3] and tuned.best_config is over3
    assert tuned.best_config_reason.startswith("fastest of 2 configs")


def test_explicit_launch_keeps_the_ladder(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _fresh().warmup(*_args(), **OVER, grid=(1,))
    n = len(ck.trace.passes)
    with pytest.raises(SharedBudgetExceeded) as e:
        ck.build_gpu(Target(90), ladder=False)
    assert e.value.required > e.value.limit == 232448
    assert len(ck.trace.passes) == n and "ptx" not in ck.asm
    ck.build_gpu(Target(90))  # the default: built with fewer stages, the trace says so
    assert ck.shared <= 232448 and "ptx" in ck.asm
    assert any("built with num_stages=3" in note for note in ck.trace.notes)
    with pytest.raises(SharedBudgetExceeded):  # a kernel built through the ladder still does not fit as asked
        ck.build_gpu(Target(90), ladder=False)


def test_config_built_through_the_ladder_before_tuning_is_still_deferred(fake_gpu):
    timed, table = fake_gpu
    kern = _fresh()
    kern.warmup(*_args(), **OVER, grid=(1,)).build_gpu(Target(90))  # e.g. an explicit launch came first
    over, fa = _cfg(OVER), _cfg(FIT_A)
    tuned = _tune(kern, [over, fa], table, [0.1, 2.0])
    assert timed == [fa] and tuned.best_config is fa


@pytest.mark.gpu
@pytest.mark.parametrize("with_fit", [True, False])
def test_gpu_autotune_with_an_over_budget_config(with_fit):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    configs = [_cfg(OVER)] + ([_cfg(FIT_A), _cfg(FIT_B)] if with_fit else [_cfg(dict(OVER, num_warps=8))])
    tuned = kl.autotune(configs, key=["M", "N", "K"])(_fresh())
    a, b, c, M, N, K = _args("cuda", 256, 192, 1024)
    tuned[_grid(M, N)](a, b, c, M, N, K)
    torch.cuda.synchronize()
    ref = (a.double() @ b.double()).float()
    torch.testing.assert_close(c, ref, rtol=2e-2, atol=2e-2 * K ** 0.5)  # tf32 products
    if with_fit:
        assert tuned.best_config is not configs[0] and configs[0] in tuned.deferred_configs
    else:  # none fits: both are timed, built with fewer stages
        assert set(tuned.deferred_configs) == set(configs) and tuned.best_config in configs
        assert all(t < float("inf") for t in tuned.configs_timings.values()), tuned.configs_timings
