"""Which kernel source line each line of the LLVM IR and the PTX came from (the lab's linked view reads it from
the CompileTrace's `Positions`).

Codegen stamps every LLVM instruction with a `!dbg` DILocation (lowering_core.DebugLines) and LLVM's NVPTX backend
turns them into `.loc FILE LINE COL` directives; reading them back from the text is cheap (one regex pass) and
needs nothing kept from the compile. Both functions return a `Positions` whose `source` has one entry per text
line: the source line, or None for lines that are not code (declarations, labels, metadata)."""
from __future__ import annotations

import re

from ..trace import Positions

_DILOC = re.compile(r"^!(\d+) = !DILocation\(([^)]*)\)", re.M)
_LINE = re.compile(r"\bline: (\d+)")
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)


def llvm_positions(text: str) -> Positions:
    """Per line of LLVM IR text: the source line of its `!dbg` location, and where the `, !dbg !N` text is (the
    views may dim it) — None for lines without one."""
    lines_of = {}
    meta = text.find("\n!")  # metadata follows the functions: scan only that tail
    for m in _DILOC.finditer(text, meta + 1 if meta >= 0 else len(text)):
        line = _LINE.search(m.group(2))
        if line:
            lines_of[m.group(1)] = int(line.group(1))
    source, loc = [], []
    for line in text.splitlines():
        i = line.rfind("!dbg !")
        line_no = lines_of.get(line[i + 6:].rstrip()) if i > 0 else None
        if line_no is None:
            source.append(None)
            loc.append(None)
            continue
        start = line.rfind(",", 0, i)
        while start > 0 and line[start - 1] == " ":
            start -= 1
        source.append(line_no)
        loc.append((start, len(line)))
    return Positions(tuple(source), tuple(loc))


def ptx_positions(text: str, file_index: int | None = None) -> Positions:
    """Per line of PTX: the source line of the `.loc` in force for an instruction (the `.loc` line itself too);
    None for directives, labels and braces. Only `.loc`s of `file_index` count (default: the first `.file`)."""
    if file_index is None:
        m = _PTX_FILE.search(text)
        file_index = int(m.group(1)) if m else 1
    source, current = [], None
    for line in text.splitlines():
        m = _PTX_LOC.match(line)
        if m:
            current = int(m.group(2)) if int(m.group(1)) == file_index and int(m.group(2)) > 0 else None
            source.append(current)
        elif line.startswith("}"):
            current = None
            source.append(None)
        else:  # instructions, inline-asm blocks and the comments around them; not directives, labels, blanks
            st = line.strip()
            code = st and not st.startswith(".") and not (st.endswith(":") and " " not in st)
            source.append(current if code else None)
    return Positions(tuple(source), (None,) * len(source))
