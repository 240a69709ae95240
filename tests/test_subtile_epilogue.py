"""Tutorial 09's subtiled epilogue: `split(permute(reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))` of a tensor-core
accumulator moves no data (gpu/reshape_layout.py's bit layouts): the column bit the split takes is a register bit
of the MMA fragment, so reshape, permute and split rename registers, with no shared memory and no barrier.

The layouts and assign_layouts are checked in tests/gpu_passes/test_bits_layout.py; here tutorial-style persistent matmuls (pointer or descriptor loads and
stores, with and without the subtiled epilogue) on the interpreter and, built for sm_90a without a GPU, through
ptxas with no spills and no scratch buffer for the epilogue; on a GPU (`gpu`) against torch float32 on ragged
shapes into poisoned outputs."""
from __future__ import annotations

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import ToolchainError


# ------------------------------------------------------------------------------------------- kernels
@kl.jit
def persistent_matmul_kernel(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                             NUM_SMS: tl.constexpr, SUBTILE: tl.constexpr, DESC: tl.constexpr):
    """C = A @ B.T, A [M, K], B [N, K]: tutorial 09's persistent loop, loads and stores through pointers or
    device-side descriptors, the epilogue whole or in two column halves by reshape/permute/split."""
    start = tl.program_id(0)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    a_desc = tl.make_tensor_descriptor(A, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(B, [N, K], [K, 1], [BN, BK])
    if SUBTILE:
        c_desc = tl.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN // 2])
    else:
        c_desc = tl.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN])
    for tile in tl.range(start, num_m * num_n, NUM_SMS, flatten=True):
        pm = tile // num_n
        pn = tile % num_n
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kt in range(tl.cdiv(K, BK)):
            if DESC:
                a = a_desc.load([pm * BM, kt * BK])
                b = b_desc.load([pn * BN, kt * BK])
            else:
                ks = kt * BK + rk
                a = tl.load(A + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
                b = tl.load(B + rn[:, None] * K + ks[None, :], mask=(rn[:, None] < N) & (ks[None, :] < K), other=0.0)
            acc = tl.dot(a, b.T, acc)
        if SUBTILE:
            halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
            c0, c1 = tl.split(halves)
            c0 = c0.to(C.dtype.element_ty)
            c1 = c1.to(C.dtype.element_ty)
            if DESC:
                c_desc.store([pm * BM, pn * BN], c0)
                c_desc.store([pm * BM, pn * BN + BN // 2], c1)
            else:
                rh = pn * BN + tl.arange(0, BN // 2)
                tl.store(C + rm[:, None] * N + rh[None, :], c0, mask=(rm[:, None] < M) & (rh[None, :] < N))
                rh = rh + BN // 2
                tl.store(C + rm[:, None] * N + rh[None, :], c1, mask=(rm[:, None] < M) & (rh[None, :] < N))
        else:
            c = acc.to(C.dtype.element_ty)
            if DESC:
                c_desc.store([pm * BM, pn * BN], c)
            else:
                tl.store(C + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _run(M, N, K, BM, BN, BK, subtile, desc, out_dtype=torch.float16, device="cpu", sms=3, warps=4, stages=3):
    g = torch.Generator().manual_seed(M * 7 + N * 3 + K)
    a = (torch.randn(M, K, generator=g) * 0.5 + 0.25).half().to(device)
    b = (torch.randn(N, K, generator=g) * 0.5 - 0.25).half().to(device)
    c = torch.full((M, N), float("nan"), dtype=out_dtype, device=device)
    persistent_matmul_kernel[(sms,)](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, NUM_SMS=sms, SUBTILE=subtile, DESC=desc,
                                     num_warps=warps, num_stages=stages)
    ref = a.float() @ b.float().T
    torch.testing.assert_close(c.float(), ref, rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("subtile", [False, True], ids=["whole", "subtile"])
@pytest.mark.parametrize("desc", [False, True], ids=["pointers", "descriptors"])
def test_interpreter(subtile, desc):
    _run(45, 70, 40, 16, 32, 16, subtile, desc, out_dtype=torch.float32)


def _build(subtile, desc, BM=128, BN=256, BK=64, warps=8, stages=3, tmp_path=None):
    a = torch.empty(512, 512, dtype=torch.float16)
    c = torch.empty(512, 512, dtype=torch.float16)
    ck = persistent_matmul_kernel.warmup(a, a, c, 512, 512, 512, BM=BM, BN=BN, BK=BK, NUM_SMS=132, SUBTILE=subtile,
                                         DESC=desc, num_warps=warps, num_stages=stages, grid=(1,))
    from kernellab.compiler.codegen.target import Target
    try:
        return ck.build_gpu(Target(90))
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")


@pytest.mark.parametrize("desc", [False, True], ids=["pointers", "descriptors"])
def test_sm90_subtiled_epilogue_renames_registers(desc, tmp_path, monkeypatch):
    """Built for sm_90a (wgmma m64n256): the reshape, permute and split have no scratch buffer and no layout
    conversion; no spills in either epilogue (the shared-memory round trips spilled 4 KB in tutorial 09's
    kernel, the conversions' per-register addresses 184 bytes)."""
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    sub, whole = _build(True, desc), _build(False, desc)
    gpu = sub.asm["gpu"]
    assert "wgmma" in gpu
    assert not [b for b in sub.shared_plan if b["op"] in ("tt.reshape", "tt.split", "tt.trans")], sub.shared_plan
    for name in ("tt.reshape", "tt.trans", "tt.split"):
        line = next(ln for ln in gpu.splitlines() if f"= {name} " in ln)
        assert "smem_bytes" not in line, line
    assert sub.n_spills == 0 and whole.n_spills == 0, (sub.n_spills, whole.n_spills)
    # (+16: the epilogue's stmatrix takes aligned quads of registers, 228 -> 245 for the subtiled pointer store with
    # no spill; the kernel runs one block per SM, bound by its shared memory, so registers cost no occupancy here)
    assert sub.n_regs <= max(whole.n_regs, 232) + 16, (sub.n_regs, whole.n_regs)


@pytest.mark.parametrize("subtile", [False, True], ids=["whole", "subtile"])
def test_sm90_descriptor_store_is_an_async_tma_store(subtile, tmp_path, monkeypatch):
    """The descriptor stores go out by TMA from shared memory (passes/tma_store.py): the tile is written with
    stmatrix from the accumulator's layout (no conversion, no st.global), one thread issues
    cp.async.bulk.tensor ... bulk_group and commits, and nothing waits for it until the next tile's epilogue
    (cp.async.bulk.wait_group.read before the stmatrix); the kernel's end waits for the last ones."""
    import re

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    ck = _build(subtile, True)
    ptx = ck.asm["ptx"]
    assert "st.global" not in ptx and "ttg.convert_layout" not in ck.asm["gpu"]
    # the tile loop is fused with its K loop (flatten=True, passes/flatten_loops.py), and the nest is kept for a K
    # loop that runs zero times: two epilogues, which share their buffers
    sites = 2
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.tile\.bulk_group", ptx)
    assert len(stores) == 4 * sites  # 256 columns of fp16: four 128-byte swizzle columns, in one or two halves
    lines = [ln.strip() for ln in ptx.splitlines()]
    commits = [i for i, ln in enumerate(lines) if "cp.async.bulk.commit_group" in ln]
    waits = [i for i, ln in enumerate(lines) if ln.startswith("cp.async.bulk.wait_group.read")]
    assert len(commits) == (2 if subtile else 1) * sites
    # in the loop, each wait guards the next write of its buffer (the st.shared before the next TMA store): the
    # store itself is not waited for where it is issued
    for w in waits[:-1]:
        rest = lines[w:]
        first_st = next(i for i, ln in enumerate(rest) if ln.startswith(("stmatrix", "st.shared")))
        first_tma = next(i for i, ln in enumerate(rest) if "cp.async.bulk.tensor.2d.global" in ln)
        assert first_st < first_tma
    # ... and every wait in the loop lets the other half's store run on (pending 1) when there are two
    assert lines[waits[-1]] == "cp.async.bulk.wait_group.read 0;"
    assert {lines[w] for w in waits[:-1]} == {f"cp.async.bulk.wait_group.read {1 if subtile else 0};"}
    assert ck.n_spills == 0 and ck.n_regs <= 168, (ck.n_regs, ck.n_spills)
    plan = [b for b in ck.shared_plan if "TMA store" in b["reason"]]
    assert len(plan) == (2 if subtile else 1) and sum(b["size"] for b in plan) == 128 * 256 * 2


# ------------------------------------------------------------------------------------------- on a GPU
# M ragged everywhere; N a multiple of 16 (a TMA row stride) but not of the tile in the first three, so TMA stores
# clip at the edge; the last two have rows TMA cannot address (st.global stores)
RAGGED = [(200, 336, 136), (129, 272, 64), (64, 512, 1008), (200, 333, 136), (300, 100, 24)]


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", RAGGED)
@pytest.mark.parametrize("subtile", [False, True], ids=["whole", "subtile"])
@pytest.mark.parametrize("desc", [False, True], ids=["pointers", "descriptors"])
@pytest.mark.parametrize("cfg", [(128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (64, 64, 32, 4, 2)],
                         ids=lambda c: "x".join(map(str, c)))
def test_gpu(M, N, K, subtile, desc, cfg):
    BM, BN, BK, warps, stages = cfg
    _run(M, N, K, BM, BN, BK, subtile, desc, device="cuda", sms=5, warps=warps, stages=stages)


@pytest.mark.gpu
def test_gpu_fp32_output_and_one_program():
    _run(257, 129, 200, 128, 128, 64, True, True, out_dtype=torch.float32, device="cuda", sms=1)
