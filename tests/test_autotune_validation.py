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


# ------------------------------------------------------------------- kernels whose only tensors are descriptors
class _FakeCudaTensor:
    is_cuda = True

    def data_ptr(self):
        return 0


def test_host_descriptors_over_cuda_tensors_are_timed_on_the_gpu():
    """A kernel taking only host TensorDescriptors (Liger's mlp) launches on the GPU: the autotuner must time
    its configs there, not keep the first that compiles as it does for the CPU interpreter."""
    desc = kl.TensorDescriptor.from_tensor(torch.zeros(8, 16), [8, 16])
    assert not A._on_gpu((desc, 8), {"BLOCK": 16})  # over a CPU tensor: the interpreter
    desc.base = _FakeCudaTensor()
    assert A._on_gpu((desc, 8), {"BLOCK": 16})


@kl.jit
def _desc_scale(in_desc, out_desc, N, BM: tl.constexpr, BN: tl.constexpr):
    m0, n0 = tl.program_id(0) * BM, tl.program_id(1) * BN
    out_desc.store([m0, n0], in_desc.load([m0, n0]) * 3)


def _desc_hook(nargs):
    nargs["in_desc"].block_shape = [nargs["BM"], nargs["BN"]]
    nargs["out_desc"].block_shape = [nargs["BM"], nargs["BN"]]


@pytest.mark.gpu
def test_autotune_times_descriptor_only_kernel_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    configs = [kl.Config({"BM": bm, "BN": 64}, num_warps=4, pre_hook=_desc_hook) for bm in (16, 64)]
    tuned = kl.autotune(configs, key=["N"])(_desc_scale)
    a = torch.randn(200, 192, device="cuda")
    out = torch.full_like(a, float("nan"))
    D = kl.TensorDescriptor
    grid = lambda meta: (kl.cdiv(200, meta["BM"]), kl.cdiv(192, meta["BN"]))  # noqa: E731
    tuned[grid](D.from_tensor(a, [1, 1]), D.from_tensor(out, [1, 1]), 192)
    assert tuned.best_config_reason.startswith("fastest of 2"), tuned.best_config_reason
    assert len(tuned.configs_timings) == 2
    torch.testing.assert_close(out, a * 3)
