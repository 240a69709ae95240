"""The core every lower_*.py shares: GPU IR -> LLVM IR (llvmlite) for one kernel function.

A tensor value becomes, in each thread, a Python list of LLVM values: one per register of its
layout (see gpu/layouts.py for which element each register holds). Elementwise ops work register
by register; loads and stores move `vec` consecutive registers with one 4/8/16-byte access; layout
conversions, cross-warp reductions and dot operands go through the shared-memory scratch the
allocator placed (`smem_offset` on the op). Control flow becomes basic blocks with one phi per
register of every carried value.

Here: the LLVM types, `KernelLowering` (the function being built, value map, layout index math,
elementwise ops) and the table of op handlers that the lower_*.py modules fill with `@handles`.
`lower.py` is the entry that imports them all and lowers a kernel.
"""
from __future__ import annotations

import os
import struct

import llvmlite.ir as ir

from ..gpu.layouts import sliced_infos
from ..ir import Block, Function, Module, Op, Value
from ..ops import info as op_info
from ..ops import is_elementwise
from ..types import DType, PointerType, TensorType

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
GPTR, SPTR = ir.PointerType(addrspace=1), ir.PointerType(addrspace=3)
VOID = ir.VoidType()


def _bf16_bits(x: float) -> int:
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    if (b & 0x7F800000) == 0x7F800000 and b & 0x7FFFFF:
        return 0x7FC0
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


class BFloat16Type(ir.types._BaseFloatType):
    """llvmlite has no bfloat; LLVM IR spells its constants 0xR followed by 4 hex digits."""

    null = "0xR0000"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"

    def format_constant(self, value):
        return f"0xR{_bf16_bits(float(value)):04X}"


BFloat16Type._create_instance()
BF16 = BFloat16Type()


class LoweringError(Exception):
    """The GPU backend cannot lower this op yet (the message says which and where)."""


def llty(t) -> ir.Type:
    """LLVM type of a scalar IR type, as held in registers."""
    if isinstance(t, PointerType):
        return GPTR
    name = t.ir
    if name == "i1":
        return I1
    if name in ("f16",):
        return F16
    if name == "bf16":
        return BF16
    if name == "f32":
        return F32
    if name == "f64":
        return F64
    return ir.IntType(t.bits)


def memty(t) -> ir.Type:
    """LLVM type of a scalar as stored in memory (i1 is a byte)."""
    if not isinstance(t, PointerType) and t.ir == "i1":
        return I8
    return llty(t)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _log2(n: int) -> int:
    assert n > 0 and n & (n - 1) == 0, n
    return n.bit_length() - 1


def _is_float(t):
    return isinstance(t, DType) and t.is_floating()


def _cint(v, ty=I32):
    return ir.Constant(ty, v)


CONSUMER_BARRIER = 3  # the named barrier of a warp-specialized kernel's consumers (1 and 2 are warpgroup_turns')


def producer_warps(fn) -> int:
    """The warps a kernel launches beyond num_warps: its producer warpgroup, if it is warp-specialized
    (codegen/lower_warp_specialize.py)."""
    return max((int(op.attrs.get("producer_warps", 4)) for op in fn.walk() if op.name == "ttg.warp_specialize"),
               default=0)


class KernelLowering:
    def __init__(self, module: Module, options, arch: int = 90, tensormaps=None):
        """`tensormaps`: (the TMA tensor-map recipes, one kernel parameter each, and id(ttg.tensormap op) -> its
        parameter index), from lower_tma.tensormap_recipes."""
        self.ir_fn: Function = module.kernel
        self.opts = options
        self.arch = arch
        self.mod = ir.Module(name=self.ir_fn.name)
        self.mod.triple = "nvptx64-nvidia-cuda"
        self.mod.data_layout = "e-p3:32:32-p4:32:32-p5:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
        self.vals: dict[int, object] = {}
        self.decls: dict[str, ir.Function] = {}
        self.idx_cache: dict = {}
        self.strings: dict[str, ir.GlobalVariable] = {}
        self.arg_kinds: list[str] = []
        # warp specialization (lower_warp_specialize): the thread that issues one-thread operations (TMA, mbarrier
        # expects) and, once the producer warps have left, the consumers' thread count for their named barrier
        self.leader = 0
        self.consumer_threads = 0
        self._make_function(tensormaps)
        self.debug = DebugLines(self) if getattr(options, "line_info", True) else None

    # ------------------------------------------------------------------ setup
    def _make_function(self, tensormaps):
        params = []
        for a in self.ir_fn.args:
            t = a.type
            if isinstance(t, PointerType):
                params.append(GPTR)
                self.arg_kinds.append("ptr")
            elif t.ir == "i1":
                params.append(I32)
                self.arg_kinds.append("i32")
            elif t.is_floating():
                params.append(llty(t))
                self.arg_kinds.append({"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16"}[t.ir])
            else:
                params.append(ir.IntType(t.bits))
                self.arg_kinds.append(("u" if t.kind == "uint" else "i") + str(t.bits))
        recipes, self.tensormap_index = tensormaps or ((), {})
        params += [ir.PointerType()] * len(recipes)  # TMA tensor maps: byval, see lower_tma.patch_params
        self.arg_kinds += [{"tensormap": r} for r in recipes]
        # tensor maps the kernel makes (lower_tma): one 128-byte slot each per program in the launch's global scratch
        made = [op for op in self.ir_fn.walk() if op.name == "ttg.make_tensormap"]
        self.made_tensormaps = {id(op): i for i, op in enumerate(made)}
        if made:
            params.append(GPTR)
            self.arg_kinds.append({"scratch": 128 * len(made)})
        self.fn = ir.Function(self.mod, ir.FunctionType(VOID, params), name=self.ir_fn.name)
        self.fn.calling_convention = "ptx_kernel"
        n_args = len(self.ir_fn.args)
        self.tensormap_params = self.fn.args[n_args:n_args + len(recipes)]
        self.scratch_param = self.fn.args[-1] if made else None
        if made:
            self.scratch_param.name = "global_scratch"
        for i, p in enumerate(self.tensormap_params):
            p.name = f"tensormap{i}"
        entry = self.fn.append_basic_block("entry")
        body = self.fn.append_basic_block("body")
        self.eb = ir.IRBuilder(entry)  # index math lives in the entry block: it dominates everything
        self.eb.position_at_end(entry)
        self._entry_term = self.eb.branch(body)
        self.eb.position_before(self._entry_term)
        self.b = ir.IRBuilder(body)
        for a, p in zip(self.ir_fn.args, self.fn.args):
            p.name = a.hint or "arg"
            v = p
            if not isinstance(a.type, PointerType) and a.type.ir == "i1":
                v = self.eb.trunc(p, I1)
            self.vals[id(a)] = v
        tid = self.eb.call(self.intrinsic("llvm.nvvm.read.ptx.sreg.tid.x", I32, []), [])
        self.tid = tid
        self.lane = self.eb.and_(tid, _cint(31), name="lane")
        # the warp index read back through a shuffle from lane 0: the same value, but ptxas then knows it is
        # uniform across the warp and keeps what derives from it (wgmma descriptors) in uniform registers
        shfl = self.intrinsic("llvm.nvvm.shfl.sync.idx.i32", I32, [I32, I32, I32, I32])
        self.warp = self.eb.call(shfl, [_cint(-1), self.eb.lshr(tid, _cint(5)), _cint(0), _cint(31)], name="warp")
        smem = ir.GlobalVariable(self.mod, ir.ArrayType(I8, 0), "global_smem", addrspace=3)
        smem.linkage = "external"
        smem.align = 1024  # swizzled (wgmma) tiles need 1024-byte aligned addresses
        smem.type = SPTR  # use it as an opaque pointer (see toolchain notes)
        self.smem = smem
        # its 32-bit shared-window address: arithmetic on it stays 32-bit (through a 64-bit gep, LLVM does the
        # address math of wgmma descriptors in 64 bits, which ptxas turns into more uniform-datapath ops)
        self.smem32 = self.eb.ptrtoint(smem, I32, name="smem32")
        # the exact block size (`.reqntid`, as Triton): with only an upper bound (`.maxntid`) ptxas may pick a
        # register budget for occupancy (32 registers at 64 threads, then kilobytes of spills); a warp-specialized
        # kernel launches its producer warps on top
        threads = (self.opts.num_warps + producer_warps(self.ir_fn)) * 32
        md = self.mod.add_metadata([self.fn, ir.MetaDataString(self.mod, "reqntidx"), _cint(threads)])
        md2 = self.mod.add_metadata([self.fn, ir.MetaDataString(self.mod, "kernel"), _cint(1)])
        self.mod.add_named_metadata("nvvm.annotations", md)
        self.mod.add_named_metadata("nvvm.annotations", md2)

    def intrinsic(self, name, ret, args, var_arg=False) -> ir.Function:
        if name not in self.decls:
            self.decls[name] = ir.Function(self.mod, ir.FunctionType(ret, args, var_arg=var_arg), name=name)
        return self.decls[name]

    # ------------------------------------------------------------------ values
    def get(self, v: Value):
        try:
            return self.vals[id(v)]
        except KeyError:
            raise LoweringError(f"value {v} used before it was lowered") from None

    def put(self, v: Value, x):
        self.vals[id(v)] = x

    def regs(self, v: Value) -> list:
        x = self.get(v)
        return x if isinstance(x, list) else [x]

    # ------------------------------------------------------------------ layout index math
    def thread_parts(self, layout, shape):
        key = ("tp", str(layout), tuple(shape))
        if key not in self.idx_cache:
            infos = layout.dims_info(shape) + sliced_infos(layout, shape)
            parts = []
            for info in infos:
                lane_c = self.eb.and_(self.eb.lshr(self.lane, _cint(_log2(info.lane_div))), _cint(info.lanes - 1))
                warp_c = self.eb.and_(self.eb.lshr(self.warp, _cint(_log2(info.warp_div))), _cint(info.warps - 1))
                parts.append(self.eb.add(self.eb.mul(warp_c, _cint(info.warp_stride)),
                                         self.eb.mul(lane_c, _cint(info.lane_stride))))
            self.idx_cache[key] = parts
        return self.idx_cache[key]

    def reg_indices(self, layout, shape):
        """Per register, per dimension: the element index it holds (LLVM i32)."""
        key = ("ix", str(layout), tuple(shape))
        if key not in self.idx_cache:
            infos = layout.dims_info(shape)
            parts = self.thread_parts(layout, shape)
            out = []
            for offs in layout.registers(shape):
                idx = []
                for d, info in enumerate(infos):
                    x = self.eb.add(parts[d], _cint(offs[d]))
                    if info.replicated:
                        x = self.eb.and_(x, _cint(info.size - 1))
                    idx.append(x)
                out.append(idx)
            self.idx_cache[key] = out
        return self.idx_cache[key]

    def reg_valid(self, layout, shape):
        """Per register: i1 'this copy is the representative one', or None when every copy is."""
        key = ("ok", str(layout), tuple(shape))
        if key not in self.idx_cache:
            infos = layout.dims_info(shape)
            extra = sliced_infos(layout, shape)
            parts = self.thread_parts(layout, shape)
            if not any(i.replicated for i in infos) and not extra:
                self.idx_cache[key] = None
            else:
                out = []
                for offs in layout.registers(shape):
                    ok = ir.Constant(I1, 1)
                    for d, info in enumerate(infos):
                        if info.replicated:
                            c = self.eb.icmp_unsigned("<", self.eb.add(parts[d], _cint(offs[d])), _cint(info.size))
                            ok = self.eb.and_(ok, c)
                    for j, _ in enumerate(extra):
                        c = self.eb.icmp_unsigned("==", parts[len(infos) + j], _cint(0))
                        ok = self.eb.and_(ok, c)
                    out.append(ok)
                self.idx_cache[key] = out
        return self.idx_cache[key]

    def linear_parts(self, layout, shape, pitch=None):
        """The row-major linear index of each register's element (rows `pitch` elements apart when padded) as
        one thread part (LLVM i32, in the body) plus a constant per register; None where a dimension
        replicates (its index wraps, so it is not linear in the register offsets). Addresses built as base +
        constant keep the constant an immediate of the shared-memory access: from the per-dim indices, LLVM
        turns `+ offset` into `or` (the bits are disjoint), ptxas cannot fold those, and holds one address
        register per access instead (32 for a 128x128 accumulator's conversion, live across a loop)."""
        infos = layout.dims_info(shape)
        if any(i.replicated for i in infos):
            return None
        parts = self.thread_parts(layout, shape)
        strides, stride = [0] * len(shape), 1
        for d in reversed(range(len(shape))):
            strides[d] = stride
            stride *= pitch if pitch is not None and d == len(shape) - 1 else shape[d]
        base = None
        for d in range(len(shape)):
            term = parts[d] if strides[d] == 1 else self.b.mul(parts[d], _cint(strides[d]))
            base = term if base is None else self.b.add(base, term)
        consts = [sum(o * st for o, st in zip(offs, strides)) for offs in layout.registers(shape)]
        return (base if base is not None else _cint(0)), consts

    def linear_index(self, idx, shape, pitch=None):
        """Row-major linear index of an element from its per-dim indices (rows `pitch` elements apart when
        they are padded)."""
        lin, stride = None, 1
        for d in reversed(range(len(shape))):
            term = idx[d] if stride == 1 else self.b.mul(idx[d], _cint(stride))
            lin = term if lin is None else self.b.add(lin, term)
            stride *= pitch if pitch is not None and d == len(shape) - 1 else shape[d]
        return lin if lin is not None else _cint(0)

    def smem_places(self, op: Op, layout, shape, size: int, regs, pitch=None):
        """Per register k in `regs`: the shared-memory address of its element (row-major, rows `pitch` apart,
        `size` bytes each). Where the layout holds no copies, the address is one per-thread base plus a constant
        per register (`linear_parts`) -- the constant folds into the load's or store's immediate offset, so a
        tile's conversion keeps one address register instead of one per register (LLVM's disjoint-bit `or`s of
        the index math did not fold, and the hoisted 64-bit addresses spilled tutorial 09's epilogue).
        KERNELLAB_CONVERT_ADDRESSES=per_register gives each its own index math (kept to time the two)."""
        per_register = os.environ.get("KERNELLAB_CONVERT_ADDRESSES", "").lower() == "per_register"
        lin = None if per_register or not shape else self.linear_parts(layout, shape, pitch)
        if lin is None:
            idx = self.reg_indices(layout, shape)
            return [self.smem_ptr(op, self.b.mul(self.linear_index(idx[k], shape, pitch), _cint(size))) for k in regs]
        thread, consts = lin
        base = self.smem_ptr(op, self.b.mul(thread, _cint(size)))
        return [self.b.gep(base, [_cint(consts[k] * size)], source_etype=I8) if consts[k] else base for k in regs]

    def smem_ptr(self, op: Op, byte_offset, extra=0):
        base = op.attrs.get("smem_offset", 0) + extra
        off = self.b.add(byte_offset, _cint(base)) if not isinstance(byte_offset, int) else _cint(byte_offset + base)
        return self.b.gep(self.smem, [off], source_etype=I8)

    def barrier(self):
        """Every thread of the program waits here; after a warp-specialized split, every consumer thread (a named
        barrier: the producer warps have left)."""
        if self.consumer_threads:
            fn = self.intrinsic("llvm.nvvm.barrier.cta.sync.aligned.count", VOID, [I32, I32])
            self.b.call(fn, [_cint(CONSUMER_BARRIER), _cint(self.consumer_threads)])
            return
        self.b.call(self.intrinsic("llvm.nvvm.barrier0", VOID, []), [])

    # ------------------------------------------------------------------ driver
    def lower(self) -> ir.Module:
        self.block(self.ir_fn.body)
        return self.mod

    def block(self, block: Block):
        for op in block.ops:
            self.op(op)

    def block_without_terminator(self, block: Block):
        """Lower a region's ops; the caller reads its terminator's operands (yields become phis)."""
        for op in block.ops:
            if op.name not in ("scf.yield", "scf.condition", "tt.reduce.return"):
                self.op(op)

    def op(self, op: Op):
        if self.debug is not None:
            with self.debug.at(op.loc):
                return self._op(op)
        return self._op(op)

    def _op(self, op: Op):
        handler = _HANDLERS.get(op.name)
        if handler is None:
            if is_elementwise(op.name):
                return self.elementwise(op)
            raise LoweringError(f"the GPU backend cannot lower {op.name} yet (line {op.loc})")
        return handler(self, op)

    # ------------------------------------------------------------------ elementwise
    def elementwise(self, op: Op):
        res = op.results[0]
        operands = [self.get(v) for v in op.operands]
        if isinstance(res.type, TensorType):
            offsets = res.type.layout.registers(res.type.shape)
            n = len(offsets)
            cols = [x if isinstance(x, list) else [x] * n for x in operands]
            blocks = op.attrs.get("uniform_blocks")
            if blocks:  # registers whose offsets agree on offset // block hold one value (share_uniform_runs)
                first_of = {}
                firsts = [first_of.setdefault(tuple(x // b for x, b in zip(o, blocks)), i)
                          for i, o in enumerate(offsets)]
            else:
                firsts = range(n)
            if not blocks and n > 1 and self._paired_fp8(op):
                self.put(res, self._fp8_pairs(op, cols[0]))
                return
            out = []
            for i, first in enumerate(firsts):
                out.append(out[first] if first < i else self.scalar_op(op, [c[i] for c in cols]))
            self.put(res, out)
        else:
            self.put(res, self.scalar_op(op, operands))

    def scalar_op(self, op: Op, xs: list):
        b = self.b
        name = op.name
        rt = op.results[0].type.scalar
        st = op.operands[0].type.scalar if op.operands else rt
        if name == "arith.addi":
            return b.add(*xs)
        if name == "arith.subi":
            return b.sub(*xs)
        if name == "arith.muli":
            return b.mul(*xs)
        if name in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui"):
            fns = {"arith.divsi": b.sdiv, "arith.divui": b.udiv, "arith.remsi": b.srem, "arith.remui": b.urem}
            return fns[name](*xs)
        if name in ("arith.andi", "arith.ori", "arith.xori"):
            return {"arith.andi": b.and_, "arith.ori": b.or_, "arith.xori": b.xor}[name](*xs)
        if name in ("arith.shli", "arith.shrsi", "arith.shrui"):
            bits = rt.bits
            ty = llty(rt)
            amount = xs[1]
            too_big = b.icmp_unsigned(">=", amount, ir.Constant(ty, bits))
            safe = b.select(too_big, ir.Constant(ty, 0), amount)
            if name == "arith.shli":
                return b.select(too_big, ir.Constant(ty, 0), b.shl(xs[0], safe))
            if name == "arith.shrui":
                return b.select(too_big, ir.Constant(ty, 0), b.lshr(xs[0], safe))
            return b.ashr(xs[0], b.select(too_big, ir.Constant(ty, bits - 1), amount))
        if name in ("arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui"):
            signed = name.endswith("si")
            cmp = b.icmp_signed if signed else b.icmp_unsigned
            c = cmp(">" if "max" in name else "<", xs[0], xs[1])
            return b.select(c, xs[0], xs[1])
        if name == "arith.divf" and rt.ir == "f32":
            # `/` on f32: div.full.f32 (2 ulp, no slow path), as Triton does; tl.div_rn is the IEEE one
            return b.asm(ir.FunctionType(F32, [F32, F32]), "div.full.f32 $0, $1, $2;", "=f,f,f", xs, False)
        if name in ("arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "tt.precise_divf"):
            f = {"arith.addf": b.fadd, "arith.subf": b.fsub, "arith.mulf": b.fmul, "arith.divf": b.fdiv,
                 "arith.remf": b.frem, "tt.precise_divf": b.fdiv}[name]
            return self.float_binop(rt, f, xs)
        if name == "arith.negf":
            return b.fneg(xs[0])
        if name in ("arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf"):
            intr = {"arith.maxnumf": "maxnum", "arith.minnumf": "minnum", "arith.maximumf": "maximum",
                    "arith.minimumf": "minimum"}[name]
            return self.float_intrinsic(rt, intr, xs)
        if name == "arith.cmpi":
            pred = op.attrs["predicate"]
            ops_ = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
            if pred in ("eq", "ne"):
                return b.icmp_unsigned(ops_[pred], *self._int_operands(xs))
            fn = b.icmp_signed if pred[0] == "s" else b.icmp_unsigned
            return fn(ops_[pred[1:]], *self._int_operands(xs))
        if name == "arith.cmpf":
            pred = op.attrs["predicate"]
            ops_ = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
            if pred[0] == "o":
                return b.fcmp_ordered(ops_[pred[1:]], *xs)
            return b.fcmp_unordered(ops_[pred[1:]], *xs)
        if name == "arith.select":
            return b.select(*xs)
        if name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.sitofp", "arith.uitofp", "arith.fptosi",
                    "arith.fptoui", "arith.extf", "arith.truncf", "arith.bitcast", "tt.int_to_ptr", "tt.ptr_to_int"):
            return self.cast(name, st, rt, xs[0])
        if name == "tt.fp_to_fp":
            return self.fp8_convert(st, rt, xs[0], op.attrs.get("rounding", "rtne"))
        if name == "tt.addptr":
            off = xs[1]
            off_t = op.operands[1].type.scalar
            if off.type.width < 64:
                off = b.sext(off, I64) if off_t.kind in ("int", "bool") else b.zext(off, I64)
            return b.gep(xs[0], [off], source_etype=memty(rt.elem))
        if name == "tt.hint":
            return xs[0]
        if name == "tt.umulhi":  # the unsigned product's high half, for signed types too (__nv_umulhi)
            wide = ir.IntType(rt.bits * 2)
            p = b.mul(b.zext(xs[0], wide), b.zext(xs[1], wide))
            return b.trunc(b.lshr(p, ir.Constant(wide, rt.bits)), llty(rt))
        if name.startswith("math.") or name == "tt.precise_sqrt":
            return self.math(name, rt, xs)
        if name == "tt.splat":
            return xs[0]
        raise LoweringError(f"the GPU backend cannot lower {name} yet (line {op.loc})")

    def _paired_fp8(self, op) -> bool:
        """A downcast to e4m3/e5m2 that cvt.rn.satfinite does two registers at a time (sm_89+)."""
        if op.name != "tt.fp_to_fp" or self.arch < 89 or op.attrs.get("rounding", "rtne") != "rtne":
            return False
        src, dst = op.operands[0].type.scalar.ir, op.results[0].type.scalar.ir
        return (dst in ("f8e4nv", "f8e5") and src in ("f32", "f16", "bf16")) or \
            (src in ("f8e4nv", "f8e5") and dst in ("f32", "f16", "bf16"))

    def _fp8_pairs(self, op, xs):
        """fp8 downcasts of a thread's registers, two per `cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32` (Triton's form:
        torchao's fp8 weight quantization had one cvt and a byte repack per element, 1360 SASS to Triton's 904)."""
        b = self.b
        st, rt = op.operands[0].type.scalar, op.results[0].type.scalar
        if st.ir.startswith("f8"):  # upcasts: two bytes a `cvt.rn.f16x2.{e4m3x2,e5m2x2}` (exact)
            kind = "e4m3x2" if st.ir == "f8e4nv" else "e5m2x2"
            out = []
            for i in range(0, len(xs) - 1, 2):
                two = b.insert_element(b.insert_element(ir.Constant(ir.VectorType(I8, 2), None), xs[i],
                                                        ir.Constant(I32, 0)), xs[i + 1], ir.Constant(I32, 1))
                pair = b.asm(ir.FunctionType(I32, [I16]), f"cvt.rn.f16x2.{kind} $0, $1;", "=r,h",
                             [b.bitcast(two, I16)], False)
                halves = b.bitcast(pair, ir.VectorType(F16, 2))  # the low byte's value is the low half
                for j in (0, 1):
                    h = b.extract_element(halves, ir.Constant(I32, j))
                    out.append(h if rt.ir == "f16" else b.fpext(h, F32) if rt.ir == "f32" else
                               b.fptrunc(b.fpext(h, F32), llty(rt)))
            if len(xs) % 2:
                out.append(self.fp8_convert(st, rt, xs[-1], "rtne"))
            return out
        kind = "e4m3x2" if rt.ir == "f8e4nv" else "e5m2x2"
        fs = [x if x.type == F32 else b.fpext(x, F32) for x in xs]
        out = []
        for i in range(0, len(fs) - 1, 2):
            # the first source goes to the high byte, the second to the low byte
            pair = b.asm(ir.FunctionType(I16, [F32, F32]), f"cvt.rn.satfinite.{kind}.f32 $0, $1, $2;", "=h,f,f",
                         [fs[i + 1], fs[i]], False)
            two = b.bitcast(pair, ir.VectorType(I8, 2))  # little-endian: element 0 is the low byte
            out += [b.extract_element(two, ir.Constant(I32, 0)), b.extract_element(two, ir.Constant(I32, 1))]
        if len(fs) % 2:
            out.append(self.fp8_convert(st, rt, xs[-1], "rtne"))
        return out

    def fp8_convert(self, st, rt, x, rounding):
        """`tt.fp_to_fp` as Triton lowers it on sm_90 (fp8 values are i8 registers): PTX cvt for e4m3/e5m2
        (exact upcasts; `cvt.rn.satfinite` downcasts from f32, which f16/bf16 reach exactly), f32 -> e5m2 toward
        zero through f16, and Triton's bit manipulation for e4b15 (see compiler/fp8.py)."""
        b = self.b
        src, dst = st.ir, rt.ir
        if dst in ("f16", "bf16") and not src.startswith("f8"):  # f32 toward zero (fp_downcast_rounding="rtz")
            bits = b.asm(ir.FunctionType(I16, [F32]), f"cvt.rz.{dst}.f32 $0, $1;", "=h,f", [x], False)
            return b.bitcast(bits, llty(rt))
        if src.startswith("f8"):
            if src == "f8e4b15":  # the byte's 7 value bits are f16 bits 13..7; the sign moves to bit 15
                w = b.zext(x, I16)
                h = b.or_(b.shl(b.and_(w, ir.Constant(I16, 0x7F)), ir.Constant(I16, 7)),
                          b.shl(b.and_(w, ir.Constant(I16, 0x80)), ir.Constant(I16, 8)))
                h = b.bitcast(h, F16)
            elif self.arch < 89:  # no fp8 cvt before sm_89: the same exact upcast by bits
                h = self._fp8_to_f16_bits(src, x)
            else:
                kind = "e4m3x2" if src == "f8e4nv" else "e5m2x2"
                pair = b.asm(ir.FunctionType(I32, [I16]), f"cvt.rn.f16x2.{kind} $0, $1;", "=r,h", [b.zext(x, I16)],
                             False)
                h = b.bitcast(b.trunc(pair, I16), F16)
            if dst == "f16":
                return h
            f = b.fpext(h, F32)
            return f if dst == "f32" else b.fptrunc(f, llty(rt))  # bf16: exact
        if dst == "f8e4b15":
            if src == "f32":
                bits = b.asm(ir.FunctionType(I16, [F32]), "cvt.rz.f16.f32 $0, $1;", "=h,f", [x], False)
            else:
                bits = b.bitcast(x, I16)
            mag = b.and_(bits, ir.Constant(I16, 0x7FFF))
            big = b.icmp_unsigned(">", mag, ir.Constant(I16, 0x3F00))  # NaN and infinities too: 1.75
            mag = b.select(big, ir.Constant(I16, 0x3F00), mag)
            byte = b.lshr(b.add(mag, ir.Constant(I16, 0x40)), ir.Constant(I16, 7))
            sign = b.lshr(b.and_(bits, ir.Constant(I16, 0x8000)), ir.Constant(I16, 8))
            return b.trunc(b.or_(byte, sign), I8)
        if dst not in ("f8e4nv", "f8e5"):
            raise LoweringError(f"no GPU conversion from {src} to {dst}")
        f = x if src == "f32" else b.fpext(x, F32)
        if rounding == "rtz":  # f32 -> e5m2: toward zero to f16, then its high byte (also toward zero)
            h = b.asm(ir.FunctionType(I16, [F32]), "cvt.rz.f16.f32 $0, $1;", "=h,f", [f], False)
            return b.trunc(b.lshr(h, ir.Constant(I16, 8)), I8)
        if self.arch < 89:  # no fp8 cvt before sm_89
            return self._f32_to_fp8_bits(dst, f)
        kind = "e4m3x2" if dst == "f8e4nv" else "e5m2x2"
        pair = b.asm(ir.FunctionType(I16, [F32]), f"cvt.rn.satfinite.{kind}.f32 $0, $1, $1;", "=h,f", [f], False)
        return b.trunc(pair, I8)

    def _f32_to_fp8_bits(self, dst, f):
        """f32 -> e5m2 / e4m3 by bits, as `cvt.rn.satfinite` rounds (sm_80 has no fp8 cvt): one rounding to
        nearest even of the exact value, saturating at +-max (infinities too), NaN -> 0x7f with the sign.
        Normal results: round the f32 pattern at the format's last mantissa bit and rebias the exponent.
        Subnormal results: |x| + 2^k, with 2^k's f32 ulp the format's subnormal step (2^-16 e5m2, 2^-9 e4m3),
        rounds |x| in one f32 add; the sum's low bits are the byte (4 or 8 steps reach the smallest normal,
        whose byte is the same number)."""
        b = self.b
        man, bias, big, top = (2, 15, 128.0, 0x7B) if dst == "f8e5" else (3, 7, 16384.0, 0x7E)
        drop = 23 - man
        bits = b.bitcast(f, I32)
        mag = b.and_(bits, _cint(0x7FFFFFFF))
        odd = b.and_(b.lshr(mag, _cint(drop)), _cint(1))
        rounded = b.add(mag, b.add(_cint((1 << (drop - 1)) - 1), odd))
        normal = b.sub(b.lshr(rounded, _cint(drop)), _cint((127 - bias) << man))
        normal = b.select(b.icmp_unsigned(">", normal, _cint(top)), _cint(top), normal)  # unsigned: > max
        absf = b.bitcast(mag, F32)
        sum_bits = b.bitcast(b.fadd(absf, ir.Constant(F32, big)), I32)
        sub = b.sub(sum_bits, _cint(struct.unpack("<I", struct.pack("<f", big))[0]))
        min_normal = (127 - bias + 1) << 23
        byte = b.select(b.icmp_unsigned("<", mag, _cint(min_normal)), sub, normal)
        byte = b.select(b.icmp_unsigned(">", mag, _cint(0x7F800000)), _cint(0x7F), byte)  # NaN
        sign = b.lshr(b.and_(bits, _cint(0x80000000)), _cint(24))
        return b.trunc(b.or_(byte, sign), I8)

    def _fp8_to_f16_bits(self, src, x):
        """e5m2 or e4m3 to f16 without cvt (sm_80, where fp8 dots are upcast): e5m2 is an f16's high byte; an
        e4m3 byte's 7 value bits placed at f16 bits 13..7 read 2^-8 of the value (subnormals too), so one exact
        multiply by 256 restores it; 0x7f / 0xff (e4m3's NaN) become NaN."""
        b = self.b
        w = b.zext(x, I16)
        if src == "f8e5":
            return b.bitcast(b.shl(w, ir.Constant(I16, 8)), F16)
        mag = b.and_(w, ir.Constant(I16, 0x7F))
        bits = b.or_(b.shl(mag, ir.Constant(I16, 7)), b.shl(b.and_(w, ir.Constant(I16, 0x80)), ir.Constant(I16, 8)))
        h = b.fmul(b.bitcast(bits, F16), ir.Constant(F16, 256.0))
        return b.select(b.icmp_unsigned("==", mag, ir.Constant(I16, 0x7F)), ir.Constant(F16, float("nan")), h)

    def _int_operands(self, xs):
        if isinstance(xs[0].type, ir.PointerType):
            return [self.b.ptrtoint(x, I64) for x in xs]
        return xs

    def float_binop(self, t, f, xs):
        if t.ir == "bf16":  # compute in f32, round once
            a, c = (self.b.fpext(x, F32) for x in xs)
            return self.b.fptrunc(f(a, c), BF16)
        if getattr(self.opts, "fp_fusion", True) and f.__name__ in ("fadd", "fsub", "fmul"):
            return f(*xs, flags=("contract",))  # ptxas may fuse a*b+c into one fma, as Triton allows
        return f(*xs)

    def float_intrinsic(self, t, name, xs):
        ty = llty(t)
        if t.ir == "bf16":
            r = self.float_intrinsic_f(F32, name, [self.b.fpext(x, F32) for x in xs])
            return self.b.fptrunc(r, BF16)
        return self.float_intrinsic_f(ty, name, xs)

    def float_intrinsic_f(self, ty, name, xs):
        suffix = {F16: "f16", F32: "f32", F64: "f64"}[ty]
        fn = self.intrinsic(f"llvm.{name}.{suffix}", ty, [ty] * len(xs))
        return self.b.call(fn, xs)

    def math(self, name, t, xs):
        b = self.b
        short = name.split(".", 1)[1]
        if short == "sqrt" and xs[0].type in (F16, BF16, F32):
            # tl.sqrt is the fast square root (Triton: sqrt.approx.ftz.f32, max relative error 2^-23); IEEE
            # rounding is tl.sqrt_rn (tt.precise_sqrt). libdevice's correctly rounded __nv_sqrtf costs ~20 SASS
            # instructions a value (a Newton step and a slow path), half of an elementwise kernel like hypot.
            f32 = [b.fpext(x, F32) for x in xs] if xs[0].type != F32 else xs
            r = b.call(self.intrinsic("llvm.nvvm.sqrt.approx.ftz.f", F32, [F32]), f32)
            return r if xs[0].type == F32 else b.fptrunc(r, xs[0].type)
        if op_info(name).tl_name:  # the math functions only libdevice provides
            return self.libdevice_call(name, xs)
        if short == "absi":
            neg = b.icmp_signed("<", xs[0], ir.Constant(xs[0].type, 0))
            return b.select(neg, b.neg(xs[0]), xs[0])
        ty = llty(t)
        if t.ir.startswith("f8") and short == "absf":  # fp8 in an i8 register: clear the sign bit
            return b.and_(xs[0], ir.Constant(I8, 0x7F))
        if t.ir in ("f16", "bf16"):  # compute in f32 and round back
            r = self.math(name, DType("f32", "float", 32), [b.fpext(x, F32) for x in xs])
            return b.fptrunc(r, ty)
        if short == "absf" and ty == F32:
            # abs.f32, as Triton's PTX has it: ptxas folds it into its user as an operand modifier (FMNMX |x|).
            # llvm.fabs of a value loaded as i32 bits becomes `and 0x7fffffff` at O3, one LOP3 an element
            return b.asm(ir.FunctionType(F32, [F32]), "abs.f32 $0, $1;", "=f,f", xs, False)
        if short == "absf":
            return self.float_intrinsic_f(ty, "fabs", xs)
        if short in ("floor", "ceil"):
            return self.float_intrinsic_f(ty, short, xs)
        if short == "fma":
            return self.float_intrinsic_f(ty, "fma", xs)
        if short == "precise_sqrt":
            return self.float_intrinsic_f(ty, "sqrt", xs)
        if short in ("exp", "exp2") and ty == F32:
            # ex2.approx (2 ulp) on the special-function unit; exp(x) = 2^(x * log2(e)). `.ftz` (as Triton):
            # results below 2^-126 flush to zero; without it ptxas wraps every MUFU.EX2 in a compare and two
            # multiplies to handle subnormals (attention's loop: 264 FMULs instead of 128). enable_reflect_ftz=False
            # (Triton's option, which its exp2 follows) keeps subnormal results: plain ex2.approx.f32
            x = xs[0] if short == "exp2" else b.fmul(xs[0], ir.Constant(F32, 1.4426950408889634))
            ftz = ".ftz" if getattr(self.opts, "reflect_ftz", True) else ""
            return b.asm(ir.FunctionType(F32, [F32]), f"ex2.approx{ftz}.f32 $0, $1;", "=f,f", [x], False)
        names = op_info(name).libdevice
        if names is None:
            raise LoweringError(f"no lowering for {name}")
        return b.call(self.intrinsic(names[0] if ty == F32 else names[1], ty, [ty]), xs)

    def libdevice_call(self, name, xs):
        """A catalogue math function through libdevice: f16/bf16 computed in f32 and rounded back; the
        tests (isnan, signbit, ...) return libdevice's nonzero int as i32 0/1."""
        b = self.b
        info = op_info(name)
        ty = xs[0].type
        if ty in (F16, BF16):
            xs = [b.fpext(x, F32) for x in xs]
        fty = xs[0].type
        ret = I32 if info.result == "i32" else fty
        fname = info.libdevice[0] if fty == F32 else info.libdevice[1]
        r = b.call(self.intrinsic(fname, ret, [fty] * len(xs)), xs)
        if info.result == "i32":
            return b.zext(b.icmp_unsigned("!=", r, _cint(0)), I32)
        return b.fptrunc(r, ty) if ty != fty else r

    def cast(self, name, st, rt, x):
        b = self.b
        to = llty(rt)
        if name == "arith.extsi":
            return b.sext(x, to)
        if name == "arith.extui":
            return b.zext(x, to)
        if name == "arith.trunci":
            return b.trunc(x, to)
        if name == "arith.sitofp":
            return b.sitofp(x, to)
        if name == "arith.uitofp":
            return b.uitofp(x, to)
        if name in ("arith.fptosi", "arith.fptoui"):
            src = x
            if st.ir in ("f16", "bf16"):
                src = b.fpext(x, F32)
            # saturating (NaN -> 0), like PTX's cvt and the interpreter; plain fptosi is undefined out of range.
            # 8-bit results saturate to 16 bits and keep the low byte: what NVPTX makes of Triton's plain
            # fptosi (cvt.rzi.s16 in a 16-bit register, then the byte)
            kind = "fptosi" if name == "arith.fptosi" else "fptoui"
            fty = {F32: "f32", F64: "f64"}[src.type]
            width = max(to.width, 16)
            wide = ir.IntType(width)
            if fty == "f32" and width in (16, 32):
                # PTX's cvt.rzi from f32 to a 16- or 32-bit integer saturates and makes NaN 0 by itself (PTX ISA,
                # cvt: "clamped to the destination range by default"; NaN gives 0 unless the source is f64 or the
                # destination 64-bit): one instruction, where NVPTX expands llvm.fpto*i.sat into clamps and a NaN
                # select around the same cvt (3-5 more)
                sign = "s" if kind == "fptosi" else "u"
                reg = "h" if width == 16 else "r"
                r = b.asm(ir.FunctionType(wide, [F32]), f"cvt.rzi.{sign}{width}.f32 $0, $1;", f"={reg},f", [src],
                          False)
                return b.trunc(r, to) if width != to.width else r
            fn = self.intrinsic(f"llvm.{kind}.sat.i{width}.{fty}", wide, [src.type])
            r = b.call(fn, [src])
            return b.trunc(r, to) if width != to.width else r
        if name == "arith.extf":
            return b.fpext(x, to)
        if name == "arith.truncf":
            return b.fptrunc(x, to)
        if name == "tt.int_to_ptr":
            return b.inttoptr(x, GPTR)
        if name == "tt.ptr_to_int":
            return b.ptrtoint(x, to)
        if name == "arith.bitcast":
            if x.type == to:
                return x
            if isinstance(x.type, ir.PointerType) and isinstance(to, ir.PointerType):
                return x
            return b.bitcast(x, to)
        raise LoweringError(name)


class DebugLines:
    """Source lines for the LLVM IR: a line-tables-only compile unit (`DebugDirectivesOnly`: LLVM's NVPTX backend
    then writes `.file`/`.loc` directives into the PTX and no DWARF sections, which is what nvcc -lineinfo gives
    ptxas) and a `!dbg` DILocation on every instruction an op lowers to. Both builders carry the location of the
    op being lowered (index math hoisted into the entry block belongs to the op that first needed it); what is
    built before any op (thread and warp ids) gets the kernel's `def` line. Line info does not change the code:
    tests/test_line_info.py compares PTX instructions and ptxas' register counts with and without it."""

    def __init__(self, lw: KernelLowering):
        import os

        fn, mod = lw.ir_fn, lw.mod
        directory, name = os.path.split(fn.source_file or "<kernel>")
        self.mod = mod
        self.file = mod.add_debug_info("DIFile", {"filename": name, "directory": directory})
        unit = mod.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_Python"), "file": self.file, "producer": "kernellab",
            "isOptimized": True, "runtimeVersion": 0, "emissionKind": ir.DIToken("DebugDirectivesOnly")},
            is_distinct=True)
        fty = mod.add_debug_info("DISubroutineType", {"types": mod.add_metadata([])})
        self.scope = mod.add_debug_info("DISubprogram", {
            "name": fn.name, "scope": self.file, "file": self.file, "line": fn.first_line, "type": fty,
            "scopeLine": fn.first_line, "unit": unit,
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized")}, is_distinct=True)
        lw.fn.set_metadata("dbg", self.scope)
        mod.add_named_metadata("llvm.dbg.cu", unit)
        for key, value in (("Debug Info Version", 3), ("Dwarf Version", 4)):
            mod.add_named_metadata("llvm.module.flags", mod.add_metadata([I32(2), key, I32(value)]))
        self.lw = lw
        self._locs: dict = {}
        self._scopes: dict = {}
        start = self.location(fn.first_line, 0)
        for inst in lw.fn.blocks[0].instructions:  # what _make_function built: the thread and warp ids
            inst.set_metadata("dbg", start)
        lw.b.debug_metadata = lw.eb.debug_metadata = start

    def location(self, line: int, col: int, file: str | None = None):
        """The DILocation of (line, col) in `file` (None or the kernel's file: the kernel's subprogram; another
        file, an inlined @jit helper's: a DILexicalBlockFile of it, so the PTX gets its own `.file` entry)."""
        key = (line, col, file if file != self.lw.ir_fn.source_file else None)
        if key not in self._locs:
            self._locs[key] = self.mod.add_debug_info("DILocation", {"line": line, "column": col,
                                                                    "scope": self._scope_of(key[2])})
        return self._locs[key]

    def _scope_of(self, file: str | None):
        if file is None:
            return self.scope
        if file not in self._scopes:
            import os

            directory, name = os.path.split(file)
            f = self.mod.add_debug_info("DIFile", {"filename": name, "directory": directory})
            self._scopes[file] = self.mod.add_debug_info("DILexicalBlockFile", {
                "scope": self.scope, "file": f, "discriminator": 0})
        return self._scopes[file]

    def at(self, loc):
        """A context in which both builders stamp `loc` (an ir.Loc, or None: keep the enclosing op's)."""
        return _AtLocation(self, loc)


class _AtLocation:
    def __init__(self, debug: DebugLines, loc):
        self.debug, self.loc = debug, loc

    def __enter__(self):
        lw = self.debug.lw
        self.saved = lw.b.debug_metadata, lw.eb.debug_metadata
        if self.loc is not None and getattr(self.loc, "line", None):
            lw.b.debug_metadata = lw.eb.debug_metadata = self.debug.location(self.loc.line, self.loc.col or 0,
                                                                             getattr(self.loc, "file", None))

    def __exit__(self, *exc):
        lw = self.debug.lw
        lw.b.debug_metadata, lw.eb.debug_metadata = self.saved
        return False


_HANDLERS: dict = {}


def handles(*names):
    def deco(f):
        for n in names:
            _HANDLERS[n] = f
        return f

    return deco


def const_value(t, v):
    if isinstance(t, DType) and t.ir.startswith("f8"):  # its byte, rounded as a cast from f32 would
        from ..fp8 import convert_to, encode

        return ir.Constant(I8, int(encode(t.ir, convert_to(t.ir, "f32", float(v)))))
    ty = llty(t)
    if isinstance(ty, ir.IntType):
        if ty.width == 1:
            return ir.Constant(ty, int(bool(v)))
        return ir.Constant(ty, int(v) & ((1 << ty.width) - 1))
    if ty == GPTR:
        return ir.Constant(GPTR, None)
    return ir.Constant(ty, float(v))
