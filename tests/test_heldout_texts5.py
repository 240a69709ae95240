"""benchmarks/heldout_texts5.py's kernel texts compute what their float64 references say, on the CPU interpreter and
(marked gpu) compiled on a GPU, with kernellab.compat serving `triton` in a child process (so the import hook stays
out of this one); and `benchmarks/idioms.py --texts` runs them."""
from __future__ import annotations

from .heldout_screens import case_names, case_tests, child, idioms_dry_run

STEM = "heldout_texts5"


def test_cases_are_new_and_complete():
    names = case_names(STEM)
    assert 16 <= len(names) <= 20 and len(set(names)) == len(names)
    assert all(n.startswith("h5_") for n in names)
    for other in ("heldout_texts3", "heldout_texts4"):
        assert not set(names) & set(case_names(other))


test_heldout_text_on_interpreter, test_heldout_text_on_gpu = case_tests(STEM, ["", "KERNELLAB_L2_EVICT_HINT=1 KERNELLAB_STORE_RUN_PEERS=1"])


def test_checks_catch_a_wrong_kernel():
    """The comparisons fail where they should: an unwritten output (poison left), a NaN row answered finite, and a
    padding slot that wrote the paged cache."""
    code = ("import torch, heldout_common as hc\n"
            "want = torch.tensor([1.0, float('nan'), float('inf'), 2.0], dtype=torch.float64)\n"
            "for got in ([1.0, 0.5, float('inf'), 2.0], [1.0, float('nan'), float('inf'), float('nan')],\n"
            "            [1.0, float('nan'), 3.0, 2.0]):\n"
            "    try:\n"
            "        hc.close_nonfinite('t', torch.tensor(got), want, 1e-3)\n"
            "    except AssertionError:\n"
            "        continue\n"
            "    raise SystemExit(f'{got} passed')\n"
            "hc.close_nonfinite('t', torch.tensor([1.0, float('nan'), float('inf'), 2.0]), want, 1e-3)\n"
            "c = heldout_texts5.CASE_DEFS['h5_reshape_and_cache']\n"
            "x = c.inputs(c.test_size, hc.maker(0))\n"
            "x['slots'][1] = x['slots'][0]\n"  # a padding token given token 0's slot
            "c.launch(x, dict(num_warps=4))\n"
            "try:\n"
            "    c.compare(x, None)\n"
            "except AssertionError:\n"
            "    print('caught')\n")
    assert child(STEM, code).strip().endswith("caught")


def test_idioms_texts_dry_run_on_the_interpreter():
    """`idioms.py --texts` on this module on the CPU (test sizes, a stand-in timer, kernellab only): every config of
    two cases (two kernels a launch; a lookup table built at launch) checked and timed."""
    idioms_dry_run(STEM, ["h5_flash_decode_split", "h5_bsr_matmul"], 6)
