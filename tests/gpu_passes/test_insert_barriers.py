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
