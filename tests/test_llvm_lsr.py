"""LLVM's loop strength reduction is off for kernels with a dot in a loop (backend._llvm_lsr): their pointers
are already loop-carried (by the user's `ptrs += step` or the strength_reduce_pointers pass), and LSR
re-formed them as an invariant base plus a shared offset — one 64-bit multiply-add per pointer next to the
tensor-core instructions in the PTX/SASS. Checked on the PTX of the matmul loop, on the CPU."""
from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import kernellab  # noqa: E402
import kernellab.language as tl  # noqa: E402
from tests.idioms import make_idioms  # noqa: E402

N = 512


def _matmul(variant: str, monkeypatch, lsr: str | None):
    if lsr is None:
        monkeypatch.delenv("KERNELLAB_LLVM_LSR", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_LLVM_LSR", lsr)
    w = {w.name: w for w in make_idioms(kernellab.jit, tl)}["matmul"]
    v = next(v for v in w.variants if v.name == variant)
    a, b, c = (torch.empty((N, N), dtype=torch.float16) for _ in range(3))
    ck = v.kernel.warmup(a, b, c, N, N, N, N, 1, N, 1, N, 1, BM=128, BN=256, BK=64, GM=8, num_warps=8,
                         num_stages=3, grid=(1,))
    ck.build_gpu()
    return ck


def _main_loop(ptx: str) -> str:
    """The PTX of the loop holding the wgmma instructions (label to its backward branch)."""
    for m in re.finditer(r"^(\$L__BB\d+_\d+):", ptx, re.M):
        end = ptx.find(f"bra.uni \t{m.group(1)};", m.end())
        end = end if end >= 0 else ptx.find(f"bra \t{m.group(1)};", m.end())
        if end > 0 and "wgmma.mma_async" in ptx[m.end():end]:
            return ptx[m.end():end]
    raise AssertionError("no loop with wgmma in the PTX")


@pytest.mark.parametrize("variant", ["dot_plus_acc", "acc_arg"])
def test_dot_loops_advance_carried_pointers_without_wide_multiplies(variant, monkeypatch):
    ck = _matmul(variant, monkeypatch, None)
    loop = _main_loop(ck.asm["ptx"])
    assert "cp.async.cg.shared.global" in loop
    assert not re.search(r"\b(mul|mad)\.wide\.", loop), "a pointer is rebuilt from a base and an offset"
    assert "strength reduction off" in ck.trace.stage("ptx").description


def test_lsr_on_rebuilds_the_pointers(monkeypatch):
    """The control: with LSR forced on, the same loop forms each copy's address from an invariant base plus
    a shared offset — more 64-bit adds than the carried form's one increment per pointer (if this fails, LLVM
    stopped doing it and the switch may no longer be needed)."""
    def adds(lsr):
        return len(re.findall(r"\badd\.s64\b", _main_loop(_matmul("dot_plus_acc", monkeypatch, lsr).asm["ptx"])))

    assert adds("on") > adds("off")


def test_kernels_without_a_dot_loop_keep_lsr():
    @kernellab.jit
    def row_sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros((BLOCK,), tl.float32)
        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + row, tl.sum(acc, axis=0))

    x, y = torch.empty((4, 1000)), torch.empty(4)
    ck = row_sum.warmup(x, y, 1000, BLOCK=256, grid=(1,))
    ck.build_gpu()
    assert "strength reduction off" not in ck.trace.stage("ptx").description


# KERNELLAB_LLVM_LSR=carried: off only where a loop with a dot carries an address (a pointer or pointer tile, or a
# 64-bit offset); a loop that rebuilds its addresses from the induction variable each iteration keeps LSR (fla's
# chunk_fwd_kernel_h: its int64 `i_t * BT + arange(BT)` stayed 16 64-bit loop invariants without it).
_LOOP = """
#L0 = #blocked<[1, 4], [4, 8], [1, 1], [1, 0]>
#L2 = #mma<[1, 1]>
tt.func @k(%a: tensor<32x32xf32, #L0>, %b: tensor<32x32xf32, #L0>, %p: tensor<32x32x!ptr<f32>, #L2>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L2>
  %acc, %x = scf.for %c0, %n, %c1, %zero, CARRY : tensor<32x32xf32, #L2>, CTYPE {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L2>, %x0: CTYPE):
    %d = tt.dot %a, %b, %acc0 {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [1, 1]} : tensor<32x32xf32, #L2>
    scf.yield %d, %x0
  }
  tt.store %p, %acc
  tt.return
}
"""


@pytest.mark.parametrize("carry, ctype, carries", [
    ("%p", "tensor<32x32x!ptr<f32>, #L2>", True),  # a pointer tile
    ("%o", "i64", True),                             # strength_reduce_pointers' 64-bit offset
    ("%c1", "i32", False),                           # a stage index
])
def test_carried_mode(carry, ctype, carries, monkeypatch):
    from kernellab.compiler import backend
    from kernellab.compiler.parser import parse_module

    text = _LOOP.replace("CARRY", carry).replace("CTYPE", ctype)
    if carry == "%o":
        text = text.replace("  %c0 = arith", "  %o = arith.constant {value = 0} : i64\n  %c0 = arith", 1)
    m = parse_module(text)
    assert backend._dot_loop_carries_addresses(m) == carries
    monkeypatch.setenv("KERNELLAB_LLVM_LSR", "carried")
    assert backend._llvm_lsr(m) == (not carries)
    monkeypatch.delenv("KERNELLAB_LLVM_LSR")
    assert backend._llvm_lsr(m) is False  # the default: off for every dot loop


# A dot loop carrying many addresses per thread keeps LSR (backend.LSR_MAX_CARRIED_ADDRESSES): pointer tiles no
# vector access covers (strides read at run time, unaligned sizes: one 2-byte load per element) are two registers
# per address next to the accumulator, and with LSR off they spill.
_MANY = """
#L0 = #blocked<[1, 4], [4, 8], [1, 1], [1, 0]>
#L2 = #mma<[1, 1]>
#L3 = #blocked<SPT, [4, 1], [1, 0]>
tt.func @k(%a: tensor<32x32xf32, #L0>, %b: tensor<32x32xf32, #L0>, %p: tensor<32x32x!ptr<f32>, #L2>, %q: tensor<128x64x!ptr<f16>, #L3>, %n: i32) {
  %c0 = arith.constant {value = 0} : i32
  %c1 = arith.constant {value = 1} : i32
  %zero = arith.constant {value = 0.0} : tensor<32x32xf32, #L2>
  %acc, %x = scf.for %c0, %n, %c1, %zero, %q : tensor<32x32xf32, #L2>, tensor<128x64x!ptr<f16>, #L3> {
  ^bb(%i: i32, %acc0: tensor<32x32xf32, #L2>, %x0: tensor<128x64x!ptr<f16>, #L3>):
    %d = tt.dot %a, %b, %acc0 {input_precision = "tf32", instr = "mma.sync.m16n8k8.tf32", mma = [1, 1]} : tensor<32x32xf32, #L2>
    scf.yield %d, %x0
  }
  tt.store %p, %acc
  tt.return
}
"""


@pytest.mark.parametrize("spt, addresses, lsr", [
    ("[1, 1], [1, 32]", 64, True),  # 128x64 over 128 threads, one element per access: 64 addresses per thread
    ("[1, 8], [4, 8]", 8, False),   # 16-byte vectors: 8 addresses per thread, the carried form stays
])
def test_many_carried_addresses_keep_lsr(spt, addresses, lsr, monkeypatch):
    from kernellab.compiler import backend
    from kernellab.compiler.parser import parse_module

    monkeypatch.delenv("KERNELLAB_LLVM_LSR", raising=False)
    m = parse_module(_MANY.replace("SPT", spt))
    assert backend._carried_addresses(m) == addresses
    assert backend._llvm_lsr(m) is lsr
    monkeypatch.setenv("KERNELLAB_LLVM_LSR", "off")  # the switch still decides when set
    assert backend._llvm_lsr(m) is False


@kernellab.jit
def _mm_strided(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :]
    b = b_ptr + rk[:, None] * sbk + rn[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
        y = tl.load(b, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BK
        b += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def _unaligned(M=70, N=90, K=100, device="cpu"):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g).half().to(device)
    b = torch.randn(K, N, generator=g).half().to(device)
    return a, b, torch.full((M, N), float("nan"), dtype=torch.float16, device=device)


def test_unaligned_matmul_keeps_lsr_and_spills_less(monkeypatch):
    """Odd strides: scalar loads, 64 carried addresses per thread at 128x128x32 / 4 warps. LSR on (the default
    now) spills less than LSR off (the rule before): 5020 -> 2392 bytes on tests/idioms.py's bmm at its test size."""
    def build(lsr):
        if lsr is None:
            monkeypatch.delenv("KERNELLAB_LLVM_LSR", raising=False)
        else:
            monkeypatch.setenv("KERNELLAB_LLVM_LSR", lsr)
        a, b, c = _unaligned()
        ck = _mm_strided.warmup(a, b, c, 70, 90, 100, 100, 90, 90, BM=128, BN=128, BK=32, num_warps=4,
                                num_stages=3, grid=(1, 1))
        ck.build_gpu()
        return ck

    new, old = build(None), build("off")
    assert "strength reduction off" not in new.trace.stage("ptx").description
    assert "strength reduction off" in old.trace.stage("ptx").description
    assert new.n_spills < old.n_spills, (new.n_spills, old.n_spills)


@pytest.mark.gpu
def test_unaligned_matmul_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    a, b, c = _unaligned(device="cuda")
    _mm_strided[(1, 1)](a, b, c, 70, 90, 100, 100, 90, 90, BM=128, BN=128, BK=32, num_warps=4, num_stages=3)
    ref = a.double() @ b.double()
    assert (c.double() - ref).norm() / ref.norm() < 1e-2
