"""Tile stores written the ways users write them, for tma_pointer_store's tests (tests/gpu_passes/
test_tma_pointer_store.py: which the pass rewrites and why not; tests/test_tma_pointer_store.py: the interpreter on
the IR before and after it, the sm_90a build and the GPU). Each kernel multiplies an M x K by a K x N tile into C
(one K step: BLOCK_K >= K), so its store is a matmul epilogue's; what differs is how the store's addresses and
mask are written. `FORMS` maps a name to (kernel, lifted?, a piece of the reason when not)."""
from __future__ import annotations

import kernellab as kl
import kernellab.language as tl


def _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K: tl.constexpr):
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.)
    b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.)
    return tl.dot(a, b)


@kl.jit
def grid2d(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The plain form: 2-D grid, `(rm[:, None] < M) & (rn[None, :] < N)`."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def pieces_reversed(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """1-D masks expanded separately, columns first, `N > rn`; offsets hinted with tl.multiple_of, arange first;
    the addresses summed in one parenthesis (one addptr)."""
    rm = tl.arange(0, BLOCK_M) + tl.multiple_of(tl.program_id(0) * BLOCK_M, BLOCK_M)
    rn = tl.arange(0, BLOCK_N) + tl.multiple_of(tl.program_id(1) * BLOCK_N, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    mask_m = rm < M
    mask_n = N > rn
    tl.store(c_ptr + (rn[None, :] * stride_cn + stride_cm * rm[:, None]), acc.to(c_ptr.dtype.element_ty),
             mask=mask_n[None, :] & mask_m[:, None])


@kl.jit
def grouped_1d(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The tutorial's grouped order over a 1-D grid (pid_n's divisor is not provably positive: checked at run
    time); wrap-around `% M` on the loads only."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@kl.jit
def wrapped_store(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """`% M` offsets on the store too: the rows wrap, not one box (kept st.global)."""
    rm = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def extra_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A mask that is the bounds and one more condition (a lower triangle): kept st.global."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N) & (rn[None, :] <= rm[:, None]))


@kl.jit
def off_by_one_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """`rm <= M`: not the bounds (one row more): kept st.global."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] <= M) & (rn[None, :] < N))


@kl.jit
def other_index_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The mask bounds the columns by the row index: kept st.global."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rm[:, None] < N))


@kl.jit
def no_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """No mask: no extents for the tensor map (kept st.global)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty))


@kl.jit
def reads_output(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C += A @ B: the kernel reads the tensor it stores (kept st.global)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    c = tl.load(c_ptrs, mask=mask, other=0.)
    tl.store(c_ptrs, (acc + c.to(tl.float32)).to(c_ptr.dtype.element_ty), mask=mask)


@kl.jit
def program_base(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The tile's offsets folded into the base pointer (`c_ptr += pid_m * BLOCK_M * stride_cm + pid_n * BLOCK_N`),
    the addresses then over bare aranges, the mask over the full indices: the same box."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    c_ptr += pid_m * BLOCK_M * stride_cm + pid_n * BLOCK_N * stride_cn
    r = tl.arange(0, BLOCK_M)
    cc = tl.arange(0, BLOCK_N)
    tl.store(c_ptr + r[:, None] * stride_cm + cc[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def wide_offsets(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """64-bit addresses (`rm.to(tl.int64)`, as large-tensor kernels write) over 32-bit indices."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    offs = rm.to(tl.int64)[:, None] * stride_cm + rn.to(tl.int64)[None, :] * stride_cn
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def unshifted_address(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The mask bounds the tile's rows but the addresses use bare aranges (every program writes the first tile's
    box): not the box the mask describes (kept st.global)."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = _acc(a_ptr, b_ptr, M, N, K, rm, rn, stride_am, stride_bk, BLOCK_K)
    r = tl.arange(0, BLOCK_M)
    tl.store(c_ptr + r[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


FORMS = {
    "grid2d": (grid2d, True, None),
    "pieces_reversed": (pieces_reversed, True, None),
    "grouped_1d": (grouped_1d, True, None),
    "wrapped_store": (wrapped_store, False, "wrap-around"),
    "extra_mask": (extra_mask, False, "mask"),
    "off_by_one_mask": (off_by_one_mask, False, "mask"),
    "other_index_mask": (other_index_mask, False, "mask"),
    "no_mask": (no_mask, False, "no mask"),
    "reads_output": (reads_output, False, "also reads"),
    "program_base": (program_base, True, None),
    "wide_offsets": (wide_offsets, True, None),
    "unshifted_address": (unshifted_address, False, "another index"),
}


def args(a, b, c):
    """The kernels' runtime arguments."""
    (M, K), N = a.shape, b.shape[1]
    return [a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), c.stride(1)]


def grid(kernel, M, N, bm, bn):
    if kernel is grouped_1d:
        return (kl.cdiv(M, bm) * kl.cdiv(N, bn),)
    return (kl.cdiv(M, bm), kl.cdiv(N, bn))


def meta(kernel, bm, bn, bk):
    extra = {"GROUP_M": 2} if kernel is grouped_1d else {}
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **extra)
