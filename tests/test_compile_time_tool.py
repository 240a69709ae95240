"""benchmarks/compile_time.py --all-configs: the collector records every autotune config's compile (what the GPU
path's tuning builds), not only the first (the CPU path's)."""
import sys
from pathlib import Path

import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.runtime import autotuner as A
from kernellab.runtime import jit as J

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import compile_time  # noqa: E402


@kl.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


def test_all_configs_are_recorded(monkeypatch):
    monkeypatch.setattr(A.Autotuner, "_choose", A.Autotuner._choose)  # restored after the test
    compile_time._record_every_config()
    configs = [kl.Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in (32, 64) for w in (4, 8) for s in (2, 3)]
    tuned = kl.autotune(configs, key=["n"])(kl.jit(_scale.fn))
    seen = []
    monkeypatch.setattr(J, "compile_hook", lambda fn, spec, warmup: seen.append(
        (spec[0]["BLOCK"], spec[3].get("num_warps"), spec[3].get("num_stages"))) or True)
    x = torch.rand(100)
    tuned[lambda m: (kl.cdiv(100, m["BLOCK"]),)](x, torch.empty(100), 100)
    assert sorted(set(seen)) == sorted((c.kwargs["BLOCK"], c.num_warps, c.num_stages) for c in configs)
    assert tuned.best_config is configs[0]
