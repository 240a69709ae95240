"""`auto` persistence keeps the kernel as written where the persistent variant fits fewer blocks an SM
(runtime/persistent.py, PersistentState.fewer_blocks_per_sm): the corpus matmul at 128x128x64 / 3 stages fits two
blocks an SM as written and one persistent (its epilogue buffer beside the stages), and ran 0.85-0.94x of as
written on the H200; at 64x128x64 / 4 stages both fit two and persistence won. Built for sm_90a on any machine."""
from __future__ import annotations

import pytest
import torch

import kernellab
import kernellab.language as tl
from kernellab.compiler.codegen.target import Target
from kernellab.errors import ToolchainError
from kernellab.runtime import persistent, targets
from tests.corpus import make_kernels

MATMUL = make_kernels(kernellab, tl)["matmul_kernel"]


@pytest.mark.parametrize("cfg,fewer", [
    (dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3), True),
    (dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3), True),
    (dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4), False),
    (dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3), False),
])
def test_auto_keeps_the_blocks_per_sm(monkeypatch, cfg, fewer):
    monkeypatch.setattr(targets, "current_target", lambda: Target(90))
    M = N = 4096
    K = 1024
    a, b = torch.empty(M, K, dtype=torch.float16), torch.empty(K, N, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)
    ck = MATMUL.warmup(a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1), GROUP_M=8, **cfg, grid=(1,))
    try:
        ck.build_gpu()
        st = persistent.state(MATMUL, ck)
        st.get_variant(on_gpu=False).build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas here: {e}")
    assert st.fused()
    assert st.fewer_blocks_per_sm() is fewer
