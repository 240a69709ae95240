"""The autotuner's GPU builds in worker processes (runtime/compile_pool.py): what a worker files in the disk cache is
what the sequential build makes (same PTX, cubin, trace records), a config a worker cannot build is built by the
parent as before, and KERNELLAB_COMPILE_WORKERS=0 turns the workers off. CPU tests: the autotuner's GPU path with
a fake timer (as in test_autotune_shared_budget.py)."""
import os
import pickle

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target
from kernellab.runtime import autotuner as A
from kernellab.runtime import compile_pool as P
from kernellab.runtime import jit as J

pytestmark = pytest.mark.skipif(not J._can_assemble(), reason="no ptxas here: the GPU build stops at PTX")


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


# fp32 64x64x128 at 4 stages is over sm_90's shared memory (see test_autotune_shared_budget.py): no worker files it
CONFIGS = [dict(BM=32, BN=32, BK=32, num_warps=4, num_stages=3), dict(BM=32, BN=32, BK=64, num_warps=4, num_stages=2),
           dict(BM=32, BN=32, BK=32, num_warps=8, num_stages=3), dict(BM=64, BN=64, BK=128, num_warps=4, num_stages=4)]


def _cfg(d):
    d = dict(d)
    return kl.Config({k: d.pop(k) for k in ("BM", "BN", "BK")}, **d)


def _args(M=64, N=64, K=256):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(M, K, generator=g) * 2 - 0.5
    b = torch.randn(K, N, generator=g)
    return a, b, torch.full((M, N), float("nan")), M, N, K


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: True)
    monkeypatch.setattr(J, "current_target", lambda: Target(90))
    monkeypatch.setattr(A.Autotuner, "_time_config", lambda self, cfg, *a, **k: 1.0 + 0.1 * cfg.num_warps)
    return tmp_path


def _tune(configs):
    kern = kl.jit(_mm.fn)  # a compile cache of its own
    tuned = kl.autotune([_cfg(c) for c in configs], key=["M", "N", "K"])(kern)
    a, b, c, M, N, K = _args()
    tuned[lambda meta: (kl.cdiv(M, meta["BM"]), kl.cdiv(N, meta["BN"]))](a, b, c, M, N, K)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)
    return kern, tuned


def _records(ck):
    """The trace's records, ptxas' "Compile time = ... ms" left out (it differs from one run to the next)."""
    return [(r.name, r.stage, "\n".join(ln for ln in r.ir.splitlines() if "Compile time" not in ln))
            for r in ck.trace.passes]


def test_workers_file_what_the_sequential_build_makes(fake_gpu, monkeypatch, tmp_path_factory):
    monkeypatch.setenv(P.KNOB, "2")
    before = dict(P.stats)
    kern, tuned = _tune(CONFIGS)
    assert P.stats["jobs"] - before["jobs"] == 4
    assert P.stats["built"] - before["built"] == 3  # the config over the shared memory is not filed
    assert set(tuned.deferred_configs) == {tuned.configs[3]}
    parallel = [kern.warmup(*_args(), **c, grid=(1,)) for c in CONFIGS[:3]]
    for ck, c in zip(parallel, CONFIGS[:3]):
        assert any("built by a compile worker" in n for n in ck.trace.notes)
        # filed in the disk cache too: another kernel object (another process) loads it
        again = kl.jit(_mm.fn).warmup(*_args(), **c, grid=(1,)).build_gpu(Target(90))
        assert any("loaded from the disk cache" in n for n in again.trace.notes) and again.asm["ptx"] == ck.asm["ptx"]
    # the same builds made one after another in a fresh cache, without workers
    monkeypatch.setenv(P.KNOB, "0")
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path_factory.mktemp("sequential")))
    kern2, tuned2 = _tune(CONFIGS)
    for ck, c in zip(parallel, CONFIGS[:3]):
        ck2 = kern2.warmup(*_args(), **c, grid=(1,))
        assert not any("compile worker" in n or "disk cache" in n for n in ck2.trace.notes)
        assert ck.asm["ptx"] == ck2.asm["ptx"] and ck.asm["gpu"] == ck2.asm["gpu"] and ck.asm["llir"] == ck2.asm["llir"]
        assert (ck.n_regs, ck.n_spills, ck.shared, ck.arg_kinds, ck.shared_plan, ck.report.get("n_regs")) == \
            (ck2.n_regs, ck2.n_spills, ck2.shared, ck2.arg_kinds, ck2.shared_plan, ck2.report.get("n_regs"))
        assert _records(ck) == _records(ck2)
    assert tuned.best_config.all_kwargs() == tuned2.best_config.all_kwargs()
    # the config over the shared memory: deferred with the same reason; in the parallel run its GPU passes ran in a
    # worker only (the parent's build took the worker's probe)
    assert list(tuned.deferred_configs.values()) == list(tuned2.deferred_configs.values())
    assert kern.warmup(*_args(), **CONFIGS[3], grid=(1,)).__dict__.get("_shared_probes")
    assert not kern2.warmup(*_args(), **CONFIGS[3], grid=(1,)).__dict__.get("_shared_probes")


def test_a_probed_config_still_builds_down_the_ladder(fake_gpu, monkeypatch, tmp_path_factory):
    """When no config that fits runs, the one over the shared memory is built with fewer stages (the ladder),
    its first rung from the worker's probe: the same kernel as a build without workers."""
    monkeypatch.setenv(P.KNOB, "2")
    monkeypatch.setattr(A.Autotuner, "_time_config", lambda self, cfg, *a, **k: (
        float("inf") if cfg.kwargs["BM"] == 32 else self.fn.warmup(*a[0], **cfg.all_kwargs()).build_gpu(Target(90))
        and 1.0))
    kern, tuned = _tune([CONFIGS[0], CONFIGS[3]])
    ck = kern.warmup(*_args(), **CONFIGS[3], grid=(1,))
    assert ck.__dict__.get("_shared_probes") and "ptx" in ck.asm
    assert any("built with num_stages=3" in n for n in ck.trace.notes)
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path_factory.mktemp("no_workers")))
    fresh = kl.jit(_mm.fn).warmup(*_args(), **CONFIGS[3], grid=(1,)).build_gpu(Target(90))
    ladder = [n for n in ck.trace.notes if n.startswith("shared memory:")]
    assert fresh.asm["ptx"] == ck.asm["ptx"] and ladder == [n for n in fresh.trace.notes if n.startswith("shared memory:")]


def test_off_with_zero_workers(fake_gpu, monkeypatch):
    monkeypatch.setenv(P.KNOB, "0")
    before = dict(P.stats)
    monkeypatch.setattr(P, "_Worker", lambda: pytest.fail("no worker may start"))
    _tune(CONFIGS[:3])
    assert P.stats == before


def test_a_dead_worker_leaves_the_build_to_the_parent(fake_gpu, monkeypatch):
    monkeypatch.setenv(P.KNOB, "2")

    class Dead:
        def build(self, job):
            raise EOFError("worker closed its pipe")

        def close(self):
            pass

        def alive(self):
            return False

    monkeypatch.setattr(P, "_take_worker", Dead)
    before = dict(P.stats)
    kern, _ = _tune(CONFIGS[:3])
    assert P.stats["built"] == before["built"] and P.stats["jobs"] - before["jobs"] == 3
    ck = kern.warmup(*_args(), **CONFIGS[0], grid=(1,))
    assert "ptx" in ck.asm and not any("compile worker" in n or "disk cache" in n for n in ck.trace.notes)


def test_a_worker_with_another_key_files_nothing(fake_gpu):
    ck = kl.jit(_mm.fn).warmup(*_args(), **CONFIGS[0], grid=(1,))
    target = Target(90)
    module = P._with_big_stack(lambda: pickle.loads(pickle.dumps(ck.module)))  # the worker's copy
    job = {"module": module, "tile": ck.asm["tile"], "key": "0" * 64, "options": ck.gpu_options(target),
           "target": target, "shared_limit": J._max_shared(90), "env": dict(os.environ),
           "name": ck.trace.kernel}
    assert P._build_one(job) == {"filed": False, "why": "key mismatch"}
    job["key"] = J._gpu_cache_key(ck.asm["tile"], job["options"], target)
    res = P._build_one(job)
    assert res["filed"] is True and res["out"]["ptx"] and res["passes"][-1].stage == "cubin"
    assert J._load_cached(job["key"], ck.trace) is not None


@pytest.mark.gpu
def test_gpu_autotune_with_workers(monkeypatch, tmp_path):
    """On a GPU: the configs built by workers load, launch and compute the product (fp32 inputs: tf32 dots)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(P.KNOB, "4")
    before = dict(P.stats)
    kern = kl.jit(_mm.fn)
    tuned = kl.autotune([_cfg(c) for c in CONFIGS], key=["M", "N", "K"])(kern)
    a, b, c, M, N, K = (t.cuda() if isinstance(t, torch.Tensor) else t for t in _args(256, 192, 1024))
    tuned[lambda meta: (kl.cdiv(M, meta["BM"]), kl.cdiv(N, meta["BN"]))](a, b, c, M, N, K)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=2e-2, atol=2e-2 * K ** 0.5)
    assert P.stats["built"] - before["built"] == 3
    assert set(tuned.deferred_configs) == {tuned.configs[3]} and tuned.best_config is not tuned.configs[3]


def test_a_worker_answers_a_bad_job_and_goes_on():
    w = P._Worker()
    try:
        res = w.build(pickle.dumps({"bogus": 1}))
        assert res["filed"] is False and "KeyError" in res["why"]
        assert w.alive() and w.build(pickle.dumps({}))["filed"] is False
    finally:
        w.close()
    assert not w.alive()


def test_worker_count_default_and_share(monkeypatch):
    """Unset means `auto` (the CPUs less one, capped); under pytest-xdist each process counts its share of the
    CPUs; 0 turns the workers off."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    monkeypatch.delenv(P.KNOB, raising=False)
    assert P.n_workers() == P.MAX_WORKERS
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    assert P.n_workers() == 3
    monkeypatch.setenv(P.KNOB, "0")
    assert P.n_workers() == 0
    monkeypatch.setenv(P.KNOB, "5")
    assert P.n_workers() == 5
