"""Run the layer-norm benchmark kernel once with kernellab and once with Triton (for ncu)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import triton  # noqa: E402
import triton.language as trtl  # noqa: E402

import kernellab  # noqa: E402
import kernellab.language as kltl  # noqa: E402
from benchmarks.memory_bound import kernels  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
M = 4096
x = torch.randn(M, N, device="cuda").half()
w = torch.randn(N, device="cuda").half()
b = torch.randn(N, device="cuda").half()
nw = min(max(N // 256, 1), 8)
for name, (jit, tl) in {"kl": (kernellab.jit, kltl), "tr": (triton.jit, trtl)}.items():
    k = kernels(jit, tl)[2]
    y = torch.empty_like(x)
    for _ in range(3):
        k[(M,)](x, y, w, b, x.stride(0), N, 1e-5, BLOCK=N, num_warps=nw)
    torch.cuda.synchronize()
