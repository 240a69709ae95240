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
