"""Reading generated PTX in tests."""
from __future__ import annotations

import re


def loop_bodies(ptx: str) -> list:
    """The PTX of each loop, from its header label to its backward branch, in the order of the branches."""
    out = []
    for m in re.finditer(r"bra(?:\.uni)?\s+(\$L__BB\d+_\d+);", ptx):
        start = ptx.find(m.group(1) + ":")
        if 0 <= start < m.start():
            out.append(ptx[start:m.end()])
    return out


def loads_after_copies(ptx: str) -> list:
    """`ld.shared` lines issued after a cp.async with no bar.sync between (straight-line order): the load may
    read bytes the copy (or a faster warp's copy) is overwriting. A stage buffer's own tiles are read by
    ldmatrix or wgmma after a wait's bar.sync, so in a correct kernel this list is empty."""
    out, copying = [], False
    for ln in ptx.splitlines():
        s = ln.strip()
        if s.startswith("cp.async.c"):
            copying = True
        elif s.startswith("bar.sync"):
            copying = False
        elif copying and s.startswith("ld.shared"):
            out.append(s)
    return out


def shared_reuse_hazards(gpu: str) -> list:
    """GPU IR lines (in program order) whose shared buffer overlaps the scratch buffer of the op before them with
    no barrier or wait between: a write overtaking a slower warp's read. Stage buffers (`ttg.local_alloc`) count
    as written where they are allocated."""
    out, pending = [], []
    for ln in gpu.splitlines():
        if re.search(r"ttg\.barrier|tt\.debug_barrier|ttg\.async_wait", ln):
            pending = []
            continue
        m = re.search(r"smem_bytes = (\d+), smem_offset = (\d+)", ln)
        if not m:
            continue
        n, o = int(m.group(1)), int(m.group(2))
        if any(o < po + pn and po < o + n for po, pn in pending):
            out.append(ln.strip())
        pending = [] if "_alloc " in ln else [(o, n)]
    return out
