"""Triton's cache_modifier / eviction_policy on tl.load and tl.store reach the PTX (ld.global.cg, st.global.cs,
ld.global.L1::evict_last, ...), keep the values right, and unknown ones are refused."""
from __future__ import annotations

import shutil

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import KernelLabError


@kl.jit
def copy_kernel(x_ptr, y_ptr, n, LOAD_CACHE: tl.constexpr, STORE_CACHE: tl.constexpr, EVICT: tl.constexpr,
                MASKED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=LOAD_CACHE, eviction_policy=EVICT)
        tl.store(y_ptr + offs, x * 2, mask=offs < n, cache_modifier=STORE_CACHE)
    else:
        x = tl.load(x_ptr + offs, cache_modifier=LOAD_CACHE, eviction_policy=EVICT)
        tl.store(y_ptr + offs, x * 2, cache_modifier=STORE_CACHE)


def _run(device, load_cache, store_cache, evict, masked, n=1024):
    x = torch.randn(n, device=device)
    y = torch.full_like(x, float("nan"))
    ck = copy_kernel[(kl.cdiv(n, 256),)](x, y, n, LOAD_CACHE=load_cache, STORE_CACHE=store_cache, EVICT=evict,
                                         MASKED=masked, BLOCK=256)
    torch.testing.assert_close(y, x * 2)
    return ck


CASES = [(".ca", "", ""), (".cg", ".cg", ""), (".cv", ".cs", ""), ("", ".wt", "evict_last"), ("", ".wb", "evict_first"),
         ("", "", "")]


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("load_cache, store_cache, evict", CASES)
def test_interpreter_values(load_cache, store_cache, evict, masked):
    _run("cpu", load_cache, store_cache, evict, masked, n=1000 if masked else 1024)


@pytest.mark.gpu
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("load_cache, store_cache, evict", CASES)
def test_gpu_values_and_ptx(load_cache, store_cache, evict, masked):
    ck = _run("cuda", load_cache, store_cache, evict, masked, n=1000 if masked else 1024)
    _check_ptx(ck.asm["ptx"], load_cache, store_cache, evict)


def _check_ptx(ptx, load_cache, store_cache, evict):
    loads = [ln for ln in ptx.splitlines() if "ld.global" in ln]
    stores = [ln for ln in ptx.splitlines() if "st.global" in ln]
    assert loads and stores
    if load_cache:
        assert all(f"ld.global{load_cache}." in ln for ln in loads), loads
    elif evict:
        assert all(f"ld.global.L1::{evict}." in ln for ln in loads), loads
    else:
        assert not any(q in ln for ln in loads for q in (".ca.", ".cg.", ".cv.", "L1::"))
    if store_cache:
        assert all(f"st.global{store_cache}." in ln for ln in stores), stores
    else:
        assert not any(q in ln for ln in stores for q in (".wb.", ".cg.", ".cs.", ".wt."))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("load_cache, store_cache, evict", CASES)
def test_ptx_qualifiers(load_cache, store_cache, evict, masked):
    x = torch.empty(1024)
    ck = copy_kernel.warmup(x, x, 1024, LOAD_CACHE=load_cache, STORE_CACHE=store_cache, EVICT=evict, MASKED=masked,
                            BLOCK=256, grid=(4,))
    ck.build_gpu()  # ptxas assembles it for sm_90
    _check_ptx(ck.asm["ptx"], load_cache, store_cache, evict)


@pytest.mark.parametrize("kw", [dict(LOAD_CACHE=".wt", STORE_CACHE="", EVICT=""),
                                dict(LOAD_CACHE="", STORE_CACHE=".ca", EVICT=""),
                                dict(LOAD_CACHE="", STORE_CACHE="", EVICT="evict_sometimes")])
def test_unknown_modifier_is_refused(kw):
    x = torch.randn(256)
    with pytest.raises(KernelLabError, match="not supported"):
        copy_kernel[(1,)](x, x, 256, MASKED=True, BLOCK=256, **kw)


@kl.jit
def evict_copy_kernel(x_ptr, y_ptr, n, EVICT: tl.constexpr, STORE_EVICT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy=EVICT)
    tl.store(y_ptr + offs, x * 2, mask=offs < n, eviction_policy=STORE_EVICT)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) is not on PATH")
@pytest.mark.parametrize("evict, store_evict", [("evict_last", "evict_first"), ("evict_first", ""),
                                                ("", "evict_last"), ("evict_normal", "")])
def test_l2_evict_hint_knob(monkeypatch, evict, store_evict):
    """KERNELLAB_L2_EVICT_HINT=1: evict_first / evict_last accesses also carry the L2 priority as a createpolicy
    cache hint (Triton 3.6's sm_80+ code), assembled by ptxas; off (the default), only the L1 qualifier."""
    x = torch.empty(1000)
    for knob in ("0", "1"):
        monkeypatch.setenv("KERNELLAB_L2_EVICT_HINT", knob)
        ck = evict_copy_kernel.warmup(x, x, 1000, EVICT=evict, STORE_EVICT=store_evict, BLOCK=256, grid=(4,))
        ck.build_gpu()
        ptx = ck.asm["ptx"]
        lines = [ln for ln in ptx.splitlines() if "ld.global" in ln or "st.global" in ln]
        for kind, ev in (("ld.global", evict), ("st.global", store_evict)):
            mine = [ln for ln in lines if kind in ln]
            assert mine
            hinted = knob == "1" and ev in ("evict_first", "evict_last")
            if ev in ("evict_first", "evict_last"):  # evict_normal: no qualifier (Triton's too)
                assert all(f"{kind}.L1::{ev}" in ln for ln in mine), mine
            assert all((f"createpolicy.fractional.L2::{ev}.b64" in ln and ".L2::cache_hint" in ln) == hinted
                       for ln in mine), (knob, mine)


def test_l2_evict_hint_values_on_the_interpreter(monkeypatch):
    monkeypatch.setenv("KERNELLAB_L2_EVICT_HINT", "1")
    x = torch.randn(1000)
    y = torch.full_like(x, float("nan"))
    evict_copy_kernel[(4,)](x, y, 1000, EVICT="evict_last", STORE_EVICT="evict_first", BLOCK=256)
    torch.testing.assert_close(y, x * 2)


@pytest.mark.gpu
def test_l2_evict_hint_values_on_gpu(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("KERNELLAB_L2_EVICT_HINT", "1")
    x = torch.randn(100000, device="cuda")
    y = torch.full_like(x, float("nan"))
    ck = evict_copy_kernel[(kl.cdiv(100000, 1024),)](x, y, 100000, EVICT="evict_last", STORE_EVICT="evict_first",
                                                     BLOCK=1024)
    torch.testing.assert_close(y, x * 2)
    assert "createpolicy.fractional.L2::evict_last.b64" in ck.asm["ptx"]
