"""tma_store (sm_90): a block pointer's tile (a tensor descriptor's store) goes out by TMA from a swizzled buffer,
written from the value's own layout (the conversion for st.global goes); in a loop the buffer is waited for
(wait_group.read) only before it is written again, and every return waits for the last stores."""
from __future__ import annotations

from kernellab.compiler.gpu.options import GpuOptions
from kernellab.compiler.passes import tma_store

HEAD = """#L1 = #blocked<[1, 8], [4, 8], [4, 1], [1, 0]>
#L3 = #blocked<[1, 1], [1, 32], [4, 1], [1, 0]>
"""

ONCE = HEAD + """
tt.func @store_tile(%out_ptr: !ptr<f16> {tt.divisibility = 16}, %M: i32, %N: i32 {tt.divisibility = 16}, %m0: i32, %n0: i32, %x: tensor<32x64xf16, #L3>) {
  %0 = arith.extsi %N : i64
  %1 = arith.constant {value = 1} : i64
  %13 = arith.extsi %M : i64
  %14 = tt.make_block_ptr %out_ptr, %13, %0, %0, %1, %m0, %n0 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
  %c = ttg.convert_layout %x : tensor<32x64xf16, #L1>
  tt.store %14, %c {boundary_check = [0, 1], vec = 8}
  tt.return
}
"""


def test_a_store_outside_loops_goes_by_tma_without_the_conversion(check):
    _, stats = check(tma_store, ONCE, """
#L0 = #blocked<[1, 1], [1, 32], [4, 1], [1, 0]>

tt.func @store_tile(%out_ptr: !ptr<f16> {tt.divisibility = 16}, %M: i32, %N: i32 {tt.divisibility = 16}, %m0: i32, %n0: i32, %x: tensor<32x64xf16, #L0>) {
  %0 = arith.extsi %N : i64
  %1 = arith.constant {value = 1} : i64
  %2 = arith.extsi %M : i64
  %3 = tt.make_block_ptr %out_ptr, %2, %0, %0, %1, %m0, %n0 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
  %store0_tile = ttg.local_alloc {fill = "registers", read_by = "TMA store", stages = 1} : !memdesc<1x32x64xf16, order=1,0, pad=0, swizzle=128>
  %4 = arith.constant {value = 0} : i32
  %5 = ttg.memdesc_index %store0_tile, %4 : !memdesc<32x64xf16, order=1,0, pad=0, swizzle=128>
  %store0_tensormap = ttg.tensormap %out_ptr, %N, %M, %N {box = [64, 32], swizzle = 128} : i64
  ttg.local_store %x, %5
  ttg.barrier {reason = "the tile is in shared memory (fenced for the async proxy)"}
  ttg.tma_store %store0_tensormap, %3, %5
  ttg.tma_store_wait %5 {pending = 0}
  tt.return
}
""", GpuOptions(num_warps=4, arch=90))
    assert stats == {"tma_store": 1}


LOOP = HEAD + """
tt.func @halves(%out_ptr: !ptr<f16> {tt.divisibility = 16}, %M: i32, %N: i32 {tt.divisibility = 16}, %n: i32, %x: tensor<32x64xf16, #L1>) {
  %0 = arith.extsi %N : i64
  %1 = arith.constant {value = 1} : i64
  %13 = arith.extsi %M : i64
  %z = arith.constant {value = 0} : i32
  %s = arith.constant {value = 1} : i32
  %c64 = arith.constant {value = 64} : i32
  scf.for %z, %n, %s {
  ^bb(%i: i32):
    %14 = tt.make_block_ptr %out_ptr, %13, %0, %0, %1, %i, %z {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
    tt.store %14, %x {boundary_check = [0, 1], vec = 8}
    %15 = tt.make_block_ptr %out_ptr, %13, %0, %0, %1, %i, %c64 {block_shape = [32, 64], order = [1, 0]} : !blockptr<f16, 32x64>
    tt.store %15, %x {boundary_check = [0, 1], vec = 8}
    scf.yield
  }
  tt.return
}
"""


def test_two_stores_in_a_loop_wait_for_their_own_previous_store_only(run_pass):
    """Two buffers, made before the loop (live through it); each store waits while the other's last group may
    still read (pending 1), nothing waits after a store in the loop; the return waits for both."""
    m, stats = run_pass(tma_store, LOOP, GpuOptions(num_warps=4, arch=90))
    assert stats == {"tma_store": 2}
    body = m.kernel.body.ops
    names = [o.name for o in body]
    loop = names.index("scf.for")
    assert names[:loop].count("ttg.local_alloc") == 2 and names[:loop].count("ttg.tensormap") == 2
    inner = [o for o in body[loop].regions[0].ops]
    seq = [o.name for o in inner if o.name.startswith("ttg.")]
    assert seq == ["ttg.tma_store_wait", "ttg.barrier", "ttg.local_store", "ttg.barrier", "ttg.tma_store"] * 2
    assert [o.attrs["pending"] for o in inner if o.name == "ttg.tma_store_wait"] == [1, 1]
    final = body[-2]
    assert final.name == "ttg.tma_store_wait" and final.attrs["pending"] == 0 and len(final.operands) == 2


def test_stores_tma_cannot_serve_keep_st_global(run_pass):
    """The row stride not known to be a multiple of 16 bytes (N without divisibility), and sm_80."""
    src = ONCE.replace("%N: i32 {tt.divisibility = 16}", "%N: i32")
    m, stats = run_pass(tma_store, src, GpuOptions(num_warps=4, arch=90))
    assert stats["tma_store"] == 0 and "16 bytes" in stats["no_tma_store"][0]
    assert any(o.name == "tt.store" for o in m.kernel.walk())
    m, stats = run_pass(tma_store, ONCE, GpuOptions(num_warps=4, arch=80))
    assert stats == {"tma_store": 0}
    m, stats = run_pass(tma_store, ONCE, GpuOptions(num_warps=4, arch=90, tma=False))
    assert stats == {"tma_store": 0}


def test_a_tensor_the_kernel_also_reads_keeps_st_global(run_pass):
    """A TMA store is asynchronous and in the async proxy: a tile read back (here the same block pointer, loaded
    and stored again) could see old data, so a tensor the kernel reads is stored with st.global."""
    src = ONCE.replace("""  %c = ttg.convert_layout %x : tensor<32x64xf16, #L1>
  tt.store %14, %c""", """  %ld = tt.load %14 {boundary_check = [0, 1], vec = 8} : tensor<32x64xf16, #L1>
  tt.store %14, %ld""")
    m, stats = run_pass(tma_store, src, GpuOptions(num_warps=4, arch=90))
    assert stats["tma_store"] == 0 and "also reads" in stats["no_tma_store"][0]
