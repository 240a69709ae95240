"""A dot-free kernel a few registers above an occupancy cliff is assembled again under it (codegen/occupancy_cap.py):
the model, and Liger kl_div forward's shape (16 warps, 32 logs a thread: ptxas' 33 registers fit 3 blocks per SM,
the cap's 32 fit 4, with no spills). CPU only (ptxas)."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

from kernellab.compiler.codegen import occupancy_cap as oc  # noqa: E402
from tests.test_libdevice_reflect import _libdevice_or_skip, kl_rows  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")


def test_blocks_per_sm_model():
    assert oc.blocks_per_sm(32, 16, 64, 90) == 4  # 32 x 32 x 16 = 16384 registers a block
    assert oc.blocks_per_sm(33, 16, 64, 90) == 3  # 33 rounds up to 40 a thread
    assert oc.blocks_per_sm(16, 4, 0, 90) == 16  # 64 warps an SM at most
    assert oc.blocks_per_sm(16, 1, 0, 90) == 32  # 32 blocks an SM at most
    assert oc.blocks_per_sm(32, 4, 100 * 1024, 90) == 2  # shared memory: 228 KiB, 1 KiB reserved a block
    assert oc.blocks_per_sm(32, 4, 100 * 1024, 80) == 1  # 164 KiB on sm_80


@pytest.mark.parametrize("regs, warps, shared, arch, cap", [
    (33, 16, 64, 90, 32),     # kl_div forward: 3 -> 4 blocks
    (35, 8, 0, 90, 32),       # 6 -> 8 blocks (the cap fits 7 and then 8)
    (128, 4, 0, 90, None),    # 96 fits a fifth block: 32 registers is too far below
    (95, 16, 0, 90, None),    # 1 -> 2 blocks needs 64
    (40, 16, 0, 90, None),    # 3 blocks at 40; 4 need 32: 8 below 40 is more than an eighth
    (32, 16, 0, 90, None),    # already at the warp limit (64 warps)
    (33, 16, 64, 86, None),   # sm_86's limits are not modelled
    (33, 16, 100 * 1024, 90, None),  # shared memory limits it to 2 blocks either way
    (24, 8, 0, 90, None),     # at MIN_REGS or below
    (33, 32, 0, 90, 32),      # 32 warps: 1 -> 2 blocks
])
def test_cliff(regs, warps, shared, arch, cap):
    assert oc.cliff(regs, warps, shared, arch) == cap


def test_tensor_core_code_is_left_alone():
    assert oc.has_tensor_core_code("\twgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {...};")
    assert oc.has_tensor_core_code("\t@%p3 mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};")
    assert not oc.has_tensor_core_code("\tfma.rn.f32 %r1, %r2, %r3, %r4;\n\t// mma.sync in a comment\n")


def _kl_div_forward(monkeypatch, cap, **options):
    if cap is None:
        monkeypatch.delenv("KERNELLAB_OCCUPANCY_CAP", raising=False)
    else:
        monkeypatch.setenv("KERNELLAB_OCCUPANCY_CAP", cap)
    monkeypatch.delenv("KERNELLAB_NVVM_REFLECT", raising=False)
    kl_rows.cache.clear()
    y, gt = torch.empty(4, 32768), torch.empty(4, 32768)
    ck = kl_rows.warmup(y, gt, torch.empty(4), 32768, 1e-10, BLOCK=16384, num_warps=16, grid=(1,), **options)
    ck.build_gpu()
    kl_rows.cache.clear()
    return ck


@needs_ptxas
def test_kl_div_forward_is_capped_at_the_cliff(monkeypatch):
    _libdevice_or_skip()
    off = _kl_div_forward(monkeypatch, "off")
    if off.n_regs != 33:
        pytest.skip(f"ptxas gives {off.n_regs} registers uncapped (33 when this was written): no cliff to test")
    on = _kl_div_forward(monkeypatch, None)
    assert on.n_regs == 32 and on.n_spills == 0
    assert ".maxnreg 32" in on.asm["ptx"] and ".maxnreg" not in off.asm["ptx"]
    assert "4 blocks per SM instead of 3" in on.trace.stage("cubin").description
    # a launch's own maxnreg wins: no second assembly
    given = _kl_div_forward(monkeypatch, None, maxnreg=40)
    assert ".maxnreg 40" in given.asm["ptx"] and ".maxnreg 32" not in given.asm["ptx"]


def test_acceptable_needs_no_spills_and_little_growth(monkeypatch):
    """text_bytes reads the SASS size off the cubin's .text sections (16 bytes an instruction)."""
    assert oc.text_bytes(b"not an elf") is None
    sizes = {b"A": 1000 * 16, b"B": 1010 * 16, b"C": 1100 * 16}
    monkeypatch.setattr(oc, "text_bytes", lambda cubin: sizes[cubin])
    ok = {"n_regs": 32, "n_spills": 0}
    assert oc.acceptable({"n_regs": 33}, ok, 32, b"A", b"B")
    assert not oc.acceptable({"n_regs": 33}, ok, 32, b"A", b"C")  # 10% more instructions
    assert not oc.acceptable({"n_regs": 33}, {"n_regs": 32, "n_spills": 8}, 32, b"A", b"A")
    assert not oc.acceptable({"n_regs": 33}, {"n_regs": 33, "n_spills": 0}, 32, b"A", b"A")


@needs_ptxas
def test_text_bytes_counts_instructions():
    _libdevice_or_skip()
    ck = kl_rows.warmup(torch.empty(4, 1024), torch.empty(4, 1024), torch.empty(4), 1024, 1e-10, BLOCK=256,
                        grid=(1,))
    ck.build_gpu()
    n = oc.text_bytes(ck.asm["cubin"])
    assert n and n % 16 == 0 and 50 * 16 < n < 5000 * 16
