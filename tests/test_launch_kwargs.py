"""Launches with arguments given by name (as Liger-Kernel and most libraries launch) take the warm-launch fast
path too: the keywords are put in their positions before the key is formed. Before, any tensor given by
name sent every launch through binding and specialization (Liger's cross-entropy forward paid ~0.1 ms of
host time per call, visible on the GPU because the op syncs on `.item()`)."""
from __future__ import annotations

import pytest

import kernellab
import kernellab.language as tl

torch = pytest.importorskip("torch")


@kernellab.jit
def scale_add(x_ptr, y_ptr, out_ptr, n, alpha=2.0, BLOCK: tl.constexpr = 128, FLIP: tl.constexpr = False,
              BIAS=None):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    r = x * alpha + y
    if FLIP:
        r = -r
    if BIAS is not None:
        r += tl.load(BIAS + offs, mask=mask)
    tl.store(out_ptr + offs, r, mask=mask)


def test_keywords_bind_as_positions():
    """The fast path's binder puts keywords in their positions and fills in defaults: one key however a call
    spells its arguments; a call binding would refuse gets no key (the slow path explains)."""
    k = scale_add
    key = k._fast_sig((1, 2, 3, 4, 2.0, 64), {"num_warps": 2})
    assert key is not None
    assert k._fast_sig((1, 2), dict(out_ptr=3, n=4, BLOCK=64, num_warps=2)) == key  # alpha's default filled in
    assert k._fast_sig((), dict(n=4, BLOCK=64, num_warps=2, out_ptr=3, y_ptr=2, x_ptr=1)) == key
    assert k._fast_sig((1, 2, 3, 4, 2.0, 64), {"num_warps": 4}) != key
    assert k._fast_sig((1,), dict(x_ptr=5, y_ptr=2, out_ptr=3, n=4)) is None  # x_ptr twice: slow path says so
    assert k._fast_sig((1,), dict(out_ptr=3, n=4)) is None  # y_ptr missing: slow path says so
    assert k._fast_sig((1, 2, 3, 4), {"BIAS": None}) == k._fast_sig((1, 2, 3, 4), {})
    assert k._fast_sig((1, 2, 3, 4), {"BIAS": 5}) != k._fast_sig((1, 2, 3, 4), {})
    assert k._fast_sig((1, 2, 3, 4), {"BLOK": 64}) is None  # not a parameter: the slow path names it


@pytest.mark.gpu
def test_keyword_launches_take_the_fast_path_with_the_right_results(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    n = 1000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    want = {False: x.double() * 3 + y.double(), True: -(x.double() * 3 + y.double())}
    grid = (triton_cdiv(n, 128),)
    for flip in (False, True, False):
        out = torch.full((n,), float("nan"), device="cuda")
        scale_add[grid](out_ptr=out, y_ptr=y, x_ptr=x, n=n, alpha=3.0, FLIP=flip)
        torch.testing.assert_close(out.double(), want[flip], rtol=1e-6, atol=1e-6)
    calls = []
    monkeypatch.setattr(type(scale_add), "_get_compiled", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(
        AssertionError("the slow path ran for a warm keyword launch")))
    out = torch.full((n,), float("nan"), device="cuda")
    scale_add[grid](x_ptr=x, y_ptr=y, out_ptr=out, n=n, alpha=3.0, FLIP=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), want[True], rtol=1e-6, atol=1e-6)
    # a None given by name for a parameter with a default (attention's LSE=None): still the fast path
    monkeypatch.undo()
    scale_add[grid](x, y, out, n, alpha=3.0, BIAS=None, num_warps=4)
    monkeypatch.setattr(type(scale_add), "_get_compiled", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(
        AssertionError("the slow path ran for a warm launch with a None argument")))
    out.fill_(float("nan"))
    scale_add[grid](x, y, out, n, alpha=3.0, BIAS=None, num_warps=4)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), want[False], rtol=1e-6, atol=1e-6)
    assert not calls


def triton_cdiv(a, b):
    return (a + b - 1) // b


@kernellab.jit
def _desc_copy(src_desc, dst_ptr, ld, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    tile = src_desc.load([pm * BM, pn * BN])
    rows = pm * BM + tl.arange(0, BM)[:, None]
    cols = pn * BN + tl.arange(0, BN)[None, :]
    tl.store(dst_ptr + rows * ld + cols, tile * 2.0)


@pytest.mark.gpu
def test_host_tensor_descriptor_launches_take_the_fast_path(monkeypatch):
    """A host TensorDescriptor is five kernel parameters (base, shape, strides) and a key of its own: warm launches
    skip binding (tutorial 09's TMA kernels paid ~0.1 ms of host time per launch before, which showed at K=512),
    and a descriptor over another shape or stride class is another key, never the warm kernel's."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from kernellab.tools.tensor_descriptor import TensorDescriptor

    def run(rows, cols, view_cols=None):
        src = torch.randn(rows, view_cols or cols, device="cuda")[:, :cols]
        dst = torch.full((rows // 64 * 64, cols // 64 * 64), float("nan"), device="cuda")
        d = TensorDescriptor(src, list(src.shape), list(src.stride()), [64, 64])
        _desc_copy[(rows // 64, cols // 64)](d, dst, dst.stride(0), BM=64, BN=64)
        torch.cuda.synchronize()
        torch.testing.assert_close(dst, src[:dst.shape[0], :dst.shape[1]] * 2.0)

    run(256, 128)
    assert _desc_copy._fast, "the descriptor launch was not remembered"
    calls = []
    monkeypatch.setattr(type(_desc_copy), "_get_compiled", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(
        AssertionError("the slow path ran for a warm descriptor launch")))
    run(256, 128)
    run(512, 192)  # same classes (multiples of 16): the warm kernel, new values
    monkeypatch.undo()
    run(256, 128, view_cols=136)  # row stride 136: another key (still % 8 elements = 16-byte aligned)
    assert not calls


@kernellab.jit
def _ints(out, a, b, BLOCK: tl.constexpr = 16):
    tl.store(out + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.int64) + a + b)


def test_fast_key_classes_integers_as_specialization_does():
    """Two integers share a fast-path key only when binding would specialize them alike (the same type: int32,
    int64, uint64; == 1 or not; a multiple of 16 or not), and every two int32 values that specialize alike share
    one (outside int32 a finer key is harmless)."""
    def spec(v):
        width = "i32" if -2**31 <= v < 2**31 else "i64" if -2**63 <= v < 2**63 else "u64"
        return width, v == 1, v % 16 == 0

    values = [0, 1, 2, 3, 15, 16, 17, 32, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**32 + 1,
              -2**31, -2**31 - 1, -2**31 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1, None]
    values = [v for v in values if v is not None]
    keys = {v: _ints._fast_sig((None, v, 3), {}) for v in values}
    for v in values:
        for w in values:
            if keys[v] == keys[w]:
                assert spec(v) == spec(w), (v, w)
            elif spec(v) == spec(w):
                assert spec(v)[0] != "i32", (v, w)
