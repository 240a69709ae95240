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
