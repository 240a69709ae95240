"""insert_barriers: a bar.sync only before a shared-memory op whose buffer overlaps one that an
earlier op may still be reading (write-after-read), including across loop back edges."""
from __future__ import annotations

from kernellab.compiler.passes import allocate_shared, insert_barriers

HEADER = """
#L0 = #blocked<[4], [32], [4], [0]>
#L1 = #blocked<[1], [32], [4], [0]>
"""
T0 = "tensor<1024xf32, #L0>"
T1 = "tensor<1024xf32, #L1>"


def conv(name, src, offset, size=4096, to=T1):
    return f"%{name} = ttg.convert_layout %{src} {{smem_bytes = {size}, smem_offset = {offset}}} : {to}"


BARRIER = 'ttg.barrier {reason = "write-after-read on shared memory"}'


def barriers(module):
    return [op for op in module.kernel.walk() if op.name == "ttg.barrier"]


def test_disjoint_buffers_need_no_barrier(check):
    text = HEADER + f"""
tt.func @k(%v: {T0}) {{
  {conv("a", "v", 0)}
  {conv("b", "a", 4096, to=T0)}
  {conv("c", "b", 8192)}
  tt.print %c
  tt.return
}}
"""
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def test_overlapping_buffer_gets_a_barrier(check):
    m, stats = check(insert_barriers, HEADER + f"""
tt.func @k(%v: {T0}) {{
  {conv("a", "v", 0)}
  %x = arith.addf %a, %a : {T1}
  {conv("b", "x", 2048, to=T0)}
  {conv("c", "b", 8192)}
  tt.print %c
  tt.return
}}
""", HEADER + f"""
tt.func @k(%v: {T0}) {{
  {conv("a", "v", 0)}
  %x = arith.addf %a, %a : {T1}
  {BARRIER}
  {conv("b", "x", 2048, to=T0)}
  {conv("c", "b", 8192)}
  tt.print %c
  tt.return
}}
""")
    assert stats == {"barriers": 1}


def test_only_the_most_recent_op_can_have_pending_reads(check):
    """a and c share addresses, but b's own barrier (between its write and read) already waited
    for every read of a."""
    text = HEADER + f"""
tt.func @k(%v: {T0}) {{
  {conv("a", "v", 0)}
  {conv("b", "a", 4096, to=T0)}
  {conv("c", "b", 0)}
  tt.print %c
  tt.return
}}
"""
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def test_explicit_debug_barrier_is_enough(check):
    text = HEADER + f"""
tt.func @k(%v: {T0}) {{
  {conv("a", "v", 0)}
  tt.debug_barrier
  {conv("b", "a", 0, to=T0)}
  ttg.barrier
  {conv("c", "b", 0)}
  tt.print %c
  tt.return
}}
"""
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def loop(body: str, before: str = "", after: str = "") -> str:
    return HEADER + f"""
tt.func @k(%v: {T0}, %n: i32) {{
  %c0 = arith.constant {{value = 0}} : i32
  %c1 = arith.constant {{value = 1}} : i32
  {before}
  %r = scf.for %c0, %n, %c1, %v : {T0} {{
  ^bb(%i: i32, %acc: {T0}):
{body}
  }}
  {after}
  tt.return
}}
"""


def test_loop_back_edge(check):
    """x and z reuse addresses with y in between: within an iteration y's barrier separates them,
    but x of the next iteration directly follows z of the previous one."""
    body = f"""
    {conv("x", "acc", 0)}
    {conv("y", "x", 4096, to=T0)}
    {conv("z", "y", 0)}
    %w = ttg.convert_layout %z : {T0}
    scf.yield %w"""
    m, stats = check(insert_barriers, loop(body), loop(f"""
    {BARRIER}
    {conv("x", "acc", 0)}
    {conv("y", "x", 4096, to=T0)}
    {conv("z", "y", 0)}
    %w = ttg.convert_layout %z : {T0}
    scf.yield %w"""))
    assert stats == {"barriers": 1}
    # the same body with z's buffer moved away needs no barrier at all
    text = loop(body.replace("smem_offset = 0} : tensor<1024xf32, #L1>\n    %w", "smem_offset = 8192} : "
                                                                                  "tensor<1024xf32, #L1>\n    %w"))
    assert "smem_offset = 8192" in text
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def test_single_op_loop_waits_for_its_previous_iteration(check):
    body = f"""
    {conv("x", "acc", 0)}
    %w = arith.addf %x, %x : {T1}
    %y = ttg.convert_layout %w : {T0}
    scf.yield %y"""
    expected_body = f"""
    {BARRIER}
    {conv("x", "acc", 0)}
    %w = arith.addf %x, %x : {T1}
    %y = ttg.convert_layout %w : {T0}
    scf.yield %y"""
    m, stats = check(insert_barriers, loop(body), loop(expected_body))
    assert stats == {"barriers": 1}


def test_loop_of_disjoint_buffers_needs_no_barrier(check):
    text = loop(f"""
    {conv("x", "acc", 0)}
    {conv("y", "x", 4096, to=T0)}
    scf.yield %y""")
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def test_loop_entry_and_exit(check):
    """The op before the loop is pending at the first iteration; after the loop, what any iteration
    (or none, for a zero-trip loop) left pending."""
    before = conv("p", "v", 4096)
    after = conv("q", "r", 0)
    body = f"""
    {conv("x", "acc", 4096)}
    {conv("y", "x", 8192, to=T0)}
    scf.yield %y"""
    m, stats = check(insert_barriers, loop(body, before, after), loop(f"""
    {BARRIER}
    {conv("x", "acc", 4096)}
    {conv("y", "x", 8192, to=T0)}
    scf.yield %y""", before, after))
    # q (at 0) overlaps neither p (4096) nor y (8192): no barrier after the loop
    assert stats == {"barriers": 1}

    after2 = conv("q", "r", 4096)
    m, stats = check(insert_barriers, loop(body, before, after2), loop(f"""
    {BARRIER}
    {conv("x", "acc", 4096)}
    {conv("y", "x", 8192, to=T0)}
    scf.yield %y""", before, BARRIER + "\n  " + after2))
    # q at 4096 overlaps p, which is still pending when the loop runs zero times
    assert stats == {"barriers": 2}


def branch(then: str, after: str) -> str:
    return HEADER + f"""
tt.func @k(%v: {T0}, %c: i1) {{
  {conv("p", "v", 4096)}
  scf.if %c {{
{then}
    scf.yield
  }} {{
    scf.yield
  }}
  {after}
  tt.return
}}
"""


def test_after_scf_if(check):
    then = f"""    {conv("t", "v", 0)}
    tt.print %t"""
    # both paths' pending reads count: p (else path) overlaps q
    m, stats = check(insert_barriers, branch(then, conv("q", "v", 4096)),
                     branch(then, BARRIER + "\n  " + conv("q", "v", 4096)))
    assert stats == {"barriers": 1}
    # t (then path) overlaps q
    m, stats = check(insert_barriers, branch(then, conv("q", "v", 0)),
                     branch(then, BARRIER + "\n  " + conv("q", "v", 0)))
    assert stats == {"barriers": 1}
    # neither does
    text = branch(then, conv("q", "v", 8192))
    m, stats = check(insert_barriers, text, text)
    assert stats == {"barriers": 0}


def test_barrier_inside_a_branch(check):
    then = f"""    {conv("t", "v", 4096)}
    tt.print %t"""
    expected_then = f"""    {BARRIER}
    {conv("t", "v", 4096)}
    tt.print %t"""
    m, stats = check(insert_barriers, branch(then, ""), branch(expected_then, ""))
    assert stats == {"barriers": 1}
    if_op = m.kernel.body.ops[1]
    assert if_op.regions[0].ops[0].name == "ttg.barrier" and not barriers(m)[1:]


PLAN = HEADER + f"""
#L2 = #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>
#L3 = #slice<0, #blocked<[1, 4], [4, 8], [4, 1], [1, 0]>>
#L4 = #blocked<[4, 1], [8, 4], [1, 4], [0, 1]>

tt.func @k(%v: {T0}, %t: tensor<64x32xf32, #L2>) {{
  %a = ttg.convert_layout %v : {T1}
  %cols = tt.reduce %t {{axis = 0}} : tensor<32xf32, #L3> {{
  ^bb(%x1: f32, %y1: f32):
    %z1 = arith.addf %x1, %y1 : f32
    tt.reduce.return %z1
  }}
  %b = ttg.convert_layout %t : tensor<64x32xf32, #L4>
  tt.print %a, %cols, %b
  tt.return
}}
"""


def test_with_allocate_shared_small_plan_has_no_barriers(run_pass):
    m, _ = run_pass(allocate_shared, PLAN)
    from kernellab.compiler.printer import print_module

    _, stats = run_pass(insert_barriers, print_module(m))
    assert stats == {"barriers": 0}


def test_with_allocate_shared_reused_plan_has_barriers(run_pass, monkeypatch):
    monkeypatch.setattr(allocate_shared, "DISJOINT_LIMIT", 0)
    from kernellab.compiler.printer import print_module

    m, _ = run_pass(allocate_shared, PLAN)
    assert [b["offset"] for b in m.shared_plan] == [0, 0, 0]
    m2, stats = run_pass(insert_barriers, print_module(m))
    assert stats == {"barriers": 2}
    names = [op.name for op in m2.kernel.body.ops]
    assert names == ["ttg.convert_layout", "ttg.barrier", "tt.reduce", "ttg.barrier", "ttg.convert_layout",
                     "tt.print", "tt.return"]


def while_loop(before_extra: str, after_loop: str) -> str:
    return HEADER + f"""
tt.func @k(%v: {T0}, %n: i32) {{
  %c0 = arith.constant {{value = 0}} : i32
  %c1 = arith.constant {{value = 1}} : i32
  %r, %ri = scf.while %v, %c0 : {T0}, i32 {{
  ^bb(%a: {T0}, %i: i32):
{before_extra}
    %more = arith.cmpi %i, %n {{predicate = "slt"}} : i1
    scf.condition %more, %a, %i
  }} {{
  ^bb(%b: {T0}, %j: i32):
    {conv("y", "b", 4096)}
    %z = ttg.convert_layout %y : {T0}
    %j1 = arith.addi %j, %c1 : i32
    scf.yield %z, %j1
  }}
  {after_loop}
  tt.return
}}
"""


def test_while_loop_exits_from_the_before_region(check):
    """scf.while leaves from its `before` region: what that region's ops may still be reading is
    pending after the loop, not only what the `after` region left."""
    before = f"    {conv('x', 'a', 0)}\n    tt.print %x"
    m, stats = check(insert_barriers, while_loop(before, conv("q", "v", 0)),
                     while_loop(before, BARRIER + "\n  " + conv("q", "v", 0)))
    assert stats == {"barriers": 1}
    # and within the loop, x (before) and y (after) use disjoint buffers: no barrier inside
    assert all(op.name != "ttg.barrier" for reg in m.kernel.body.ops[2].regions for op in reg.ops)


STAGE_HEADER = """
#L0 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #mma<[2, 2]>
"""
TILE = "tensor<32x32xf16, #L0>"
ACC = "tensor<32x32xf32, #L1>"
STAGE = "!memdesc<1x32x32xf16, order=1,0, pad=8>"
VIEW = "!memdesc<32x32xf16, order=1,0, pad=8>"


def _staged_dot(before_store: str, after_dot: str) -> str:
    """A one-stage buffer at offset 0 (5120 bytes) filled by ttg.local_store and read by a dot."""
    return STAGE_HEADER + f"""
tt.func @k(%a_ptrs: tensor<32x32x!ptr<f16>, #L0>, %b: {TILE}, %v: {ACC}) {{
  %zero = arith.constant {{value = 0.0}} : {ACC}
  %a = tt.load %a_ptrs {{vec = 8}} : {TILE}
{before_store}  %t = ttg.local_alloc {{smem_bytes = 5120, smem_offset = 0, stages = 1}} : {STAGE}
  %i = arith.constant {{value = 0}} : i32
  %s = ttg.memdesc_index %t, %i : {VIEW}
  ttg.local_store %a, %s
  ttg.barrier {{reason = "stored"}}
  %d = tt.dot %s, %b, %zero {{mma = [2, 2], smem_bytes = 2560, smem_offset = 8192}} : {ACC}
{after_dot}  tt.print %d
  tt.return
}}
"""


def test_a_local_store_waits_for_earlier_reads_of_its_addresses():
    """The stage reuses a conversion's scratch (a bigger plan shares addresses by liveness): its stores, which have
    no barrier of their own, must not overtake a slower warp still reading that scratch."""
    from kernellab.compiler.parser import parse_module

    conv_ = "  %w = ttg.convert_layout %v {smem_bytes = 4096, smem_offset = 1024} : tensor<32x32xf32, #L0>\n"
    m = parse_module(_staged_dot(conv_, ""))
    assert insert_barriers.run(m) == {"barriers": 1}
    names = [op.name for op in m.kernel.walk()]
    # before the stage's allocation (its first write) or its store: after the conversion either way
    assert names.index("ttg.convert_layout") < names.index("ttg.barrier") < names.index("ttg.local_store")
    m = parse_module(_staged_dot(conv_.replace("smem_offset = 1024", "smem_offset = 16384"), ""))
    assert insert_barriers.run(m) == {"barriers": 0}  # elsewhere: nothing to wait for


def test_reads_of_a_stage_by_a_dot_are_waited_for():
    """After its last dot the stage's addresses may be reused: a write there waits for the dot's reads."""
    from kernellab.compiler.parser import parse_module

    after = "  %w = ttg.convert_layout %d {smem_bytes = 4096, smem_offset = 0} : tensor<32x32xf32, #L0>\n"
    m = parse_module(_staged_dot("", after))
    assert insert_barriers.run(m) == {"barriers": 1}
    names = [op.name for op in m.kernel.walk()]
    assert names[names.index("ttg.convert_layout") - 1] == "ttg.barrier"


STAGE = "!memdesc<2x32x32xf16, order=1,0, pad=0, swizzle=64>"
TILE = "!memdesc<32x32xf16, order=1,0, pad=0, swizzle=64>"
PTRS = "tensor<32x32x!ptr<f16>, #P1>"


def staged(before: str, after: str = "", offset: int = 0) -> str:
    """A row vector converted through scratch at 0, then a stage buffer at `offset` filled by cp.async
    (the dQ kernel's lse/delta conversions hoisted above its pipelined loop)."""
    text = f"""
#L0 = #blocked<[4], [32], [4], [0]>
#P1 = #blocked<[1, 8], [8, 4], [4, 1], [1, 0]>
#L1 = #blocked<[1], [32], [4], [0]>

tt.func @k(%v: {T0}, %p: {PTRS}) {{
  %c0 = arith.constant {{value = 0}} : i32
  %t = arith.constant {{value = true}} : i1
  {before}
  %s = ttg.local_alloc {{operand = "b", smem_bytes = 4096, smem_offset = {offset}, stages = 2}} : {STAGE}
  %s0 = ttg.memdesc_index %s, %c0 : {TILE}
  ttg.async_copy %p, %s0, %t {{vec = 8}}
  ttg.async_commit
  ttg.async_wait %s {{pending = 0}}
  {after}
  tt.print %a
  tt.return
}}
"""
    return text.replace("#L1", "#L2").replace("#P1", "#L1")  # aliases numbered as the printer does


def test_stage_buffer_reusing_a_scratch_address_waits_for_its_readers(check):
    """A stage buffer placed where a conversion just read (the allocator frees scratch right after its op):
    its first cp.async must not overtake a slower warp's read of the conversion (the attention backward's dQ
    kernel with 4 warps read delta after kT overwrote it, wrong dQ on the GPU run to run)."""
    before = conv("a", "v", 0)
    m, stats = check(insert_barriers, staged(before),
                     staged(before + '\n  ttg.barrier {reason = "write-after-read on shared memory: a buffer '
                            'reuses a scratch address"}'))
    assert stats == {"barriers": 1}
    # elsewhere, or with a barrier already between them, nothing is added
    for text in (staged(before, offset=8192), staged(before + "\n  ttg.barrier")):
        m, stats = check(insert_barriers, text, text)
        assert stats == {"barriers": 0}


def test_scratch_after_a_stage_buffer_waits_for_its_readers(check):
    """Reads of a stage by a dot stay pending: a conversion placed on the buffer's address after its last
    reader waits for them (unless a wait's barrier came between)."""
    dot = """%z = arith.constant {value = 0.0} : tensor<32x32xf32, #P1>
  %d = tt.dot %s0, %s0, %z : tensor<32x32xf32, #P1>
  tt.print %d"""
    a = conv("a", "v", 0)
    m, stats = check(insert_barriers, staged("", dot + "\n  " + a, offset=0),
                     staged("", dot + '\n  ttg.barrier {reason = "write-after-read on shared memory"}\n  ' + a))
    assert stats == {"barriers": 1}
