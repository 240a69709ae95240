"""Turn a live module, as the printer printed it, into the trace's plain records (kernellab.compiler.trace).

The printer says on which line it put every op, region and value (`printer.Printed`); this module reads the
IR objects themselves for names, types, layouts, attributes and source lines, and adds what the GPU stages
found: per access its vector width and coalescing, the shared-memory plan with each buffer's owning op, the
barriers. Nothing here parses text.
"""
from __future__ import annotations

from .gpu.scratch import mem_bytes
from .layout_model import coalescing
from .printer import Printed
from .trace import (
    Access,
    Barrier,
    FunctionRecord,
    OpRecord,
    Positions,
    SharedBuffer,
    SharedTile,
    Snapshot,
    ValueRecord,
)

ASYNC_WAIT_REASON = ("cp.async.wait_group {pending}, then bar.sync: the stage read next has landed and every warp "
                     "is past the last read")


def positions(printed: Printed) -> Positions:
    return Positions(printed.source_lines(), tuple(printed.loc_spans), printed.source_files())


def _other_file(loc, fn) -> str | None:
    """The file of `loc` when it is not the kernel's (`fn`, the module's first function): an @jit helper from
    another module, inlined or not yet."""
    f = getattr(loc, "file", None) if loc is not None else None
    return f if f and f != fn.source_file else None


def elem_bytes(t) -> int:
    """Bytes of one element of `t` in memory (scratch.mem_bytes; a block pointer is a pointer); 0 when unsized."""
    s = t.scalar
    if s.is_block_ptr():
        return 8
    return mem_bytes(t) if s.is_ptr() or getattr(s, "bits", None) else 0


def shared_tile(t) -> SharedTile:
    """The SharedTile record of a `!memdesc` type."""
    return SharedTile(tuple(t.shape), str(t.elem), elem_bytes(t), tuple(t.order), t.pad, t.swizzle)


def _type_fields(t, aliases: dict) -> dict:
    text = str(t)
    layout = getattr(t, "layout", None)
    lay = str(layout) if layout is not None else None
    alias = aliases.get(lay) if lay else None
    if alias:
        text = text.replace(lay, alias)
    shared = shared_tile(t) if t.is_memdesc() else None
    elem = str(t.scalar) if (t.is_block() or shared) else text
    return {"type": text, "shape": tuple(t.shape), "elem": elem, "elem_bytes": elem_bytes(t), "layout": lay,
            "alias": alias, "shared": shared}


def _plain_attr(v):
    return tuple(_plain_attr(x) for x in v) if isinstance(v, (list, tuple)) else v


def build(module, printed: Printed, default_origin: str = "frontend", num_warps: int | None = None,
          points: dict | None = None) -> Snapshot:
    """The Snapshot of `module` as `printed`. GPU stages pass `num_warps` (accesses get their coalescing) and
    `points`, {id(op): (program point, op)} as allocate_shared numbered the ops (the plan and the barriers
    are recorded then)."""
    op_line, end_line, region_lines, args_line, fn_lines = {}, {}, {}, {}, {}
    for i, (kind, obj, region) in enumerate(printed.rows):
        if kind == "op":
            op_line[id(obj)] = i
            if obj.regions:
                region_lines[id(obj)] = [i]
        elif kind == "next":
            region_lines[id(obj)].append(i)
        elif kind == "end":
            end_line[id(obj)] = i
        elif kind == "args":
            args_line[(id(obj), region)] = i
        elif kind == "func":
            fn_lines[id(obj)] = [i, i]
        elif kind == "func_end":
            fn_lines[id(obj)][1] = i
    names, aliases = printed.names, printed.aliases

    def name(v) -> str:
        n = names.get(id(v))
        return "%" + n if n is not None else "%<undefined>"

    functions, ops, values = [], [], []

    def visit(block, parent, region, fk):
        for op in block.ops:
            k = len(ops)
            at = op_line[id(op)]
            line = op.loc.line if op.loc is not None else None
            origin = op.origin or default_origin
            point = None
            if points is not None:
                p = points.get(id(op))
                point = p[0] if p is not None and p[1] is op else None
            ops.append(OpRecord(k, op.name, tuple(name(r) for r in op.results), tuple(name(v) for v in op.operands),
                                tuple((key, _plain_attr(op.attrs[key])) for key in sorted(op.attrs)), line, at,
                                end_line.get(id(op), at), tuple(region_lines.get(id(op), ())), parent, region, fk,
                                origin, point, _other_file(op.loc, module.functions[0])))
            for r in op.results:
                values.append(ValueRecord(name(r), kind="result", op=op.name, op_index=k, ir_line=at, line=line,
                                          defined_by=origin, **_type_fields(r.type, aliases)))
            for ri, reg in enumerate(op.regions):
                for a in reg.args:
                    values.append(ValueRecord(name(a), kind="arg", op=f"block argument of {op.name}", op_index=k,
                                              ir_line=args_line.get((id(op), ri), at), line=line, defined_by=origin,
                                              **_type_fields(a.type, aliases)))
                visit(reg, k, ri, fk)

    for fk, fn in enumerate(module.functions):
        first, last = fn_lines[id(fn)]
        functions.append(FunctionRecord(fn.name, first, last, fn.source_file, fn.first_line,
                                        tuple(name(a) for a in fn.args)))
        for a in fn.args:
            values.append(ValueRecord(name(a), kind="param", op="parameter", op_index=None, ir_line=first,
                                      line=fn.first_line, defined_by="frontend", **_type_fields(a.type, aliases)))
        visit(fn.body, None, 0, fk)

    extra = {}
    if num_warps is not None:
        extra["num_warps"] = num_warps
        extra["accesses"] = tuple(_accesses(ops, {v.name: v for v in values}, num_warps))
    if points is not None:
        extra.update(_shared(module, ops, len(points)))
    layouts = tuple((alias, text) for text, alias in aliases.items())
    return Snapshot(tuple(functions), tuple(ops), tuple(values), layouts, **extra)


def _accesses(ops, values: dict, num_warps: int):
    """Every tt.load / tt.store of a tensor with a layout, with its vector width and coalescing."""
    for op in ops:
        if op.name not in ("tt.load", "tt.store"):
            continue
        name = op.results[0] if op.name == "tt.load" else (op.operands[1] if len(op.operands) > 1 else None)
        v = values.get(name)
        if v is None or v.layout is None:
            continue
        vec = op.attr("vec") or 1
        yield Access(op.name, name, op.index, op.ir_line, op.line, vec, v.elem_bytes, vec * v.elem_bytes,
                     coalescing(v.layout, v.shape, num_warps, vec, v.elem_bytes))


_BUFFER_FIELDS = ("stages", "stage_bytes", "swizzle", "filled_by", "align")


def _shared(module, ops, n_points) -> dict:
    """The plan's buffers (each with the op owning it) and the barriers, at their program points."""
    by_point = {op.point: op.index for op in ops if op.point is not None}
    buffers = []
    for b in module.shared_plan:
        live = tuple(b.get("live", (0, 0)))
        buffers.append(SharedBuffer(b["op"], b.get("line"), b["offset"], b["size"], live, b.get("reason", ""),
                                    by_point.get(live[0]), mbarriers=tuple(b.get("mbarriers", ())), file=b.get("file"),
                                    **{k: b[k] for k in _BUFFER_FIELDS if k in b}))
    barriers = []
    kernel_ops = [op for op in ops if op.function == 0]
    next_point, upcoming = n_points, []
    for op in reversed(kernel_ops):  # a barrier made after the plan stands at the point of the op it precedes
        if op.point is not None:
            next_point = op.point
        upcoming.append(next_point)
    upcoming.reverse()
    for op, at in zip(kernel_ops, upcoming):
        if op.name == "ttg.barrier":
            barriers.append(Barrier(at, op.index, op.ir_line, op.line, "bar.sync", op.attr("reason", ""), file=op.file))
        elif op.name == "ttg.async_wait":
            pending = op.attr("pending")
            barriers.append(Barrier(at, op.index, op.ir_line, op.line, "cp.async.wait_group",
                                    ASYNC_WAIT_REASON.format(pending="?" if pending is None else pending), pending,
                                    op.file))
    return {"shared_plan": tuple(buffers), "barriers": tuple(barriers), "program_points": n_points}
