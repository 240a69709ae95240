"""Equivalent formulations of the same workloads, written the ways different users write them.

kernellab's speed must not depend on which of them a user picked (issue 14). Each workload has a
reference (torch), inputs at a benchmark size and at a small test size, and variants: a kernel text
plus a launcher and the configs to launch it with. `make_idioms(jit, tl)` builds them for kernellab or
for Triton, so both compile the same text. Used by tests/test_idioms.py (interpreter and GPU checks)
and benchmarks/idioms.py (timings against Triton).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Variant:
    name: str
    kernel: object
    launch: object          # launch(kernel, inputs, config) -> None
    configs: list           # dicts of constexprs plus num_warps / num_stages
    autotune: bool = False  # also time it through an autotuner over its configs
    test_size: object = None  # a size of its own for the tests, where the text needs divisible shapes
    params: dict = field(default_factory=dict)  # what its text fixes of the workload (linear: act), for the reference


@dataclass
class Workload:
    name: str
    inputs: object          # inputs(size, device, seed) -> dict
    reference: object       # reference(inputs, **variant.params) -> tensor (float64 or exact)
    output: object          # which input holds the output (a name, or a tuple of names: checked together)
    flops_or_bytes: object  # (inputs) -> (kind, amount) for the figures
    sizes: dict             # "bench" / "test" -> size argument of `inputs`
    tol: float = 1e-2
    variants: list = field(default_factory=list)

    def outputs(self) -> tuple:
        return self.output if isinstance(self.output, tuple) else (self.output,)

    def poison(self, x):
        """NaN into every output (an integer output: its type's smallest value), so elements a kernel does not
        write show."""
        import torch

        for n in self.outputs():
            t = x[n]
            t.fill_(float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min)

    def result(self, x):
        """The outputs as one float64 tensor, flattened in `output`'s order when there are several (the
        reference lays them out alike)."""
        import torch

        if not isinstance(self.output, tuple):
            return x[self.output].double()
        return torch.cat([x[n].double().flatten() for n in self.output])

    def expected(self, inputs, variant: Variant):
        """The reference result of `variant` (its params: what its kernel text fixes, e.g. an activation)."""
        return self.reference(inputs, **variant.params)


def cdiv(a, b):
    return (a + b - 1) // b


def _grid_1d(M, N, meta):
    """One program per BM x BN tile; with no config (an autotuned kernel: `meta` empty) the grid asks the chosen
    config's blocks."""
    if not meta:
        return lambda m: (cdiv(M, m["BM"]) * cdiv(N, m["BN"]),)
    return (cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]),)


def _split(config):
    """(constexprs, launch options) of a config; an autotuned kernel's launch passes None: ({}, {})."""
    if config is None:
        return {}, {}
    opts = {k: config[k] for k in ("num_warps", "num_stages") if k in config}
    meta = {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}
    return meta, opts


MATMUL_CONFIGS = [
    dict(BM=128, BN=256, BK=64, GM=8, num_stages=3, num_warps=8),
    dict(BM=128, BN=128, BK=64, GM=8, num_stages=4, num_warps=4),
    dict(BM=256, BN=128, BK=64, GM=8, num_stages=3, num_warps=8),
    dict(BM=128, BN=256, BK=64, GM=8, num_stages=4, num_warps=8),
    dict(BM=128, BN=128, BK=64, GM=8, num_stages=3, num_warps=8),
    dict(BM=64, BN=128, BK=32, GM=8, num_stages=4, num_warps=4),
]


def _matmul(jit, tl):
    @jit
    def mm_acc_arg(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # the tutorial's text: grouped order, wrap-around rows, K-masked loads, dot(a, b, acc)
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BM)
        num_pid_n = tl.cdiv(N, BN)
        num_pid_in_group = GM * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GM
        group_size_m = min(num_pid_m - first_pid_m, GM)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BM + tl.arange(0, BM)) % M
        offs_bn = (pid_n * BN + tl.arange(0, BN)) % N
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + (offs_am[:, None] * sam + offs_k[None, :] * sak)
        b_ptrs = b_ptr + (offs_k[:, None] * sbk + offs_bn[None, :] * sbn)
        accumulator = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        c = accumulator.to(tl.float16)
        offs_cm = pid_m * BM + tl.arange(0, BM)
        offs_cn = pid_n * BN + tl.arange(0, BN)
        tl.store(c_ptr + scm * offs_cm[:, None] + scn * offs_cn[None, :], c,
                 mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))

    @jit
    def mm_plus_eq(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # acc += dot(a, b), wrap-around rows, K-masked loads
        pid = tl.program_id(0)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = GM * npn
        gid = pid // width
        gsize = tl.minimum(npm - gid * GM, GM)
        pm = gid * GM + (pid % width) % gsize
        pn = (pid % width) // gsize
        rm = (pm * BM + tl.arange(0, BM)) % M
        rn = (pn * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        A = a_ptr + rm[:, None] * sam + rk[None, :] * sak
        B = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(A, mask=rk[None, :] < K - k * BK, other=0.0)
            b = tl.load(B, mask=rk[:, None] < K - k * BK, other=0.0)
            acc += tl.dot(a, b)
            A += BK * sak
            B += BK * sbk
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    @jit
    def mm_masked_2d(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # 2-D grid, no grouping, rows and columns masked instead of wrapped, acc = acc + dot(a, b)
        pm = tl.program_id(0)
        pn = tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                        mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = acc + tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    @jit
    def mm_dot_plus_acc(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # grouped order with tl.swizzle-like arithmetic written out, pointers rebuilt from k each step,
        # acc = dot(a, b) + acc, no masks (K a multiple of BK)
        pid = tl.program_id(0)
        grid_n = (N + BN - 1) // BN
        grid_m = (M + BM - 1) // BM
        group = pid // (GM * grid_n)
        first = group * GM
        rows_in_group = min(grid_m - first, GM)
        pm = first + (pid % (GM * grid_n)) % rows_in_group
        pn = (pid % (GM * grid_n)) // rows_in_group
        offs_m = pm * BM + tl.arange(0, BM)
        offs_n = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(K // BK):
            offs_k = k * BK + tl.arange(0, BK)
            a = tl.load(a_ptr + offs_m[:, None] * sam + offs_k[None, :] * sak)
            b = tl.load(b_ptr + offs_k[:, None] * sbk + offs_n[None, :] * sbn)
            acc = tl.dot(a, b) + acc
        c_ptrs = c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn
        tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    @jit
    def mm_block_ptr(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # block pointers advanced through K, acc += dot(a, b)
        pid = tl.program_id(0)
        npm = tl.cdiv(M, BM)
        npn = tl.cdiv(N, BN)
        width = GM * npn
        first = (pid // width) * GM
        gsize = min(npm - first, GM)
        pm = first + (pid % width) % gsize
        pn = (pid % width) // gsize
        a_blk = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(sam, sak), offsets=(pm * BM, 0),
                                  block_shape=(BM, BK), order=(1, 0))
        b_blk = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(sbk, sbn), offsets=(0, pn * BN),
                                  block_shape=(BK, BN), order=(1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K, BK):
            acc += tl.dot(tl.load(a_blk, boundary_check=(0, 1)), tl.load(b_blk, boundary_check=(0, 1)))
            a_blk = tl.advance(a_blk, (0, BK))
            b_blk = tl.advance(b_blk, (BK, 0))
        c_blk = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(scm, scn), offsets=(pm * BM, pn * BN),
                                  block_shape=(BM, BN), order=(1, 0))
        tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))

    def launch_1d(kernel, x, cfg):
        meta, opts = _split(cfg)
        a, b, c = x["a"], x["b"], x["c"]
        M, K = a.shape
        N = b.shape[1]
        grid = _grid_1d(M, N, meta)
        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                     c.stride(1), **meta, **opts)

    def launch_2d(kernel, x, cfg):
        meta, opts = _split(cfg)
        a, b, c = x["a"], x["b"], x["c"]
        M, K = a.shape
        N = b.shape[1]
        grid = (cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))
        kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                     c.stride(1), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N, K = size
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(M, K, generator=g).to(torch.float16).to(device)
        b = torch.randn(K, N, generator=g).to(torch.float16).to(device)
        c = torch.full((M, N), float("nan"), dtype=torch.float16, device=device)
        return dict(a=a, b=b, c=c)

    def reference(x):
        return x["a"].double() @ x["b"].double()

    w = Workload("matmul", inputs, reference, "c", lambda x: ("flop", 2 * x["a"].shape[0] * x["a"].shape[1]
                                                             * x["b"].shape[1]),
                 sizes={"bench": (4096, 4096, 4096), "test": (96, 80, 128)}, tol=2e-2)
    w.variants = [
        Variant("acc_arg", mm_acc_arg, launch_1d, MATMUL_CONFIGS),
        Variant("plus_eq", mm_plus_eq, launch_1d, MATMUL_CONFIGS, autotune=True),
        Variant("masked_2d", mm_masked_2d, launch_2d, MATMUL_CONFIGS),
        Variant("dot_plus_acc", mm_dot_plus_acc, launch_1d, MATMUL_CONFIGS, test_size=(256, 256, 128)),
        Variant("block_ptr", mm_block_ptr, launch_1d, MATMUL_CONFIGS),
    ]
    return w


def _linear(jit, tl):
    """A linear layer's forward with its epilogue fused: act(x @ w.T + bias), w stored [N, K] as nn.Linear keeps it
    (so the dot's B operand is K-major), fp16 out."""

    @jit
    def lin_swizzle2d(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # tl.swizzle2d for the grouped order, w.T read through its strides, both operands masked, leaky relu
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        pid_m, pid_n = tl.swizzle2d(pid // num_n, pid % num_n, num_m, num_n, GM)
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        x_ptrs = x_ptr + offs_m[:, None] * sxm + offs_k[None, :] * sxk
        w_ptrs = w_ptr + offs_n[None, :] * swn + offs_k[:, None] * swk  # [BK, BN]: a tile of w.T
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] + k < K), other=0.0)
            w = tl.load(w_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] + k < K), other=0.0)
            acc = tl.dot(x, w, acc)
            x_ptrs += BK * sxk
            w_ptrs += BK * swk
        bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        y = acc + bias[None, :]
        y = tl.where(y >= 0, y, 0.01 * y)
        tl.store(y_ptr + offs_m[:, None] * sym + offs_n[None, :] * syn, y.to(y_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

    @jit
    def lin_descriptor(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
        # in-kernel tensor descriptors (TMA on Hopper), w's [BN, BK] tile transposed with .T, a sigmoid-gelu
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        in_group = GM * num_n
        first_m = (pid // in_group) * GM
        rows = min(num_m - first_m, GM)
        pid_m = first_m + (pid % in_group) % rows
        pid_n = (pid % in_group) // rows
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[sxm, 1], block_shape=[BM, BK])
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[swn, 1], block_shape=[BN, BK])
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[sym, 1], block_shape=[BM, BN])
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in tl.range(0, tl.cdiv(K, BK)):
            x = x_desc.load([pid_m * BM, kk * BK])
            w = w_desc.load([pid_n * BN, kk * BK])
            acc = tl.dot(x, w.T, acc)
        offs_n = pid_n * BN + tl.arange(0, BN)
        y = acc + tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        y = y * tl.sigmoid(1.702 * y)
        y_desc.store([pid_m * BM, pid_n * BN], y.to(tl.float16))

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        a, w, bias, y = x["x"], x["w"], x["bias"], x["y"]
        M, K = a.shape
        N = w.shape[0]
        _set_descriptor_allocator(a.device)
        grid = _grid_1d(M, N, meta)
        kernel[grid](a, w, bias, y, M, N, K, a.stride(0), a.stride(1), w.stride(0), w.stride(1), y.stride(0),
                     y.stride(1), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N, K = size
        g = torch.Generator().manual_seed(seed)
        return dict(x=torch.randn(M, K, generator=g).to(torch.float16).to(device),
                    w=(torch.randn(N, K, generator=g) / 8).to(torch.float16).to(device),
                    bias=torch.randn(N, generator=g).to(torch.float16).to(device),
                    y=torch.full((M, N), float("nan"), dtype=torch.float16, device=device))

    def reference(x, act):
        import torch

        y = x["x"].double() @ x["w"].double().T + x["bias"].double()
        return {"leaky": lambda: torch.where(y >= 0, y, 0.01 * y), "gelu": lambda: y * torch.sigmoid(1.702 * y)}[act]()

    w = Workload("linear", inputs, reference, "y", lambda x: ("flop", 2 * x["x"].shape[0] * x["x"].shape[1]
                                                             * x["w"].shape[0]),
                 sizes={"bench": (4096, 4096, 4096), "test": (96, 80, 128)}, tol=2e-2)
    w.variants = [
        Variant("swizzle2d_leaky", lin_swizzle2d, launch, MATMUL_CONFIGS, params={"act": "leaky"}),
        Variant("descriptor_gelu", lin_descriptor, launch, MATMUL_CONFIGS, autotune=True, params={"act": "gelu"}),
    ]
    return w


def _set_descriptor_allocator(device):
    """Triton makes in-kernel tensor descriptors in a global scratch it asks an allocator for; kernellab needs none
    (its descriptors live in its own scratch), and a set allocator changes nothing for it."""
    import sys

    triton = sys.modules.get("triton")
    if triton is not None and hasattr(triton, "set_allocator") and device.type == "cuda":
        import torch

        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device))


def _softmax(jit, tl):
    @jit
    def sm_row(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        # one row per program (the tutorial's first version)
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    @jit
    def sm_row_loop(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr):
        # a grid of programs striding over rows (the tutorial's persistent version)
        start = tl.program_id(0)
        step = tl.num_programs(0)
        for row in range(start, n_rows, step):
            offs = tl.arange(0, BLOCK)
            mask = offs < n_cols
            row_vals = tl.load(in_ptr + row * in_stride + offs, mask=mask, other=-float("inf"))
            num = tl.exp(row_vals - tl.max(row_vals, axis=0))
            tl.store(out_ptr + row * out_stride + offs, num / tl.sum(num, axis=0), mask=mask)

    @jit
    def sm_rows_2d(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, ROWS: tl.constexpr,
                   BLOCK: tl.constexpr):
        # a 2-D tile of ROWS rows per program, exp2 with a log2(e) scale
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
        cols = tl.arange(0, BLOCK)[None, :]
        m = (rows < n_rows) & (cols < n_cols)
        x = tl.load(in_ptr + rows * in_stride + cols, mask=m, other=float("-inf")).to(tl.float32)
        p = tl.exp2((x - tl.max(x, 1, keep_dims=True)) * 1.4426950408889634)
        tl.store(out_ptr + rows * out_stride + cols, p / tl.sum(p, 1, keep_dims=True), mask=m)

    @jit
    def sm_online(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        # column blocks: an online max/sum pass, then a normalizing pass
        row = tl.program_id(0)
        m_i = float("-inf")
        l_i = 0.0
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m_i, tl.max(x, 0))
            l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m_i = m_new
        for c0 in range(0, n_cols, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=float("-inf"))
            tl.store(out_ptr + row * out_stride + cols, tl.exp(x - m_i) / l_i, mask=cols < n_cols)

    def npow2(n):
        p = 1
        while p < n:
            p *= 2
        return p

    def launch_row(kernel, x, cfg):
        meta, opts = _split(cfg)
        i, o = x["x"], x["y"]
        kernel[(i.shape[0],)](o, i, i.stride(0), o.stride(0), i.shape[1], BLOCK=npow2(i.shape[1]), **opts)

    def launch_row_loop(kernel, x, cfg):
        meta, opts = _split(cfg)
        i, o = x["x"], x["y"]
        grid = (min(i.shape[0], meta["PROGRAMS"]),)
        kernel[grid](o, i, i.stride(0), o.stride(0), i.shape[0], i.shape[1], BLOCK=npow2(i.shape[1]), **opts)

    def launch_rows_2d(kernel, x, cfg):
        meta, opts = _split(cfg)
        i, o = x["x"], x["y"]
        block = npow2(i.shape[1])
        rows = max(1, meta["ELEMS"] // block)
        kernel[(cdiv(i.shape[0], rows),)](o, i, i.stride(0), o.stride(0), i.shape[0], i.shape[1], ROWS=rows,
                                          BLOCK=block, **opts)

    def launch_online(kernel, x, cfg):
        meta, opts = _split(cfg)
        i, o = x["x"], x["y"]
        kernel[(i.shape[0],)](o, i, i.stride(0), o.stride(0), i.shape[1], **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(M, N, generator=g) * 4).to(device)
        return dict(x=x, y=torch.full_like(x, float("nan")))

    def reference(x):
        return torch_softmax(x["x"].double())

    w = Workload("softmax", inputs, reference, "y", lambda x: ("bytes", 2 * x["x"].numel() * 4),
                 sizes={"bench": (16384, 1024), "test": (37, 200)}, tol=1e-5)
    w.variants = [
        Variant("row", sm_row, launch_row, [dict(num_warps=4), dict(num_warps=8)]),
        Variant("row_loop", sm_row_loop, launch_row_loop,
                [dict(PROGRAMS=132 * 4, num_warps=4), dict(PROGRAMS=132 * 8, num_warps=8)]),
        Variant("rows_2d", sm_rows_2d, launch_rows_2d, [dict(ELEMS=4096, num_warps=4), dict(ELEMS=8192, num_warps=8)]),
        Variant("online", sm_online, launch_online, [dict(BLOCK=256, num_warps=2), dict(BLOCK=1024, num_warps=4)]),
    ]
    return w


def torch_softmax(x):
    import torch

    return torch.softmax(x, dim=-1)


def _layer_norm(jit, tl):
    @jit
    def ln_whole_row(X, Y, W, B, stride, N, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * stride + cols, mask=mask, other=0.).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.)
        rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        tl.store(Y + row * stride + cols, (xc * rstd * w + b).to(Y.dtype.element_ty), mask=mask)

    @jit
    def ln_blocked(X, Y, W, B, stride, N, eps, BLOCK: tl.constexpr):
        # the tutorial's loops over column blocks: mean, variance, then normalize
        row = tl.program_id(0)
        Y += row * stride
        X += row * stride
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            acc += tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc2 = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
            x = tl.where(cols < N, x - mean, 0.)
            acc2 += x * x
        rstd = 1 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
        for off in range(0, N, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            mask = cols < N
            w = tl.load(W + cols, mask=mask)
            b = tl.load(B + cols, mask=mask)
            x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
            tl.store(Y + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=mask)

    @jit
    def ln_one_pass(X, Y, W, B, stride, N, eps, BLOCK: tl.constexpr):
        # sum and sum of squares in one sweep, rstd via tl.rsqrt
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + row * stride + offs, mask=offs < N, other=0.0).to(tl.float32)
        s = tl.sum(x)
        ss = tl.sum(x * x)
        mean = s / N
        var = ss / N - mean * mean
        r = tl.rsqrt(var + eps)
        y = (x - mean) * r * tl.load(W + offs, mask=offs < N).to(tl.float32) + tl.load(B + offs, mask=offs < N)
        tl.store(Y + row * stride + offs, y, mask=offs < N)

    def npow2(n):
        p = 1
        while p < n:
            p *= 2
        return p

    def launch_whole(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        kernel[(X.shape[0],)](X, x["y"], x["w"], x["b"], X.stride(0), X.shape[1], 1e-5, BLOCK=npow2(X.shape[1]),
                              **opts)

    def launch_blocked(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        kernel[(X.shape[0],)](X, x["y"], x["w"], x["b"], X.stride(0), X.shape[1], 1e-5, **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(M, N, generator=g) * 2 + 0.5).to(torch.float16).to(device)
        w = torch.rand(N, generator=g).to(torch.float16).to(device)
        b = torch.randn(N, generator=g).to(torch.float16).to(device)
        return dict(x=x, w=w, b=b, y=torch.full_like(x, float("nan")))

    def reference(x):
        import torch

        return torch.nn.functional.layer_norm(x["x"].double(), x["x"].shape[-1:], x["w"].double(), x["b"].double(),
                                              1e-5)

    w = Workload("layer_norm", inputs, reference, "y", lambda x: ("bytes", 2 * x["x"].numel() * 2),
                 sizes={"bench": (4096, 8192), "test": (19, 300)}, tol=1e-2)
    w.variants = [
        Variant("whole_row", ln_whole_row, launch_whole, [dict(num_warps=8), dict(num_warps=16)]),
        Variant("blocked", ln_blocked, launch_blocked, [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8)]),
        Variant("one_pass", ln_one_pass, launch_whole, [dict(num_warps=8), dict(num_warps=16)]),
    ]
    return w


def _reduction(jit, tl):
    @jit
    def rowsum_loop(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        # per-row sum accumulated in a vector, reduced once at the end
        row = tl.program_id(0)
        acc = tl.zeros((BLOCK,), tl.float32)
        for c in range(0, n_cols, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    @jit
    def rowsum_scalar(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        # per-row sum reduced to a scalar every iteration
        row = tl.program_id(0)
        total = 0.0
        for c in range(0, n_cols, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            total += tl.sum(tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0))
        tl.store(out_ptr + row, total)

    @jit
    def rowsum_tile(x_ptr, out_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        # ROWS rows per program, a 2-D tile reduced along axis 1
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        acc = tl.zeros((ROWS, BLOCK), tl.float32)
        for c in range(0, n_cols, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
            acc += tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=m, other=0.0)
        tl.store(out_ptr + rows, tl.sum(acc, axis=1), mask=rows < n_rows)

    def launch_row(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        kernel[(X.shape[0],)](X, x["y"], X.shape[1], X.stride(0), **meta, **opts)

    def launch_tile(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        kernel[(cdiv(X.shape[0], meta["ROWS"]),)](X, x["y"], X.shape[0], X.shape[1], X.stride(0), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(M, N, generator=g).to(device)
        return dict(x=x, y=torch.full((M,), float("nan"), device=device))

    def reference(x):
        return x["x"].double().sum(dim=1)

    w = Workload("row_sum", inputs, reference, "y", lambda x: ("bytes", x["x"].numel() * 4),
                 sizes={"bench": (8192, 8192), "test": (21, 1000)}, tol=1e-4)
    w.variants = [
        Variant("vector_acc", rowsum_loop, launch_row, [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8)]),
        Variant("scalar_acc", rowsum_scalar, launch_row, [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8)]),
        Variant("tile", rowsum_tile, launch_tile, [dict(ROWS=4, BLOCK=512, num_warps=4),
                                                    dict(ROWS=8, BLOCK=256, num_warps=4)]),
    ]
    return w


def _scan(jit, tl):
    """Row-wise inclusive prefix sums (a cumulative sum, as gated linear attention and SSM kernels take them)."""

    @jit
    def cumsum_row(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
        # the whole row in one tile, tl.cumsum
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * stride + cols, tl.cumsum(x, axis=0), mask=cols < n_cols)

    @jit
    def _add(a, b):
        return a + b

    @jit
    def scan_blocked(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
        # blocks of the row, each scanned with tl.associative_scan and a combine function, the running total
        # carried from block to block
        row = tl.program_id(0)
        carry = 0.0
        for c in range(0, n_cols, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
            y = tl.associative_scan(x, 0, _add) + carry
            tl.store(y_ptr + row * stride + cols, y, mask=cols < n_cols)
            carry += tl.sum(x, axis=0)

    @jit
    def cumsum_tile(x_ptr, y_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        # ROWS rows per program, a 2-D tile scanned along axis 1 (the row fits in BLOCK)
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        offs = rows[:, None] * stride + cols[None, :]
        x = tl.load(x_ptr + offs, mask=m, other=0.0)
        tl.store(y_ptr + offs, tl.cumsum(x, axis=1), mask=m)

    def launch_row(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        block = meta.pop("BLOCK", None) or _next_pow2(X.shape[1])
        kernel[(X.shape[0],)](X, x["y"], X.shape[1], X.stride(0), BLOCK=block, **meta, **opts)

    def launch_tile(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        kernel[(cdiv(X.shape[0], meta["ROWS"]),)](X, x["y"], X.shape[0], X.shape[1], X.stride(0),
                                                  BLOCK=_next_pow2(X.shape[1]), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(M, N, generator=g).to(device)
        return dict(x=x, y=torch.full((M, N), float("nan"), device=device))

    def reference(x):
        return x["x"].double().cumsum(dim=1)

    w = Workload("scan", inputs, reference, "y", lambda x: ("bytes", x["x"].numel() * 8),
                 sizes={"bench": (8192, 2048), "test": (21, 200)}, tol=1e-5)
    w.variants = [
        Variant("cumsum_row", cumsum_row, launch_row, [dict(num_warps=4), dict(num_warps=8)]),
        Variant("blocked_assoc", scan_blocked, launch_row, [dict(BLOCK=512, num_warps=4),
                                                            dict(BLOCK=1024, num_warps=4)]),
        Variant("tile", cumsum_tile, launch_tile, [dict(ROWS=2, num_warps=4), dict(ROWS=4, num_warps=8)]),
    ]
    return w


def _next_pow2(n):
    return 1 << (n - 1).bit_length()


def _weight_grad(jit, tl):
    """The backward of y = x * w (w broadcast over rows): dw = sum over rows of dy * x, accumulated
    with atomics from programs that each own a band of rows (layer norm's dW/dB have this shape)."""

    @jit
    def dw_atomic_rows(dy_ptr, x_ptr, dw_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        # each program sums a band of rows for one column block, then one atomic add per column
        pid_r = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK,), tl.float32)
        for r in range(pid_r * ROWS, min(pid_r * ROWS + ROWS, n_rows)):
            acc += tl.load(dy_ptr + r * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32) * \
                tl.load(x_ptr + r * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.atomic_add(dw_ptr + cols, acc, mask=cols < n_cols)

    @jit
    def dw_atomic_tile(dy_ptr, x_ptr, dw_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
        # a 2-D tile per step, reduced over rows with tl.sum, then atomics
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        offs = rows[:, None] * n_cols + cols[None, :]
        dy = tl.load(dy_ptr + offs, mask=m, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
        tl.atomic_add(dw_ptr + cols, tl.sum(dy * x, axis=0), mask=cols < n_cols)

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        x["dw"].zero_()
        M, N = x["x"].shape
        grid = (cdiv(M, meta["ROWS"]), cdiv(N, meta["BLOCK"]))
        kernel[grid](x["dy"], x["x"], x["dw"], M, N, **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        return dict(dy=torch.randn(M, N, generator=g).to(torch.float16).to(device),
                    x=torch.randn(M, N, generator=g).to(torch.float16).to(device),
                    dw=torch.zeros(N, device=device))

    def reference(x):
        return (x["dy"].double() * x["x"].double()).sum(dim=0)

    w = Workload("weight_grad", inputs, reference, "dw", lambda x: ("bytes", 2 * x["x"].numel() * 2),
                 sizes={"bench": (16384, 4096), "test": (50, 300)}, tol=1e-3)
    w.variants = [
        Variant("atomic_rows", dw_atomic_rows, launch, [dict(ROWS=128, BLOCK=256, num_warps=4),
                                                       dict(ROWS=256, BLOCK=512, num_warps=4)]),
        Variant("atomic_tile", dw_atomic_tile, launch, [dict(ROWS=32, BLOCK=128, num_warps=4),
                                                       dict(ROWS=64, BLOCK=64, num_warps=4)]),
    ]
    return w


def _gemv(jit, tl):
    """y = A @ x for a wide fp16 matrix: memory-bound, three ways of walking A."""

    @jit
    def gemv_rows_loop(a_ptr, x_ptr, y_ptr, M, N, stride_am, BM: tl.constexpr, BN: tl.constexpr):
        # a band of rows per program, a 2-D tile per step reduced with tl.sum
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        acc = tl.zeros((BM,), dtype=tl.float32)
        for n0 in range(0, N, BN):
            cols = n0 + tl.arange(0, BN)
            a = tl.load(a_ptr + rows[:, None] * stride_am + cols[None, :],
                        mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
            xv = tl.load(x_ptr + cols, mask=cols < N, other=0.0)
            acc += tl.sum(a.to(tl.float32) * xv[None, :].to(tl.float32), axis=1)
        tl.store(y_ptr + rows, acc, mask=rows < M)

    @jit
    def gemv_tile_acc(a_ptr, x_ptr, y_ptr, M, N, stride_am, BM: tl.constexpr, BN: tl.constexpr):
        # a 2-D accumulator, reduced once after the loop; pointers advanced in place
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.arange(0, BN)
        a_ptrs = a_ptr + rows[:, None] * stride_am + cols[None, :]
        x_ptrs = x_ptr + cols
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for n0 in range(0, tl.cdiv(N, BN)):
            m = cols < N - n0 * BN
            a = tl.load(a_ptrs, mask=(rows[:, None] < M) & m[None, :], other=0.0)
            xv = tl.load(x_ptrs, mask=m, other=0.0)
            acc += a * xv[None, :]
            a_ptrs += BN
            x_ptrs += BN
        tl.store(y_ptr + rows, tl.sum(acc, axis=1), mask=rows < M)

    @jit
    def gemv_one_row(a_ptr, x_ptr, y_ptr, M, N, stride_am, BN: tl.constexpr):
        # one row per program, a scalar accumulator
        row = tl.program_id(0).to(tl.int64)
        total = 0.0
        for n0 in range(0, N, BN):
            cols = n0 + tl.arange(0, BN)
            a = tl.load(a_ptr + row * stride_am + cols, mask=cols < N, other=0.0).to(tl.float32)
            total += tl.sum(a * tl.load(x_ptr + cols, mask=cols < N, other=0.0).to(tl.float32))
        tl.store(y_ptr + row, total)

    def launch_band(kernel, x, cfg):
        meta, opts = _split(cfg)
        A = x["a"]
        kernel[(cdiv(A.shape[0], meta["BM"]),)](A, x["x"], x["y"], A.shape[0], A.shape[1], A.stride(0), **meta, **opts)

    def launch_row(kernel, x, cfg):
        meta, opts = _split(cfg)
        A = x["a"]
        kernel[(A.shape[0],)](A, x["x"], x["y"], A.shape[0], A.shape[1], A.stride(0), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        return dict(a=torch.randn(M, N, generator=g).to(torch.float16).to(device),
                    x=torch.randn(N, generator=g).to(torch.float16).to(device),
                    y=torch.full((M,), float("nan"), device=device))

    def reference(x):
        return x["a"].double() @ x["x"].double()

    w = Workload("gemv", inputs, reference, "y", lambda x: ("bytes", x["a"].numel() * 2),
                 sizes={"bench": (16384, 8192), "test": (70, 300)}, tol=1e-3)
    w.variants = [
        Variant("rows_loop", gemv_rows_loop, launch_band, [dict(BM=64, BN=128, num_warps=4),
                                                           dict(BM=16, BN=512, num_warps=4)]),
        Variant("tile_acc", gemv_tile_acc, launch_band, [dict(BM=32, BN=256, num_warps=4),
                                                         dict(BM=8, BN=1024, num_warps=8)]),
        Variant("one_row", gemv_one_row, launch_row, [dict(BN=1024, num_warps=4), dict(BN=2048, num_warps=8)]),
    ]
    return w


def _transpose(jit, tl):
    """out = x.T (fp16): the tile changes which index is contiguous between the load and the store."""

    @jit
    def transpose_trans(x_ptr, y_ptr, M, N, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
        # load a tile, tl.trans it, store it row-major into the output
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        t = tl.load(x_ptr + rm[:, None] * sx + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
        tl.store(y_ptr + rn[:, None] * sy + rm[None, :], tl.trans(t), mask=(rn[:, None] < N) & (rm[None, :] < M))

    @jit
    def transpose_strided(x_ptr, y_ptr, M, N, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
        # no trans: the store's pointers are the transposed ones
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        m = (rm[:, None] < M) & (rn[None, :] < N)
        t = tl.load(x_ptr + rm[:, None] * sx + rn[None, :], mask=m)
        tl.store(y_ptr + rn[None, :] * sy + rm[:, None], t, mask=m)

    @jit
    def transpose_blockptr(x_ptr, y_ptr, M, N, sx, sy, BM: tl.constexpr, BN: tl.constexpr):
        # block pointers, the output's described with its strides swapped (order (0, 1))
        pm = tl.program_id(0) * BM
        pn = tl.program_id(1) * BN
        src = tl.make_block_ptr(x_ptr, (M, N), (sx, 1), (pm, pn), (BM, BN), (1, 0))
        dst = tl.make_block_ptr(y_ptr, (M, N), (1, sy), (pm, pn), (BM, BN), (0, 1))
        tl.store(dst, tl.load(src, boundary_check=(0, 1)), boundary_check=(0, 1))

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        X, Y = x["x"], x["y"]
        M, N = X.shape
        kernel[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]))](X, Y, M, N, X.stride(0), Y.stride(0), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        return dict(x=torch.randn(M, N, generator=g).to(torch.float16).to(device),
                    y=torch.full((N, M), float("nan"), dtype=torch.float16, device=device))

    def reference(x):
        return x["x"].double().t()

    w = Workload("transpose", inputs, reference, "y", lambda x: ("bytes", 2 * x["x"].numel() * 2),
                 sizes={"bench": (8192, 8192), "test": (70, 130)}, tol=1e-12)
    cfgs = [dict(BM=64, BN=64, num_warps=4), dict(BM=32, BN=128, num_warps=4), dict(BM=128, BN=64, num_warps=8)]
    w.variants = [Variant("trans", transpose_trans, launch, cfgs),
                  Variant("strided", transpose_strided, launch, cfgs),
                  Variant("block_ptr", transpose_blockptr, launch, cfgs)]
    return w


def _cross_entropy(jit, tl):
    """Per-row cross entropy over a large vocabulary, with the gradient written over the logits (Liger and
    Unsloth do this in place): an online logsumexp pass, then a pass writing softmax - onehot."""

    @jit
    def ce_online(logits_ptr, labels_ptr, loss_ptr, V, stride, BLOCK: tl.constexpr):
        # scalar running max and sum, updated per block
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * stride
        y = tl.load(labels_ptr + row)
        m = float("-inf")
        d = 0.0
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
        lse = m + tl.log(d)
        tl.store(loss_ptr + row, lse - tl.load(base + y).to(tl.float32))
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
            g = tl.exp(x - lse) - tl.where(cols == y, 1.0, 0.0)
            tl.store(base + cols, g.to(logits_ptr.dtype.element_ty), mask=cols < V)

    @jit
    def ce_vector_state(logits_ptr, labels_ptr, loss_ptr, V, stride, BLOCK: tl.constexpr):
        # per-lane running max and sum (reduced once), exp2 with a log2(e) scale; a finite floor for the max,
        # so lanes past the vocabulary stay 0 instead of NaN
        row = tl.program_id(0).to(tl.int64)
        base = logits_ptr + row * stride
        y = tl.load(labels_ptr + row)
        m = tl.full((BLOCK,), -1e30, tl.float32)
        d = tl.zeros((BLOCK,), tl.float32)
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * 1.4426950408889634
            m_new = tl.maximum(m, x)
            d = d * tl.exp2(m - m_new) + tl.exp2(x - m_new)
            m = m_new
        mx = tl.max(m, 0)
        lse2 = mx + tl.log2(tl.sum(d * tl.exp2(m - mx), 0))
        lse = lse2 * 0.6931471805599453
        tl.store(loss_ptr + row, lse - tl.load(base + y).to(tl.float32))
        for off in range(0, V, BLOCK):
            cols = off + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < V, other=0.0).to(tl.float32)
            g = tl.exp2(x * 1.4426950408889634 - lse2)
            g = tl.where(cols == y, g - 1.0, g)
            tl.store(base + cols, g.to(logits_ptr.dtype.element_ty), mask=cols < V)

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        x["logits"].copy_(x["orig"])  # the kernel overwrites its input with the gradient (poisoning it is moot)
        L = x["logits"]
        kernel[(L.shape[0],)](L, x["labels"], x["loss"], L.shape[1], L.stride(0), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, V = size
        g = torch.Generator().manual_seed(seed)
        orig = (torch.randn(M, V, generator=g) * 3).to(torch.bfloat16).to(device)
        labels = torch.randint(0, V, (M,), generator=g).to(device)
        return dict(orig=orig, logits=orig.clone(), labels=labels, loss=torch.full((M,), float("nan"), device=device))

    def reference(x):
        import torch

        lg = x["orig"].double()
        lse = torch.logsumexp(lg, dim=1)
        loss = lse - lg.gather(1, x["labels"][:, None])[:, 0]
        grad = torch.softmax(lg, dim=1)
        grad[torch.arange(lg.shape[0]), x["labels"]] -= 1.0
        # the loss, then the gradient (bf16-rounded, as the kernel stores it), checked together
        return torch.cat([loss, grad.to(torch.bfloat16).double().flatten()])

    w = Workload("cross_entropy", inputs, reference, ("loss", "logits"), lambda x: ("bytes", 3 * x["orig"].numel() * 2),
                 sizes={"bench": (4096, 32000), "test": (9, 1000)}, tol=5e-3)
    w.variants = [
        Variant("online", ce_online, launch, [dict(BLOCK=4096, num_warps=8), dict(BLOCK=8192, num_warps=16)]),
        Variant("vector_state", ce_vector_state, launch, [dict(BLOCK=2048, num_warps=8),
                                                          dict(BLOCK=4096, num_warps=16)]),
    ]
    return w


def _bmm(jit, tl):
    """Batched matmul C[b] = A[b] @ B[b] (fp16), the batch on the grid's third axis or folded into the first."""

    @jit
    def bmm_block_ptr(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # block pointers with boundary checks, advanced along K; the batch on program_id(2)
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        bat = tl.program_id(2)
        a_blk = tl.make_block_ptr(a_ptr + bat * sab, (M, K), (sam, sak), (pid_m * BM, 0), (BM, BK), (1, 0))
        b_blk = tl.make_block_ptr(b_ptr + bat * sbb, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):
            acc += tl.dot(tl.load(a_blk, boundary_check=(0, 1), padding_option="zero"),
                          tl.load(b_blk, boundary_check=(0, 1), padding_option="zero"))
            a_blk = tl.advance(a_blk, (0, BK))
            b_blk = tl.advance(b_blk, (BK, 0))
        c_blk = tl.make_block_ptr(c_ptr + bat * scb, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
        tl.store(c_blk, acc.to(tl.float16), boundary_check=(0, 1))

    @jit
    def bmm_flat_grid(a_ptr, b_ptr, c_ptr, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # one flat grid: batch, then tiles in row-major order; int64 batch offsets; masked K tail
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BN)
        per_batch = tl.cdiv(M, BM) * tiles_n
        bat = (pid // per_batch).to(tl.int64)
        t = pid % per_batch
        rm = (t // tiles_n) * BM + tl.arange(0, BM)
        rn = (t % tiles_n) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + bat * sab + rm[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + bat * sbb + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
            b = tl.load(b_ptrs, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        c_ptrs = c_ptr + bat * scb + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def launch_3d(kernel, x, cfg):
        meta, opts = _split(cfg)
        A, B, C = x["a"], x["b"], x["c"]
        Bt, M, K = A.shape
        N = B.shape[2]
        kernel[(cdiv(M, meta["BM"]), cdiv(N, meta["BN"]), Bt)](A, B, C, M, N, K, *A.stride(), *B.stride(),
                                                               *C.stride(), **meta, **opts)

    def launch_flat(kernel, x, cfg):
        meta, opts = _split(cfg)
        A, B, C = x["a"], x["b"], x["c"]
        Bt, M, K = A.shape
        N = B.shape[2]
        kernel[(Bt * cdiv(M, meta["BM"]) * cdiv(N, meta["BN"]),)](A, B, C, M, N, K, *A.stride(), *B.stride(),
                                                                  *C.stride(), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        Bt, M, N, K = size
        g = torch.Generator().manual_seed(seed)
        return dict(a=torch.randn(Bt, M, K, generator=g).to(torch.float16).to(device),
                    b=torch.randn(Bt, K, N, generator=g).to(torch.float16).to(device),
                    c=torch.full((Bt, M, N), float("nan"), dtype=torch.float16, device=device))

    def reference(x):
        return x["a"].double() @ x["b"].double()

    w = Workload("bmm", inputs, reference, "c",
                 lambda x: ("flop", 2 * x["a"].shape[0] * x["a"].shape[1] * x["a"].shape[2] * x["b"].shape[2]),
                 sizes={"bench": (32, 1024, 1024, 1024), "test": (3, 70, 90, 100)}, tol=1e-2)
    cfgs = [dict(BM=128, BN=128, BK=64, num_warps=4, num_stages=3), dict(BM=128, BN=256, BK=64, num_warps=8,
                                                                        num_stages=3),
            dict(BM=64, BN=128, BK=64, num_warps=4, num_stages=4)]
    w.variants = [Variant("block_ptr", bmm_block_ptr, launch_3d, cfgs),
                  Variant("flat_grid", bmm_flat_grid, launch_flat, cfgs)]
    return w


def _attention(jit, tl):
    """Causal/full attention forward (fp16, fp32 accumulation) written three ways: natural-log softmax with the
    scale applied to the scores, exp2 with the scale folded into log2(e), and block pointers advanced along the
    keys. One program per (query block, batch x head)."""

    @jit
    def attn_exp(q_ptr, k_ptr, v_ptr, o_ptr, scale, S, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
                 BN: tl.constexpr, CAUSAL: tl.constexpr):
        # tl.exp of (q k^T) * scale; the causal mask by tl.where over every key block up to the diagonal
        pid_m = tl.program_id(0)
        bh = tl.program_id(1).to(tl.int64)
        base = bh * S * D
        rm = pid_m * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
        m_i = tl.full((BM,), float("-inf"), tl.float32)
        l_i = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        end = tl.minimum((pid_m + 1) * BM, S) if CAUSAL else S
        for n0 in range(0, end, BN):
            rn = n0 + tl.arange(0, BN)
            k = tl.load(k_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            keep = rn[None, :] < S
            if CAUSAL:
                keep = keep & (rm[:, None] >= rn[None, :])
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
            m_i = m_new
        tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], (acc / l_i[:, None]).to(tl.float16),
                 mask=rm[:, None] < S)

    @jit
    def attn_exp2(q_ptr, k_ptr, v_ptr, o_ptr, scale, S, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, CAUSAL: tl.constexpr):
        # exp2 with scale * log2(e) folded into q; K read transposed through its pointers; acc += p @ v
        pid_m = tl.program_id(0)
        off = tl.program_id(1).to(tl.int64) * S * D
        rm = pid_m * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(q_ptr + off + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
        q = (q * (scale * 1.4426950408889634)).to(tl.float16)
        m_i = tl.zeros((BM,), tl.float32) - float("inf")
        l_i = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        hi = tl.minimum((pid_m + 1) * BM, S) if CAUSAL else S
        for n0 in range(0, hi, BN):
            rn = n0 + tl.arange(0, BN)
            kt = tl.load(k_ptr + off + rd[:, None] + rn[None, :] * D, mask=rn[None, :] < S, other=0.0)
            s = tl.dot(q, kt)
            if CAUSAL:
                s = tl.where((rm[:, None] >= rn[None, :]) & (rn[None, :] < S), s, float("-inf"))
            else:
                s = tl.where(rn[None, :] < S, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.math.exp2(m_i - m_new)
            p = tl.math.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc *= alpha[:, None]
            v = tl.load(v_ptr + off + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
            acc += tl.dot(p.to(v.dtype), v)
            m_i = m_new
        acc = acc / l_i[:, None]
        tl.store(o_ptr + off + rm[:, None] * D + rd[None, :], acc.to(o_ptr.dtype.element_ty), mask=rm[:, None] < S)

    @jit
    def attn_block_ptr(q_ptr, k_ptr, v_ptr, o_ptr, scale, S, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr,
                       BN: tl.constexpr, CAUSAL: tl.constexpr):
        # block pointers (K as a [D, S] view), advanced along the keys; boundary checks instead of masks
        pid_m = tl.program_id(0)
        off = tl.program_id(1).to(tl.int64) * S * D
        q_blk = tl.make_block_ptr(q_ptr + off, (S, D), (D, 1), (pid_m * BM, 0), (BM, D), (1, 0))
        kt_blk = tl.make_block_ptr(k_ptr + off, (D, S), (1, D), (0, 0), (D, BN), (0, 1))
        v_blk = tl.make_block_ptr(v_ptr + off, (S, D), (D, 1), (0, 0), (BN, D), (1, 0))
        q = tl.load(q_blk, boundary_check=(0,), padding_option="zero")
        rm = pid_m * BM + tl.arange(0, BM)
        m_i = tl.full((BM,), float("-inf"), tl.float32)
        l_i = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        qk_scale = scale * 1.4426950408889634
        hi = tl.minimum((pid_m + 1) * BM, S) if CAUSAL else S
        for n0 in range(0, hi, BN):
            kt = tl.load(kt_blk, boundary_check=(1,), padding_option="zero")
            s = tl.dot(q, kt) * qk_scale
            rn = n0 + tl.arange(0, BN)
            keep = rn[None, :] < S
            if CAUSAL:
                keep = keep & (rm[:, None] >= rn[None, :])
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_blk, boundary_check=(0,), padding_option="zero")
            acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])
            m_i = m_new
            kt_blk = tl.advance(kt_blk, (0, BN))
            v_blk = tl.advance(v_blk, (BN, 0))
        o_blk = tl.make_block_ptr(o_ptr + off, (S, D), (D, 1), (pid_m * BM, 0), (BM, D), (1, 0))
        tl.store(o_blk, (acc / l_i[:, None]).to(tl.float16), boundary_check=(0,))

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        q = x["q"]
        B, H, S, D = q.shape
        kernel[(cdiv(S, meta["BM"]), B * H)](q, x["k"], x["v"], x["o"], D ** -0.5, S, H=H, D=D,
                                             CAUSAL=x["causal"], **meta, **opts)

    def inputs(size, device, seed):
        import torch

        B, H, S, D, causal = size
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(B, H, S, D, generator=g).to(torch.float16).to(device) for _ in range(3))
        return dict(q=q, k=k, v=v, o=torch.full_like(q, float("nan")), causal=causal)

    def reference(x):
        import torch

        q, k, v = (x[n].double() for n in "qkv")
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        if x["causal"]:
            S = q.shape[-2]
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v

    def flops(x):
        B, H, S, D = x["q"].shape
        return "flop", 4 * B * H * S * S * D // (2 if x["causal"] else 1)

    w = Workload("attention", inputs, reference, "o", flops,
                 sizes={"bench": (4, 16, 4096, 128, False), "test": (1, 2, 200, 64, True)}, tol=1e-2)
    cfgs = [dict(BM=128, BN=64, num_warps=8, num_stages=3), dict(BM=128, BN=128, num_warps=8, num_stages=3),
            dict(BM=64, BN=64, num_warps=4, num_stages=3)]
    w.variants = [Variant("exp", attn_exp, launch, cfgs), Variant("exp2", attn_exp2, launch, cfgs),
                  Variant("block_ptr", attn_block_ptr, launch, cfgs)]
    return w


def _rope(jit, tl):
    """Rotary position embedding of x [B, S, H, D] (fp16) with cos/sin tables [S, D/2] (fp32)."""

    @jit
    def rope_halves(x_ptr, cos_ptr, sin_ptr, o_ptr, S, H, sxb, sxs, sxh, HALF: tl.constexpr, BH: tl.constexpr):
        # NeoX / Llama: the halves x[:D/2], x[D/2:] rotated; one program per token, all its heads
        pid = tl.program_id(0)
        b = pid // S
        s = pid % S
        h = tl.arange(0, BH)
        d = tl.arange(0, HALF)
        hm = h[:, None] < H
        off = b * sxb + s * sxs + h[:, None] * sxh + d[None, :]
        x1 = tl.load(x_ptr + off, mask=hm, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + off + HALF, mask=hm, other=0.0).to(tl.float32)
        c = tl.load(cos_ptr + s * HALF + d)[None, :]
        sn = tl.load(sin_ptr + s * HALF + d)[None, :]
        tl.store(o_ptr + off, (x1 * c - x2 * sn).to(o_ptr.dtype.element_ty), mask=hm)
        tl.store(o_ptr + off + HALF, (x2 * c + x1 * sn).to(o_ptr.dtype.element_ty), mask=hm)

    @jit
    def rope_pairs(x_ptr, cos_ptr, sin_ptr, o_ptr, S, H, n_rows, D: tl.constexpr, BR: tl.constexpr):
        # GPT-J: interleaved pairs (x[2i], x[2i+1]) split with tl.split and joined back; BR rows (token, head) per
        # program, the position from the row index
        rows = tl.program_id(0) * BR + tl.arange(0, BR)
        rm = rows < n_rows
        pos = (rows // H) % S
        cols = tl.arange(0, D)
        x = tl.load(x_ptr + rows[:, None] * D + cols[None, :], mask=rm[:, None], other=0.0).to(tl.float32)
        xe, xo = tl.split(tl.reshape(x, (BR, D // 2, 2)))
        half = tl.arange(0, D // 2)
        c = tl.load(cos_ptr + pos[:, None] * (D // 2) + half[None, :], mask=rm[:, None], other=0.0)
        sn = tl.load(sin_ptr + pos[:, None] * (D // 2) + half[None, :], mask=rm[:, None], other=0.0)
        y = tl.reshape(tl.join(xe * c - xo * sn, xo * c + xe * sn), (BR, D))
        tl.store(o_ptr + rows[:, None] * D + cols[None, :], y.to(o_ptr.dtype.element_ty), mask=rm[:, None])

    def launch_halves(kernel, x, cfg):
        meta, opts = _split(cfg)
        t = x["x"]
        B, S, H, D = t.shape
        kernel[(B * S,)](t, x["cos"], x["sin"], x["out"], S, H, t.stride(0), t.stride(1), t.stride(2), HALF=D // 2,
                         BH=_next_pow2(H), **meta, **opts)

    def launch_pairs(kernel, x, cfg):
        meta, opts = _split(cfg)
        t = x["x"]
        B, S, H, D = t.shape
        kernel[(cdiv(B * S * H, meta["BR"]),)](t, x["cos"], x["sin"], x["out"], S, H, B * S * H, D=D, **meta, **opts)

    def inputs(size, device, seed):
        import torch

        B, S, H, D = size
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(B, S, H, D, generator=g)
        x.view(-1)[:4] = torch.tensor([0.0, -0.0, 60000.0, -60000.0])
        ang = torch.arange(S)[:, None] * torch.rand(D // 2, generator=g)[None, :] * 3
        return dict(x=x.half().to(device), cos=ang.cos().to(device), sin=ang.sin().to(device),
                    out=torch.full((B, S, H, D), float("nan"), dtype=torch.float16, device=device))

    def reference(x, pairs=False):
        import torch

        xx = x["x"].double()
        c, s = x["cos"].double()[None, :, None, :], x["sin"].double()[None, :, None, :]
        if pairs:
            x1, x2 = xx[..., 0::2], xx[..., 1::2]
            return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
        h = xx.shape[-1] // 2
        x1, x2 = xx[..., :h], xx[..., h:]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    w = Workload("rope", inputs, reference, "out", lambda x: ("bytes", 2 * x["x"].numel() * 2),
                 sizes={"bench": (8, 2048, 32, 128), "test": (2, 5, 3, 64)}, tol=1e-3)
    w.variants = [
        Variant("halves", rope_halves, launch_halves, [dict(num_warps=4), dict(num_warps=8), dict(num_warps=2)]),
        Variant("pairs", rope_pairs, launch_pairs, [dict(BR=16, num_warps=4), dict(BR=32, num_warps=8),
                                              dict(BR=8, num_warps=2)], params={"pairs": True}),
    ]
    return w


def _quantize(jit, tl):
    """int8 per-row quantization: scale = absmax / 127, q = round half away from zero of x / scale, clamped."""

    @jit
    def quant_row(x_ptr, q_ptr, s_ptr, N, sx, sq, BLOCK: tl.constexpr):
        # the whole row in one block
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        m = cols < N
        x = tl.load(x_ptr + row * sx + cols, mask=m, other=0.0).to(tl.float32)
        scale = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-6) / 127.0
        q = x * (1.0 / scale)
        q = tl.where(q >= 0, q + 0.5, q - 0.5)
        q = tl.minimum(tl.maximum(q, -127.0), 127.0)
        tl.store(q_ptr + row * sq + cols, q.to(tl.int8), mask=m)
        tl.store(s_ptr + row, scale)

    @jit
    def quant_two_pass(x_ptr, q_ptr, s_ptr, N, sx, sq, BLOCK: tl.constexpr):
        # long rows: an absmax pass over blocks, then a quantizing pass; rounding by floor, clamping by tl.clamp
        row = tl.program_id(0).to(tl.int64)
        amax = tl.zeros((BLOCK,), tl.float32)
        for c in range(0, N, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * sx + cols, mask=cols < N, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(x))
        scale = tl.maximum(tl.max(amax, axis=0), 1e-6) / 127.0
        inv = 1.0 / scale
        for c in range(0, N, BLOCK):
            cols = c + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * sx + cols, mask=cols < N, other=0.0).to(tl.float32)
            y = x * inv
            q = tl.where(y >= 0, tl.floor(y + 0.5), -tl.floor(0.5 - y))
            q = tl.clamp(q, -127.0, 127.0)
            tl.store(q_ptr + row * sq + cols, q.to(tl.int8), mask=cols < N)
        tl.store(s_ptr + row, scale)

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        X, Q = x["x"], x["q"]
        M, N = X.shape
        if "BLOCK" not in meta:
            meta = dict(meta, BLOCK=_next_pow2(N))
        kernel[(M,)](X, Q, x["scale"], N, X.stride(0), Q.stride(0), **meta, **opts)

    def inputs(size, device, seed):
        import torch

        M, N = size
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(M, N, generator=g) * torch.rand(M, 1, generator=g) * 4
        x[0, :3] = torch.tensor([0.0, -0.0, 1e-3])
        x[1 % M, 0] = 1000.0
        return dict(x=x.half().to(device), q=torch.full((M, N), -128, dtype=torch.int8, device=device),
                    scale=torch.full((M,), float("nan"), device=device))

    def reference(x):
        import torch

        xx = x["x"].double()
        scale = (xx.abs().amax(dim=1).clamp_min(1e-6) / 127.0).float()
        y = xx / scale.double()[:, None]
        q = torch.where(y >= 0, torch.floor(y + 0.5), -torch.floor(0.5 - y)).clamp(-127, 127)
        return torch.cat([q.flatten(), scale.double()])

    w = Workload("quantize", inputs, reference, ("q", "scale"), lambda x: ("bytes", x["x"].numel() * 3),
                 sizes={"bench": (16384, 4096), "test": (9, 1000)}, tol=1e-3)
    w.variants = [
        Variant("one_block", quant_row, launch, [dict(num_warps=4), dict(num_warps=8), dict(num_warps=16)]),
        Variant("two_pass", quant_two_pass, launch, [dict(BLOCK=1024, num_warps=4), dict(BLOCK=2048, num_warps=8),
                                                     dict(BLOCK=512, num_warps=4)]),
    ]
    return w


def _stencil(jit, tl):
    """A depthwise 3x3 convolution with zero padding over planes [P, H, W] (fp16), weights [P, 9] (fp32)."""

    @jit
    def conv_taps(x_ptr, w_ptr, y_ptr, H, W, BH: tl.constexpr, BW: tl.constexpr):
        # BH x BW tiles, the nine taps as shifted masked loads in static loops
        pid_w = tl.program_id(0)
        pid_h = tl.program_id(1)
        plane = tl.program_id(2)
        rh = pid_h * BH + tl.arange(0, BH)
        rw = pid_w * BW + tl.arange(0, BW)
        base = plane * H * W
        acc = tl.zeros((BH, BW), tl.float32)
        for i in tl.static_range(3):
            for j in tl.static_range(3):
                hh = rh[:, None] + (i - 1)
                ww = rw[None, :] + (j - 1)
                m = (hh >= 0) & (hh < H) & (ww >= 0) & (ww < W)
                xv = tl.load(x_ptr + base + hh * W + ww, mask=m, other=0.0)
                acc += xv.to(tl.float32) * tl.load(w_ptr + plane * 9 + i * 3 + j)
        tl.store(y_ptr + base + rh[:, None] * W + rw[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(rh[:, None] < H) & (rw[None, :] < W))

    @jit
    def conv_rows(x_ptr, w_ptr, y_ptr, H, W, ROWS: tl.constexpr, BW: tl.constexpr):
        # a column strip per program walking down ROWS output rows; the taps' weights loaded once, as scalars
        pid_w = tl.program_id(0)
        h0 = tl.program_id(1) * ROWS
        plane = tl.program_id(2).to(tl.int64)
        cols = pid_w * BW + tl.arange(0, BW)
        xp = x_ptr + plane * H * W
        wp = w_ptr + plane * 9
        w00, w01, w02 = tl.load(wp), tl.load(wp + 1), tl.load(wp + 2)
        w10, w11, w12 = tl.load(wp + 3), tl.load(wp + 4), tl.load(wp + 5)
        w20, w21, w22 = tl.load(wp + 6), tl.load(wp + 7), tl.load(wp + 8)
        cl, cc, cr = cols - 1, cols, cols + 1
        ml, mc, mr = (cl >= 0) & (cl < W), cc < W, cr < W
        for r in range(h0, tl.minimum(h0 + ROWS, H)):
            acc = tl.zeros((BW,), tl.float32)
            if r > 0:
                up = xp + (r - 1) * W
                acc += w00 * tl.load(up + cl, mask=ml, other=0.0).to(tl.float32)
                acc += w01 * tl.load(up + cc, mask=mc, other=0.0).to(tl.float32)
                acc += w02 * tl.load(up + cr, mask=mr, other=0.0).to(tl.float32)
            mid = xp + r * W
            acc += w10 * tl.load(mid + cl, mask=ml, other=0.0).to(tl.float32)
            acc += w11 * tl.load(mid + cc, mask=mc, other=0.0).to(tl.float32)
            acc += w12 * tl.load(mid + cr, mask=mr, other=0.0).to(tl.float32)
            if r + 1 < H:
                dn = xp + (r + 1) * W
                acc += w20 * tl.load(dn + cl, mask=ml, other=0.0).to(tl.float32)
                acc += w21 * tl.load(dn + cc, mask=mc, other=0.0).to(tl.float32)
                acc += w22 * tl.load(dn + cr, mask=mr, other=0.0).to(tl.float32)
            tl.store(y_ptr + plane * H * W + r * W + cols, acc.to(y_ptr.dtype.element_ty), mask=mc)

    def launch(kernel, x, cfg):
        meta, opts = _split(cfg)
        X = x["x"]
        P, H, W = X.shape
        rows = meta.get("BH", meta.get("ROWS"))
        kernel[(cdiv(W, meta["BW"]), cdiv(H, rows), P)](X, x["w"], x["y"], H, W, **meta, **opts)

    def inputs(size, device, seed):
        import torch

        P, H, W = size
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(P, H, W, generator=g)
        x.view(-1)[:3] = torch.tensor([0.0, 1000.0, -1000.0])
        return dict(x=x.half().to(device), w=(torch.rand(P, 9, generator=g) - 0.5).to(device),
                    y=torch.full((P, H, W), float("nan"), dtype=torch.float16, device=device))

    def reference(x):
        import torch

        P = x["x"].shape[0]
        wt = x["w"].double().reshape(P, 1, 3, 3)
        return torch.nn.functional.conv2d(x["x"].double()[None], wt, padding=1, groups=P)[0]

    w = Workload("stencil", inputs, reference, "y", lambda x: ("bytes", 2 * x["x"].numel() * 2),
                 sizes={"bench": (64, 1024, 1024), "test": (3, 37, 70)}, tol=1e-3)
    w.variants = [
        Variant("taps_2d", conv_taps, launch, [dict(BH=16, BW=64, num_warps=4), dict(BH=32, BW=128, num_warps=8),
                                               dict(BH=8, BW=128, num_warps=4)]),
        Variant("row_walk", conv_rows, launch, [dict(ROWS=16, BW=512, num_warps=4), dict(ROWS=32, BW=1024, num_warps=8),
                                                dict(ROWS=8, BW=256, num_warps=2)]),
    ]
    return w


def _paged_decode(jit, tl):
    """Decode attention over a paged KV cache (vLLM's layout: caches [blocks, KV_H, T, D], a block table per
    sequence, one query token per sequence), grouped-query heads."""

    @jit
    def decode_head(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, o_ptr, scale, sqb, sqh, skb, skh, skt, sbt,
                    GROUP: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
        # one program per (sequence, query head), the online softmax in scalars over the sequence's pages
        b = tl.program_id(0)
        h = tl.program_id(1)
        kvh = h // GROUP
        seq_len = tl.load(len_ptr + b)
        d = tl.arange(0, D)
        t = tl.arange(0, T)
        q = tl.load(q_ptr + b * sqb + h * sqh + d).to(tl.float32) * scale
        m_i = float("-inf")
        l_i = 0.0
        acc = tl.zeros((D,), tl.float32)
        for j in range(0, tl.cdiv(seq_len, T)):
            blk = tl.load(bt_ptr + b * sbt + j).to(tl.int64)
            valid = j * T + t < seq_len
            off = blk * skb + kvh * skh + t[:, None] * skt + d[None, :]
            k = tl.load(k_ptr + off, mask=valid[:, None], other=0.0).to(tl.float32)
            s = tl.where(valid, tl.sum(k * q[None, :], axis=1), float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new)
            v = tl.load(v_ptr + off, mask=valid[:, None], other=0.0).to(tl.float32)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            m_i = m_new
        tl.store(o_ptr + b * sqb + h * sqh + d, (acc / l_i).to(o_ptr.dtype.element_ty))

    @jit
    def decode_group(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, o_ptr, scale, sqb, sqh, skb, skh, skt, sbt,
                     GROUP: tl.constexpr, D: tl.constexpr, T: tl.constexpr):
        # one program per (sequence, KV head): its GROUP query heads share each page's loads (3-D broadcasts)
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        seq_len = tl.load(len_ptr + b)
        g = tl.arange(0, GROUP)
        d = tl.arange(0, D)
        t = tl.arange(0, T)
        qh = kvh * GROUP + g
        q = tl.load(q_ptr + b * sqb + qh[:, None] * sqh + d[None, :]).to(tl.float32) * scale
        m_i = tl.full((GROUP,), float("-inf"), tl.float32)
        l_i = tl.zeros((GROUP,), tl.float32)
        acc = tl.zeros((GROUP, D), tl.float32)
        for j in range(0, tl.cdiv(seq_len, T)):
            blk = tl.load(bt_ptr + b * sbt + j).to(tl.int64)
            valid = j * T + t < seq_len
            off = blk * skb + kvh * skh + t[:, None] * skt + d[None, :]
            k = tl.load(k_ptr + off, mask=valid[:, None], other=0.0).to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)
            s = tl.where(valid[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(s - m_new[:, None])
            v = tl.load(v_ptr + off, mask=valid[:, None], other=0.0).to(tl.float32)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            m_i = m_new
        tl.store(o_ptr + b * sqb + qh[:, None] * sqh + d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))

    def launch(kernel, x, cfg, per_head):
        meta, opts = _split(cfg)
        q, kc, o, bt = x["q"], x["k"], x["o"], x["table"]
        B, H, D = q.shape
        KVH, T = kc.shape[1], kc.shape[2]
        kernel[(B, H if per_head else KVH)](q, kc, x["v"], bt, x["lens"], o, D ** -0.5, q.stride(0), q.stride(1),
                                            kc.stride(0), kc.stride(1), kc.stride(2), bt.stride(0), GROUP=H // KVH,
                                            D=D, T=T, **meta, **opts)

    def inputs(size, device, seed):
        import torch

        B, H, KVH, D, T, max_len = size
        per = cdiv(max_len, T)
        nblk = B * per + 3
        g = torch.Generator().manual_seed(seed)
        lens = torch.randint(1, max_len + 1, (B,), generator=g, dtype=torch.int32)
        lens[0] = max_len
        table = torch.randperm(nblk, generator=g)[:B * per].reshape(B, per).to(torch.int32)
        kc = torch.randn(nblk, KVH, T, D, generator=g).half()
        vc = torch.randn(nblk, KVH, T, D, generator=g).half()
        q = (torch.randn(B, H, D, generator=g) * 2).half()
        return dict(q=q.to(device), k=kc.to(device), v=vc.to(device), table=table.to(device), lens=lens.to(device),
                    o=torch.full((B, H, D), float("nan"), dtype=torch.float16, device=device))

    def reference(x):
        import torch

        q, kc, vc = (x[n].double().cpu() for n in ("q", "k", "v"))
        table, lens = x["table"].cpu(), x["lens"].cpu()
        B, H, D = q.shape
        KVH, T = kc.shape[1], kc.shape[2]
        out = torch.empty(B, H, D, dtype=torch.float64)
        for b in range(B):
            L = int(lens[b])
            blocks = table[b, :cdiv(L, T)].long()
            k = kc[blocks].transpose(0, 1).reshape(KVH, -1, D)[:, :L].repeat_interleave(H // KVH, 0)
            v = vc[blocks].transpose(0, 1).reshape(KVH, -1, D)[:, :L].repeat_interleave(H // KVH, 0)
            s = (k @ q[b][:, :, None])[..., 0] * D ** -0.5
            out[b] = (torch.softmax(s, -1)[:, None, :] @ v)[:, 0]
        return out.to(x["q"].device)

    def bytes_read(x):
        KVH, T, D = x["k"].shape[1:]
        return "bytes", int(x["lens"].sum()) * KVH * D * 2 * 2

    w = Workload("paged_decode", inputs, reference, "o", bytes_read,
                 sizes={"bench": (64, 32, 8, 128, 16, 4096), "test": (3, 8, 2, 64, 16, 70)}, tol=1e-2)
    cfgs = [dict(num_warps=4), dict(num_warps=8), dict(num_warps=2)]
    w.variants = [Variant("per_head", decode_head, lambda k, x, c: launch(k, x, c, True), cfgs),
                  Variant("per_group", decode_group, lambda k, x, c: launch(k, x, c, False), cfgs)]
    return w


def make_idioms(jit, tl) -> list:
    """Every workload with its variants, compiled by `jit` (kernellab's or Triton's)."""
    return [_matmul(jit, tl), _linear(jit, tl), _softmax(jit, tl), _layer_norm(jit, tl), _reduction(jit, tl),
            _scan(jit, tl), _weight_grad(jit, tl), _gemv(jit, tl), _transpose(jit, tl), _cross_entropy(jit, tl),
            _bmm(jit, tl), _attention(jit, tl), _rope(jit, tl), _quantize(jit, tl), _stencil(jit, tl),
            _paged_decode(jit, tl)]


def gpu_build_of(monkeypatch, workload, variant: str, x, cfg):
    """The GPU build (sm_90a, no GPU needed) of one variant of `workload` launched on inputs `x` with `cfg`: its
    launch runs as written up to the kernel's run, which only builds (tests of what a knob does to the code)."""
    import kernellab.runtime.jit as jit

    v = next(v for v in workload.variants if v.name == variant)
    built, real_run = [], jit.CompiledKernel.run
    monkeypatch.setattr(jit.CompiledKernel, "run", lambda self, grid, args: built.append(self.build_gpu()))
    v.launch(v.kernel, x, cfg)
    monkeypatch.setattr(jit.CompiledKernel, "run", real_run)
    return built[0]
