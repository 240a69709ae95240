"""Codegen infrastructure below the IR lowering: LLVM IR -> PTX -> cubin, libdevice, the disk cache, argument
packing and (with a GPU) loading and launching through the CUDA driver."""
from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import llvmlite.ir as ir
import pytest

from kernellab.compiler.codegen import libdevice as libdevice_mod
from kernellab.compiler.codegen import ptx_to_cubin as ptx_mod
from kernellab.compiler.codegen.libdevice import find_libdevice
from kernellab.compiler.codegen.llvm_to_ptx import compile_llvm, llvm_to_ptx
from kernellab.compiler.codegen.ptx_to_cubin import find_ptxas, parse_ptxas_report, ptx_to_cubin
from kernellab.compiler.codegen.target import Target
from kernellab.errors import KernelCrashError, KernelLabError, LaunchError, ToolchainError
from kernellab.runtime.cache import DiskCache, cache_key
from kernellab.runtime.driver import ArgPacker, LoadedKernel

REPO = Path(__file__).resolve().parent.parent
F32 = ir.FloatType()
I32 = ir.IntType(32)
GPTR = ir.PointerType(addrspace=1)


# ---------------------------------------------------------------------------------------------------------
# kernels built with llvmlite.ir (what the lowering will hand us)


def _sreg(module: ir.Module, name: str) -> ir.Function:
    full = f"llvm.nvvm.read.ptx.sreg.{name}"
    return module.globals.get(full) or ir.Function(module, ir.FunctionType(I32, []), full)


def vadd_ir(name: str = "vadd", unary: str | None = None) -> str:
    """out[i] = x[i] + y[i] for i < n (or out[i] = unary(x[i]) with a declared function ``unary``);
    i = ctaid.x * ntid.x + tid.x."""
    m = ir.Module(name="vadd_module")
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [GPTR, GPTR, GPTR, I32]), name)
    fn.calling_convention = "ptx_kernel"
    x, y, out, n = fn.args
    entry, body, done = fn.append_basic_block("entry"), fn.append_basic_block("body"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    idx = b.add(b.mul(b.call(_sreg(m, "ctaid.x"), []), b.call(_sreg(m, "ntid.x"), [])),
                b.call(_sreg(m, "tid.x"), []))
    b.cbranch(b.icmp_signed("<", idx, n), body, done)
    b.position_at_end(body)
    xv = b.load(b.gep(x, [idx], source_etype=F32), typ=F32)
    if unary is None:
        val = b.fadd(xv, b.load(b.gep(y, [idx], source_etype=F32), typ=F32))
    else:
        val = b.call(ir.Function(m, ir.FunctionType(F32, [F32]), unary), [xv])
    b.store(val, b.gep(out, [idx], source_etype=F32))
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return str(m)


def shared_ir() -> str:
    """A kernel with 1 KiB of static shared memory: out[t] = x[(t + 1) % 256] through shared memory."""
    m = ir.Module(name="shared_module")
    arr = ir.ArrayType(F32, 256)
    sh = ir.GlobalVariable(m, arr, "tile", addrspace=3)
    sh.linkage = "internal"
    sh.initializer = ir.Constant(arr, None)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [GPTR, GPTR]), "rotate")
    fn.calling_convention = "ptx_kernel"
    x, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    t = b.call(_sreg(m, "tid.x"), [])
    b.store(b.load(b.gep(x, [t], source_etype=F32), typ=F32), b.gep(sh, [ir.Constant(I32, 0), t]))
    b.call(ir.Function(m, ir.FunctionType(ir.VoidType(), []), "llvm.nvvm.barrier0"), [])
    t1 = b.urem(b.add(t, ir.Constant(I32, 1)), ir.Constant(I32, 256))
    b.store(b.load(b.gep(sh, [ir.Constant(I32, 0), t1])), b.gep(out, [t], source_etype=F32))
    b.ret_void()
    return str(m)


def _ptxas_or_skip() -> str:
    try:
        return find_ptxas()
    except ToolchainError as e:
        pytest.skip(f"no ptxas on this machine: {e}")


def _libdevice_or_skip() -> str:
    try:
        return find_libdevice()
    except ToolchainError as e:
        pytest.skip(f"no libdevice on this machine: {e}")


# ---------------------------------------------------------------------------------------------------------
# (a) target, LLVM -> PTX -> cubin


def test_target_names():
    assert Target(90).cpu == "sm_90a" and Target(80).cpu == "sm_80"
    assert Target(90, arch_specific=False).cpu == "sm_90"
    assert Target(90).triple == "nvptx64-nvidia-cuda"
    assert Target(90).features == "+ptx81" and Target(80).ptx_version == 80  # sm_90a: vector atomics
    assert Target.from_capability((8, 6)).arch == 86
    assert Target(90) == Target(90, ptx_version=81)  # the default is resolved, so equal targets compare equal
    with pytest.raises(ValueError):
        Target(90, ptx_version=70)  # sm_90a needs PTX 8.0


@pytest.mark.parametrize("arch", [80, 90])
def test_vadd_to_ptx_and_cubin(arch):
    target = Target(arch)
    ptx = llvm_to_ptx(vadd_ir(), target, "vadd")
    assert f".target {target.cpu}" in ptx
    assert (".version 8.1" if arch == 90 else ".version 8.0") in ptx
    assert ".entry vadd(" in ptx
    assert "%ctaid.x" in ptx and "%tid.x" in ptx and "add.rn.f32" in ptx
    _ptxas_or_skip()
    cubin, report = ptx_to_cubin(ptx, target, "vadd")
    assert cubin[:4] == b"\x7fELF"
    assert report["compiler"] == "ptxas"
    assert report["n_regs"] > 0
    assert report["n_spills"] == 0 and report["local"] == 0 and report["shared"] == 0
    assert "vadd" in report["log"]


def test_static_shared_memory_reported():
    _ptxas_or_skip()
    ptx = llvm_to_ptx(shared_ir(), Target(90), "rotate")
    assert ".shared" in ptx and "bar.sync" in ptx
    _, report = ptx_to_cubin(ptx, Target(90), "rotate")
    assert report["shared"] == 256 * 4
    assert report["n_barriers"] == 1


def test_parse_ptxas_report_picks_the_named_entry():
    log = textwrap.dedent("""\
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function 'other' for 'sm_80'
        ptxas info    : Function properties for other
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 4 registers, used 0 barriers, 360 bytes cmem[0]
        ptxas info    : Compiling entry function 'k' for 'sm_80'
        ptxas info    : Function properties for helper
            8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Function properties for k
            256 bytes stack frame, 40 bytes spill stores, 24 bytes spill loads
        ptxas info    : Used 255 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem, 364 bytes cmem[0]
        ptxas info    : Compile time = 1.164 ms
        """)
    r = parse_ptxas_report(log, "k")
    assert (r["n_regs"], r["n_spills"], r["spill_stores"], r["spill_loads"]) == (255, 64, 40, 24)
    assert (r["local"], r["shared"], r["n_barriers"], r["const"]) == (256, 1024, 1, 364)
    assert parse_ptxas_report(log, "missing")["n_regs"] is None


def test_ptxas_failure_names_kernel_and_shows_log():
    _ptxas_or_skip()
    bad = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken() { bogus.instruction; }\n"
    with pytest.raises(ToolchainError) as info:
        ptx_to_cubin(bad, Target(80), "broken")
    text = str(info.value)
    assert "broken" in text and "ptxas" in text and "compiled.asm['ptx']" in text
    assert "bogus" in text  # ptxas' own message is in the log we show


def test_find_ptxas_search_order(tmp_path, monkeypatch):
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KERNELLAB_PTXAS", str(fake))
    assert find_ptxas() == str(fake)
    monkeypatch.setenv("KERNELLAB_PTXAS", str(tmp_path / "nope"))
    with pytest.raises(ToolchainError, match="KERNELLAB_PTXAS"):
        find_ptxas()
    monkeypatch.delenv("KERNELLAB_PTXAS")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(ptx_mod, "ptxas_candidates", lambda: [tmp_path / "cuda" / "bin" / "ptxas"])
    with pytest.raises(ToolchainError) as info:
        find_ptxas()
    assert str(tmp_path / "cuda" / "bin" / "ptxas") in str(info.value)
    assert "nvidia-cuda-nvcc" in str(info.value)


def test_nvjitlink_fallback():
    """PTX -> cubin in process when there is no ptxas (skipped where libnvJitLink is missing)."""
    ptx = llvm_to_ptx(vadd_ir(), Target(90), "vadd")
    try:
        cubin, report = ptx_mod.ptx_to_cubin_nvjitlink(ptx, Target(90), "vadd")
    except ToolchainError as e:
        pytest.skip(f"nvJitLink unusable here: {e}")
    assert cubin[:4] == b"\x7fELF"
    assert report["compiler"] == "nvjitlink"
    print("nvJitLink report:", {k: v for k, v in report.items() if k != "log"}, "log:", report["log"][:500])
    with pytest.raises(ToolchainError, match="nvJitLink"):
        ptx_mod.ptx_to_cubin_nvjitlink(ptx.replace("ret;", "bogus.op;"), Target(90), "vadd")


def test_ptx_to_cubin_falls_back_to_nvjitlink(monkeypatch):
    monkeypatch.delenv("KERNELLAB_PTXAS", raising=False)
    monkeypatch.setattr(ptx_mod, "find_ptxas", lambda: (_ for _ in ()).throw(ToolchainError("no ptxas here")))
    seen = {}

    def fake_nvjitlink(ptx, target, kernel_name, options=()):
        seen.update(kernel=kernel_name, options=list(options))
        return b"CUBIN", {"compiler": "nvjitlink"}

    monkeypatch.setattr(ptx_mod, "ptx_to_cubin_nvjitlink", fake_nvjitlink)
    assert ptx_to_cubin("ptx", Target(80), "k", ["--maxrregcount=64"]) == (b"CUBIN", {"compiler": "nvjitlink"})
    assert seen == {"kernel": "k", "options": ["-Xptxas=--maxrregcount=64"]}


# ---------------------------------------------------------------------------------------------------------
# (b), (c) libdevice linking and unresolved calls


def test_libdevice_expf_is_linked_and_resolved():
    _libdevice_or_skip()
    result = compile_llvm(vadd_ir("vexp", unary="__nv_expf"), Target(90), "vexp")
    assert result.linked_libdevice is not None
    assert "__nv_expf" not in result.ptx and "__nvvm_reflect" not in result.ptx
    assert ".extern" not in result.ptx and "call" not in result.ptx  # inlined, nothing left to link
    assert "ex2.approx" in result.ptx  # libdevice's expf body
    assert "__nv_" not in result.optimized_ir.split("!llvm.ident")[0]  # unused libdevice functions dropped
    _ptxas_or_skip()
    _, report = ptx_to_cubin(result.ptx, Target(90), "vexp")
    assert report["n_regs"] > 0


def test_nvvm_reflect_ftz_flag_and_precise_sqrt():
    _libdevice_or_skip()
    ieee = llvm_to_ptx(vadd_ir("vsqrt", unary="__nv_sqrtf"), Target(80), "vsqrt")
    ftz = llvm_to_ptx(vadd_ir("vsqrt", unary="__nv_sqrtf"), Target(80), "vsqrt", ftz=True)
    assert "sqrt.rn.f32" in ieee and ".ftz" not in ieee
    assert "sqrt.rn.ftz.f32" in ftz


def test_no_libdevice_needed_without_nv_calls(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_LIBDEVICE", str(tmp_path / "missing.bc"))  # would raise if looked up
    result = compile_llvm(vadd_ir(), Target(80), "vadd")
    assert result.linked_libdevice is None


def test_unknown_nvvm_intrinsic_raises():
    src = vadd_ir("madeup", unary="llvm.nvvm.made.up")
    with pytest.raises(ToolchainError) as info:
        llvm_to_ptx(src, Target(90), "madeup")
    text = str(info.value)
    assert "madeup" in text and "llvm.nvvm.made.up" in text and "inline PTX" in text


def test_unknown_libdevice_function_raises():
    _libdevice_or_skip()
    with pytest.raises(ToolchainError, match="__nv_not_a_function"):
        llvm_to_ptx(vadd_ir("k", unary="__nv_not_a_function"), Target(90), "k")


def test_bad_ir_and_missing_kernel_raise():
    with pytest.raises(ToolchainError, match="LLVM rejected"):
        llvm_to_ptx("define void @f( {", Target(80), "f")
    with pytest.raises(ToolchainError, match="no '.entry other'"):
        llvm_to_ptx(vadd_ir(), Target(80), "other")


# ---------------------------------------------------------------------------------------------------------
# (d) finding libdevice


def test_find_libdevice_env_override(tmp_path, monkeypatch):
    bc = tmp_path / "libdevice.10.bc"
    bc.write_bytes(b"BC")
    monkeypatch.setenv("KERNELLAB_LIBDEVICE", str(bc))
    assert find_libdevice() == str(bc)
    monkeypatch.setenv("KERNELLAB_LIBDEVICE", str(tmp_path))  # a directory holding it works too
    assert find_libdevice() == str(bc)
    monkeypatch.setenv("KERNELLAB_LIBDEVICE", str(tmp_path / "nope.bc"))
    with pytest.raises(ToolchainError, match="KERNELLAB_LIBDEVICE"):
        find_libdevice()


def test_find_libdevice_cuda_home_and_ptxas_symlink(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELLAB_LIBDEVICE", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    home = tmp_path / "cuda-home"
    (home / "nvvm" / "libdevice").mkdir(parents=True)
    (home / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert find_libdevice() == str(home / "nvvm" / "libdevice" / "libdevice.10.bc")
    # ptxas on PATH is a symlink into a toolkit: its ../nvvm/libdevice is found
    monkeypatch.delenv("CUDA_HOME")
    kit = tmp_path / "toolkit"
    (kit / "bin").mkdir(parents=True)
    (kit / "nvvm" / "libdevice").mkdir(parents=True)
    (kit / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    (kit / "bin" / "ptxas").write_text("#!/bin/sh\n")
    (kit / "bin" / "ptxas").chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ptxas").symlink_to(kit / "bin" / "ptxas")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    dirs = libdevice_mod.candidate_dirs()
    assert dirs[0] == kit / "nvvm" / "libdevice"
    assert dirs.index(kit / "nvvm" / "libdevice") < dirs.index(Path("/usr/local/cuda/nvvm/libdevice"))
    assert find_libdevice() == str(kit / "nvvm" / "libdevice" / "libdevice.10.bc")


def test_find_libdevice_error_lists_places_and_fixes(tmp_path, monkeypatch):
    monkeypatch.delenv("KERNELLAB_LIBDEVICE", raising=False)
    places = [tmp_path / "a" / "nvvm" / "libdevice", tmp_path / "b"]
    monkeypatch.setattr(libdevice_mod, "candidate_dirs", lambda: places)
    with pytest.raises(ToolchainError) as info:
        find_libdevice()
    text = str(info.value)
    assert all(str(p) in text for p in places)
    assert "CUDA toolkit" in text and "pip install nvidia-cuda-nvcc" in text and "KERNELLAB_LIBDEVICE" in text
    assert isinstance(info.value, KernelLabError)


def test_linking_uses_the_libdevice_found(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_LIBDEVICE", str(tmp_path / "missing.bc"))
    with pytest.raises(ToolchainError, match="KERNELLAB_LIBDEVICE"):
        llvm_to_ptx(vadd_ir("vexp", unary="__nv_expf"), Target(80), "vexp")


# ---------------------------------------------------------------------------------------------------------
# (e) the disk cache


def test_cache_round_trip(tmp_path):
    cache = DiskCache(tmp_path)
    key = cache_key("vadd", Target(90), {"num_warps": 4}, b"\x00\x01")
    assert cache.get(key) is None
    files = {"kernel.ptx": b".version 8.0", "kernel.cubin": bytes(range(256)) * 10, "empty.txt": b""}
    cache.put(key, files)
    assert cache.get(key) == files
    assert DiskCache(tmp_path).get(key) == files  # another instance (process) sees it
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / "c"))
    assert DiskCache().root == tmp_path / "c"
    monkeypatch.delenv("KERNELLAB_CACHE_DIR")
    assert DiskCache().root == Path.home() / ".cache" / "kernellab"


def test_cache_key_is_stable_and_unambiguous():
    assert cache_key("a", 1, (2, 3)) == cache_key("a", 1, (2, 3))
    assert cache_key("ab") != cache_key("a", "b")
    assert cache_key("1") != cache_key(1)
    assert cache_key(b"x") != cache_key("x")
    assert len(cache_key()) == 64


def test_cache_rejects_bad_keys_and_names(tmp_path):
    cache = DiskCache(tmp_path)
    with pytest.raises(ValueError):
        cache.put("../escape", {"a": b""})
    with pytest.raises(ValueError):
        cache.put("k", {"sub/file": b""})
    with pytest.raises(ValueError):
        cache.put("k", {"manifest.json": b""})


def test_cache_concurrent_writers_and_readers(tmp_path):
    cache = DiskCache(tmp_path)
    payloads = {f"k{i}": {"a.bin": os.urandom(50_000), "b.txt": f"entry {i}".encode()} for i in range(20)}
    keys = [cache_key(k) for k in payloads]
    barrier = threading.Barrier(4)
    bad: list[str] = []

    def writer():
        barrier.wait()
        for key, files in zip(keys, payloads.values()):
            DiskCache(tmp_path).put(key, files)

    def reader():
        barrier.wait()
        for _ in range(5):
            for key, files in zip(keys, payloads.values()):
                got = DiskCache(tmp_path).get(key)
                if got is not None and got != files:
                    bad.append(key)

    threads = [threading.Thread(target=writer), threading.Thread(target=writer),
               threading.Thread(target=reader), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad  # a reader sees an entry whole or not at all
    for key, files in zip(keys, payloads.values()):
        assert cache.get(key) == files
    assert cache.corrupt_entries_removed == 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["flip_byte", "delete_file", "truncate", "bad_manifest", "no_manifest"])
def test_cache_detects_and_removes_corrupt_entries(tmp_path, damage):
    cache = DiskCache(tmp_path)
    key = cache_key("corrupt", damage)
    files = {"kernel.cubin": b"\x7fELF" + bytes(1000), "kernel.ptx": b"ptx text"}
    cache.put(key, files)
    entry = cache.path_for(key)
    cubin = entry / "kernel.cubin"
    if damage == "flip_byte":
        data = bytearray(cubin.read_bytes())
        data[100] ^= 0xFF
        cubin.write_bytes(bytes(data))
    elif damage == "delete_file":
        cubin.unlink()
    elif damage == "truncate":
        cubin.write_bytes(b"\x7fELF")
    elif damage == "bad_manifest":
        (entry / "manifest.json").write_text("{not json")
    else:
        (entry / "manifest.json").unlink()
    assert cache.get(key) is None
    assert not entry.exists()
    assert cache.corrupt_entries_removed == 1
    cache.put(key, files)  # the slot is usable again
    assert cache.get(key) == files


def test_cache_put_replaces_a_corrupt_entry(tmp_path):
    cache = DiskCache(tmp_path)
    key = cache_key("replace")
    cache.put(key, {"a": b"old"})
    (cache.path_for(key) / "a").write_bytes(b"bad")
    cache.put(key, {"a": b"new"})
    assert cache.get(key) == {"a": b"new"}


# ---------------------------------------------------------------------------------------------------------
# (f) argument packing and launch checks, without a GPU


def _slot(fmt: str, value) -> bytes:
    raw = struct.pack("<" + fmt, value)
    return raw + bytes(8 - len(raw))


class FakeTensor:
    def __init__(self, ptr: int, is_cuda: bool = True):
        self._ptr, self.is_cuda, self.device = ptr, is_cuda, "cuda:0" if is_cuda else "cpu"

    def data_ptr(self) -> int:
        return self._ptr


def test_packer_bytes_for_every_kind():
    cases = [
        ("ptr", 0x7F00_1234_5678, _slot("Q", 0x7F00_1234_5678)),
        ("ptr", FakeTensor(0xDEAD_BEEF_0000), _slot("Q", 0xDEAD_BEEF_0000)),
        ("ptr", None, bytes(8)),
        ("i1", True, b"\x01" + bytes(7)),
        ("i8", -2, b"\xfe" + bytes(7)),
        ("u8", 255, b"\xff" + bytes(7)),
        ("i16", -300, _slot("h", -300)),
        ("u16", 65535, _slot("H", 65535)),
        ("i32", -5, b"\xfb\xff\xff\xff" + bytes(4)),
        ("u32", 2**32 - 1, b"\xff\xff\xff\xff" + bytes(4)),
        ("i64", -(2**40), _slot("q", -(2**40))),
        ("u64", 2**64 - 1, b"\xff" * 8),
        ("f16", 1.5, b"\x00\x3e" + bytes(6)),
        ("bf16", 1.0, b"\x80\x3f" + bytes(6)),
        ("bf16", -2.5, b"\x20\xc0" + bytes(6)),
        ("f32", 0.1, _slot("f", 0.1)),
        ("f64", math.pi, _slot("d", math.pi)),
    ]
    packer = ArgPacker([kind for kind, _, _ in cases])
    packer.pack([value for _, value, _ in cases])
    raw = packer.as_bytes()
    for i, (kind, value, expected) in enumerate(cases):
        assert raw[8 * i: 8 * i + 8] == expected, (i, kind, value)
    # the void*[] array points at the slots, and packing again overwrites in place
    import ctypes

    base = ctypes.addressof(packer.storage)
    assert [packer.params[i] for i in range(len(cases))] == [base + 8 * i for i in range(len(cases))]
    assert ctypes.cast(packer.params_address, ctypes.POINTER(ctypes.c_void_p))[3] == base + 24
    cases[8] = ("i32", 7, _slot("i", 7))
    packer.pack([value for _, value, _ in cases])
    assert packer.as_bytes()[64:72] == _slot("i", 7)


def test_bf16_rounding():
    def bits(x):
        p = ArgPacker(["bf16"])
        p.pack([x])
        return struct.unpack("<H", p.as_bytes()[:2])[0]

    assert bits(1.00390625) == 0x3F80  # a tie rounds to even (down)
    assert bits(1.01171875) == 0x3F82  # a tie rounds to even (up)
    assert bits(1.0 + 2**-7 + 2**-12) == 0x3F81  # above the tie rounds up
    assert bits(float("inf")) == 0x7F80
    assert (bits(float("nan")) & 0x7F80) == 0x7F80 and (bits(float("nan")) & 0x7F) != 0


def test_packer_signature_aliases_and_errors():
    assert ArgPacker(["*fp32", "fp32", "i32"]).signature == ("ptr", "f32", "i32")
    with pytest.raises(LaunchError, match="unknown kernel argument kind"):
        ArgPacker(["complex64"])
    empty = ArgPacker([])
    empty.pack([])
    with pytest.raises(ValueError):
        empty.pack([1])


PROPS = {"max_grid_dims": (2**31 - 1, 65535, 65535), "max_threads_per_block": 1024, "warp_size": 32,
         "max_shared_per_block_optin": 232448, "max_shared_per_block": 49152}


def _fake_kernel(signature, attributes=None):
    calls = []

    def fake_launch(*args):
        calls.append(args)
        return (0,)

    k = LoadedKernel("vadd", "FUNCTION", signature, device_index=0, props=PROPS,
                     attributes=attributes or {"static_shared_bytes": 1024, "max_threads_per_block": 1024,
                                               "n_regs": 32},
                     launch_fn=fake_launch, dynamic_shared_limit=48 * 1024)
    return k, calls


def test_launch_passes_packed_params_to_the_driver():
    k, calls = _fake_kernel(["ptr", "ptr", "ptr", "i32"])
    k.launch((7,), 4, 0, 1234, [FakeTensor(16), FakeTensor(32), 48, 1000])
    assert calls == [("FUNCTION", 7, 1, 1, 128, 1, 1, 0, 1234, k.packer.params_address, 0)]
    assert k.packer.as_bytes() == _slot("Q", 16) + _slot("Q", 32) + _slot("Q", 48) + _slot("i", 1000)
    k.launch((3, 2, 5), 8, 100, 0, [1, 2, 3, 4])
    assert calls[-1][1:9] == (3, 2, 5, 256, 1, 1, 100, 0)


def test_launch_rejects_before_launching():
    k, calls = _fake_kernel(["ptr", "i32"])
    with pytest.raises(LaunchError, match=r"grid dimension 1 is 70000, over the device limit of 65535"):
        k.launch((1, 70000), 4, 0, 0, [0, 1])
    with pytest.raises(LaunchError, match=r"232524 bytes .* the device allows 232448"):
        k.launch((1,), 4, 231500, 0, [0, 1])  # 231500 dynamic + 1024 static > 232448 opt-in
    with pytest.raises(LaunchError, match="num_warps=64"):
        k.launch((1,), 64, 0, 0, [0, 1])
    with pytest.raises(LaunchError, match="takes 2 arguments"):
        k.launch((1,), 4, 0, 0, [0])
    with pytest.raises(LaunchError, match=r"argument 1 = 4294967296 does not fit kind 'i32'"):
        k.launch((1,), 4, 0, 0, [0, 2**32])
    with pytest.raises(LaunchError, match="argument 0 is a tensor on cpu"):
        k.launch((1,), 4, 0, 0, [FakeTensor(8, is_cuda=False), 1])
    with pytest.raises(LaunchError, match="grid dimension 0 is negative"):
        k.launch((-1,), 4, 0, 0, [0, 1])
    with pytest.raises(LaunchError):
        k.launch((), 4, 0, 0, [0, 1])
    assert calls == []
    k.launch((0, 4), 4, 0, 0, [0, 1])  # an empty grid launches nothing
    assert calls == []
    k.launch((1,), 4, 100_000, 0, [0, 1])  # within the opt-in limit: fine
    assert calls[-1][7] == 100_000


def test_launches_from_several_threads_do_not_share_argument_storage():
    import ctypes

    seen_wrong = []

    def fake_launch(*a):
        params = ctypes.cast(a[9], ctypes.POINTER(ctypes.c_void_p))
        first = ctypes.cast(params[0], ctypes.POINTER(ctypes.c_uint64))[0]
        second = ctypes.cast(params[1], ctypes.POINTER(ctypes.c_int32))[0]
        if first != second:  # each thread launches with (v, v): a mix means another thread overwrote the slots
            seen_wrong.append((first, second))
        return (0,)

    k = LoadedKernel("t", "F", ["ptr", "i32"], device_index=0, props=PROPS, attributes={}, launch_fn=fake_launch)
    barrier = threading.Barrier(4)

    def work(v):
        barrier.wait()
        for _ in range(3000):
            k.launch((1,), 1, 0, 0, [v, v])

    threads = [threading.Thread(target=work, args=(v,)) for v in (11, 22, 33, 44)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not seen_wrong
    assert len(k._thread_packers) == 3  # the first launching thread uses k.packer


def test_packing_cost_is_small():
    """The Python work of a launch (checks + packing) with a no-op driver call, for 3 pointers and an int."""
    import time

    k, _ = _fake_kernel(["ptr", "ptr", "ptr", "i32"])
    k._launch_fn = lambda *a: (0,)
    args = [FakeTensor(16), FakeTensor(32), FakeTensor(48), 1000]
    n = 20000
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            k.launch((7,), 4, 0, 0, args)
        best = min(best, (time.perf_counter() - t0) / n)
    print(f"launch overhead without the driver: {best * 1e6:.2f} us")
    assert best < 20e-6  # a few microseconds normally; generous for loaded CI machines


# ---------------------------------------------------------------------------------------------------------
# (g) on a GPU: load, launch, compare with torch; a crash raises KernelCrashError

gpu = pytest.mark.gpu


@gpu
def test_device_props_match_torch():
    import torch

    from kernellab.compiler.codegen.target import detect_target
    from kernellab.runtime.driver import driver_available, get_device_props

    assert driver_available()
    props = get_device_props(torch.cuda.current_device())
    tp = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert props["cc"] == (tp.major, tp.minor)
    assert props["sm_count"] == tp.multi_processor_count
    assert props["warp_size"] == 32 and props["max_threads_per_block"] == 1024
    assert props["max_grid_dims"][0] == 2**31 - 1
    assert props["max_shared_per_block_optin"] >= props["max_shared_per_block"] == 48 * 1024
    assert detect_target() == Target.from_capability((tp.major, tp.minor))


def _gpu_cubin(ir_text: str, name: str):
    import torch

    _ptxas_or_skip()
    target = Target.from_capability(torch.cuda.get_device_capability())
    ptx = llvm_to_ptx(ir_text, target, name)
    cubin, report = ptx_to_cubin(ptx, target, name)
    return cubin, report


@gpu
@pytest.mark.parametrize("n", [1, 1000, 4096, 100_003])
def test_vadd_on_gpu_matches_torch(n):
    import torch

    from kernellab.runtime.driver import load_kernel

    cubin, report = _gpu_cubin(vadd_ir(), "vadd")
    kernel = load_kernel(cubin, "vadd", 0, ["ptr", "ptr", "ptr", "i32"])
    assert kernel.attributes["n_regs"] == report["n_regs"]
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.full((n + 64,), float("nan"), device="cuda")  # poisoned, with a tail that must stay untouched
    stream = torch.cuda.current_stream()
    block = 4 * 32
    kernel.launch(((n + block - 1) // block,), 4, 0, stream.cuda_stream, [x, y, out, n])
    stream.synchronize()
    torch.testing.assert_close(out[:n], x + y, rtol=0, atol=0)
    assert torch.isnan(out[n:]).all()


@gpu
def test_launch_on_a_side_stream_orders_with_torch():
    import torch

    from kernellab.runtime.driver import load_kernel

    cubin, _ = _gpu_cubin(vadd_ir(), "vadd")
    kernel = load_kernel(cubin, "vadd", 0, ["ptr", "ptr", "ptr", "i32"])
    n = 1 << 20
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.arange(n, device="cuda", dtype=torch.float32)
        y = x * 2  # queued on the side stream before our kernel
        out = torch.full_like(x, float("nan"))
        kernel.launch((n // 128,), 4, 0, torch.cuda.current_stream().cuda_stream, [x, y, out, n])
        z = out + 1  # queued after it
    side.synchronize()
    torch.testing.assert_close(z, 3 * x + 1)


@gpu
def test_dynamic_shared_memory_over_48k():
    import torch

    from kernellab.runtime.driver import get_device_props, load_kernel

    # out[t] = x[t] through an extern dynamic shared buffer, written at a byte offset above 48 KiB
    m = ir.Module(name="dyn")
    dyn = ir.GlobalVariable(m, ir.ArrayType(F32, 0), "dyn_smem", addrspace=3)
    dyn.linkage = "external"
    dyn.align = 16
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [GPTR, GPTR]), "dyncopy")
    fn.calling_convention = "ptx_kernel"
    x, out = fn.args
    b = ir.IRBuilder(fn.append_basic_block())
    t = b.call(_sreg(m, "tid.x"), [])
    slot = b.add(t, ir.Constant(I32, 16 * 1024))  # float index 16384 = byte 64 KiB
    b.store(b.load(b.gep(x, [t], source_etype=F32), typ=F32), b.gep(dyn, [ir.Constant(I32, 0), slot]))
    b.call(ir.Function(m, ir.FunctionType(ir.VoidType(), []), "llvm.nvvm.barrier0"), [])
    b.store(b.load(b.gep(dyn, [ir.Constant(I32, 0), slot])), b.gep(out, [t], source_etype=F32))
    b.ret_void()
    cubin, _ = _gpu_cubin(str(m), "dyncopy")
    shared = 64 * 1024 + 128 * 4
    assert shared <= get_device_props(torch.cuda.current_device())["max_shared_per_block_optin"]
    kernel = load_kernel(cubin, "dyncopy", shared, ["ptr", "ptr"])
    x = torch.randn(128, device="cuda")
    out = torch.full_like(x, float("nan"))
    kernel.launch((1,), 4, shared, torch.cuda.current_stream().cuda_stream, [x, out])
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    with pytest.raises(LaunchError, match="the device allows"):
        kernel.launch((1,), 4, 10 * 1024 * 1024, torch.cuda.current_stream().cuda_stream, [x, out])


_CRASH_SCRIPT = textwrap.dedent("""
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from test_codegen_infra import vadd_ir
    from kernellab.compiler.codegen.llvm_to_ptx import llvm_to_ptx
    from kernellab.compiler.codegen.ptx_to_cubin import ptx_to_cubin
    from kernellab.compiler.codegen.target import Target
    from kernellab.errors import KernelCrashError
    from kernellab.runtime import driver
    target = Target.from_capability(torch.cuda.get_device_capability())
    cubin, _ = ptx_to_cubin(llvm_to_ptx(vadd_ir(), target, "vadd"), target, "vadd")
    k = driver.load_kernel(cubin, "vadd", 0, ["ptr", "ptr", "ptr", "i32"])
    x = torch.ones(1 << 20, device="cuda")
    bad = 0x10  # not a device address: the first store faults
    try:
        k.launch((8192,), 4, 0, torch.cuda.current_stream().cuda_stream, [x, x, bad, 1 << 20])
        driver.synchronize()
    except KernelCrashError as e:
        print("CRASH:", e)
        sys.exit(0)
    print("NO ERROR")
    sys.exit(1)
""")


@gpu
def test_illegal_address_raises_kernel_crash_error_in_subprocess(tmp_path):
    """Run in a child process: a fault poisons the CUDA context of the process that launched it."""
    script = tmp_path / "crash.py"
    script.write_text(_CRASH_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(REPO), str(REPO / "tests")],
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "CRASH:" in out and "vadd" in out
    assert "restart the Python process" in out and "CUDA_ERROR_ILLEGAL_ADDRESS" in out
    assert KernelCrashError.__doc__  # the class users catch


@gpu
def test_launch_overhead_on_gpu():
    """Python-side cost of LoadedKernel.launch (checks + packing + cuLaunchKernel) with torch tensors."""
    import time

    import torch

    from kernellab.runtime.driver import load_kernel

    cubin, _ = _gpu_cubin(vadd_ir(), "vadd")
    kernel = load_kernel(cubin, "vadd", 0, ["ptr", "ptr", "ptr", "i32"])
    x, y, out = (torch.zeros(1024, device="cuda") for _ in range(3))
    s = torch.cuda.current_stream().cuda_stream
    args = [x, y, out, 1024]
    for _ in range(200):
        kernel.launch((8,), 4, 0, s, args)
    torch.cuda.synchronize()
    n = 5000
    best_launch = best_pack = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            kernel.launch((8,), 4, 0, s, args)
        best_launch = min(best_launch, (time.perf_counter() - t0) / n)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            kernel._pack(args)
        best_pack = min(best_pack, (time.perf_counter() - t0) / n)
    t0 = time.perf_counter()
    for _ in range(n):
        torch.add(x, y, out=out)
    torch_add = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    print(f"per launch: {best_launch * 1e6:.2f} us (packing {best_pack * 1e6:.2f} us); "
          f"torch.add(out=) {torch_add * 1e6:.2f} us")
    assert best_launch < 50e-6


@gpu
def test_launch_from_a_fresh_thread():
    """A thread torch never used has no current CUDA context: the launch makes the primary context current."""
    import torch

    from kernellab.runtime.driver import load_kernel

    cubin, _ = _gpu_cubin(vadd_ir(), "vadd")
    kernel = load_kernel(cubin, "vadd", 0, ["ptr", "ptr", "ptr", "i32"])
    x = torch.arange(256, device="cuda", dtype=torch.float32)
    out = torch.full_like(x, float("nan"))
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            kernel.launch((2,), 4, 0, 0, [x, x, out, 256])
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x)
