"""libdevice's reflect queries are answered after O3 (llvm_to_ptx._defer_reflect), so logf's inf/NaN slow path
stays a branch as in Triton and ptxas finishes each element's log before loading the next: Liger's kl_div forward
(32 logs a thread, 16 warps) drops from 95 registers to Triton's ~32. Checked on IR -> PTX and on ptxas's
register count (CPU), the kernels' values on the interpreter, and on the GPU against torch float64."""
from __future__ import annotations

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.codegen.llvm_to_ptx import BRANCHY_LIBDEVICE, compile_llvm  # noqa: E402
from kernellab.compiler.codegen.target import Target  # noqa: E402
from kernellab.errors import ToolchainError  # noqa: E402
from tests.test_codegen_infra import vadd_ir  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _libdevice_or_skip():
    from kernellab.compiler.codegen.libdevice import find_libdevice

    try:
        find_libdevice()
    except ToolchainError as e:
        pytest.skip(str(e))


def _cond_branches(ptx: str) -> int:
    return len(re.findall(r"@!?%p\d+ bra\b", ptx))


# ---------------------------------------------------------------------------------------------------------
# Kernels in Liger's style (our own code): a log per element, reduced (kl_div) or stored (jsd), and a
# two-pass log-sum-exp (cross entropy's loss)


@kl.jit
def kl_rows(y_ptr, gt_ptr, loss_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_ptr += row * n_cols
    gt_ptr += row * n_cols
    acc = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        y = tl.load(y_ptr + offs, mask=mask, other=0.0)
        gt = tl.load(gt_ptr + offs, mask=mask, other=0.0)
        acc += tl.sum(gt * (tl.log(tl.maximum(gt, eps)) - y), axis=0)
    tl.store(loss_ptr + row, acc)


@kl.jit
def jsd_rows(x_ptr, y_ptr, loss_ptr, dx_ptr, n_cols, beta: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + base + offs, mask=mask, other=float("-inf"))
        y = tl.load(y_ptr + base + offs, mask=mask, other=float("-inf"))
        m = tl.maximum(x, y)
        log_m = m + tl.log(beta * tl.exp(y - m) + (1 - beta) * tl.exp(x - m))
        q = (1 - beta) * tl.exp(x)
        loss = beta * tl.exp(y) * (y - log_m) + q * (x - log_m)
        tl.store(loss_ptr + base + offs, loss, mask=mask)
        tl.store(dx_ptr + base + offs, q * (x - log_m), mask=mask)


@kl.jit
def lse_rows(x_ptr, target_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_ptr += row * n_cols
    m = float("-inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n_cols, other=float("-inf"))
        new_m = tl.maximum(m, tl.max(x, axis=0))
        d = d * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
    t = tl.load(target_ptr + row)
    tl.store(loss_ptr + row, m + tl.log(d) - tl.load(x_ptr + t))


@kl.jit
def log_elems(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.log(tl.load(x_ptr + offs, mask=mask, other=1.0)), mask=mask)


def _inputs(rows, cols, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.log_softmax(torch.randn(rows, cols, generator=g, dtype=torch.float64) * 3, dim=-1)
    gt = torch.softmax(torch.randn(rows, cols, generator=g, dtype=torch.float64) * 3, dim=-1)
    gt[:, ::97] = 0.0  # log(max(0, eps)): the eps edge
    gt[:, 1::89] = 1e-42  # a float32 subnormal, below eps
    return y.float().to(device), gt.float().to(device)


def _kl_ref(y, gt, eps):
    y, gt = y.double().cpu(), gt.double().cpu()
    return (gt * (torch.log(torch.clamp(gt, min=eps)) - y)).sum(-1)


def _jsd_ref(x, y, beta):
    x, y = x.double().cpu(), y.double().cpu()
    m = torch.maximum(x, y)
    log_m = m + torch.log(beta * torch.exp(y - m) + (1 - beta) * torch.exp(x - m))
    q = (1 - beta) * torch.exp(x)
    return beta * torch.exp(y) * (y - log_m) + q * (x - log_m), q * (x - log_m)


def _lse_ref(x, t):
    x = x.double().cpu()
    return torch.logsumexp(x, -1) - x[torch.arange(x.shape[0]), t.cpu()]


def _log_edges(device):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(5000, generator=g) * 100
    edges = torch.tensor([0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 1e-40, 1.17e-38,
                          3.4e38, 1.0, 0.5])
    x[: len(edges)] = edges
    return x.to(device)


# ---------------------------------------------------------------------------------------------------------
# The mechanism, IR in -> PTX out


def test_logf_slow_path_stays_a_branch(monkeypatch):
    _libdevice_or_skip()
    monkeypatch.delenv("KERNELLAB_NVVM_REFLECT", raising=False)
    ir = vadd_ir("vlog", unary="__nv_logf")
    late = compile_llvm(ir, Target(90), "vlog", ftz=True)
    # the bounds check plus logf's inf/NaN path: two conditional branches, the slow fma alone after the second
    assert _cond_branches(late.ptx) == 2
    assert "__nvvm_reflect" not in late.ptx and "__kernellab" not in late.ptx and ".extern" not in late.ptx
    assert "__nvvm_reflect" in late.optimized_ir  # O3 left the queries to the code generator
    assert "fma.rn.ftz.f32" in late.ptx  # ... which answered __CUDA_FTZ from the module flag
    ieee = compile_llvm(ir, Target(90), "vlog", ftz=False).ptx
    assert "fma.rn.ftz" not in ieee and "fma.rn.f32" in ieee and _cond_branches(ieee) == 2

    monkeypatch.setenv("KERNELLAB_NVVM_REFLECT", "early")  # the control: answered at O3's start
    early = compile_llvm(ir, Target(90), "vlog", ftz=True)
    assert _cond_branches(early.ptx) == 1 and "selp.f32" in early.ptx
    assert "__nvvm_reflect" not in early.optimized_ir


def test_precise_sqrt_still_answered_late(monkeypatch):
    _libdevice_or_skip()
    monkeypatch.setenv("KERNELLAB_NVVM_REFLECT", "late")
    ptx = compile_llvm(vadd_ir("vsqrt", unary="__nv_sqrtf"), Target(80), "vsqrt").ptx
    assert "sqrt.rn.f32" in ptx and "sqrt.approx" not in ptx


@pytest.mark.parametrize("fn, gains", [("__nv_logf", True), ("__nv_log2f", True), ("__nv_sinf", True),
                                       ("__nv_rsqrtf", False), ("__nv_sqrtf", False), ("__nv_expf", False),
                                       ("__nv_tanhf", False)])
def test_which_functions_defer(fn, gains, monkeypatch):
    """BRANCHY_LIBDEVICE lists the functions whose slow path deferral keeps a branch; "auto" defers for those only
    (rsqrtf's FTZ diamond would only split the block: attorch's 1-warp layer norm then spills)."""
    _libdevice_or_skip()
    ir = vadd_ir("k", unary=fn)
    branches = {}
    for mode in ("early", "late", "auto"):
        monkeypatch.setenv("KERNELLAB_NVVM_REFLECT", mode)
        res = compile_llvm(ir, Target(90), "k", ftz=True)
        branches[mode] = _cond_branches(res.ptx)
        if mode == "auto":
            assert ("__nvvm_reflect" in res.optimized_ir) == gains
    assert (branches["late"] > branches["early"]) == gains
    assert (fn in BRANCHY_LIBDEVICE) == gains
    assert branches["auto"] == branches["late" if gains else "early"]


@needs_ptxas
def test_many_logs_a_thread_keep_registers_low(monkeypatch):
    """Liger kl_div's forward shape (BLOCK 16384, 16 warps: 32 logs a thread): Triton 3.6 uses 32 registers;
    with the log's slow path speculated into selects kernellab used 95 (ptxas loaded all 64 values first)."""
    _libdevice_or_skip()

    def regs(mode):
        monkeypatch.setenv("KERNELLAB_NVVM_REFLECT", mode)
        monkeypatch.setenv("KERNELLAB_OCCUPANCY_CAP", "off")
        kl_rows.cache.clear()
        y, gt = torch.empty(4, 32768), torch.empty(4, 32768)
        ck = kl_rows.warmup(y, gt, torch.empty(4), 32768, 1e-10, BLOCK=16384, num_warps=16, grid=(1,))
        ck.build_gpu()
        assert ck.n_spills == 0
        return ck.n_regs, ck.asm["ptx"]

    late, ptx = regs("auto")
    early, _ = regs("early")
    monkeypatch.delenv("KERNELLAB_NVVM_REFLECT")
    monkeypatch.delenv("KERNELLAB_OCCUPANCY_CAP")
    kl_rows.cache.clear()
    assert _cond_branches(ptx) >= 32  # one slow path per element
    assert late <= 40, late
    assert early >= 64, early  # the control; if this fails, ptxas changed and the deferral may be moot


# ---------------------------------------------------------------------------------------------------------
# Values: the interpreter (CPU) and the GPU against torch float64, outputs poisoned


def _cdiv(a, b):
    return (a + b - 1) // b


def _run_all(device, rows, cols, kl_block, jsd_block, warps):
    y, gt = _inputs(rows, cols, device)
    loss = torch.full((rows,), float("nan"), device=device)
    kl_rows[(rows,)](y, gt, loss, cols, 1e-10, BLOCK=kl_block, num_warps=warps)
    torch.testing.assert_close(loss.double().cpu(), _kl_ref(y, gt, 1e-10), rtol=1e-5, atol=1e-5)

    x = torch.log_softmax(torch.randn(rows, cols, generator=torch.Generator().manual_seed(1)) * 2, -1).to(device)
    jl, jd = (torch.full((rows, cols), float("nan"), device=device) for _ in range(2))
    jsd_rows[(rows,)](x, y, jl, jd, cols, beta=0.3, BLOCK=jsd_block, num_warps=4)
    rl, rd = _jsd_ref(x, y, 0.3)
    torch.testing.assert_close(jl.double().cpu(), rl, rtol=1e-4, atol=2e-5)
    torch.testing.assert_close(jd.double().cpu(), rd, rtol=1e-4, atol=2e-5)

    logits = (torch.randn(rows, cols, generator=torch.Generator().manual_seed(2)) * 4).to(device)
    t = torch.randint(0, cols, (rows,), generator=torch.Generator().manual_seed(5)).to(device)
    lse = torch.full((rows,), float("nan"), device=device)
    lse_rows[(rows,)](logits, t, lse, cols, BLOCK=kl_block, num_warps=warps)
    torch.testing.assert_close(lse.double().cpu(), _lse_ref(logits, t), rtol=1e-5, atol=1e-4)

    xs = _log_edges(device)
    out = torch.full_like(xs, 12345.0)
    log_elems[(_cdiv(xs.numel(), 1024),)](xs, out, xs.numel(), BLOCK=1024)
    ref = torch.log(xs.double().cpu())
    torch.testing.assert_close(out.double().cpu(), ref, rtol=3e-7, atol=1e-7, equal_nan=True)


def test_values_on_the_interpreter():
    _run_all("cpu", rows=3, cols=1000, kl_block=256, jsd_block=256, warps=4)


@pytest.mark.parametrize("cols, kl_block, jsd_block, warps", [(32768, 16384, 4096, 16), (3001, 1024, 1024, 8)])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_values_on_the_gpu(cols, kl_block, jsd_block, warps):
    _run_all("cuda", rows=64, cols=cols, kl_block=kl_block, jsd_block=jsd_block, warps=warps)
