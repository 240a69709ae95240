"""The kernels people open the lab for, compiled for sm_90a on any machine (no GPU needed): a 128x128x64
fp16 matmul with 4 warps and 3 stages, the causal flash-attention forward of the benchmarks (head dim 64),
and softmax / layer norm (whose reductions put bar.sync in the PTX). Cached per process."""
from __future__ import annotations

import functools
import math

import torch

import kernellab as kl
import kernellab.language as tl
from tests.corpus import make_kernels


@functools.lru_cache(maxsize=None)
def _corpus():
    return make_kernels(kl, tl)


def _target():
    from kernellab.compiler.codegen.target import Target

    return Target(90)


@functools.lru_cache(maxsize=None)
def matmul():
    h = torch.randn(256, 256).half()
    return _corpus()["matmul_kernel"].warmup(h, h, h, 256, 256, 256, 256, 1, 256, 1, 256, 1, BLOCK_M=128,
                                             BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4,
                                             num_stages=3).build_gpu(_target())


@functools.lru_cache(maxsize=None)
def attention(head_dim: int = 64):
    from benchmarks.attention import CONFIGS
    from benchmarks.attention_kernel import LOG2E, make_attention_kernel

    q = torch.empty(1, 2, 256, head_dim, dtype=torch.float16)
    return make_attention_kernel(kl, tl).warmup(
        q, q, q, q, LOG2E / math.sqrt(head_dim), *q.stride(), *q.stride(), *q.stride(), *q.stride(), 2, 256,
        HEAD_DIM=head_dim, CAUSAL=True, grid=(2, 2), **CONFIGS[head_dim]).build_gpu(_target())


@functools.lru_cache(maxsize=None)
def softmax():
    x = torch.randn(64, 64)
    return _corpus()["softmax_kernel"].warmup(x, x, 64, 64, 64, 64, BLOCK=128).build_gpu(_target())


@functools.lru_cache(maxsize=None)
def layer_norm():
    x, w, m = torch.randn(8, 256), torch.randn(256), torch.randn(8)
    return _corpus()["layer_norm_kernel"].warmup(x, x, w, w, m, m, 256, 256, 1e-5, BLOCK=256).build_gpu(_target())


REAL = {"matmul": matmul, "attention": attention}
