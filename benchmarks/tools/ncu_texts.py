"""One timed-size launch per side of held-out texts cases, for ncu: kernellab (and each --also-env setting) then
Triton, each config launched twice (a warm-up and the one to read). Kernel names are the text's, the same on both
sides, so read the rows in launch order: for each case and config, kernellab x2, [each setting x2], Triton x2.

    ncu --csv --page details --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats -k regex:'mm_w4a16' \
        python benchmarks/tools/ncu_texts.py --texts benchmarks/heldout_texts4.py h4_mm_w4a16 --config 2

The launch order is printed on stderr (one line a launch pair)."""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", required=True)
    ap.add_argument("--config", type=int, action="append", help="config index (repeatable; default all)")
    ap.add_argument("--also-env", action="append", default=[], metavar="VAR=VALUE")
    ap.add_argument("cases", nargs="+")
    a = ap.parse_args(argv)
    import torch

    from benchmarks.idioms import env_setting, load_texts_both

    kl, tr, alts = load_texts_both(a.texts, a.also_env)
    sides = [("kernellab", kl, None)] + [(f"kernellab[{s}]", m, s) for s, m in alts.items()] + [("triton", tr, None)]
    for name in a.cases:
        case = kl.CASE_DEFS[name]
        x = kl.bench_inputs(name, "cuda")
        for i, cfg in enumerate(case.configs):
            if a.config and i not in a.config:
                continue
            for side, mod, setting in sides:
                with env_setting(setting):
                    for _ in range(2):
                        mod.CASE_DEFS[name].launch(x, dict(cfg))
                torch.cuda.synchronize()
                print(f"launch x2: {name} config {i} {cfg} {side}", file=sys.stderr)


if __name__ == "__main__":
    main()
