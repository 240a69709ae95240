"""A kernel whose pipeline buffers do not fit the GPU's shared memory is built with fewer stages (down to one)
instead of failing at launch, and the trace says so."""
import torch

import kernellab as kl
import kernellab.language as tl


@kl.jit
def big_tile_matmul(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def test_too_many_stages_are_cut_to_fit():
    BM, BN, BK, K = 128, 128, 128, 1024  # 64 KiB of operands per stage: 5 stages cannot fit 227 KiB
    a, b = torch.zeros(BM, K, dtype=torch.float16), torch.zeros(K, BN, dtype=torch.float16)
    ck = big_tile_matmul.warmup(a, b, torch.empty(BM, BN), K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=5,
                                grid=(1,))
    ck.build_gpu()
    assert ck.shared <= 232448
    notes = " ".join(ck.trace.notes)
    assert "num_stages=5 is over sm_90" in notes and "built with num_stages=" in notes
    assert sum(p.name == "allocate_shared" for p in ck.trace.passes) == 1  # the trace keeps one GPU build


def test_a_fitting_kernel_keeps_its_stages():
    BM, BN, BK, K = 64, 64, 32, 128
    a, b = torch.zeros(BM, K, dtype=torch.float16), torch.zeros(K, BN, dtype=torch.float16)
    ck = big_tile_matmul.warmup(a, b, torch.empty(BM, BN), K, BM=BM, BN=BN, BK=BK, num_stages=3, grid=(1,))
    ck.build_gpu()
    assert not any("shared memory:" in n for n in ck.trace.notes)


def test_rungs_over_the_budget_stop_before_llvm(monkeypatch, tmp_path):
    """A rung of the ladder whose plan is over the budget is not lowered: LLVM and ptxas run once, for the build
    that is used (they ran for every rung: an autotune list with configs Triton refuses paid for each twice)."""
    from kernellab.compiler import backend

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    calls = []
    real = backend.compile_llvm
    monkeypatch.setattr(backend, "compile_llvm", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    BM, BN, BK, K = 128, 128, 128, 1024
    a, b = torch.zeros(BM, K, dtype=torch.float16), torch.zeros(K, BN, dtype=torch.float16)
    ck = big_tile_matmul.warmup(a, b, torch.empty(BM, BN), K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=6,
                                grid=(1,))
    ck.build_gpu()
    assert ck.shared <= 232448 and "ptx" in ck.asm
    assert "num_stages=6 is over sm_90" in " ".join(ck.trace.notes)
    assert len(calls) == 1
