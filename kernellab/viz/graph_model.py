"""The dataflow graph of one IR snapshot, as plain nodes, edges and clusters (what `graph.py` draws).

It reads only the trace's records (a `Snapshot`: ops with operands, results, parents and regions; values with
types and layouts). A learner wants to see loads -> dot -> store, not the 40 integer ops that build the
pointers, so with `fold=True` the *expression* values collapse:

- an expression value is the result of a pure index-building op (constants, `make_range`, `splat`,
  `broadcast`, `expand_dims`, integer arithmetic and comparisons, `addptr`, `program_id`, `select` on
  integers, `memdesc_index`), a parameter or a loop-carried value of integer / pointer type, *all of whose
  uses* are themselves expressions or the address operands of a memory op (pointers, masks, `other`, a
  shared-memory view), the condition of a `select`, the bounds of a loop or the condition of an `if`;
- every drawn op that takes expression operands gets one attached node ("address of a") whose lines spell
  the expression out (`a_ptr + (offs_am[:, None]*stride_am + offs_k[None, :])`), with named intermediate
  values defined on lines below; loop bounds and `if` conditions go into their header's label;
- constants are written into the label of the op that uses them.

Structured ops are clusters attached to their op: a loop's cluster holds its header (`for k in range(...)`),
the loop-carried values (with their initial value), the body and the `yield`, whose back edges go to the
loop-carried values; a reduce or scan cluster holds the op and its combine region.

`owner` maps every op index of the snapshot to the node that draws it or that it is folded into (None only
for `tt.return` without operands, the end of the function); `Graph.check()` asserts it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# ops whose results may fold into an expression node (when their result type is an index / pointer / mask /
# shared-memory view and every use is an expression use)
FOLDABLE = frozenset("""
arith.constant arith.addi arith.subi arith.muli arith.divsi arith.divui arith.remsi arith.remui arith.minsi
arith.maxsi arith.minui arith.maxui arith.andi arith.ori arith.xori arith.shli arith.shrsi arith.shrui arith.cmpi
arith.select arith.extsi arith.extui arith.trunci arith.index_cast tt.make_range tt.splat tt.broadcast
tt.expand_dims tt.addptr tt.get_program_id tt.get_num_programs ttg.memdesc_index ttg.memdesc_subview
ttg.convert_layout tt.advance tt.make_tensor_ptr tt.int_to_ptr tt.reshape
""".split())

# op classes, in legend order: (class, legend text, colour)
CLASSES = (
    ("memory", "global memory (load, store, atomic, async copy)", "#4e79a7"),
    ("shared", "shared memory and synchronisation", "#76b7b2"),
    ("dot", "dot (tensor cores)", "#e15759"),
    ("compute", "elementwise compute", "#59a14f"),
    ("reduce", "reduce / scan", "#b07aa1"),
    ("convert", "layout conversion, reshape, transpose", "#edc948"),
    ("control", "control flow (loop, if, yield)", "#f28e2b"),
    ("address", "address, mask and index arithmetic (folded)", "#bab0ac"),
    ("input", "kernel argument, constant, loop-carried value", "#9c755f"),
)
COLORS = {c: col for c, _, col in CLASSES}

_MEMORY = re.compile(r"^tt\.(load|store|atomic\w*|descriptor_\w+|experimental_descriptor\w*|prefetch)$|"
                     r"^ttg?\.async_(copy|tma\w*)$|^ttng?\.\w*tma\w*$")
_SHARED = re.compile(r"^ttg\.(local_\w+|memdesc_\w+|async_commit|async_wait|barrier)$|^ttng?\.\w*(mbarrier|fence)\w*$")
_DOT = re.compile(r"^tt\.dot(_scaled)?$|^ttg\.dot_wait$|^ttng?\.\w*(wgmma|warp_group_dot)\w*$")
_REDUCE = re.compile(r"^tt\.(reduce|scan|histogram)(\.return)?$")
_CONVERT = re.compile(r"^ttg\.convert_layout$|^tt\.(trans|reshape|join|split|cat|broadcast|expand_dims|splat)$")
_CONTROL = re.compile(r"^scf\.|^tt\.(return|call)$")
_ADDRESS = re.compile(r"^tt\.(make_range|addptr|get_program_id|get_num_programs|advance|make_tensor_ptr)$")


def op_class(name: str) -> str:
    """The colour class of an op (see CLASSES)."""
    for cls, rx in (("memory", _MEMORY), ("shared", _SHARED), ("dot", _DOT), ("reduce", _REDUCE),
                    ("control", _CONTROL), ("address", _ADDRESS), ("convert", _CONVERT)):
        if rx.search(name):
            return cls
    if name == "arith.constant":
        return "input"
    return "compute"


# which operands of a memory op are data (everything else is address, mask or `other`)
_DATA_OPERANDS = {"tt.store": {1}, "tt.atomic_cas": {1, 2}, "ttg.local_store": {0}, "tt.descriptor_store": {1}}
_ROLES = {"tt.load": ("ptr", "mask", "other"), "tt.store": ("ptr", "value", "mask"),
          "ttg.async_copy": ("ptr", "smem", "mask", "other"), "ttg.memdesc_index": ("buffer", "stage"),
          "ttg.local_store": ("value", "smem"),
          "arith.select": ("cond", "if true", "if false"), "ttg.local_load": ("smem",),
          "tt.dot": ("A", "B", "acc")}

_BIN = {"arith.addi": ("+", 4), "arith.subi": ("-", 4), "arith.muli": ("*", 5), "arith.divsi": ("//", 5),
        "arith.divui": ("//", 5), "arith.remsi": ("%", 5), "arith.remui": ("%", 5), "arith.andi": ("&", 2),
        "arith.ori": ("|", 1), "arith.xori": ("^", 1), "arith.shli": ("<<", 3), "arith.shrsi": (">>", 3),
        "arith.shrui": (">>", 3), "tt.addptr": ("+", 4)}
_CMP = {"slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "eq": "==", "ne": "!=", "ult": "<", "ule": "<=",
        "ugt": ">", "uge": ">="}
_CALLS = {"arith.minsi": "min", "arith.minui": "min", "arith.maxsi": "max", "arith.maxui": "max"}
_SYNC = {"ttg.async_wait", "ttg.barrier", "ttg.async_commit", "ttg.mbarrier_wait"}
_SHAPE_OPS = {"tt.expand_dims", "tt.broadcast", "tt.splat"}  # on data: folded onto the edge, as `[:, None]`
_TRANSPARENT = {"tt.splat", "tt.broadcast", "ttg.convert_layout", "arith.extsi", "arith.extui", "arith.trunci",
                "arith.index_cast", "tt.reshape", "tt.int_to_ptr"}
MAX_LINE = 52  # characters of one label line before it is cut (the side panel has the full text)
MAX_LINES = 5  # label lines of an expression node
EXPR_WIDTH = 34  # characters of an expression node's line: longer ones wrap (a grey box stays narrow)


@dataclass
class Node:
    """One box: `lines` its label (the first is the title), `cls` its colour class, `op` the op it draws
    (None for parameters and expression nodes), `folded` the ops folded into it, `detail` lines for the side
    panel, `line` its source line, `cluster` the cluster holding it."""

    id: str
    kind: str  # "op", "param", "arg", "expr", "header", "yield"
    cls: str
    lines: list
    op: int | None = None
    folded: list = field(default_factory=list)
    detail: list = field(default_factory=list)
    line: int | None = None
    cluster: str | None = None
    values: list = field(default_factory=list)  # names of the values it defines (for the side panel's types)


@dataclass
class Edge:
    src: str
    dst: str
    kind: str = "data"  # "data", "back" (loop-carried), "init", "invis", "region"
    label: str = ""


@dataclass
class Cluster:
    id: str
    label: str
    kind: str  # "loop", "if", "region", "reduce", "op"
    parent: str | None
    op: int


@dataclass
class Graph:
    nodes: dict
    edges: list
    clusters: dict
    owner: dict  # op index -> node id (None: the function's end)
    fold: bool
    n_ops: int

    def check(self) -> None:
        """Every op of the kernel is drawn or folded into a drawn node (None: the function's end `tt.return`, and
        the ops of functions the kernel calls, before inlining puts them in the kernel)."""
        missing = [i for i in range(self.n_ops) if i not in self.owner]
        assert not missing, f"ops neither drawn nor folded: {missing}"
        bad = [i for i, n in self.owner.items() if n is not None and n not in self.nodes]
        assert not bad, f"ops owned by nodes that are not drawn: {bad}"


def short_type(v, gpu: bool = False) -> str:
    """`f16[128x64]`, `i32`, `ptr<f16>[128x64]`, `smem f16[3x128x64]`; on the GPU stage with the layout's
    alias and kind (`f32[128x128] #L5 mma`)."""
    if v is None:
        return ""
    elem = v.elem.replace("!ptr", "ptr")
    if v.shared is not None:
        s = f"smem {v.shared.elem}[{'x'.join(map(str, v.shared.shape))}]"
        if v.shared.swizzle:
            s += f" swz{v.shared.swizzle}"
        return s
    s = f"{elem}[{'x'.join(map(str, v.shape))}]" if v.shape else elem
    if gpu and v.layout:
        m = re.match(r"#(\w+)<(\d+)?", v.layout)
        kind = m.group(1) if m else "layout"
        if kind == "slice" and m.group(2) is not None:
            inner = re.match(r"#slice<\d+,\s*#(\w+)", v.layout)
            kind = f"slice{m.group(2)}:{inner.group(1) if inner else ''}"
        s += f" {v.alias or ''} {kind}".rstrip() if v.alias else f" {kind}"
    return s


def _disp(name: str) -> str:
    return name[1:] if name.startswith("%") else name


def _named(name: str) -> bool:
    return not re.fullmatch(r"%\d+", name)


def _const_text(op) -> str:
    v = op.attr("value")
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "-inf" if v < 0 else "inf"
        return f"{v:.6g}" if ("e" in f"{v:.6g}" or "." in f"{v:.6g}") else f"{v:.6g}.0"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(map(str, v[:4])) + (", …" if len(v) > 4 else "") + "]"
    return str(v)


def _cut(s: str, n: int = MAX_LINE) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def build_graph(snap, fold: bool = True, gpu: bool = False) -> Graph:
    """The Graph of a Snapshot (see the module's docstring); `gpu` adds layout tags to the types."""
    # the kernel's function only: before inlining, a called function's ops are drawn where they are inlined
    # (and its value names may repeat the kernel's)
    ops, n = snap.ops, len(snap.ops)
    kops = [op for op in ops if op.function == 0]
    kernel_params = set(snap.functions[0].params) if snap.functions else set()
    kvalues = [v for v in snap.values if (v.kind == "param" and v.name in kernel_params
                                          and v.ir_line == snap.functions[0].ir_line)
               or (v.op_index is not None and ops[v.op_index].function == 0)]
    values = {v.name: v for v in kvalues}
    uses: dict = {}  # value name -> [(op index, operand position)]
    for op in kops:
        for k, v in enumerate(op.operands):
            uses.setdefault(v, []).append((op.index, k))
    children: dict = {}  # (op index, region) -> [op index]
    for op in kops:
        if op.parent is not None:
            children.setdefault((op.parent, op.region), []).append(op.index)
    args_of: dict = {}  # (op index, region) -> [block argument names]
    for v in kvalues:
        if v.kind == "arg":
            args_of.setdefault((v.op_index, _region_of_arg(snap, v)), []).append(v.name)
    region_count = {}
    for op in kops:
        region_count[op.index] = max(len(op.region_lines), 0)
    # used constants (a dead one, before DCE removes it, is drawn as a box of its own)
    is_const = {op.index for op in kops if op.name == "arith.constant" and not op.operands and op.results
                and uses.get(op.results[0])}
    const_root: dict = {k: k for k in is_const}  # a splat / broadcast of a constant is that constant
    for op in kops:
        if op.name in _SHAPE_OPS and op.operands and op.results and uses.get(op.results[0]):
            d = values.get(op.operands[0])
            if d is not None and d.kind == "result" and d.op_index in const_root:
                const_root[op.index] = const_root[d.op_index]
    is_const = set(const_root)

    def terminator(p, r):
        kids = children.get((p, r), [])
        return kids[-1] if kids and ops[kids[-1]].name in ("scf.yield", "scf.condition") else None

    def loop_position(arg_name):
        """(for op, j) when `arg_name` is loop-carried value j of an scf.for (not its induction variable)."""
        v = values[arg_name]
        if v.kind != "arg" or ops[v.op_index].name != "scf.for":
            return None
        j = args_of.get((v.op_index, 0), []).index(arg_name) - 1
        return (v.op_index, j) if j >= 0 else None

    # ---- the fold set: values whose every use is an expression use (fixpoint from all candidates)
    def candidate(name):
        v = values.get(name)
        if v is None:
            return False
        index_like = v.elem.startswith(("i", "!ptr", "ptr", "index")) or v.shared is not None
        if v.kind == "param":
            return index_like
        if v.kind == "arg":
            owner = ops[v.op_index].name
            return index_like and owner == "scf.for"
        op = ops[v.op_index]
        if op.name == "scf.for":
            return index_like  # an unused loop result folds with its loop-carried value
        if not uses.get(name):
            return False  # dead (DCE removes it later): drawn, not folded into nothing
        if op.name not in FOLDABLE:
            return False
        return op.index in is_const or index_like

    F = {v.name for v in kvalues if fold and candidate(v.name)}

    def expr_use(i, k):
        op = ops[i]
        if any(r in F for r in op.results) and op.name in FOLDABLE:
            return True
        cls = op_class(op.name)
        if op.name == "ttg.memdesc_index":
            return False  # not folded itself: its users draw it
        if cls in ("memory", "shared"):
            return k not in _DATA_OPERANDS.get(op.name, set())
        if op.name in ("tt.dot", "tt.dot_scaled"):
            return values[op.operands[k]].shared is not None
        if op.name == "arith.select":
            return k == 0
        if op.name == "scf.for":
            if k < 3:
                return True
            names = args_of.get((i, 0), [])
            arg = names[k - 2] if k - 2 < len(names) else None
            res = op.results[k - 3] if k - 3 < len(op.results) else None
            return arg in F and (res is None or res in F)
        if op.name == "scf.if":
            return k == 0
        if op.name == "scf.yield" and op.parent is not None and ops[op.parent].name == "scf.for":
            p = op.parent
            arg = args_of.get((p, 0), [])
            arg = arg[k + 1] if k + 1 < len(arg) else None
            res = ops[p].results[k] if k < len(ops[p].results) else None
            return arg in F and (res is None or res in F)
        return False

    changed = True
    while changed and F:
        changed = False
        for name in list(F):
            v = values[name]
            if v.kind == "result" and ops[v.op_index].index in is_const:
                continue  # constants are always written into their users
            ok = all(expr_use(i, k) for i, k in uses.get(name, ()))
            pos = loop_position(name) if v.kind == "arg" else None
            if pos is not None:  # a loop-carried value folds with its loop result, init and yield as one
                p, j = pos
                res = ops[p].results[j] if j < len(ops[p].results) else None
                ok = ok and (res is None or res in F)
            if v.kind == "result" and ops[v.op_index].name == "scf.for":
                p = v.op_index
                j = ops[p].results.index(name)
                arg = args_of.get((p, 0), [])
                ok = ok and j + 1 < len(arg) and arg[j + 1] in F
            if not ok:
                F.discard(name)
                changed = True
    folded_op = {op.index for op in kops if op.results and all(r in F for r in op.results)
                 and op.name in FOLDABLE} | (is_const if fold else set())

    # ---- expressions
    def expr(name, named_leaves, refs, depth=0):
        """(text, precedence) of a value; named folded values become leaves (and go to `refs`) when asked."""
        v = values.get(name)
        if v is None:
            return _disp(name), 9
        if v.kind != "result":
            if name in F and v.kind == "arg" and loop_position(name) is not None:
                refs.append(name)
            return _disp(name), 9
        op = ops[v.op_index]
        if op.index in is_const:
            return _const_text(ops[const_root[op.index]]), 9
        if name not in F or op.index not in folded_op:
            return _disp(name), 9
        if named_leaves and depth > 0 and _named(name):
            refs.append(name)
            return _disp(name), 9

        def sub(x, prec=0):
            t, p = expr(x, named_leaves, refs, depth + 1)
            return f"({t})" if p < prec else t

        a = op.operands
        if op.name in _TRANSPARENT:
            return expr(a[0], named_leaves, refs, depth + 1)
        if op.name == "tt.make_range":
            return f"arange({op.attr('start', 0)}, {op.attr('end')})", 9
        if op.name == "tt.expand_dims":
            shape = values[op.results[0]].shape
            idx = ["None" if d == op.attr("axis") else ":" for d in range(len(shape))]
            return f"{sub(a[0], 9)}[{', '.join(idx)}]", 9
        if op.name in ("tt.get_program_id", "tt.get_num_programs"):
            return f"{'program_id' if 'id' in op.name else 'num_programs'}({op.attr('axis', 0)})", 9
        if op.name in _BIN:
            sym, p = _BIN[op.name]
            return f"{sub(a[0], p)} {sym} {sub(a[1], p + 1)}", p
        if op.name == "arith.cmpi":
            sym = _CMP.get(op.attr("predicate"), op.attr("predicate"))
            return f"{sub(a[0], 4)} {sym} {sub(a[1], 4)}", 3
        if op.name in _CALLS:
            return f"{_CALLS[op.name]}({sub(a[0])}, {sub(a[1])})", 9
        if op.name == "arith.select":
            return f"{sub(a[1], 1)} if {sub(a[0], 1)} else {sub(a[2], 1)}", 0
        if op.name in ("ttg.memdesc_index", "ttg.memdesc_subview"):
            return f"{sub(a[0], 9)}[{', '.join(sub(x) for x in a[1:])}]", 9
        return f"{op.name.split('.')[-1]}({', '.join(sub(x) for x in a)})", 9

    def expansion(items):
        """Label lines for [(role, value)]: each expression with named leaves, then the leaves' definitions."""
        lines, refs, seen = [], [], set()
        for role, name in items:
            t, _ = expr(name, True, refs)
            lines.append(f"{role} = {t}" if role else t)
        k = 0
        while k < len(refs):
            name = refs[k]
            k += 1
            if name in seen:
                continue
            seen.add(name)
            v = values[name]
            more: list = []
            if v.kind == "arg":
                p, j = loop_position(name)
                init = ops[p].operands[3 + j]
                y = terminator(p, 0)
                nxt = ops[y].operands[j] if y is not None and j < len(ops[y].operands) else None
                t0, _ = expr(init, True, more)
                t1, _ = expr(nxt, True, more, 0) if nxt else ("?", 9)
                lines.append(f"{_disp(name)} = {t0}, then {t1} each iteration")
            else:
                t, _ = expr(name, True, more, 0)
                lines.append(f"{_disp(name)} = {t}")
            refs += more
        return lines

    def folded_slice(names):
        """Op indices folded into an expression of `names` (constants included), and their non-folded inputs."""
        out, inputs, stack, seen = [], [], list(names), set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            v = values.get(name)
            if v is None:
                continue
            if v.kind == "result" and v.op_index in folded_op:
                out.append(v.op_index)
                stack += ops[v.op_index].operands
            elif name in F and v.kind == "arg":
                pos = loop_position(name)
                if pos:
                    p, j = pos
                    stack.append(ops[p].operands[3 + j])
                    y = terminator(p, 0)
                    if y is not None and j < len(ops[y].operands):
                        stack.append(ops[y].operands[j])
            elif name in F:
                continue  # a folded parameter or induction variable: named in the text
            else:
                inputs.append(name)
        return sorted(set(out)), list(dict.fromkeys(inputs))

    # ---- clusters
    nodes: dict = {}
    edges: list = []
    clusters: dict = {}
    owner: dict = {}
    producer: dict = {}  # value name -> node id that the value's edges start from
    vedges: list = []  # (value, destination node, kind, label): resolved to edges once every producer is known
    alias: dict = {}  # result of a folded shape op -> (its operand, edge text, op index)
    shape_ops: dict = {}

    def is_c(x):
        v = values.get(x)
        return fold and v is not None and v.kind == "result" and v.op_index in is_const

    def cluster_of(op_index):
        op = ops[op_index]
        if op.parent is None:
            return None
        p = ops[op.parent]
        return f"c{p.index}_{op.region}" if len(p.region_lines) > 1 else f"c{p.index}"

    def source_bits(op):
        return f"  L{op.line}" if op.line else ""

    for op in kops:
        if not op.region_lines:
            continue
        parent = cluster_of(op.index)
        kind = {"scf.for": "loop", "scf.while": "loop", "scf.if": "if", "tt.reduce": "reduce",
                "tt.scan": "reduce"}.get(op.name, "op")
        label = {"loop": "loop", "if": "if", "reduce": op.name.split(".")[-1]}.get(kind, op.name)
        if op.line:
            label += f" (line {op.line})"
        clusters[f"c{op.index}"] = Cluster(f"c{op.index}", label, kind, parent, op.index)
        if len(op.region_lines) > 1:
            for r in range(len(op.region_lines)):
                name = {"if": ("then", "else")}.get(kind, ())
                lab = name[r] if r < len(name) else f"region {r + 1}"
                clusters[f"c{op.index}_{r}"] = Cluster(f"c{op.index}_{r}", lab, "region", f"c{op.index}", op.index)

    def add(node):
        nodes[node.id] = node
        return node

    # parameters that are drawn
    for fn in snap.functions[:1]:
        for name in fn.params:
            if name in F or not uses.get(name):
                continue
            v = values[name]
            nid = f"p{fn.params.index(name)}"
            add(Node(nid, "param", "input", [_disp(name), short_type(v, gpu)], line=v.line,
                     values=[name], detail=[f"kernel argument {_disp(name)}: {v.type}"]))
            producer[name] = nid

    # block arguments that are drawn (loop-carried values, induction variables, combine-region arguments)
    for (p, r), names in args_of.items():
        op = ops[p]
        for j, name in enumerate(names):
            if name in F:
                continue
            v = values[name]
            if op.name == "scf.for" and r == 0:
                continue  # the loop's own values: drawn below with the header
            nid = f"a{p}_{r}_{j}"
            cl = f"c{p}_{r}" if len(op.region_lines) > 1 else f"c{p}"
            add(Node(nid, "arg", "input", [_disp(name), short_type(v, gpu)], op=None, cluster=cl, line=v.line,
                     values=[name], detail=[f"argument {j} of {op.name}'s region {r + 1}: {v.type}"]))
            producer[name] = nid

    for op in kops:
        cl = cluster_of(op.index)
        if op.index in folded_op:
            continue  # owner set by the expression node it lands in
        if op.name == "tt.return" and not op.operands:
            owner[op.index] = None
            continue
        res = ", ".join(_disp(r) for r in op.results)
        short = op.name.split(".", 1)[-1] if op.name.startswith(("tt.", "arith.", "scf.", "math.")) else op.name
        consts = [(k, x) for k, x in enumerate(op.operands)
                  if values.get(x) and values[x].kind == "result" and values[x].op_index in folded_op
                  and values[x].op_index in is_const]
        if op.name == "scf.for":
            lb, ub, st = op.operands[:3]
            names = args_of.get((op.index, 0), [])
            refs: list = []
            iv = _disp(names[0]) if names else "_"
            bounds = ", ".join(expr(x, True, refs)[0] if (x in F or values[x].op_index in is_const) else _disp(x)
                               for x in (lb, ub, st))
            head = f"for {iv} in range({bounds})"
            folded_in, _ = folded_slice([x for x in (lb, ub, st) if x in F])
            hid = f"o{op.index}"
            add(Node(hid, "header", "control", [_cut(head), f"scf.for{source_bits(op)}"], op=op.index,
                     folded=folded_in, cluster=f"c{op.index}", line=op.line, values=names[:1],
                     detail=expansion([(None, x) for x in (lb, ub, st) if x in F])))
            owner[op.index] = hid
            for i in folded_in:
                owner.setdefault(i, hid)
            for x in (lb, ub, st):
                if x not in F and not is_c(x):
                    vedges.append((x, hid, "data", "bound"))
            if names and names[0] not in F:
                producer[names[0]] = hid
            y = terminator(op.index, 0)
            for j, name in enumerate(names[1:]):
                if name in F:
                    continue
                v = values[name]
                init = op.operands[3 + j]
                lines = [f"{_disp(name)} ⟲", short_type(v, gpu)]
                iv_ = values.get(init)
                if iv_ is not None and iv_.kind == "result" and iv_.op_index in is_const:
                    lines.append(f"initially {_const_text(ops[const_root[iv_.op_index]])}")
                    owner.setdefault(iv_.op_index, f"a{op.index}_0_{j + 1}")
                elif init in F:
                    lines.append(_cut("initially " + expr(init, True, [])[0]))
                nid = f"a{op.index}_0_{j + 1}"
                add(Node(nid, "arg", "input", lines, cluster=f"c{op.index}", line=v.line, values=[name],
                         detail=[f"loop-carried value {j + 1} of the loop at line {op.line}: {v.type}",
                                 f"initial value: {_disp(init)}",
                                 f"leaves the loop as {_disp(op.results[j])}" if j < len(op.results) else ""]))
                producer[name] = nid
                if init not in F and not is_c(init):
                    vedges.append((init, nid, "init", "init"))
                if y is not None:
                    owner_y = f"o{y}"
                    if j < len(op.results):
                        producer[op.results[j]] = owner_y  # the loop's results leave from its yield
            continue
        if op.name == "scf.if":
            refs = []
            c = op.operands[0]
            cond = expr(c, True, refs)[0] if c in F else _disp(c)
            hid = f"o{op.index}"
            folded_in, _ = folded_slice([c] if c in F else [])
            add(Node(hid, "header", "control", [_cut(f"if {cond}"), f"scf.if{source_bits(op)}"], op=op.index,
                     folded=folded_in, cluster=f"c{op.index}", line=op.line, values=list(op.results),
                     detail=expansion([("cond", c)] if c in F else [])))
            owner[op.index] = hid
            for i in folded_in:
                owner.setdefault(i, hid)
            if c not in F:
                vedges.append((c, hid, "data", ""))
            for r_ in op.results:
                producer[r_] = hid
            continue
        if fold and op.name in _SHAPE_OPS and len(op.results) == 1 and op.operands:
            a0 = op.operands[0]
            dims = values[op.results[0]].shape
            shape = "x".join(map(str, dims))
            idx = ", ".join("None" if d == op.attr("axis") else ":" for d in range(len(dims)))
            lab = {"tt.expand_dims": f"[{idx}]", "tt.broadcast": f"→{shape}", "tt.splat": f"splat→{shape}"}[op.name]
            alias[op.results[0]] = (a0, lab, op.index)
            shape_ops[op.index] = alias[op.results[0]]
            continue
        # an op box
        nid = f"o{op.index}"
        kind = "yield" if op.name in ("scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return") else "op"
        title = f"{res} = {short}" if res else short
        if op.name == "tt.store" and len(op.operands) > 1:
            title = f"store {_disp(op.operands[1])}"
        elif op.name == "ttg.async_copy" and len(op.operands) > 1:
            title = f"{short} → {expr(op.operands[1], True, [])[0]}"
        attrs = []
        if op.name in ("tt.reduce", "tt.scan", "tt.expand_dims", "tt.trans") and op.attr("axis") is not None:
            attrs.append(f"axis={op.attr('axis')}")
        if op.name in ("tt.reduce", "tt.scan"):
            body = [ops[i].name.split(".")[-1] for i in children.get((op.index, 0), [])
                    if not ops[i].name.endswith("return")]
            attrs.append("combine: " + ", ".join(body))
        if op.attr("instr"):
            attrs.append(str(op.attr("instr")))
        if op.attr("pending") is not None:
            attrs.append(f"pending={op.attr('pending')}")
        if op.attr("stages"):
            attrs.append(f"{op.attr('stages')} stages")
        if consts:
            attrs.append("with " + ", ".join(_const_text(ops[const_root[values[x].op_index]]) for _, x in consts))
        lines = [_cut(title)]
        t = short_type(values.get(op.results[0]), gpu) if op.results else ""
        lines.append(_cut((t + "  " if t else "") + (f"L{op.line}" if op.line else "")).strip())
        if attrs:
            lines.append(_cut(" · ".join(attrs)))
        add(Node(nid, kind, op_class(op.name), lines, op=op.index, cluster=cl, line=op.line,
                 values=list(op.results)))
        owner[op.index] = nid
        for _, x in consts:
            owner.setdefault(values[x].op_index, nid)
        for r_ in op.results:
            producer[r_] = nid
        # the expression node of its folded operands
        exprs = [(k, x) for k, x in enumerate(op.operands) if x in F and not is_c(x)]
        if exprs:
            roles = _ROLES.get(op.name, ())
            items = [(roles[k] if k < len(roles) else f"operand {k}", x) for k, x in exprs]
            if op.name == "scf.yield":
                continue  # a loop-carried expression: drawn in the nodes that use it
            xid = f"x{op.index}"
            folded_in, inputs = folded_slice([x for _, x in exprs])
            what = {"tt.load": "address of " + res, "tt.store": "address of the " + title,
                    "ttg.async_copy": "address of the copy" + title[len(short):],
                    "arith.select": "condition of " + res,
                    "tt.dot": "shared-memory operands of " + res}.get(op.name, f"index operands of {title}")
            body = expansion(items)
            shown = _wrapped_lines(body)
            add(Node(xid, "expr", "address", [what] + shown, cluster=cl, line=op.line, folded=folded_in,
                     detail=body))
            for i in folded_in:
                owner.setdefault(i, xid)
            edges.append(Edge(xid, nid, "data"))
            for x in inputs:
                vedges.append((x, xid, "data", ""))

    # data edges of drawn ops (after all producers are known)
    for op in kops:
        nid = owner.get(op.index)
        if nid is None or op.index in folded_op or op.name in ("scf.for", "scf.if"):
            continue
        if not nid.startswith("o"):
            continue
        for k, x in enumerate(dict.fromkeys(op.operands)):
            if x in F:
                continue
            v = values.get(x)
            if v is not None and v.kind == "result" and v.op_index in is_const and fold:
                continue
            vedges.append((x, nid, "data", ""))
    # value edges: from the node that made the value, through folded shape ops (their text on the edge)
    for x, dst, kind, label in vedges:
        labels, through = [], []
        while x in alias:
            x, lab, k = alias[x]
            labels.insert(0, lab)
            through.append(k)
        src = producer.get(x)
        if src is None:
            continue
        for k in through:
            owner.setdefault(k, dst)
        text = " ".join(labels) if labels else label
        if labels and kind == "data":
            kind = "shape"
        elif dst.startswith("o") and nodes[dst].op is not None and ops[nodes[dst].op].name in _SYNC:
            kind = "sync"  # a wait or barrier names the buffers it orders: drawn faint
        edges.append(Edge(src, dst, kind, text))
    for k, (x, _, _) in shape_ops.items():  # a shape op nobody drawn uses: folded into its operand's maker
        while x in alias:
            x = alias[x][0]
        owner.setdefault(k, producer.get(x))
    edges = [e for e in edges if e.src in nodes and e.dst in nodes]

    # loop back edges: yield operand j -> loop-carried value j
    for op in kops:
        if op.name != "scf.for":
            continue
        y = terminator(op.index, 0)
        if y is None:
            continue
        for j in range(len(op.results)):
            nid = f"a{op.index}_0_{j + 1}"
            if nid in nodes:
                edges.append(Edge(f"o{y}", nid, "back", "next"))
    # a combine region hangs under its reduce / scan op
    for c in clusters.values():
        if c.kind == "reduce":
            first = next((nid for nid, nd in nodes.items() if nd.cluster == c.id and nid != f"o{c.op}"), None)
            if first:
                edges.append(Edge(f"o{c.op}", first, "region", "combine"))
    # an op with regions (other than a loop or if, drawn by a header) sits in its own cluster, over its regions
    for nid, nd in nodes.items():
        if nd.op is not None and nd.kind == "op" and ops[nd.op].region_lines:
            nd.cluster = f"c{nd.op}"
    # a loop's or if's header heads its cluster: invisible edges to the cluster's first nodes
    for c in clusters.values():
        hid = f"o{c.op}"
        if c.kind not in ("loop", "if") or hid not in nodes:
            continue
        inside = {nid for nid, nd in nodes.items() if nd.cluster == c.id and nid != hid}
        fed = {e.dst for e in edges if e.kind not in ("back", "invis") and e.src in inside}
        edges += [Edge(hid, nid, "invis") for nid in sorted(inside - fed)]
    # a constant (or its splat) belongs to the box that uses it: the op that writes it in its label
    for _ in range(3):
        for k in sorted(is_const):
            if owner.get(k) is None and ops[k].results:
                users = [owner.get(i) for i, _ in uses.get(ops[k].results[0], ())]
                found = next((u for u in users if u is not None), None)
                if found is not None:
                    owner[k] = found
    for op in ops:
        if op.function != 0:
            owner[op.index] = None  # a called function's op: drawn after inlining, where it lands
    edges = _fold_simple_combines(nodes, edges, clusters, owner, ops, children)
    dedup = list(dict.fromkeys((e.src, e.dst, e.kind, e.label) for e in edges))
    return Graph(nodes, [Edge(*e) for e in dedup], clusters, owner, fold, n)


def _fold_simple_combines(nodes, edges, clusters, owner, ops, children):
    """A reduce or scan whose combine region is one op on its two arguments (`maxnumf`, `addf`) is drawn as
    one box: its label already says `combine: maxnumf`, so the region's arguments, op and return (four boxes
    and a dashed cluster per reduce) go, their ops owned by the reduce's box. A longer combine keeps its
    cluster."""
    for c in [c for c in clusters.values() if c.kind == "reduce"]:
        body = [i for i in children.get((c.op, 0), []) if not ops[i].name.endswith("return")]
        if len(body) > 1 or len(ops[c.op].region_lines) != 1:
            continue
        rid = f"o{c.op}"
        inside = {nid for nid, nd in nodes.items() if nd.cluster == c.id and nid != rid}
        if rid not in nodes:
            continue
        for nid in inside:
            del nodes[nid]
        for k, o in owner.items():
            if o in inside:
                owner[k] = rid
        nodes[rid].cluster = c.parent
        nodes[rid].detail.append("the combine region (one op on its two arguments) is drawn in this box")
        del clusters[c.id]
        edges = [e for e in edges if e.src not in inside and e.dst not in inside]
    return edges


def _wrapped_lines(body: list, width: int = EXPR_WIDTH, rows: int = MAX_LINES + 1) -> list:
    """An expression node's label: each line wrapped at spaces to `width` characters (continuations indented),
    at most `rows` rows; what does not fit is counted in a last `… n more lines (click)` row."""
    out: list = []
    for k, line in enumerate(body):
        wrapped = _wrap(line, width)
        if len(out) + len(wrapped) > rows or (len(out) + len(wrapped) == rows and k < len(body) - 1):
            left = len(body) - k
            room = rows - 1 - len(out)
            if room > 0 and len(wrapped) > 1:  # the start of this line, then the count of the rest
                out += wrapped[:room]
            out.append(f"… {left} more line{'s' if left > 1 else ''} (click)")
            return out
        out += wrapped
    return out


def _wrap(line: str, width: int, max_rows: int = 3) -> list:
    """`line` broken at spaces into rows of at most `width` characters, continuations indented by 2; a word
    longer than a row is cut with `…`, as is what is left after `max_rows` rows."""
    if len(line) <= width:
        return [line]
    depth, chars = 0, []
    for ch in line:  # a space inside brackets (`x[:, None]`) does not break
        depth += ch in "([{"
        depth -= ch in ")]}"
        chars.append("\0" if ch == " " and depth > 0 else ch)
    rows, cur = [], ""
    for word in "".join(chars).replace("\0", "\u00a0").split(" "):
        cand = f"{cur} {word}" if cur else word
        limit = width if not rows else width - 2
        if len(cand) <= limit or not cur:
            cur = cand
        else:
            rows.append(cur)
            cur = word
    rows.append(cur)
    rows = [(r if i == 0 else "  " + r).replace("\u00a0", " ") for i, r in enumerate(rows)]
    rows = [_cut(r, width) for r in rows]
    if len(rows) > max_rows:
        rows = rows[:max_rows]
        rows[-1] = rows[-1][:width - 2] + " …"
    return rows


def _region_of_arg(snap, v) -> int:
    """Which region of its op a block argument belongs to (by its printed line)."""
    op = snap.ops[v.op_index]
    r = 0
    for k, at in enumerate(op.region_lines):
        if v.ir_line >= at:
            r = k
    return r


def main_loop(g: Graph, snap) -> str | None:
    """The cluster a user opens the graph for: the loop holding the most boxes among those that hold a dot
    (the matmul's K loop, attention's off-diagonal KV loop), else the loop with the most boxes; None without
    loops."""
    parent = {c.id: c.parent for c in g.clusters.values()}

    def within(cid, loop):
        while cid is not None:
            if cid == loop:
                return True
            cid = parent.get(cid)
        return False

    loops = []
    for c in g.clusters.values():
        if c.kind == "loop":
            inside = [n for n in g.nodes.values() if within(n.cluster, c.id)]
            loops.append((any(n.cls == "dot" for n in inside), len(inside), c.op, c.id))
    if not loops:
        return None
    most = max(n for _, n, _, _ in loops)
    # a loop with a dot first, then one nearly as big as the biggest, then the first in the program (causal
    # attention's two KV loops differ by the mask's few boxes: the first one does most of the work)
    return max(loops, key=lambda t: (t[0], t[1] >= 0.75 * most, -t[2]))[3]
