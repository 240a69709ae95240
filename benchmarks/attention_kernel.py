"""Flash-attention forward pass, written once in Triton's language.

`make_attention_kernel(kl, tl)` jits the same kernel text with whichever module it is given
(`kernellab` and `kernellab.language`, or `triton` and `triton.language`), the way
`tests.corpus.make_kernels` does for the matmul benchmark. `attention(...)` launches it.

One program computes BLOCK_M query rows of one (batch, head). It walks the keys in blocks of
BLOCK_N with an online softmax: a running row max `m_i` (in the log2 domain), a running row sum
`l_i` and an fp32 accumulator rescaled whenever the max grows. K is loaded already transposed, as a
[HEAD_DIM, BLOCK_N] tile, through its strides, so the score is a plain `tl.dot(q, kT)`. The softmax
scale is folded into the exponent: exp(s * sm_scale) = exp2(s * sm_scale * log2(e)). With CAUSAL the
key loop stops at the diagonal: blocks strictly below it need no mask, and only the BLOCK_M keys on
the diagonal go through `tl.where`. The sequence length must be a multiple of BLOCK_M and BLOCK_N
(no bounds masks), and BLOCK_M a multiple of BLOCK_N. Given an `LSE` tensor, the forward also writes each
row's log2-sum-exp2 of the scaled scores (m_i + log2(l_i)), which the backward needs.

The backward (`make_attention_bwd_kernels`, `attention_backward`) has the structure of Triton's tutorial 06,
as three kernels: `delta = rowsum(o * do)`; one program per BLOCK_N1 keys that keeps k and v in registers
and walks the query blocks (BLOCK_M1 rows) accumulating dK and dV; one program per BLOCK_M2 queries that
keeps q and do and walks the key blocks (BLOCK_N2 keys) accumulating dQ. Both recompute p = exp2(s *
qk_scale - lse) from the forward's LSE, so no probability matrix is stored. With CAUSAL, the blocks on the
diagonal go through a masked copy of the loop and the blocks the mask hides entirely are skipped.
"""
from __future__ import annotations

LOG2E = 1.4426950408889634


def make_attention_kernel(kl, tl):
    """The attention forward kernel jitted by `kl` (kernellab or triton) with its language `tl`."""

    @kl.jit
    def _attn_fwd_inner(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n, lo, hi, qk_scale,
                        BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
        for start_n in range(lo, hi, BLOCK_N):
            kT = tl.load(kT_ptrs + start_n * stride_kn)
            s = tl.dot(q, kT)
            if MASKED:
                visible = offs_m[:, None] >= start_n + offs_n[None, :]
                s = tl.where(visible, s * qk_scale, -float("inf"))
            else:
                s = s * qk_scale
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = tl.load(v_ptrs + start_n * stride_vn)
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new
        return acc, l_i, m_i

    @kl.jit
    def attention_fwd_kernel(Q, K, V, Out, qk_scale,
                             stride_qz, stride_qh, stride_qm, stride_qd,
                             stride_kz, stride_kh, stride_kn, stride_kd,
                             stride_vz, stride_vh, stride_vn, stride_vd,
                             stride_oz, stride_oh, stride_om, stride_od,
                             H, N_CTX,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                             CAUSAL: tl.constexpr, LSE=None):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)

        q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        kT_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_d[:, None] * stride_kd + offs_n[None, :] * stride_kn
        v_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd

        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        q = tl.load(q_ptrs)

        if CAUSAL:
            # key blocks strictly before this query block: every key visible, no mask
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                            0, start_m * BLOCK_M, qk_scale, BLOCK_N, False)
            # the diagonal block: key j visible to query i when j <= i
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                            start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True)
        else:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, kT_ptrs, v_ptrs, stride_kn, stride_vn, offs_m, offs_n,
                                            0, N_CTX, qk_scale, BLOCK_N, False)

        out = acc / l_i[:, None]
        o_ptrs = (Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om
                  + offs_d[None, :] * stride_od)
        tl.store(o_ptrs, out.to(Out.dtype.element_ty))
        if LSE is not None:  # the row's log2-sum-exp2, for the backward
            tl.store(LSE + off_hz * N_CTX + offs_m, m_i + tl.log2(l_i))

    return attention_fwd_kernel


def make_attention_desc_kernel(kl, tl):
    """The forward again, its tiles read through tensor descriptors made in the kernel (the structure of Triton's
    tutorial 06 on Hopper), so TMA can fill the K and V stages and `WS=True` marks the key loops for warp
    specialization (`tl.range(..., warp_specialize=WS)`; causal: both, one producer fills both): a producer
    warpgroup issues the copies, the num_warps consumer warps compute. Each (batch, head) is one [N_CTX, HEAD_DIM]
    plane of a rank-3 descriptor over [Z * H, N_CTX, HEAD_DIM], so TMA zero-fills past the sequence's end and a
    length that is not a multiple of the blocks works: with EVEN_N false, keys past N_CTX are masked out of the
    scores (query rows past it are not stored)."""

    @kl.jit
    def _attn_desc_inner(acc, l_i, m_i, q, desc_k, desc_v, off_hz, offs_m, offs_n, lo, hi, qk_scale, N_CTX,
                         BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, DIAGONAL: tl.constexpr, EVEN_N: tl.constexpr,
                         WS: tl.constexpr):
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            k = desc_k.load([off_hz, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
            s = tl.dot(q, k.T)
            if DIAGONAL:  # key j is visible to query i when j <= i (keys past N_CTX only to rows past it)
                s = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], s, -float("inf"))
            elif not EVEN_N:
                s = tl.where((start_n + offs_n < N_CTX)[None, :], s, -float("inf"))
            # the scale (> 0) applied after the row max: one fused multiply-add per score
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.exp2(s * qk_scale - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            v = desc_v.load([off_hz, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new
        return acc, l_i, m_i

    @kl.jit
    def attention_desc_fwd_kernel(Q, K, V, Out, LSE, qk_scale, Z, H, N_CTX,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                  CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, WS: tl.constexpr):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        desc_q = tl.make_tensor_descriptor(Q, [Z * H, N_CTX, HEAD_DIM], [N_CTX * HEAD_DIM, HEAD_DIM, 1],
                                           [1, BLOCK_M, HEAD_DIM])
        desc_k = tl.make_tensor_descriptor(K, [Z * H, N_CTX, HEAD_DIM], [N_CTX * HEAD_DIM, HEAD_DIM, 1],
                                           [1, BLOCK_N, HEAD_DIM])
        desc_v = tl.make_tensor_descriptor(V, [Z * H, N_CTX, HEAD_DIM], [N_CTX * HEAD_DIM, HEAD_DIM, 1],
                                           [1, BLOCK_N, HEAD_DIM])
        desc_o = tl.make_tensor_descriptor(Out, [Z * H, N_CTX, HEAD_DIM], [N_CTX * HEAD_DIM, HEAD_DIM, 1],
                                           [1, BLOCK_M, HEAD_DIM])
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        q = desc_q.load([off_hz, start_m * BLOCK_M, 0]).reshape([BLOCK_M, HEAD_DIM])
        if CAUSAL:  # the blocks before the diagonal (no mask), then the diagonal's
            acc, l_i, m_i = _attn_desc_inner(acc, l_i, m_i, q, desc_k, desc_v, off_hz, offs_m, offs_n, 0,
                                             start_m * BLOCK_M, qk_scale, N_CTX, BLOCK_N, HEAD_DIM, False, True, WS)
            acc, l_i, m_i = _attn_desc_inner(acc, l_i, m_i, q, desc_k, desc_v, off_hz, offs_m, offs_n,
                                             start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale, N_CTX, BLOCK_N,
                                             HEAD_DIM, True, True, WS)
        else:
            acc, l_i, m_i = _attn_desc_inner(acc, l_i, m_i, q, desc_k, desc_v, off_hz, offs_m, offs_n, 0, N_CTX,
                                             qk_scale, N_CTX, BLOCK_N, HEAD_DIM, False, EVEN_N, WS)
        out = acc / l_i[:, None]
        desc_o.store([off_hz, start_m * BLOCK_M, 0], out.to(Out.dtype.element_ty).reshape([1, BLOCK_M, HEAD_DIM]))
        if LSE is not None:  # the row's log2-sum-exp2, for the backward
            tl.store(LSE + off_hz * N_CTX + offs_m, m_i + tl.log2(l_i), mask=offs_m < N_CTX)

    return attention_desc_fwd_kernel


def attention_desc(q, k, v, causal, sm_scale, kl_module, kernel, BLOCK_M=128, BLOCK_N=64, num_warps=4,
                   num_stages=3, out=None, lse=None, warp_specialize=False):
    """`attention` through `make_attention_desc_kernel`'s text (q, k, v contiguous [batch, heads, seq, head_dim];
    any seq). Triton makes in-kernel descriptors in a global scratch it asks an allocator for: one is set when
    `kl_module` has `set_allocator`."""
    Z, H, N_CTX, HEAD_DIM = q.shape
    assert k.shape == v.shape == q.shape and q.is_contiguous() and k.is_contiguous() and v.is_contiguous(), \
        "q, k and v: contiguous, of the same shape"
    if out is None:
        out = q.new_empty(q.shape)
    if hasattr(kl_module, "set_allocator"):
        import torch

        kl_module.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    grid = (kl_module.cdiv(N_CTX, BLOCK_M), Z * H)
    launched = kernel[grid](q, k, v, out, lse, sm_scale * LOG2E, Z, H, N_CTX, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                            HEAD_DIM=HEAD_DIM, CAUSAL=causal, EVEN_N=N_CTX % BLOCK_N == 0, WS=warp_specialize,
                            num_warps=num_warps, num_stages=num_stages)
    return out, launched


def attention(q, k, v, causal, sm_scale, kl_module, kernel, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3,
              out=None, lse=None):
    """softmax(q k^T * sm_scale [causal mask]) v for q, k, v of shape [batch, heads, seq, head_dim].

    `kernel` comes from `make_attention_kernel(kl_module, ...)`; `kl_module` supplies `cdiv`. Writes
    into `out` when given (else a new tensor), and the rows' log2-sum-exp2 into `lse` (float32 [batch, heads,
    seq], contiguous) when given; returns (out, what the launch returned)."""
    Z, H, N_CTX, HEAD_DIM = q.shape
    assert k.shape == v.shape == q.shape, "q, k and v must have the same shape"
    assert N_CTX % BLOCK_M == 0 and N_CTX % BLOCK_N == 0 and BLOCK_M % BLOCK_N == 0, \
        "the kernel has no bounds masks: seq must be a multiple of BLOCK_M and BLOCK_N, BLOCK_M of BLOCK_N"
    if out is None:
        out = q.new_empty(q.shape)
    grid = (kl_module.cdiv(N_CTX, BLOCK_M), Z * H)
    assert lse is None or (lse.shape == q.shape[:3] and lse.is_contiguous()), "lse: contiguous [batch, heads, seq]"
    launched = kernel[grid](q, k, v, out, sm_scale * LOG2E,
                            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                            H, N_CTX,
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, CAUSAL=causal,
                            LSE=lse, num_warps=num_warps, num_stages=num_stages)
    return out, launched


def make_attention_bwd_kernels(kl, tl):
    """The three backward kernels (preprocess, dkdv, dq) jitted by `kl` with its language `tl`."""

    @kl.jit
    def attention_bwd_preprocess(O, DO, Delta,
                                 stride_oz, stride_oh, stride_om, stride_od,
                                 stride_doz, stride_doh, stride_dom, stride_dod,
                                 H, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
        """delta[i] = sum_d o[i, d] * do[i, d]: the row term of dS = P * (dP - delta)."""
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        o = tl.load(O + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om
                    + offs_d[None, :] * stride_od)
        do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                     + offs_d[None, :] * stride_dod)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        tl.store(Delta + off_hz * N_CTX + offs_m, delta)

    @kl.jit
    def _attn_bwd_dkdv_inner(dk, dv, k, v, qT_ptrs, do_ptrs, lse_ptr, delta_ptr, stride_qm, stride_dom, offs_n,
                             lo, hi, qk_scale, BLOCK_M: tl.constexpr, MASKED: tl.constexpr):
        """Add the contribution of queries lo..hi (in blocks of BLOCK_M) to this key block's dK and dV. The
        scores are computed transposed (keys along rows), so p^T and dS^T feed the dots as A operands."""
        offs_m = tl.arange(0, BLOCK_M)
        for start_m in range(lo, hi, BLOCK_M):
            qT = tl.load(qT_ptrs + start_m * stride_qm)
            lse = tl.load(lse_ptr + start_m + offs_m)
            sT = tl.dot(k, qT)
            pT = tl.exp2(sT * qk_scale - lse[None, :])
            if MASKED:  # query i sees key j when j <= i
                pT = tl.where(start_m + offs_m[None, :] >= offs_n[:, None], pT, 0.0)
            do = tl.load(do_ptrs + start_m * stride_dom)
            dv = tl.dot(pT.to(do.dtype), do, dv)
            delta = tl.load(delta_ptr + start_m + offs_m)
            dpT = tl.dot(v, tl.trans(do))
            dsT = pT * (dpT - delta[None, :])
            dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk)
        return dk, dv

    @kl.jit
    def attention_bwd_dkdv_kernel(Q, K, V, DO, DK, DV, LSE, Delta, sm_scale, qk_scale,
                                  stride_qz, stride_qh, stride_qm, stride_qd,
                                  stride_kz, stride_kh, stride_kn, stride_kd,
                                  stride_vz, stride_vh, stride_vn, stride_vd,
                                  stride_doz, stride_doh, stride_dom, stride_dod,
                                  H, N_CTX,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                  CAUSAL: tl.constexpr):
        """dK and dV of BLOCK_N keys; DK and DV have K's and V's strides."""
        start_n = tl.program_id(0) * BLOCK_N
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        k_off = off_z * stride_kz + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_off = off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        k = tl.load(K + k_off)
        v = tl.load(V + v_off)
        qT_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_d[:, None] * stride_qd + offs_m[None, :] * stride_qm
        do_ptrs = (DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                   + offs_d[None, :] * stride_dod)
        lse_ptr = LSE + off_hz * N_CTX
        delta_ptr = Delta + off_hz * N_CTX
        dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        if CAUSAL:
            # the query blocks level with this key block see part of it; earlier queries see none of it
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, qT_ptrs, do_ptrs, lse_ptr, delta_ptr, stride_qm, stride_dom,
                                          offs_n, start_n, start_n + BLOCK_N, qk_scale, BLOCK_M, True)
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, qT_ptrs, do_ptrs, lse_ptr, delta_ptr, stride_qm, stride_dom,
                                          offs_n, start_n + BLOCK_N, N_CTX, qk_scale, BLOCK_M, False)
        else:
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, qT_ptrs, do_ptrs, lse_ptr, delta_ptr, stride_qm, stride_dom,
                                          offs_n, 0, N_CTX, qk_scale, BLOCK_M, False)
        tl.store(DV + v_off, dv.to(DV.dtype.element_ty))
        tl.store(DK + k_off, (dk * sm_scale).to(DK.dtype.element_ty))

    @kl.jit
    def _attn_bwd_dq_inner(dq, q, do, lse, delta, kT_ptrs, vT_ptrs, stride_kn, stride_vn, offs_m, lo, hi, qk_scale,
                           BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
        """Add the contribution of keys lo..hi (in blocks of BLOCK_N) to this query block's dQ."""
        offs_n = tl.arange(0, BLOCK_N)
        for start_n in range(lo, hi, BLOCK_N):
            kT = tl.load(kT_ptrs + start_n * stride_kn)
            s = tl.dot(q, kT)
            p = tl.exp2(s * qk_scale - lse[:, None])
            if MASKED:
                p = tl.where(offs_m[:, None] >= start_n + offs_n[None, :], p, 0.0)
            vT = tl.load(vT_ptrs + start_n * stride_vn)
            dp = tl.dot(do, vT)
            ds = p * (dp - delta[:, None])
            dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)
        return dq

    @kl.jit
    def attention_bwd_dq_kernel(Q, K, V, DO, DQ, LSE, Delta, sm_scale, qk_scale,
                                stride_qz, stride_qh, stride_qm, stride_qd,
                                stride_kz, stride_kh, stride_kn, stride_kd,
                                stride_vz, stride_vh, stride_vn, stride_vd,
                                stride_doz, stride_doh, stride_dom, stride_dod,
                                H, N_CTX,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                CAUSAL: tl.constexpr):
        """dQ of BLOCK_M queries; DQ has Q's strides."""
        start_m = tl.program_id(0) * BLOCK_M
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q_off = off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        q = tl.load(Q + q_off)
        do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                     + offs_d[None, :] * stride_dod)
        lse = tl.load(LSE + off_hz * N_CTX + offs_m)
        delta = tl.load(Delta + off_hz * N_CTX + offs_m)
        kT_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_d[:, None] * stride_kd + offs_n[None, :] * stride_kn
        vT_ptrs = V + off_z * stride_vz + off_h * stride_vh + offs_d[:, None] * stride_vd + offs_n[None, :] * stride_vn
        dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        if CAUSAL:
            dq = _attn_bwd_dq_inner(dq, q, do, lse, delta, kT_ptrs, vT_ptrs, stride_kn, stride_vn, offs_m,
                                    0, start_m, qk_scale, BLOCK_N, False)
            dq = _attn_bwd_dq_inner(dq, q, do, lse, delta, kT_ptrs, vT_ptrs, stride_kn, stride_vn, offs_m,
                                    start_m, start_m + BLOCK_M, qk_scale, BLOCK_N, True)
        else:
            dq = _attn_bwd_dq_inner(dq, q, do, lse, delta, kT_ptrs, vT_ptrs, stride_kn, stride_vn, offs_m,
                                    0, N_CTX, qk_scale, BLOCK_N, False)
        tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty))

    return attention_bwd_preprocess, attention_bwd_dkdv_kernel, attention_bwd_dq_kernel


def attention_backward(q, k, v, o, do, lse, causal, sm_scale, kl_module, kernels, BLOCK_M1=32, BLOCK_N1=128,
                       BLOCK_M2=128, BLOCK_N2=32, num_warps=4, num_stages=3, dq=None, dk=None, dv=None,
                       delta=None, launch=("delta", "dkdv", "dq"), **options):
    """dq, dk, dv of `attention` given its output `o`, the output's gradient `do` and the forward's `lse`.

    `kernels` comes from `make_attention_bwd_kernels(kl_module, ...)`. dq, dk and dv are written into the
    given tensors (they must have q's, k's and v's strides) or new ones; `delta` is float32 scratch of
    lse's shape; `options` go to the dK/dV and dQ launches (`enable_wgmma=False`, say). `launch` names the kernels to
    run (all three by default; one alone to time it, given the `delta` an earlier call computed). Returns (dq, dk,
    dv, the launches' results, None for a kernel not run)."""
    preprocess, dkdv_kernel, dq_kernel = kernels
    Z, H, N_CTX, HEAD_DIM = q.shape
    assert k.shape == v.shape == o.shape == do.shape == q.shape, "q, k, v, o and do must have the same shape"
    assert N_CTX % BLOCK_N1 == 0 and BLOCK_N1 % BLOCK_M1 == 0 and N_CTX % BLOCK_M2 == 0 and BLOCK_M2 % BLOCK_N2 == 0, \
        "no bounds masks: seq a multiple of BLOCK_N1 and BLOCK_M2, BLOCK_N1 of BLOCK_M1, BLOCK_M2 of BLOCK_N2"
    assert lse.shape == q.shape[:3] and lse.is_contiguous() and lse.element_size() == 4, \
        "lse: float32 [batch, heads, seq], contiguous"
    import torch

    dq = torch.empty_like(q) if dq is None else dq  # empty_like keeps the strides of a dense view
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    assert dq.stride() == q.stride() and dk.stride() == k.stride() and dv.stride() == v.stride(), \
        "dq, dk, dv must have the strides of q, k, v"
    delta = lse.new_empty(lse.shape) if delta is None else delta
    qk_scale = sm_scale * LOG2E
    cfg = dict(num_warps=num_warps, num_stages=num_stages, **options)
    pre = kv = qq = None
    if "delta" in launch:
        pre = preprocess[(N_CTX // BLOCK_M2, Z * H)](o, do, delta, *o.stride(), *do.stride(), H, N_CTX,
                                                      BLOCK_M=BLOCK_M2, HEAD_DIM=HEAD_DIM, num_warps=4)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    if "dkdv" in launch:
        kv = dkdv_kernel[(N_CTX // BLOCK_N1, Z * H)](q, k, v, do, dk, dv, lse, delta, sm_scale, qk_scale, *strides,
                                                     H, N_CTX, BLOCK_M=BLOCK_M1, BLOCK_N=BLOCK_N1, HEAD_DIM=HEAD_DIM,
                                                     CAUSAL=causal, **cfg)
    if "dq" in launch:
        qq = dq_kernel[(N_CTX // BLOCK_M2, Z * H)](q, k, v, do, dq, lse, delta, sm_scale, qk_scale, *strides, H,
                                                   N_CTX, BLOCK_M=BLOCK_M2, BLOCK_N=BLOCK_N2, HEAD_DIM=HEAD_DIM,
                                                   CAUSAL=causal, **cfg)
    return dq, dk, dv, (pre, kv, qq)


def make_attention_bp_kernel(kl, tl):
    """The forward once more, as a third kind of user writes it: block pointers (`tl.make_block_ptr` / `tl.advance`,
    the style of Triton's earlier tutorial 06), `acc += tl.dot(...)`, and K/V heads shared by GROUP query heads
    (grouped-query attention: query head h reads K/V head h // GROUP; GROUP = 1 is ordinary multi-head attention).
    With V_T, V is stored transposed ([.., HEAD_DIM, N_CTX]): the layout 8-bit dots need (fp8 operands of wgmma are
    read K-major), so the same text serves fp8 inputs. Sequence lengths are multiples of BLOCK_M (no masks)."""

    @kl.jit
    def _attn_bp_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, offs_n, lo, hi, qk_scale,
                       BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, V_T: tl.constexpr):
        K_block_ptr = tl.advance(K_block_ptr, (0, lo))
        if V_T:
            V_block_ptr = tl.advance(V_block_ptr, (0, lo))
        else:
            V_block_ptr = tl.advance(V_block_ptr, (lo, 0))
        for start_n in range(lo, hi, BLOCK_N):
            k = tl.load(K_block_ptr)
            qk = tl.dot(q, k)
            if DIAGONAL:
                qk = qk * qk_scale + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
            else:
                qk = qk * qk_scale
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
            p = tl.math.exp2(qk)
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            if V_T:
                v = tl.trans(tl.load(V_block_ptr))
                V_block_ptr = tl.advance(V_block_ptr, (0, BLOCK_N))
            else:
                v = tl.load(V_block_ptr)
                V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
            acc += tl.dot(p.to(v.dtype), v)
            m_i = m_ij
            K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
        return acc, l_i, m_i

    @kl.jit
    def attention_bp_fwd_kernel(Q, K, V, Out, sm_scale,
                                stride_qz, stride_qh, stride_qm, stride_qk,
                                stride_kz, stride_kh, stride_kn, stride_kk,
                                stride_vz, stride_vh, stride_v0, stride_v1,
                                stride_oz, stride_oh, stride_om, stride_on,
                                H, N_CTX, GROUP: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                                CAUSAL: tl.constexpr, V_T: tl.constexpr):
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        off_kv = off_h // GROUP
        q_offset = off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
        kv_offset = off_z.to(tl.int64) * stride_kz + off_kv.to(tl.int64) * stride_kh
        v_offset = off_z.to(tl.int64) * stride_vz + off_kv.to(tl.int64) * stride_vh
        Q_block_ptr = tl.make_block_ptr(base=Q + q_offset, shape=(N_CTX, HEAD_DIM), strides=(stride_qm, stride_qk),
                                        offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
        # K read as its transpose [HEAD_DIM, N_CTX]: the score is a plain dot
        K_block_ptr = tl.make_block_ptr(base=K + kv_offset, shape=(HEAD_DIM, N_CTX), strides=(stride_kk, stride_kn),
                                        offsets=(0, 0), block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
        if V_T:  # V stored [HEAD_DIM, N_CTX]
            V_block_ptr = tl.make_block_ptr(base=V + v_offset, shape=(HEAD_DIM, N_CTX),
                                            strides=(stride_v0, stride_v1), offsets=(0, 0),
                                            block_shape=(HEAD_DIM, BLOCK_N), order=(1, 0))
        else:
            V_block_ptr = tl.make_block_ptr(base=V + v_offset, shape=(N_CTX, HEAD_DIM),
                                            strides=(stride_v0, stride_v1), offsets=(0, 0),
                                            block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        qk_scale = sm_scale * 1.44269504
        q = tl.load(Q_block_ptr)
        if CAUSAL:
            acc, l_i, m_i = _attn_bp_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, offs_n,
                                           0, start_m * BLOCK_M, qk_scale, BLOCK_N, False, V_T)
            acc, l_i, m_i = _attn_bp_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, offs_n,
                                           start_m * BLOCK_M, (start_m + 1) * BLOCK_M, qk_scale, BLOCK_N, True, V_T)
        else:
            acc, l_i, m_i = _attn_bp_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, offs_n,
                                           0, N_CTX, qk_scale, BLOCK_N, False, V_T)
        acc = acc / l_i[:, None]
        O_block_ptr = tl.make_block_ptr(base=Out + q_offset, shape=(N_CTX, HEAD_DIM), strides=(stride_om, stride_on),
                                        offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
        tl.store(O_block_ptr, acc.to(Out.type.element_ty))

    return attention_bp_fwd_kernel


def attention_bp(q, k, v, causal, sm_scale, kl_module, kernel, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3,
                 out=None, v_transposed=False):
    """Attention through `make_attention_bp_kernel`'s text: q [batch, heads, seq, head_dim], k [batch, kv_heads, seq,
    head_dim] with heads a multiple of kv_heads (grouped-query attention), v like k, or [batch, kv_heads, head_dim,
    seq] with `v_transposed`. The output is fp16 for 8-bit inputs, else q's dtype."""
    Z, H, N_CTX, HEAD_DIM = q.shape
    H_KV = k.shape[1]
    assert H % H_KV == 0 and k.shape == (Z, H_KV, N_CTX, HEAD_DIM), "k: [batch, kv_heads, seq, head_dim]"
    assert v.shape == ((Z, H_KV, HEAD_DIM, N_CTX) if v_transposed else k.shape), "v: like k (or transposed)"
    assert N_CTX % BLOCK_M == 0 and BLOCK_M % BLOCK_N == 0, "seq: a multiple of BLOCK_M, BLOCK_M of BLOCK_N"
    if out is None:
        import torch

        out = q.new_empty(q.shape, dtype=torch.float16 if q.element_size() == 1 else q.dtype)
    grid = (kl_module.cdiv(N_CTX, BLOCK_M), Z * H)
    launched = kernel[grid](q, k, v, out, sm_scale, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                            H, N_CTX, GROUP=H // H_KV, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM,
                            CAUSAL=causal, V_T=v_transposed, num_warps=num_warps, num_stages=num_stages)
    return out, launched
