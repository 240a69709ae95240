"""Make a one-tile-per-program dot kernel persistent: a fixed grid of programs, each walking tiles in turn.

The tutorial matmul launches one program per output tile: each fills its pipeline's stages from empty, runs its K
loop and drains it before its epilogue (convert, store) runs with no load in flight. At short K that epilogue is
a large share of the program. Here the whole body becomes the body of a tile loop,

    pid, P = program_id(0), num_programs(0)
    for i in range(0, cdiv(tiles - pid, P)) {flatten}:     # tiles: a new i32 parameter, the grid the kernel
        tile = pid + i * P                                 #        was written for (grid x of the launch)
        <the body, program_id(0) -> tile, num_programs(0) -> tiles>

(tutorial 09's `for tile in range(pid, tiles, P)`, with a unit step: flatten_loops fuses only loops with constant
steps). The loop carries `flatten=True`, so the GPU pipeline's first pass (flatten_loops) fuses it with the K
loop, and pipeline_dot_operands then copies the next tile's first K-tiles while this tile's last MMAs and its
epilogue run. The interpreter runs the tile IR (the nest), which is how its equality with the kernel as written
is tested. The runtime (kernellab/runtime/persistent.py) compiles this variant of a specialization on demand,
picks P and launches grid (P,) with the tile count appended. The stats carry the dot loop's trip count as an
expression over the kernel's integer parameters (compiler/trip_count.py; None where a bound reads anything else):
`auto` makes only short K loops persistent.

Applies when (else the kernel is left as it was and the stats say why):
- the kernel reads program_id(0) and no program_id / num_programs of axes 1 or 2 (a 1-D grid; the runtime
  checks that the launch's grid is (x, 1, 1));
- its body has one top-level loop, an scf.for with a tl.dot at its top level and no loop inside it, whose bounds
  do not depend on the program id (flatten_loops fuses only such a nest), and no other loop anywhere;
- nothing before that loop or in it writes memory or has a side effect (a tile's prologue may then run ahead);
- no atomic compare-and-swap and no `scf.while` (programs that wait for one another could wait forever when one
  program runs several tiles in turn);
- the kernel ends in a plain return.
Program ids, once replaced by the tile, make each tile's work exactly the work of the program that ran it before:
the tiles run in another order, which changes nothing for a kernel whose tiles do not communicate.
"""
from __future__ import annotations

from ..ir import Block, Function, Module, Op, Value
from ..ops import info, is_pure
from ..rewrite import int_const
from ..trip_count import trip_count
from ..types import int32

NAME = "make_persistent"
DESCRIPTION = "run the kernel's tiles in a loop over a fixed grid of programs, fused with the K loop on the GPU"

TILES = "persistent_tiles"
_CONTROL = ("scf.yield", "scf.if", "scf.for", "scf.condition", "tt.reduce.return", "tt.scan.return")


class Refused(Exception):
    """Why a kernel is not made persistent (the stats say it; the runtime launches the kernel as written)."""


def _writes(op: Op) -> bool:
    return not (is_pure(op) or info(op.name).memory == "read")


def _depends_on_pid(v: Value, fn: Function, seen=None) -> bool:
    """Whether `v` (a scalar computed in the kernel's body) is computed from program_id / num_programs."""
    seen = set() if seen is None else seen
    if id(v) in seen:
        return False
    seen.add(id(v))
    d = v.defining_op
    if d is None:
        return False
    if d.name in ("tt.get_program_id", "tt.get_num_programs"):
        return True
    if d.regions:  # a value an scf.if or a reduction makes: assume the worst
        return True
    return any(_depends_on_pid(o, fn, seen) for o in d.operands)


def _check(fn: Function) -> Op:
    """The kernel's dot loop, or Refused."""
    pids = [op for op in fn.walk() if op.name in ("tt.get_program_id", "tt.get_num_programs")]
    if any(op.attrs.get("axis") != 0 for op in pids):
        raise Refused("the kernel reads program_id / num_programs of axis 1 or 2 (a 1-D grid is needed)")
    if not any(op.name == "tt.get_program_id" for op in pids):
        raise Refused("the kernel does not read program_id(0) (no tile to derive)")
    ret = fn.body.terminator
    if ret is None or ret.name != "tt.return" or ret.operands:
        raise Refused("the kernel does not end in a plain return")
    if any(op.name == "tt.return" for op in fn.walk() if op is not ret):
        raise Refused("the kernel returns early")
    loops = [op for op in fn.body.ops if op.name in ("scf.for", "scf.while")]
    if len(loops) != 1 or loops[0].name != "scf.for":
        raise Refused(f"{len(loops)} top-level loops (one scf.for needed)")
    loop = loops[0]
    nested = [op for top in fn.body.ops for op in top.walk() if op is not loop and op.name in ("scf.for", "scf.while")]
    if nested:
        raise Refused(f"a loop besides the dot loop ({nested[0].name}): flatten_loops fuses a nest of two")
    if not any(op.name == "tt.dot" for op in loop.regions[0].ops):
        raise Refused("the top-level loop has no tl.dot at its top level")
    if any(_depends_on_pid(v, fn) for v in loop.operands[:3]):
        raise Refused("the dot loop's bounds depend on the program id (its trip count differs between tiles)")
    st = int_const(loop.operands[2])
    if st is None or st == 0:
        raise Refused("the dot loop's step is not a constant")
    k = fn.body.ops.index(loop)
    for op in fn.body.ops[:k + 1]:
        for o in op.walk():
            if o.name not in _CONTROL and _writes(o):
                where = "in the dot loop" if o is not op or op is loop else "before the dot loop"
                raise Refused(f"{o.name} {where} has a side effect (a tile's prologue runs ahead of the epilogue "
                              "before it)")
    if any(op.name == "tt.atomic_cas" for op in fn.walk()):
        raise Refused("an atomic compare-and-swap (programs may wait for one another)")
    return loop


def make_persistent(fn: Function) -> dict:
    """Rewrite `fn` into the tile loop (raises Refused, leaving `fn` as it was)."""
    loop = _check(fn)
    trip = trip_count(loop, fn)  # (the bounds as the kernel computes them, before they move)
    loc = loop.loc
    tiles = fn.body.add_arg(int32, TILES)
    fn.arg_attrs.append({})

    def make(name, operands, attrs=None, hint=None):
        return Op(name, operands, [int32], attrs, (), loc, [hint])

    pid = make("tt.get_program_id", [], {"axis": 0}, "program")
    nprog = make("tt.get_num_programs", [], {"axis": 0}, "programs")
    tb = Block([int32], ["tile_iter"])
    step = make("arith.muli", [tb.args[0], nprog.result])
    tile = make("arith.addi", [pid.result, step.result], hint="tile")

    # every program id of the body is now the tile; the grid it was written for is `tiles`
    replaced = 0
    for op in [o for top in fn.body.ops for o in top.walk()]:
        if op.name in ("tt.get_program_id", "tt.get_num_programs"):
            op.result.replace_all_uses_with(tile.result if op.name == "tt.get_program_id" else tiles)
            op.erase()
            replaced += 1

    ret = fn.body.terminator
    body_ops = fn.body.ops[:-1]
    one, zero = make("arith.constant", [], {"value": 1}), make("arith.constant", [], {"value": 0})
    # cdiv(tiles - pid, P), at least 0: the tiles pid, pid + P, ... below `tiles`
    left = make("arith.subi", [tiles, pid.result])
    up = make("arith.addi", [left.result, nprog.result])
    up1 = make("arith.subi", [up.result, one.result])
    div = make("arith.divsi", [up1.result, nprog.result])
    mine = make("arith.maxsi", [div.result, zero.result], hint="my_tiles")
    attrs = {"flatten": True}
    if "num_stages" in loop.attrs:
        attrs["num_stages"] = loop.attrs["num_stages"]
    tloop = Op("scf.for", [zero.result, mine.result, one.result], [], attrs, [tb], loc)
    fn.body.ops = []
    for op in (pid, nprog, one, zero, left, up, up1, div, mine):
        fn.body.append(op)
    tb.append(step)
    tb.append(tile)
    # scalars the tiles share (the tile counts of a grouped order, a K loop's trip count) are computed once, before
    # the tile loop; tensors stay in it (hoisted, an epilogue's tensor would live through the K loop in registers)
    varying = {id(tile.result)}
    for op in body_ops:
        if not op.regions and is_pure(op) and op.results and all(not r.type.shape for r in op.results) \
                and not any(id(v) in varying for v in op.operands):
            fn.body.append(op)
        else:
            tb.append(op)
            varying.update(id(r) for o in op.walk() for r in o.results)
    tb.append(Op("scf.yield", [], [], {}, (), loc))
    fn.body.append(tloop)
    fn.body.append(ret)
    return {"persistent": 1, "program_ids_replaced": replaced, "trip_count": trip}


def run(module: Module) -> dict:
    try:
        return make_persistent(module.kernel)
    except Refused as e:
        return {"persistent": 0, "refused": str(e)}
