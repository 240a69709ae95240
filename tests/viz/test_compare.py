"""Compare two compiles (kernellab.viz.compare) and the FLOP / byte estimate from the tile IR
(kernellab.viz.cost). The estimates are checked against counts worked out by hand from the kernels' source;
the compare data against what the option change must do (a bigger tile: other layouts and more registers per
thread; one more stage: one more stage buffer's bytes; the same options: nothing)."""
from __future__ import annotations

import re

import pytest

import kernellab as kl
import kernellab.language as tl
import kernellab.viz as kv
from kernellab.viz import cost as C
from kernellab.viz import whatif as W

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")
HAS_GPU = torch.cuda.is_available()


@kl.jit
def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@kl.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_rows, n_cols, BLOCK: tl.constexpr):
    # a grid-stride loop over rows: each program's trip count depends on its program id
    for r in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + r * stride + cols, mask=cols < n_cols, other=-float("inf"))
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        tl.store(out_ptr + r * stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@kl.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def triangle_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # program p sums p + 1 blocks: the causal-attention shape of loop
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, (pid + 1) * BLOCK, BLOCK):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def _mm_args(M, N, K):
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    return a, b, torch.empty(M, N).half(), M, N, K


def _mm_grid(M, N):
    return lambda meta: (kl.cdiv(M, meta["BLOCK_M"]), kl.cdiv(N, meta["BLOCK_N"]))


# ------------------------------------------------------------------------------------- FLOPs and bytes
def test_estimate_vector_add_counts_whole_tiles_and_bounds_bytes_by_the_tensors():
    n = 4000
    x, y, z = torch.rand(n), torch.rand(n), torch.rand(n)
    ck = add_kernel.warmup(x, y, z, n, BLOCK=1024)
    est = C.estimate(ck, C.runtime_args(ck, (x, y, z, n)), grid=(4,))
    assert est["flops"] == 4 * 1024  # one add per element of the 4 tiles (masked-off lanes compute too)
    assert est["bytes"] == 3 * n * 4  # x, y read and z written once: bounded by their sizes
    assert est["requested_bytes"] == 3 * 4 * 1024 * 4
    assert est["by_arg"]["z_ptr"] == {"read": 0.0, "written": n * 4, "requested_read": 0.0,
                                      "requested_written": 4 * 1024 * 4, "size": n * 4}
    assert est["exact"] and est["estimated"] and est["intensity"] == pytest.approx(4096 / 48000)


def test_estimate_softmax_with_a_grid_stride_loop_evaluates_each_program():
    rows, cols, block = 10, 64, 128
    x, out = torch.randn(rows, cols), torch.empty(rows, cols)
    ck = softmax_kernel.warmup(out, x, cols, rows, cols, BLOCK=block)
    est = C.estimate(ck, C.runtime_args(ck, (out, x, cols, rows, cols)), grid=(4,))
    # per row: max (B - 1), subtract B, exp B, sum (B - 1), divide B; programs 0, 1 take 3 rows, 2, 3 take 2
    assert est["flops"] == rows * (5 * block - 2)
    assert est["bytes"] == 2 * rows * cols * 4  # the 128-wide tiles are masked to the 64 columns there are
    assert est["requested_bytes"] == 2 * rows * block * 4
    assert est["exact"]


@pytest.mark.parametrize("M, N, K", [(256, 256, 256), (128, 256, 192)])
def test_estimate_matmul_multiplies_the_dot_by_the_loop_trip_count(M, N, K):
    args = _mm_args(M, N, K)
    ck = matmul_kernel.warmup(*args, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    grid = (M // 64, N // 64)
    est = C.estimate(ck, C.runtime_args(ck, args), grid=grid)
    assert est["dot_flops"] == 2 * M * N * K  # 2·64·64·64 per trip, K / 64 trips, (M/64)(N/64) programs
    assert est["flops"] == est["dot_flops"]  # the fp32 -> fp16 cast is not a FLOP
    assert est["bytes"] == (M * K + K * N + M * N) * 2  # A, B, C once each (re-reads hit L2)
    assert est["requested_bytes"] == grid[0] * grid[1] * (K // 64) * 2 * 64 * 64 * 2 + M * N * 2


def test_estimate_loop_bounded_by_the_program_id():
    x, out = torch.rand(8 * 32), torch.empty(8 * 32)
    ck = triangle_kernel.warmup(x, out, BLOCK=32)
    est = C.estimate(ck, C.runtime_args(ck, (x, out)), grid=(8,))
    assert est["flops"] == sum(p + 1 for p in range(8)) * 32  # program p adds p + 1 blocks
    assert est["by_arg"]["x_ptr"]["requested_read"] == 36 * 32 * 4 and est["exact"]


def test_estimate_without_grid_or_values_says_what_it_could_not_know():
    args = _mm_args(128, 128, 128)
    ck = matmul_kernel.warmup(*args, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    est = C.estimate(ck)
    assert not est["exact"] and est["programs"] is None
    assert any("trip count not known" in n for n in est["notes"]) and any("no grid" in n for n in est["notes"])
    assert est["dot_flops"] == 2 * 64 * 64 * 64  # one program, the loop body once


# ------------------------------------------------------------------------------------- compare: data
@pytest.fixture(scope="module")
def mm_block_sizes():
    args = _mm_args(256, 256, 256)
    return kv.compare(matmul_kernel, *args, grid=_mm_grid(256, 256), BLOCK_K=64, target="sm_90a",
                      a=dict(BLOCK_M=64, BLOCK_N=64), b=dict(BLOCK_M=128, BLOCK_N=128))


def _row(view, metric):
    return next(r for r in view.data["rows"] if r["metric"] == metric)


def test_compare_block_sizes_changes_layouts_and_registers(mm_block_sizes):
    v = mm_block_sizes
    lay = v.data["layouts"]
    assert lay["changed"] and not v.same
    acc = [c for c in lay["changed"] if c["op"] == "tt.dot"]
    assert acc and acc[0]["shape_a"] == (64, 64) and acc[0]["shape_b"] == (128, 128)
    # a 128x128 fp32 accumulator over 128 threads: 128 registers each, a 64x64 one: 32
    assert (acc[0]["registers_a"], acc[0]["registers_b"]) == (32, 128)
    a, b = v.profiles
    if a["code"].get("regs") is not None:  # ptxas reported registers
        assert b["code"]["regs"] > a["code"]["regs"] and _row(v, "registers / thread")["changed"]
    assert _row(v, "BLOCK_M")["a"] == "64" and _row(v, "BLOCK_M")["b"] == "128"
    assert any("changed layout" in h for h in v.data["headlines"])
    # the work does not depend on the tile size; the bytes the programs request do
    assert a["cost"]["flops"] == b["cost"]["flops"] == 2 * 256 ** 3
    assert a["cost"]["requested_bytes"] > b["cost"]["requested_bytes"]


def test_compare_num_stages_changes_shared_memory_bytes():
    args = _mm_args(256, 256, 256)
    v = kv.compare(matmul_kernel, *args, grid=_mm_grid(256, 256), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                   target="sm_90a", a=dict(num_stages=2), b=dict(num_stages=3))
    a, b = v.profiles
    staged = lambda p: [x for x in p["smem"]["buffers"] if x["stages"]]  # noqa: E731
    assert [x["stages"] for x in staged(a)] == [2, 2] and [x["stages"] for x in staged(b)] == [3, 3]
    # one more stage of a 128x64 and a 64x128 fp16 tile
    extra = sum(x["size"] for x in staged(b)) - sum(x["size"] for x in staged(a))
    assert extra == 2 * 128 * 64 * 2
    assert _row(v, "pipelined stages")["changed"] and _row(v, "bytes planned")["changed"]
    assert {c["op"] for c in v.data["buffers"]} >= {"ttg.local_alloc"}
    assert b["ptx"]["cp.async"] > a["ptx"]["cp.async"]
    assert "allocate_shared" in {p["name"] for p in v.data["passes"]}


def test_compare_the_same_options_finds_no_differences():
    args = _mm_args(128, 128, 128)
    v = kv.compare(matmul_kernel, *args, grid=_mm_grid(128, 128), BLOCK_M=64, BLOCK_N=64, BLOCK_K=64,
                   a=dict(num_warps=4), b=dict(num_warps=4))
    assert v.same and not v.data["headlines"] and not any(r["changed"] for r in v.data["rows"])
    assert "no differences" in repr(v) and "no differences" in v._repr_mimebundle_()["text/html"]


def test_compare_two_compiled_kernels_and_targets():
    args = _mm_args(128, 128, 128)
    ck = matmul_kernel.warmup(*args, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    other = matmul_kernel.warmup(*args, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_warps=8)
    v = kv.compare(ck, other, target="sm_90a")
    assert _row(v, "num_warps")["a"] == "4" and _row(v, "num_warps")["b"] == "8" and not v.same
    # sm_80 vs sm_90a: mma.sync against wgmma, from one kernel built twice
    v = kv.compare(matmul_kernel, *args, grid=(2, 2), BLOCK_M=64, BLOCK_N=64, BLOCK_K=64,
                   a=dict(target="sm_80"), b=dict(target="sm_90a"))
    a, b = v.profiles
    assert (a["target"], b["target"]) == ("sm_80", "sm_90a")
    assert a["ptx"]["mma.sync"] > 0 and a["ptx"]["wgmma.mma_async"] == 0
    assert b["ptx"]["wgmma.mma_async"] > 0 and b["ptx"]["mma.sync"] == 0
    assert "pipeline_dot_operands" in {p["name"] for p in v.data["passes"]}  # wgmma overlap on sm_90a only
    # each side lists its own build's passes once, although both builds went into one trace
    assert [p["name"] for p in a["passes"]] == [p["name"] for p in b["passes"]]


def test_compare_a_source_edit():
    import inspect

    n = 2048
    x, y, z = torch.rand(n), torch.rand(n), torch.rand(n)
    src = inspect.getsource(add_kernel.fn)
    edited = src.replace("tl.load(x_ptr + offs, mask=m) + tl.load", "tl.load(x_ptr + offs, mask=m) * 2.0 + tl.load")
    assert edited != src
    v = kv.compare(add_kernel, x, y, z, n, grid=(2,), BLOCK=1024, a=dict(), b=dict(source=edited))
    a, b = v.profiles
    assert not v.data["ir_same"] and not v.same
    assert b["cost"]["flops"] == 2 * a["cost"]["flops"] == 2 * 2048
    assert _row(v, "FLOPs")["changed"] and "source" in b["options"]


def test_compare_html_says_time_is_not_measured_on_a_cpu(mm_block_sizes):
    markup = mm_block_sizes._repr_mimebundle_()["text/html"]
    text = re.sub(r"<[^>]+>", "", markup)
    if not HAS_GPU:
        assert "not measured" in text and "measured (median)" not in text
    assert "what changed" in text and "registers" in text and "estimated" in text
    assert "layouts" in text and "shared memory" in text and "GPU IR, A → B" in text
    assert markup.count("<svg") >= 1 and "<script" not in markup


def test_ptx_mix_counts():
    ptx = """
    ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];
    @%p1 ld.global.b32 %r5, [%rd2];
    cp.async.cg.shared.global [%r6], [%rd3], 16;
    bar.sync 0;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {...};
    """
    mix = W.ptx_mix(ptx)
    assert mix["ld.global (all)"] == 2 and mix["ld.global.v4"] == 1 and mix["cp.async"] == 1
    assert mix["bar.sync / barrier"] == 1 and mix["wgmma.mma_async"] == 1 and mix["mma.sync"] == 0


# ------------------------------------------------------------------------------------- on the GPU
@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_compare_on_the_gpu_times_both_sides():
    M = N = K = 512
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    c = torch.empty(M, N, device="cuda").half()
    v = kv.compare(matmul_kernel, a, b, c, M, N, K, grid=_mm_grid(M, N), BLOCK_K=64,
                   a=dict(BLOCK_M=64, BLOCK_N=64, num_stages=2), b=dict(BLOCK_M=128, BLOCK_N=128, num_stages=3))
    pa, pb = v.profiles
    assert pa["seconds"] and pb["seconds"] and pa["seconds"] > 0 and pb["seconds"] > 0
    row = _row(v, "measured (median)")
    assert row["a"].endswith("µs") and row["b"].endswith("µs")
    text = re.sub(r"<[^>]+>", "", v._repr_mimebundle_()["text/html"])
    # no "time not measured" / "not measured: no GPU" (the FLOP note says the work is estimated, not measured)
    assert "time not measured" not in text and "not measured: no GPU" not in text
    assert "measured (median)" in text
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=1e-1, rtol=1e-2)  # it really ran


def test_headline_says_the_same_buffer_change_of_one_line_once():
    """Attention inlines its inner loop twice (causal): the two allocs of line 6 changed alike are one headline
    item "2 × ...", not the same sentence twice."""
    from kernellab.viz import whatif as W

    def buf(size, stages):
        return {"size": size, "stages": stages}

    bufs = [{"op": "ttg.local_alloc", "line": line, "a": buf(16384, 2), "b": buf(24576, 3)} for line in (6, 18, 6, 18)]
    heads = W.headlines({}, {}, [], {"changed": []}, [], bufs, [])
    said = next(h for h in heads if h.startswith("shared-memory buffers"))
    assert said.count("line 6") == 1 and said.count("line 18") == 1 and said.count("2 × ttg.local_alloc") == 2
