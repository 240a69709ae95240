"""Shared-memory addressing by a base plus constants (`smem_layout.linear_delta`), which lets ptxas fold a
thread's cp.async destinations into immediates: the constant must equal the true byte distance for every
element, on padded and swizzled tiles, both orders."""
from __future__ import annotations

import itertools
import re

import pytest

from kernellab.compiler.gpu.smem_layout import element_byte, linear_delta
from kernellab.compiler.types import MemDescType
from kernellab.compiler.types import float16 as f16
from kernellab.compiler.types import float32 as f32

TILES = [MemDescType((64, 128), f16, (1, 0), 0, 128), MemDescType((128, 64), f16, (1, 0), 0, 128),
         MemDescType((64, 64), f16, (0, 1), 0, 128), MemDescType((32, 32), f16, (1, 0), 0, 64),
         MemDescType((16, 16), f32, (1, 0), 0, 64), MemDescType((32, 16), f16, (1, 0), 0, 32),
         MemDescType((64, 32), f16, (1, 0), 8, 0), MemDescType((32, 64), f32, (0, 1), 4, 0)]


@pytest.mark.parametrize("t", TILES, ids=repr)
def test_linear_delta_is_the_distance_for_every_element(t):
    rows, cols = t.shape
    found = 0
    for dr, dc in itertools.product(range(0, rows, 1), range(0, cols, 1)):
        delta = linear_delta(t, dr, dc)
        if delta is None:
            continue
        found += 1
        for r, c in itertools.product(range(rows - dr), range(0, cols - dc, max(1, (cols - dc) // 7))):
            assert element_byte(t, r + dr, c + dc) - element_byte(t, r, c) == delta, (t, r, c, dr, dc)
    assert found > 1  # at least one non-trivial distance besides (0, 0)


def test_swizzled_tiles_refuse_distances_inside_a_swizzle_period():
    t = MemDescType((64, 128), f16, (1, 0), 0, 128)
    assert linear_delta(t, 8, 0) == 8 * 128 and linear_delta(t, 0, 64) == 64 * 128
    assert linear_delta(t, 1, 0) is None and linear_delta(t, 0, 8) is None and linear_delta(t, 4, 0) is None


def test_matmul_copies_use_immediate_shared_offsets():
    """On sm_90a a 128x128x64 fp16 matmul's cp.async destinations are one register plus constants per stage
    (PTX `add` of a constant to one base), not one full swizzle computation per copy."""
    torch = pytest.importorskip("torch")
    import kernellab
    import kernellab.language as tl
    from tests.idioms import make_idioms
    w = {w.name: w for w in make_idioms(kernellab.jit, tl)}["matmul"]
    v = next(v for v in w.variants if v.name == "acc_arg")
    n = 512
    a, b, c = (torch.empty((n, n), dtype=torch.float16) for _ in range(3))
    ck = v.kernel.warmup(a, b, c, n, n, n, n, 1, n, 1, n, 1, BM=128, BN=128, BK=64, GM=8, num_warps=4,
                         num_stages=4, grid=(1,))
    ck.build_gpu()
    ptx = ck.asm["ptx"]
    copies = re.findall(r"cp\.async\.cg\.shared\.global \[(%r\d+)\]", ptx)
    assert len(copies) >= 16
    # every destination but the first of each tile is its base plus a constant
    plus_const = set(re.findall(r"add\.s32\s+(%r\d+), %r\d+, \d+;", ptx))
    assert sum(d in plus_const for d in copies) >= len(copies) * 3 // 4
