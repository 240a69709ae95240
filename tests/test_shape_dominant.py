"""KERNELLAB_SHAPE_DOMINANT=1 (assign_layouts, default off until timed on a GPU): a value that takes the kernel's
dominant layout of its rank (fresh ranges, splats, constants; gathers) takes the layout of the largest contiguous
access of its own shape where the rank's dominant layout spans more than that shape (its threads would hold
copies). bitsandbytes' 4-bit dequantization (its Triton backend's dequant_4bit_kernel: 256 packed bytes in, 512
f32 out through tl.interleave) gathered its absmax and code book in the 512-wide layout: 9 layout conversions,
pointers through shared memory, 32 registers and 8 loads a thread; with the knob none, 22 registers (Triton: 18).
Pass test (IR in / IR out, knob on and off), codegen test (ptxas), interpreter and GPU results."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import kernellab as kl  # noqa: E402
import kernellab.language as tl  # noqa: E402
from kernellab.compiler.gpu.options import GpuOptions  # noqa: E402
from kernellab.compiler.parser import parse_module  # noqa: E402
from kernellab.compiler.passes import assign_layouts  # noqa: E402
from kernellab.compiler.printer import print_module  # noqa: E402
from kernellab.compiler.verifier import verify  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")

DEQUANT = """
tt.func @dequant(%a_ptr: !ptr<u8> {tt.divisibility = 16}, %c_ptr: !ptr<f32> {tt.divisibility = 16}, %code_ptr: !ptr<f32> {tt.divisibility = 16}, %absmax_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32>
  %as = tt.splat %a_ptr : tensor<256x!ptr<u8>>
  %ap = tt.addptr %as, %r : tensor<256x!ptr<u8>>
  %a = tt.load %ap : tensor<256xu8>
  %c15 = arith.constant {value = 15} : tensor<256xu8>
  %hi = arith.andi %a, %c15 : tensor<256xu8>
  %c4 = arith.constant {value = 4} : tensor<256xu8>
  %lo = arith.shrui %a, %c4 : tensor<256xu8>
  %c32 = arith.constant {value = 32} : tensor<256xi32>
  %blk = arith.divsi %r, %c32 : tensor<256xi32>
  %ms = tt.splat %absmax_ptr : tensor<256x!ptr<f32>>
  %mp = tt.addptr %ms, %blk : tensor<256x!ptr<f32>>
  %m = tt.load %mp : tensor<256xf32>
  %cs = tt.splat %code_ptr : tensor<256x!ptr<f32>>
  %lp = tt.addptr %cs, %lo : tensor<256x!ptr<f32>>
  %l = tt.load %lp : tensor<256xf32>
  %hp = tt.addptr %cs, %hi : tensor<256x!ptr<f32>>
  %h = tt.load %hp : tensor<256xf32>
  %ml = arith.mulf %l, %m : tensor<256xf32>
  %mh = arith.mulf %h, %m : tensor<256xf32>
  %j = tt.join %ml, %mh : tensor<256x2xf32>
  %o = tt.reshape %j : tensor<512xf32>
  %r2 = tt.make_range {end = 512, start = 0} : tensor<512xi32>
  %os = tt.splat %c_ptr : tensor<512x!ptr<f32>>
  %op = tt.addptr %os, %r2 : tensor<512x!ptr<f32>>
  tt.store %op, %o
  tt.return
}
"""

EXPECTED = """
#L0 = #blocked<[2], [32], [4], [0]>
#L1 = #bits<[r0, l0, l1, l2, l3, l4, w0, w1], [r1]>
#L2 = #blocked<[4], [32], [4], [0]>

tt.func @dequant(%a_ptr: !ptr<u8> {tt.divisibility = 16}, %c_ptr: !ptr<f32> {tt.divisibility = 16}, %code_ptr: !ptr<f32> {tt.divisibility = 16}, %absmax_ptr: !ptr<f32> {tt.divisibility = 16}) {
  %r = tt.make_range {end = 256, start = 0} : tensor<256xi32, #L0>
  %as = tt.splat %a_ptr : tensor<256x!ptr<u8>, #L0>
  %ap = tt.addptr %as, %r : tensor<256x!ptr<u8>, #L0>
  %a = tt.load %ap {vec = 2} : tensor<256xu8, #L0>
  %c15 = arith.constant {value = 15} : tensor<256xu8, #L0>
  %hi = arith.andi %a, %c15 : tensor<256xu8, #L0>
  %c4 = arith.constant {value = 4} : tensor<256xu8, #L0>
  %lo = arith.shrui %a, %c4 : tensor<256xu8, #L0>
  %c32 = arith.constant {value = 32} : tensor<256xi32, #L0>
  %blk = arith.divsi %r, %c32 : tensor<256xi32, #L0>
  %ms = tt.splat %absmax_ptr : tensor<256x!ptr<f32>, #L0>
  %mp = tt.addptr %ms, %blk : tensor<256x!ptr<f32>, #L0>
  %m = tt.load %mp {vec = 1} : tensor<256xf32, #L0>
  %cs = tt.splat %code_ptr : tensor<256x!ptr<f32>, #L0>
  %lp = tt.addptr %cs, %lo : tensor<256x!ptr<f32>, #L0>
  %l = tt.load %lp {vec = 1} : tensor<256xf32, #L0>
  %hp = tt.addptr %cs, %hi : tensor<256x!ptr<f32>, #L0>
  %h = tt.load %hp {vec = 1} : tensor<256xf32, #L0>
  %ml = arith.mulf %l, %m : tensor<256xf32, #L0>
  %mh = arith.mulf %h, %m : tensor<256xf32, #L0>
  %j = tt.join %ml, %mh : tensor<256x2xf32, #L1>
  %o = tt.reshape %j : tensor<512xf32, #L2>
  %r2 = tt.make_range {end = 512, start = 0} : tensor<512xi32, #L2>
  %os = tt.splat %c_ptr : tensor<512x!ptr<f32>, #L2>
  %op = tt.addptr %os, %r2 : tensor<512x!ptr<f32>, #L2>
  tt.store %op, %o {vec = 4}
  tt.return
}

"""


def _norm(text):
    return "\n".join(ln.strip() for ln in text.strip().splitlines() if ln.strip())


def _assign(text, num_warps=4):
    m = parse_module(text)
    stats = assign_layouts.run(m, GpuOptions(num_warps=num_warps))
    verify(m, after=assign_layouts.NAME)
    return m, stats


def test_gathers_take_their_own_shapes_layout(monkeypatch):
    """4 warps: the 512-value store's layout (4 a thread) spans twice the 256-value tensors; with the knob they take
    the packed bytes' load layout (2 a thread), the interleave's join and reshape reach the store's, no conversion."""
    monkeypatch.setenv("KERNELLAB_SHAPE_DOMINANT", "1")
    m, stats = _assign(DEQUANT)
    assert _norm(print_module(m, with_locs=False)) == _norm(EXPECTED)
    assert stats == {"anchors": 5, "converts_inserted": 0}


def test_without_the_knob_the_rank_dominant_layout(monkeypatch):
    monkeypatch.delenv("KERNELLAB_SHAPE_DOMINANT", raising=False)
    m, stats = _assign(DEQUANT)
    absmax = [op for op in m.kernel.walk() if op.name == "tt.load"][1]
    assert absmax.result.type.layout.spt == (4,) and stats["converts_inserted"] == 9


def test_a_shape_without_a_contiguous_access_keeps_the_rank_dominant_layout(monkeypatch):
    """Only contiguous accesses give a shape its layout: with the packed bytes gathered too (no 256-value access of
    its own), the 256-value tensors keep the rank's dominant layout, as without the knob."""
    monkeypatch.setenv("KERNELLAB_SHAPE_DOMINANT", "1")
    src = DEQUANT.replace("%ap = tt.addptr %as, %r : tensor<256x!ptr<u8>>",
                          "%ap = tt.addptr %as, %blk0 : tensor<256x!ptr<u8>>").replace(
        "  %as = tt.splat", "  %c7 = arith.constant {value = 7} : tensor<256xi32>\n"
                          "  %blk0 = arith.divsi %r, %c7 : tensor<256xi32>\n  %as = tt.splat")
    m, _ = _assign(src)
    absmax = [op for op in m.kernel.walk() if op.name == "tt.load"][1]
    assert absmax.result.type.layout.spt == (4,)


@kl.jit
def dequant_4bit(a_ptr, c_ptr, code_ptr, absmax_ptr, n_paired, n_out, QUANT_BLOCK: tl.constexpr,
                 SPLIT: tl.constexpr):
    """bitsandbytes' dequant_4bit_kernel (backends/triton/kernels_4bit.py), rewritten: two 4-bit codes a byte, the
    high nibble first, each scaled by its block's absmax."""
    offs = tl.program_id(0) * SPLIT + tl.arange(0, SPLIT)
    mask = offs < n_paired
    a = tl.load(a_ptr + offs, mask)
    absmax = tl.load(absmax_ptr + offs // (QUANT_BLOCK // 2), mask=mask, other=1.0)
    lo = tl.load(code_ptr + (a >> 4)) * absmax
    hi = tl.load(code_ptr + (a & 0xF)) * absmax
    out = tl.interleave(lo, hi)
    o = tl.program_id(0) * SPLIT * 2 + tl.arange(0, SPLIT * 2)
    tl.store(c_ptr + o, out, o < n_out)


def _run(device, n_paired, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(0, 256, (n_paired,), dtype=torch.uint8, generator=g)
    code = torch.randn(16, generator=g)
    absmax = torch.rand(-(-2 * n_paired // 64), generator=g) + 0.5
    out = torch.full((2 * n_paired,), float("nan"))
    a, code, absmax, out = (t.to(device) for t in (a, code, absmax, out))
    dequant_4bit[(-(-n_paired // 256),)](a, out, code, absmax, n_paired, 2 * n_paired, QUANT_BLOCK=64, SPLIT=256)
    q = torch.stack((a.cpu().long() >> 4, a.cpu().long() & 15), 1).reshape(-1)
    want = code.cpu().double()[q] * absmax.cpu().double().repeat_interleave(64)[:2 * n_paired]
    assert torch.equal(out.cpu().double(), want.float().double())


def test_interpreter_with_the_knob(monkeypatch):
    monkeypatch.setenv("KERNELLAB_SHAPE_DOMINANT", "1")
    _run("cpu", 1000, 0)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
def test_codegen_no_shared_memory_and_fewer_registers(monkeypatch):
    from kernellab.compiler.codegen.target import Target

    def built(knob):
        monkeypatch.setenv("KERNELLAB_SHAPE_DOMINANT", knob)
        args = (torch.zeros(512, dtype=torch.uint8), torch.zeros(1024), torch.zeros(16), torch.zeros(16), 512, 1024)
        ck = dequant_4bit.warmup(*args, QUANT_BLOCK=64, SPLIT=256, num_warps=4, grid=(1,))
        ck.build_gpu(Target(90))
        return ck

    off, on = built("0"), built("1")
    assert "bar.sync" in off.asm["ptx"] and "bar.sync" not in on.asm["ptx"]
    assert on.n_regs < off.n_regs and on.n_spills == 0
    assert on.asm["ptx"].count("ld.global") < off.asm["ptx"].count("ld.global")


@pytest.mark.gpu
@pytest.mark.parametrize("knob", ["0", "1"])
def test_gpu_with_and_without_the_knob(monkeypatch, knob):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    monkeypatch.setenv("KERNELLAB_SHAPE_DOMINANT", knob)
    for n, seed in ((1000, 1), (256, 2), (4097, 3)):
        _run("cuda", n, seed)
