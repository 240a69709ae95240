"""The autotuner skips configs that fail to compile (as Triton does) and says why when none compiles; an
unknown `key` and a malformed Config are refused with errors that name the kernel."""
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.runtime import autotuner as A


@kl.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


def _grid(n):
    return lambda meta: (kl.cdiv(n, meta["BLOCK"]),)


BAD = kl.Config({"BLOCK": 2**21})  # over the 2^20-element tile limit: does not compile
BAD_ARANGE = kl.Config({"BLOCK": 100})  # not a power of 2
GOOD = kl.Config({"BLOCK": 128})
GOOD2 = kl.Config({"BLOCK": 64})


@pytest.mark.parametrize("on_gpu", [False, True])
def test_failing_configs_are_skipped(monkeypatch, on_gpu):
    monkeypatch.setattr(A, "_on_gpu", lambda args, kwargs: on_gpu)
    timed = []

    def bench(call):
        call()
        timed.append(1)
        return 1.0

    tuned = kl.autotune([BAD, BAD_ARANGE, GOOD, GOOD2], key=["n"], restore_value=["x_ptr"], do_bench=bench)(add_one)
    x = torch.zeros(300)
    tuned[_grid(300)](x, 300)
    assert torch.equal(x, torch.ones(300))
    assert tuned.best_config is GOOD
    assert set(tuned.failed_configs) == {BAD, BAD_ARANGE}
    assert "2 failed to compile" in tuned.best_config_reason
    assert len(timed) == (2 if on_gpu else 0)  # the failing configs are never benchmarked


def test_all_configs_failing_is_reported():
    tuned = kl.autotune([BAD, BAD_ARANGE], key=["n"])(add_one)
    with pytest.raises(kl.LaunchError) as ei:
        tuned[_grid(300)](torch.zeros(300), 300)
    text = str(ei.value)
    assert "add_one" in text and "none of the 2 configs" in text
    assert "2^20" in text and "power of 2" in text


def test_unknown_key_is_ignored_with_a_suggestion():
    """As in Triton, a key that names no parameter is ignored (code written for Triton keeps running), and
    the warning says which parameter was probably meant."""
    with pytest.warns(UserWarning) as rec:
        tuned = kl.autotune([GOOD], key=["N", "n"])(add_one)
    text = str(rec[0].message)
    assert "'N'" in text and "did you mean 'n'" in text and "add_one" in text and tuned.key == ["n"]
    x = torch.zeros(300)
    tuned[_grid(300)](x, 300)
    assert torch.equal(x, torch.ones(300))


def test_early_prune_gets_positional_and_keyword_args_as_triton_passes_them():
    seen = {}

    def prune(configs, nargs, **kwargs):
        seen.update(nargs=set(nargs), kwargs=set(kwargs))
        return configs[:1]

    tuned = kl.autotune([GOOD, GOOD], key=["n"], prune_configs_by={"early_config_prune": prune})(add_one)
    x = torch.zeros(300)
    tuned[_grid(300)](x, n=300)
    assert seen == {"nargs": {"x_ptr"}, "kwargs": {"n"}} and torch.equal(x, torch.ones(300))


@pytest.mark.parametrize("bad", [None, 3, ["BLOCK"], {1: 2}])
def test_config_needs_a_dict_of_names(bad):
    with pytest.raises(kl.LaunchError, match="kl.Config"):
        kl.Config(bad)
