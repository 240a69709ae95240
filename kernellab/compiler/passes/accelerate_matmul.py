"""Choose tensor cores for `tt.dot` where an instruction can take it.

A dot whose K is a multiple of an mma.sync instruction's (sm_80+) — m16n8k16 for fp16/bf16 (fp32 or, for
fp16, fp16 accumulation), m16n8k8 for fp32 with input_precision="tf32", m16n8k32 for int8 with int32
accumulation — gets `mma = [warps along M, warps along N]` and `instr`: layout assignment then gives its
result the #mma accumulator layout and codegen issues that mma.sync. A tile with fewer 16x8 blocks than warps,
or smaller than one block, wraps onto it: the extra warps, rows and columns hold copies, as in Triton's layouts.
On sm_90a a dot whose tile fits whole warpgroups gets wgmma instead, in the form Triton picks for its types:
f16/bf16 (k16, fp32 or fp16 accumulator), tf32 (k8), e4m3/e5m2 (k32, fp32 or fp16 accumulator) and s8 (k32). fp8
dots reach here only where wgmma takes them (`upcast_fp8_dot` widens the others to fp16). Every other dot keeps
the CUDA-core path and records why (`mma_fallback`), so the trace says why a faster one was not used.
"""
from __future__ import annotations

from ..gpu.scratch import MMA_INSTRS, WGMMA_OPERANDS, wgmma_kind
from ..ir import Module

NAME = "accelerate_matmul"
DESCRIPTION = "give tl.dot tensor-core (mma.sync) layouts where the shapes and dtypes allow"


def plan(op, num_warps: int, arch: int):
    """([wm, wn], instruction, None) when mma.sync can run this dot, else (None, None, reason)."""
    a, b, acc = (v.type for v in op.operands[:3])
    m, k = a.shape
    n = b.shape[1]
    ea, eb = a.scalar.ir, b.scalar.ir
    prec = op.attrs.get("input_precision", "ieee")
    if arch < 80:
        return None, None, f"sm_{arch} has no mma.sync"
    if ea != eb:
        return None, None, f"{ea} x {eb} operands: mma.sync takes two operands of one type"
    if ea == "f16" and acc.scalar.ir == "f16":
        instr, want_acc = MMA_INSTRS["f16acc"], "f16"
    elif ea in ("f16", "bf16"):
        instr, want_acc = MMA_INSTRS[ea], "f32"
    elif ea == "f32" and prec == "tf32":
        instr, want_acc = MMA_INSTRS["tf32"], "f32"
    elif ea == "f32":
        return None, None, f"fp32 operands with input_precision={prec!r}: IEEE fp32 runs on CUDA cores"
    elif ea == "i8":
        instr, want_acc = MMA_INSTRS["s8"], "i32"
    else:
        return None, None, f"{ea} operands: mma.sync takes fp16, bf16, fp32 (as tf32) or int8"
    if acc.scalar.ir != want_acc:
        return None, None, f"{acc.scalar.ir} accumulator: {instr.name} accumulates in {want_acc}"
    if k % instr.k or (m % 16 and 16 % m) or (n % 8 and 8 % n):
        return None, None, f"{m}x{n}x{k} is not a multiple of the 16x8x{instr.k} instruction"
    chained = _dot_chain(op, forward=True) or _dot_chain(op, forward=False)
    if chained:
        # warps along M as far as the tile splits evenly (all of them when it is smaller than one tile per warp):
        # row reductions and the next dot stay in a warp
        wm = num_warps
        while wm >= 1 and (m % (16 * wm) or n % (8 * (num_warps // wm))):
            wm //= 2
        return ([wm, num_warps // wm] if wm else [num_warps, 1]), instr, None
    return balanced_warps(m, n, num_warps), instr, None


def balanced_warps(m: int, n: int, num_warps: int) -> list:
    """[wm, wn] for an mma.sync tile of m x n: double the warps along whichever side has more 16x8 instruction
    tiles left per warp (M on a tie), as Triton 3.6 does. A warp holds 4 A registers per 16-row tile and 2 B
    registers per 8-column tile each k-step, so even counts of tiles keep its operand registers low; and for
    the small-M tiles of a skinny matmul (16 x 32, 32 x 64 over 4 warps) every warp takes all of M and its own
    columns of B ([1, 4]), each reading the large operand's tile from shared memory once. A side with one tile
    left takes the extra warps, which hold copies (the #mma layout wraps)."""
    warps, reps = [1, 1], [max(1, -(-m // 16)), max(1, -(-n // 8))]
    while warps[0] * warps[1] < num_warps:
        if reps[0] >= reps[1]:
            warps[0] *= 2
            reps[0] = max(1, reps[0] // 2)
        else:
            warps[1] *= 2
            reps[1] = max(1, reps[1] // 2)
    return warps


# the accumulators wgmma takes for each operand type, as Triton lets tl.dot ask for them
_WGMMA_ACC = {"f16": ("f32", "f16"), "bf16": ("f32",), "f32": ("f32",), "f8e4nv": ("f32", "f16"),
              "f8e5": ("f32", "f16"), "i8": ("i32",)}


def _swizzles(extent_bytes: int) -> bool:
    return extent_bytes in (32, 64) or extent_bytes % 128 == 0


def wgmma_plan(op, num_warps: int, arch: int, enabled: bool):
    """The wgmma instruction name for this dot, or (a str starting with "no") why mma.sync is used.

    wgmma.m64nNkK runs on a warpgroup (4 warps): warp w of it computes rows 16w..16w+15 of the
    instruction's 64, every column; that is the #mma layout with all warps along M, whose warps interleave
    by 16 rows, when each warpgroup issues M / (16 x num_warps) instructions per k-step. B is read from
    swizzled shared memory through a descriptor; A too, or from registers when it is another dot's
    accumulator (attention's probabilities). One instruction reads 32 bytes of K per row: k16 for 16-bit
    types, k8 for tf32, k32 for fp8 and int8; the 8- and 32-bit types must be K-major in shared memory."""
    a, b, acc = (v.type for v in op.operands[:3])
    if len(a.shape) != 2:
        return "no wgmma: a batched dot (split into 2-D dots first)"
    m, k = a.shape
    n = b.shape[1]
    ea = a.scalar.ir
    if arch < 90:
        return f"no wgmma: sm_{arch} (wgmma needs sm_90a)"
    if not enabled:
        return "no wgmma: enable_wgmma=False"
    if ea not in WGMMA_OPERANDS or b.scalar.ir != ea:
        return f"no wgmma: {ea} x {b.scalar.ir} operands"
    if ea == "f32" and op.attrs.get("input_precision", "ieee") != "tf32":
        return f"no wgmma: f32 operands with input_precision={op.attrs.get('input_precision')!r} (IEEE fp32)"
    if acc.scalar.ir not in _WGMMA_ACC[ea]:
        return f"no wgmma: a {acc.scalar.ir} accumulator for {ea} operands"
    kind = wgmma_kind(op)
    warps = wgmma_warps(m, n, num_warps, kind)
    if warps is None:
        return (f"no wgmma: a {m}x{n} tile over {num_warps} warps; wgmma needs whole warpgroups, BLOCK_M a "
                "multiple of 64 per warpgroup along M, and the columns split evenly between warpgroups along N")
    n_i = n // warps[1]
    if n_i % 8 or not 8 <= n_i <= 256 or k % kind.k:
        return f"no wgmma: {m}x{n}x{k} (wgmma takes N = 8..256 in steps of 8, K a multiple of {kind.k})"
    if not _swizzles(k * kind.esize):
        return f"no wgmma: BLOCK_K = {k} cannot be swizzled ({k * kind.esize} bytes: 32, 64 or a multiple of 128)"
    if not kind.k_major_only and not _swizzles(n * kind.esize):
        return f"no wgmma: BLOCK_N = {n} cannot be swizzled ({n * kind.esize} bytes: 32, 64 or a multiple of 128)"
    acc_note = ".f16acc" if kind.acc == "f16" else ""
    return f"wgmma.m64n{n_i}k{kind.k}.{kind.ptx}{acc_note}"


def wgmma_warps(m: int, n: int, num_warps: int, kind) -> list | None:
    """[warps along M, warps along N] for a wgmma dot, or None. All warps along M when BLOCK_M has 16 rows for each
    (every warpgroup its own 64-row blocks); else as many warpgroups along M as BLOCK_M has 64-row blocks and the
    rest along N, each warpgroup taking its own N / wn consecutive columns (a 64-row tile over 8 warps: two
    warpgroups of m64n(N/2), as Triton does, instead of falling back to mma.sync). A split of N must start each
    warpgroup's columns on a whole 128-byte swizzle atom of B."""
    if num_warps % 4 or m % 64:
        return None
    if m % (16 * num_warps) == 0:
        return [num_warps, 1]
    wm = num_warps
    while wm > 4 and m % (16 * wm):
        wm //= 2
    wn = num_warps // wm
    if m % (16 * wm) or n % wn or (n // wn) * kind.esize % 128:
        return None
    return [wm, wn]


def _dot_chain(op, forward: bool, depth: int = 24) -> bool:
    """Whether, within the dot's block, its result flows into a reduction or another dot (forward: as
    attention's scores do) or its A operand is computed from another dot's result (backward: as the
    probabilities are, which can then stay in registers with the same warps along M)."""
    targets = ("tt.reduce", "tt.dot") if forward else ("tt.dot",)
    seen, work = set(), [(op.results[0] if forward else op.operands[0], 0)]
    while work:
        v, d = work.pop()
        nxt = list(v.uses) if forward else [v.defining_op]
        for o in nxt:
            if o is None or o is op or id(o) in seen or d > depth or o.block is not op.block:
                continue
            seen.add(id(o))
            if o.name in targets:
                return True
            work.extend((x, d + 1) for x in (o.results if forward else o.operands))
    return False


def _wgmma_warps_of(op, num_warps: int) -> list:
    a, b = op.operands[0].type, op.operands[1].type
    return wgmma_warps(a.shape[0], b.shape[1], num_warps, wgmma_kind(op))


def run(module: Module, options=None) -> dict:
    num_warps = getattr(options, "num_warps", 4)
    arch = getattr(options, "arch", 90)
    used = fallback = 0
    for op in module.kernel.walk():
        if op.name != "tt.dot":
            continue
        warps, instr, why = plan(op, num_warps, arch)
        if warps is None and op.operands[0].type.scalar.ir in ("f8e4nv", "f8e5"):
            wg = wgmma_plan(op, num_warps, arch, getattr(options, "wgmma", True))
            if not wg.startswith("no wgmma"):  # fp8 has no mma.sync form here: wgmma or CUDA cores
                op.attrs["mma"] = _wgmma_warps_of(op, num_warps)
                op.attrs["instr"] = wg
                used += 1
                continue
            why = wg
        if warps is not None:
            wg = wgmma_plan(op, num_warps, arch, getattr(options, "wgmma", True))
            if wg.startswith("no wgmma"):
                op.attrs["mma"] = warps
                op.attrs["instr"] = instr.name
                if arch >= 90:  # say why the faster Hopper instruction was not used
                    op.attrs["not_wgmma"] = wg
            else:
                op.attrs["mma"] = _wgmma_warps_of(op, num_warps)
                op.attrs["instr"] = wg
            used += 1
        else:
            op.attrs["mma_fallback"] = why
            fallback += 1
    return {"mma": used, "cuda_core": fallback}
