"""Warp specialization's split (sm_90, passes/warp_specialize.py): `ttg.warp_specialize` becomes a branch on the
thread index. The warps launched beyond num_warps (one warpgroup) give registers back (setmaxnreg.dec), one warp of
them runs the region (its TMA copies issued by that warp's first thread) and all of them return; the num_warps
consumer warps take registers (setmaxnreg.inc) and run the rest of the kernel, where every CTA barrier becomes the
named barrier CONSUMER_BARRIER counting only their threads (bar.sync 0 would wait for the warps that left).

setmaxnreg needs the register count at entry: the PTX gets `.maxnreg` (`registers`), which ptxas takes as the count
every warp starts with, so what the producer frees is exactly what the consumers take (a larger request than the
pool would hang the consumers in setmaxnreg.inc).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .lowering_core import VOID, KernelLowering, _cint, handles

PRODUCER_REGISTERS = 40
MAX_REGISTERS = 240


def registers(num_warps: int, maxnreg: int | None = None, extra: int = 4) -> tuple[int, int, int]:
    """(registers per thread at entry, the producer's after setmaxnreg.dec, the consumers' after .inc): the entry
    count fills the register file with the launch's threads (65536 per SM; 168 for 8 + 4 warps), the consumers
    share what the producer frees (232 for 8 + 4 warps, as CUTLASS's 2-consumer kernels), at most 240."""
    threads = (num_warps + extra) * 32
    entry = min(65536 // threads // 8 * 8, MAX_REGISTERS)
    if maxnreg:
        entry = min(entry, int(maxnreg) // 8 * 8)
    producer = min(PRODUCER_REGISTERS, entry)
    consumer = (entry * threads - producer * extra * 32) // (num_warps * 32) // 8 * 8
    return entry, producer, max(entry, min(consumer, MAX_REGISTERS))


def _asm(lw: KernelLowering, text: str):
    lw.b.asm(ir.FunctionType(VOID, []), text, "~{memory}", [], side_effect=True)


@handles("ttg.warp_specialize")
def _warp_specialize(lw: KernelLowering, op):
    b, fn = lw.b, lw.fn
    nw = lw.opts.num_warps
    entry, dec, inc = registers(nw, getattr(lw.opts, "maxnreg", None), int(op.attrs.get("producer_warps", 4)))
    producer = fn.append_basic_block("producer")
    issuer = fn.append_basic_block("producer_issue")
    idle = fn.append_basic_block("producer_exit")
    consumers = fn.append_basic_block("consumers")
    b.cbranch(b.icmp_unsigned(">=", lw.tid, _cint(nw * 32)), producer, consumers)
    b.position_at_end(producer)
    if dec < entry:
        _asm(lw, f"setmaxnreg.dec.sync.aligned.u32 {dec};")  # the whole warpgroup, before any warp leaves
    b.cbranch(b.icmp_unsigned("<", lw.tid, _cint(nw * 32 + 32)), issuer, idle)
    b.position_at_end(idle)
    b.ret_void()
    b.position_at_end(issuer)
    lw.leader = nw * 32  # the thread that issues the expects and the copies
    lw.block(op.regions[0])
    lw.leader = 0
    lw.b.ret_void()
    lw.b.position_at_end(consumers)
    if inc > entry:
        _asm(lw, f"setmaxnreg.inc.sync.aligned.u32 {inc};")
    lw.consumer_threads = nw * 32  # every later barrier: the consumers' named one
