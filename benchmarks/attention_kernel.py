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
(no bounds masks), and BLOCK_M a multiple of BLOCK_N.
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
            acc = tl.dot(p.to(tl.float16), v, acc)
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
                             CAUSAL: tl.constexpr):
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

    return attention_fwd_kernel


def attention(q, k, v, causal, sm_scale, kl_module, kernel, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3,
              out=None):
    """softmax(q k^T * sm_scale [causal mask]) v for q, k, v of shape [batch, heads, seq, head_dim].

    `kernel` comes from `make_attention_kernel(kl_module, ...)`; `kl_module` supplies `cdiv`. Writes
    into `out` when given (else a new tensor) and returns (out, what the launch returned)."""
    Z, H, N_CTX, HEAD_DIM = q.shape
    assert k.shape == v.shape == q.shape, "q, k and v must have the same shape"
    assert N_CTX % BLOCK_M == 0 and N_CTX % BLOCK_N == 0 and BLOCK_M % BLOCK_N == 0, \
        "the kernel has no bounds masks: seq must be a multiple of BLOCK_M and BLOCK_N, BLOCK_M of BLOCK_N"
    if out is None:
        out = q.new_empty(q.shape)
    grid = (kl_module.cdiv(N_CTX, BLOCK_M), Z * H)
    launched = kernel[grid](q, k, v, out, sm_scale * LOG2E,
                            *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                            H, N_CTX,
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=HEAD_DIM, CAUSAL=causal,
                            num_warps=num_warps, num_stages=num_stages)
    return out, launched
