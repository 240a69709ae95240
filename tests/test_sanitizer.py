"""The sanitizing interpreter: every pointer bounded by its own view, regions that never bleed into one another,
alignment checked; and with `sanitize=True`, races, duplicate stores and uninitialized reads reported with both
accesses (program, lane, line)."""
import re
import warnings

import numpy as np
import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import InterpreterError, LaunchError, SanitizerError
from kernellab.runtime.jit import InterpreterNotice

pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")


def gen(seed):
    return torch.Generator().manual_seed(seed)


@kl.jit
def copy_kernel(x_ptr, y_ptr, start, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + start + offs, mask=m), mask=m)


@kl.jit
def offset_store(x_ptr, off, v):
    tl.store(x_ptr + off, v)


# ------------------------------------------------------------------ bounds by view
def test_slice_overrun_past_the_end():
    base = torch.full((10,), -1.0)
    x = torch.randn(4, generator=gen(1))
    with pytest.raises(InterpreterError) as ei:
        copy_kernel[(1,)](x, base[2:5], 0, 4, BLOCK=4)  # the view has 3 elements, the kernel writes 4
    msg = str(ei.value)
    assert "kernel 'copy_kernel' line" in msg and "tl.store(y_ptr + offs" in msg and "program (0, 0, 0)" in msg
    assert "writes out of bounds: element offset 3 of argument 'y_ptr'" in msg
    assert "valid element offsets 0..2" in msg and "bounds='storage'" in msg
    assert base[5].item() == -1.0  # the parent was not written


def test_slice_overrun_before_the_start():
    base = torch.randn(10, generator=gen(2))
    keep = base.clone()
    y = torch.full((3,), float("nan"))
    with pytest.raises(InterpreterError, match=r"program \(0, 0, 0\) reads out of bounds: element offset -2 of "
                                               r"argument 'x_ptr' .*valid element offsets 0\.\.2"):
        copy_kernel[(1,)](base[2:5], y, -2, 3, BLOCK=4)
    with pytest.raises(InterpreterError, match=r"writes out of bounds: element offset -1 of argument 'x_ptr'"):
        offset_store[(1,)](base[2:5], -1, 7.0)
    assert torch.equal(base, keep)


def test_storage_opt_out():
    base = torch.randn(10, generator=gen(3))
    y = torch.full((5,), float("nan"))
    copy_kernel[(1,)](base[2:5], y, -2, 5, BLOCK=8, bounds="storage")  # reads base[0:5] through the view
    assert torch.equal(y, base[0:5])
    offset_store[(1,)](base[2:5], 7, 42.0, bounds="storage")
    assert base[9].item() == 42.0

    @kl.jit(bounds="storage")
    def store_parent(x_ptr, off, v):
        tl.store(x_ptr + off, v)

    store_parent[(1,)](base[2:5], -2, 5.0)
    assert base[0].item() == 5.0
    with pytest.raises(InterpreterError, match="element offset 8 of argument 'x_ptr'"):  # still bounded by storage
        store_parent[(1,)](base[2:5], 8, 5.0)
    with pytest.raises(LaunchError, match="bounds must be one of"):
        offset_store[(1,)](base, 0, 1.0, bounds="parent")


def test_far_offset_into_another_argument():
    a, b = torch.zeros(16), torch.zeros(16)
    # a's synthetic region is 2**40 bytes before b's: the store must not land in b
    with pytest.raises(InterpreterError, match=r"writes out of bounds: element offset 274877906944 of argument "
                                               r"'x_ptr'"):
        offset_store[(1,)](a, 2**38, 1.0)  # 2**38 float32 elements = 2**40 bytes

    @kl.jit
    def two(a_ptr, b_ptr, off):
        r = tl.arange(0, 4)
        tl.store(a_ptr + off + r, tl.load(b_ptr + r))

    with pytest.raises(InterpreterError, match="element offset 274877906944 of argument 'a_ptr'"):
        two[(1,)](a, b, 2**38)
    with pytest.raises(InterpreterError, match="element offset -274877906944 of argument 'a_ptr'"):
        two[(1,)](b, a, -2**38)
    assert not a.any() and not b.any()


def test_misaligned_access():
    @kl.jit
    def misaligned(x_ptr, out_ptr):
        r = tl.arange(0, 4)
        p = (x_ptr.to(tl.pointer_type(tl.int8)) + 2).to(tl.pointer_type(tl.int32))
        tl.store(out_ptr + r, tl.load(p + r))

    x = torch.arange(8, dtype=torch.int32)
    out = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(InterpreterError) as ei:
        misaligned[(1,)](x, out)
    msg = str(ei.value)
    assert "kernel 'misaligned' line" in msg and "program (0, 0, 0) reads a misaligned address" in msg
    assert "byte offset 2 of argument 'x_ptr'" in msg and "4-byte element size" in msg
    # a misaligned tensor (a view of bytes at an odd offset) faults on its first access
    raw = np.zeros(40, np.uint8)
    odd = raw[1:33].view(np.float32)
    with pytest.raises(InterpreterError, match="misaligned"):
        copy_kernel[(1,)](odd, np.zeros(8, np.float32), 0, 8, BLOCK=8)


def test_non_contiguous_views_in_bounds():
    g = gen(4)
    big = torch.randn(6, 8, generator=g)

    @kl.jit
    def copy2d(x_ptr, y_ptr, sxm, sxn, M, N, BM: tl.constexpr, BN: tl.constexpr):
        m = tl.arange(0, BM)[:, None]
        n = tl.arange(0, BN)[None, :]
        k = (m < M) & (n < N)
        tl.store(y_ptr + m * N + n, tl.load(x_ptr + m * sxm + n * sxn, mask=k), mask=k)

    t = big.t()  # transposed: 8 x 6
    y = torch.full((8, 6), float("nan"))
    copy2d[(1,)](t, y, t.stride(0), t.stride(1), 8, 6, BM=8, BN=8)
    assert torch.equal(y, t)
    s = big[1:5:2, ::3]  # stepped in both dims, with an offset: 2 x 3
    y = torch.full((2, 3), float("nan"))
    copy2d[(1,)](s, y, s.stride(0), s.stride(1), 2, 3, BM=2, BN=4)
    assert torch.equal(y, s)
    # the extent of a stepped view is its lowest to its highest element: one more column is outside it
    with pytest.raises(InterpreterError, match="valid element offsets 0..22"):
        copy2d[(1,)](s, torch.zeros(2, 4), s.stride(0), s.stride(1), 2, 4, BM=2, BN=4)
    # NumPy views with a negative stride reach below their pointer
    a = np.arange(12, dtype=np.float32)
    rev = a[10:1:-3]  # 10, 7, 4
    out = np.full(3, np.nan, np.float32)

    @kl.jit
    def gather_neg(x_ptr, y_ptr, stride):
        r = tl.arange(0, 4)
        m = r < 3
        tl.store(y_ptr + r, tl.load(x_ptr + r * stride, mask=m), mask=m)

    gather_neg[(1,)](rev, out, -3)
    np.testing.assert_array_equal(out, [10, 7, 4])
    with pytest.raises(InterpreterError, match="valid element offsets -6..0"):
        gather_neg[(1,)](rev, out, 3)


def test_scalar_and_block_pointer_bounds():
    base = torch.zeros(12)

    @kl.jit
    def bp(x_ptr, M, N, BLOCK: tl.constexpr):
        p = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (0, 0), (BLOCK, BLOCK), (1, 0))
        tl.store(p, tl.full((BLOCK, BLOCK), 3.0, tl.float32), boundary_check=(0, 1))

    bp[(1,)](base[2:8], 2, 3, BLOCK=4)  # a 2 x 3 view inside the storage: in bounds, masked by the check
    assert base[2:8].eq(3).all() and base[:2].eq(0).all() and base[8:].eq(0).all()
    with pytest.raises(InterpreterError, match="element offset 6 of argument 'x_ptr'"):
        bp[(1,)](base[2:8], 3, 3, BLOCK=4)  # the shape claims a third row the view does not have


# ------------------------------------------------------------------ sanitize: races
@kl.jit
def all_to_zero(out_ptr):
    tl.store(out_ptr, tl.program_id(0).to(tl.float32))


def test_race_between_programs():
    out = torch.zeros(4)
    with pytest.raises(SanitizerError) as ei:
        all_to_zero[(4,)](out, sanitize=True)
    msg = str(ei.value)
    assert "kernel 'all_to_zero'" in msg and "race (write-write)" in msg and "element offset 0 of argument 'out_ptr'" in msg
    assert "program (1, 0, 0)" in msg and "program (0, 0, 0)" in msg
    assert re.search(r"line \d+ `tl.store\(out_ptr, tl.program_id\(0\)", msg)
    rep = ei.value.report
    (f,) = rep.findings
    assert (f.kind, f.detail, f.argument, f.element_offset) == ("race", "write-write", "out_ptr", 0)
    assert f.first.program == (0, 0, 0) and f.second.program == (1, 0, 0)
    assert f.first.kind == f.second.kind == "write" and f.first.line == f.second.line
    assert f.count == 3  # programs 1, 2, 3 each overwrote an earlier program
    assert rep.maps["out_ptr"].writer[0] == 3 and rep.maps["out_ptr"].writer[1] == -1
    # without sanitize the launch is silent (the last program wins on the interpreter)
    all_to_zero[(4,)](out)
    assert out[0].item() == 3.0


def test_identical_writes_are_not_a_race():
    @kl.jit
    def same(out_ptr):
        tl.store(out_ptr, 1.0)

    out = torch.zeros(1)
    ck = same[(8,)](out, sanitize=True)
    assert ck.sanitizer_report.ok and out.item() == 1.0


def test_read_after_write_across_programs():
    @kl.jit
    def shift(x_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        r = tl.arange(0, BLOCK)
        tl.store(x_ptr + pid * BLOCK + r, tl.load(x_ptr + pid * BLOCK + r) + 1)
        if pid > 0:
            prev = tl.load(x_ptr + pid * BLOCK - 1)  # the last element of the previous program's block
            tl.store(x_ptr + pid * BLOCK, prev)

    x = torch.zeros(16)
    with pytest.raises(SanitizerError) as ei:
        shift[(4,)](x, BLOCK=4)  # sanitize off: nothing to report
        shift[(4,)](x, BLOCK=4, sanitize=True)
    rep = ei.value.report
    raw = rep.of_kind("race")
    assert [f.detail for f in raw] == ["read-after-write"]
    f = raw[0]
    assert f.element_offset == 3 and f.first.program == (0, 0, 0) and f.first.lane == (3,)
    assert f.second.program == (1, 0, 0) and f.second.kind == "read" and f.second.lane is None
    assert "read-after-write" in str(ei.value) and "prev = tl.load" in str(ei.value)


def test_write_after_read_across_programs():
    @kl.jit
    def reverse_in_place(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + n - 1 - offs)
        tl.store(x_ptr + offs, v)

    x = torch.arange(8, dtype=torch.float32)
    with pytest.raises(SanitizerError) as ei:
        reverse_in_place[(2,)](x, 8, BLOCK=4, sanitize=True)
    raw, war = ei.value.report.findings  # program 1 reads what program 0 wrote, and overwrites what it read
    assert raw.detail == "read-after-write" and raw.first.kind == "write" and raw.second.kind == "read"
    assert war.detail == "write-after-read" and war.first.kind == "read" and war.second.kind == "write"
    assert war.first.program == (0, 0, 0) and war.second.program == (1, 0, 0) and war.count == 4
    assert (war.element_offset, war.first.lane, war.second.lane) == (4, (3,), (0,))


def test_aliased_arguments_share_their_memory():
    @kl.jit
    def reverse(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + n - 1 - offs))

    x = torch.arange(8, dtype=torch.float32)
    y = torch.zeros(8)
    assert reverse[(2,)](x, y, 8, BLOCK=4, sanitize=True).sanitizer_report.ok
    with pytest.raises(SanitizerError) as ei:  # in place: program 1 reads through x what program 0 wrote through y
        reverse[(2,)](x, x, 8, BLOCK=4, sanitize=True)
    assert [f.detail for f in ei.value.report.findings] == ["read-after-write", "write-after-read"]
    f = ei.value.report.findings[0]
    assert f.argument == "x_ptr" and f.first.op == "tl.store" and f.element_offset == 3


    @kl.jit
    def add_one(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)

    t = torch.zeros(5)
    with pytest.raises(SanitizerError) as ei:  # two overlapping views of one tensor: y[1] is x[2]
        add_one[(2,)](t[:4], t[1:], BLOCK=2, sanitize=True)
    (f,) = ei.value.report.findings
    assert (f.detail, f.argument, f.element_offset) == ("read-after-write", "x_ptr", 2)
    assert f.first.program == (0, 0, 0) and f.first.lane == (1,) and f.second.lane == (0,)


def test_atomics_are_not_races():
    @kl.jit
    def hist(x_ptr, h_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.atomic_add(h_ptr + tl.load(x_ptr + offs, mask=m, other=0), 1, mask=m)
        tl.atomic_max(h_ptr + 8, offs, mask=m)

    x = torch.randint(0, 8, (100,), generator=gen(5), dtype=torch.int32)
    h = torch.zeros(9, dtype=torch.int32)
    ck = hist[(4,)](x, h, 100, BLOCK=32, sanitize=True)
    assert ck.sanitizer_report.ok
    assert torch.equal(h[:8], torch.bincount(x, minlength=8).to(torch.int32)) and h[8].item() == 99
    assert set(np.unique(ck.sanitizer_report.maps["h_ptr"].atomic).tolist()) <= {0, 1, 2, 3}


def test_plain_store_against_atomics_is_a_race():
    @kl.jit
    def split_k(out_ptr):
        if tl.program_id(0) == 0:
            tl.store(out_ptr, 1.0)
        else:
            tl.atomic_add(out_ptr, 1.0)

    with pytest.raises(SanitizerError) as ei:
        split_k[(3,)](torch.zeros(1), sanitize=True)
    (f,) = ei.value.report.findings
    assert f.detail == "atomic-plain" and f.first.op == "tl.store" and f.second.op == "tl.atomic_add"


def test_lock_protected_accumulation_is_ordered():
    """Triton's layer-norm backward pattern: a spin lock (atomic_cas / atomic_xchg) guards plain loads and stores
    of a shared partial sum; the atomics order the programs, so nothing is reported."""
    @kl.jit
    def locked_sum(x_ptr, acc_ptr, lock_ptr, count_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + tl.program_id(0) * BLOCK + r)
        while tl.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
        count = tl.load(count_ptr)
        if count == 0:
            tl.atomic_xchg(count_ptr, 1)
        else:
            v += tl.load(acc_ptr + r)
        tl.store(acc_ptr + r, v)
        tl.atomic_xchg(lock_ptr, 0)

    x = torch.randn(5, 8, generator=gen(6))
    acc = torch.full((8,), float("nan"))
    lock, count = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    ck = locked_sum[(5,)](x, acc, lock, count, BLOCK=8, sanitize=True)
    assert ck.sanitizer_report.ok, ck.sanitizer_report
    torch.testing.assert_close(acc, x.sum(0))


def test_last_program_reduces_after_a_counter():
    """Each program writes its partial sum, then takes a ticket; the program with the last ticket reads all the
    partials: ordered by the counter (its acq_rel atomics), so nothing is reported."""
    @kl.jit
    def two_pass(x_ptr, part_ptr, count_ptr, out_ptr, NPROG: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        tl.store(part_ptr + pid, tl.sum(tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))))
        ticket = tl.atomic_add(count_ptr, 1)
        if ticket == NPROG - 1:
            tl.store(out_ptr, tl.sum(tl.load(part_ptr + tl.arange(0, NPROG))))

    x = torch.randn(4 * 16, generator=gen(8))
    out, part = torch.zeros(1), kl.empty(4)
    ck = two_pass[(4,)](x, part, torch.zeros(1, dtype=torch.int32), out, NPROG=4, BLOCK=16, sanitize=True)
    assert ck.sanitizer_report.ok, ck.sanitizer_report
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)


def test_an_atomic_orders_only_what_came_before_it():
    @kl.jit
    def counted(count_ptr, out_ptr):
        tl.atomic_add(count_ptr, 1)
        tl.store(out_ptr, tl.program_id(0).to(tl.float32))  # after the release: still a race

    with pytest.raises(SanitizerError) as ei:
        counted[(3,)](torch.zeros(1, dtype=torch.int32), torch.zeros(1), sanitize=True)
    (f,) = ei.value.report.findings
    assert f.detail == "write-write" and f.count == 2


def test_relaxed_atomics_do_not_order():
    @kl.jit
    def flag_pass(data_ptr, flag_ptr):
        pid = tl.program_id(0)
        if pid == 0:
            tl.store(data_ptr, 5.0)
            tl.atomic_xchg(flag_ptr, 1, sem="relaxed")
        else:
            tl.atomic_add(flag_ptr, 0, sem="relaxed")
            tl.store(data_ptr + 1, tl.load(data_ptr))

    with pytest.raises(SanitizerError, match="read-after-write"):
        flag_pass[(2,)](torch.zeros(2), torch.zeros(1, dtype=torch.int32), sanitize=True)
    # with the default acq_rel semantics the flag orders program 1 after program 0
    ordered = kl.JITFunction(flag_pass.fn)
    ordered._unsafe_update_src(flag_pass.src.replace(', sem="relaxed"', ""))
    ordered[(2,)](torch.zeros(2), torch.zeros(1, dtype=torch.int32), sanitize=True)


# ------------------------------------------------------------------ sanitize: duplicate stores
def test_duplicate_lane_stores():
    @kl.jit
    def collide(out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(out_ptr + r // 2, r.to(tl.float32))  # lanes 2k and 2k+1 store different values to out[k]

    out = torch.zeros(4)
    with pytest.raises(SanitizerError) as ei:
        collide[(1,)](out, BLOCK=8, sanitize=True)
    (f,) = ei.value.report.findings
    assert f.kind == "duplicate-store" and f.element_offset == 0 and f.count == 4
    assert f.first.lane == (0,) and f.second.lane == (1,) and f.first.program == f.second.program == (0, 0, 0)
    assert "duplicate store" in str(ei.value) and "kernel 'collide'" in str(ei.value)

    @kl.jit
    def same_value(out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(out_ptr + r // 2, (r // 2).to(tl.float32))  # duplicates agree: not reported

    assert same_value[(1,)](out, BLOCK=8, sanitize=True).sanitizer_report.ok


# ------------------------------------------------------------------ sanitize: uninitialized reads
def test_uninitialized_reads():
    @kl.jit
    def partial_then_sum(buf_ptr, out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.store(buf_ptr + r, r.to(tl.float32), mask=r < BLOCK - 2)  # the last two elements stay unwritten
        tl.store(out_ptr, tl.sum(tl.load(buf_ptr + r)))

    buf = kl.empty(8)
    assert torch.isnan(buf).all()  # the poison is NaN for floats
    out = torch.zeros(1)
    with pytest.raises(SanitizerError) as ei:
        partial_then_sum[(1,)](buf, out, BLOCK=8, sanitize=True)
    (f,) = ei.value.report.findings
    assert f.kind == "uninitialized-read" and f.element_offset == 6 and f.count == 2 and f.first is None
    assert f.second.lane == (6,) and "uninitialized read" in str(ei.value)
    # once written (by a kernel or by torch), the memory is initialized
    buf[6:] = 1.0
    assert partial_then_sum[(1,)](buf, out, BLOCK=8, sanitize=True).sanitizer_report.ok

    # accumulating atomically into empty memory is the classic one
    @kl.jit
    def accumulate(x_ptr, out_ptr, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)
        tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + tl.program_id(0) * BLOCK + r)))

    acc = kl.uninitialized(torch.empty(1, dtype=torch.int32))
    with pytest.raises(SanitizerError, match="uninitialized read"):
        accumulate[(2,)](torch.ones(8, dtype=torch.int32), acc, BLOCK=4, sanitize=True)
    acc.zero_()
    accumulate[(2,)](torch.ones(8, dtype=torch.int32), acc, BLOCK=4, sanitize=True)
    assert acc.item() == 8
    # marking a stepped view marks its elements only
    big = torch.zeros(2, 8)
    kl.uninitialized(big[:, ::2])
    assert torch.isnan(big[:, ::2]).all() and big[:, 1::2].eq(0).all()

    @kl.jit
    def odd_columns(x_ptr, out_ptr):
        r = tl.arange(0, 8)
        tl.store(out_ptr + r, tl.load(x_ptr + (r // 4) * 8 + (r % 4) * 2 + 1))

    out8 = torch.full((8,), float("nan"))
    assert odd_columns[(1,)](big, out8, sanitize=True).sanitizer_report.ok and out8.eq(0).all()
    # a plain torch.empty is not checked (its memory cannot be told from written memory)
    plain = torch.empty(8)
    partial_then_sum[(1,)](plain, out, BLOCK=8, sanitize=True)


# ------------------------------------------------------------------ correct kernels report nothing
@kl.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@kl.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=m)


def test_correct_kernels_report_nothing():
    g = gen(7)
    a, b = torch.randn(40, 24, generator=g), torch.randn(24, 36, generator=g)
    bt = torch.randn(36, 24, generator=g).t()  # a transposed operand
    c = kl.empty(40, 36)
    ck = matmul_kernel[(3, 3)](a, bt, c, 40, 36, 24, *a.stride(), *bt.stride(), *c.stride(), BM=16, BN=16, BK=16,
                               sanitize=True)
    rep = ck.sanitizer_report
    assert rep.ok, rep
    torch.testing.assert_close(c, a @ bt, rtol=1e-4, atol=1e-4)
    assert (rep.maps["c_ptr"].writer >= 0).all()  # every element of c written, by exactly one program
    assert rep.maps["c_ptr"].writer[0] == 0 and rep.maps["c_ptr"].writer[-1] == 8
    x = torch.randn(10, 50, generator=g)
    y = kl.empty(10, 50)
    ck = softmax_kernel[(10,)](x, y, 50, 50, BLOCK=64, sanitize=True)
    assert ck.sanitizer_report.ok
    torch.testing.assert_close(y, torch.softmax(x.double(), 1).float(), rtol=1e-5, atol=1e-6)
    del b


def test_warn_mode_and_jit_option():
    out = torch.zeros(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", InterpreterNotice)
        ck = all_to_zero[(2,)](out, sanitize="warn")
    assert [w.category for w in caught] == [kl.SanitizerWarning]
    assert "race (write-write)" in str(caught[0].message)
    assert len(ck.sanitizer_report.findings) == 1

    @kl.jit(sanitize=True)
    def racy(out_ptr):
        tl.store(out_ptr, tl.program_id(0).to(tl.float32))

    with pytest.raises(SanitizerError):
        racy[(2,)](out)
    racy[(2,)](out, sanitize=False)
    with pytest.raises(LaunchError, match="sanitize must be"):
        all_to_zero[(2,)](out, sanitize="yes")


@pytest.mark.gpu
def test_sanitize_needs_cpu_tensors():
    out = torch.zeros(4, device="cuda")
    with pytest.raises(LaunchError, match="sanitize runs on the CPU interpreter"):
        all_to_zero[(4,)](out, sanitize=True)


def test_sanitize_uses_the_same_bounds():
    base = torch.zeros(10)
    with pytest.raises(InterpreterError, match="writes out of bounds: element offset 3 of argument 'y_ptr'"):
        copy_kernel[(1,)](torch.ones(4), base[2:5], 0, 4, BLOCK=4, sanitize=True)
