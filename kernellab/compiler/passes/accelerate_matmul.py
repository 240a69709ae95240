"""Choose tensor cores for `tt.dot` where the instruction can take it.

A dot of fp16 or bf16 tiles with fp32 accumulation whose shape is a multiple of the mma.sync
m16n8k16 instruction (sm_80+) gets `mma = [warps along M, warps along N]`: layout assignment then
gives its result the #mma accumulator layout and codegen issues mma.sync. Every other dot keeps the
CUDA-core path and records why (`mma_fallback`), so the trace says why a faster one was not used.
"""
from __future__ import annotations

from ..ir import Module

NAME = "accelerate_matmul"
DESCRIPTION = "give tl.dot tensor-core (mma.sync m16n8k16) layouts where the shapes and dtypes allow"


def plan(op, num_warps: int, arch: int):
    """([wm, wn], None) when mma.sync can run this dot, else (None, reason)."""
    a, b, acc = (v.type for v in op.operands[:3])
    m, k = a.shape
    n = b.shape[1]
    ea, eb = a.scalar.name, b.scalar.name
    if arch < 80:
        return None, f"sm_{arch} has no mma.sync m16n8k16"
    if ea != eb or ea not in ("f16", "bf16"):
        return None, f"{ea} x {eb} operands: tensor cores here take fp16 or bf16 (tf32 and int8 come later)"
    if acc.scalar.name != "f32":
        return None, f"{acc.scalar.name} accumulator: mma.sync here accumulates in fp32"
    if m % 16 or n % 8 or k % 16:
        return None, f"{m}x{n}x{k} is not a multiple of the 16x8x16 instruction"
    splits = []
    wm = num_warps
    while wm >= 1:
        wn = num_warps // wm
        if m % (16 * wm) == 0 and n % (8 * wn) == 0:
            splits.append([wm, wn])
        wm //= 2
    if not splits:
        return None, f"{m}x{n} cannot be split over {num_warps} warps in 16x8 tiles"
    if _feeds_row_math(op) or _fed_by_dot(op):
        return splits[0], None  # warps along M only: row reductions and the next dot stay inside a warp
    # otherwise the squarest warp tile: each warp reads m/wm rows of A and n/wn columns of B per k-step
    return min(splits, key=lambda s: (m // s[0] + n // s[1], -s[0])), None


def _fed_by_dot(op, depth: int = 24) -> bool:
    """Whether operand A is computed (in the same block) from another dot's result, as attention's
    probabilities are: with the same warps along M it can stay in registers."""
    work, seen = [(op.operands[0], 0)], set()
    while work:
        v, d = work.pop()
        p = v.defining_op
        if p is None or p.block is not op.block or id(p) in seen or d > depth:
            continue
        seen.add(id(p))
        if p.name == "tt.dot":
            return True
        work.extend((o, d + 1) for o in p.operands)
    return False


def _feeds_row_math(op, depth: int = 24) -> bool:
    """Whether the dot's result flows (within the same block) into a reduction or another dot, as
    attention's scores do."""
    seen, work = set(), [(op.results[0], 0)]
    while work:
        v, d = work.pop()
        for user in v.uses:
            if id(user) in seen or d > depth or user.block is not op.block:
                continue
            seen.add(id(user))
            if user.name in ("tt.reduce", "tt.dot") and user is not op:
                return True
            work.extend((r, d + 1) for r in user.results)
    return False


def run(module: Module, options=None) -> dict:
    num_warps = getattr(options, "num_warps", 4)
    arch = getattr(options, "arch", 90)
    used = fallback = 0
    for op in module.kernel.walk():
        if op.name != "tt.dot":
            continue
        warps, why = plan(op, num_warps, arch)
        if warps is not None:
            op.attrs["mma"] = warps
            used += 1
        else:
            op.attrs["mma_fallback"] = why
            fallback += 1
    return {"mma": used, "cuda_core": fallback}
