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


def test_keywords_move_into_their_positions():
    k = scale_add
    args, kw = k._by_position((1, 2), dict(out_ptr=3, n=4, BLOCK=64, num_warps=2))
    assert args == (1, 2, 3, 4, 2.0, 64) and kw == {"num_warps": 2}  # alpha's default filled in before BLOCK
    assert k._by_position((1,), dict(x_ptr=5, y_ptr=2, out_ptr=3, n=4)) is None  # x_ptr twice: slow path says so
    assert k._by_position((1,), dict(out_ptr=3, n=4)) is None  # y_ptr missing: slow path says so
    assert k._by_position((1, 2, 3, 4), {"num_warps": 4}) == ((1, 2, 3, 4), {"num_warps": 4})
    assert k._by_position((1, 2, 3, 4), {"BIAS": None})[0] == (1, 2, 3, 4, 2.0, 128, False, None)


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
