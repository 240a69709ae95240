"""Liger multi_token_attention's `dw` on the GPU is computed by torch (`conv2d_weight`: cuDNN, TF32 by default), not
by a Triton kernel. This models it on the CPU at libraries.py's GPU size and inputs: float32, and float64 on inputs
rounded to TF32, each against float64, with the op's 1e-4 tolerance.

    PYTHONPATH=. python benchmarks/tools/mta_dw_tf32.py

2026-11-27: float32 err/tol 11.6; TF32 inputs 88.0 (abs 0.0169); the H200 run of libraries.py gave 87.4 (abs 0.0183).
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import libraries  # noqa: E402  (benchmarks/libraries.py)


def tf32(x):
    """float32 rounded to TF32's 10 mantissa bits (to nearest)."""
    b = x.float().view(torch.int32)
    return ((b + 0x1000) & ~0x1FFF).view(torch.float32)


def main():
    torch.manual_seed(libraries.SEED)
    op = {o.name: o for o in libraries._ops()}["multi_token_attention"]
    base = op.build(op.sizes["gpu"])
    s = base["scores"].double()
    n = s.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(future, -1e9), -1)
    g = libraries._rand(p.shape, 1.0).double().masked_fill(future, 0.0)
    shape = base["w"].shape
    ref = torch.nn.grad.conv2d_weight(p, shape, g, padding=1)
    runs = (("float32", torch.nn.grad.conv2d_weight(p.float(), shape, g.float(), padding=1).double()),
            ("TF32 inputs", torch.nn.grad.conv2d_weight(tf32(p).double(), shape, tf32(g).double(), padding=1)))
    for name, got in runs:
        err = (got - ref).abs()
        tol = op.atol + op.rtol * ref.abs()
        print(f"{name:12} max abs err {err.max().item():.4g}  err/tol {(err / tol).max().item():.1f}")


if __name__ == "__main__":
    main()
