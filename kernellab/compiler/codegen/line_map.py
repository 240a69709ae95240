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
_SCOPE = re.compile(r"\bscope: !(\d+)")
_DIFILE = re.compile(r'^!(\d+) = !DIFile\(([^)]*)\)', re.M)
_BLOCKFILE = re.compile(r"^!(\d+) = !DILexicalBlockFile\(([^)]*)\)", re.M)
_FILE_REF = re.compile(r"\bfile: !(\d+)")
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)


def llvm_positions(text: str) -> Positions:
    """Per line of LLVM IR text: the source line of its `!dbg` location, and where the `, !dbg !N` text is (the
    views may dim it) — None for lines without one."""
    lines_of, file_of = {}, {}
    meta = text.find("\n!")  # metadata follows the functions: scan only that tail
    start = meta + 1 if meta >= 0 else len(text)
    paths = {}
    for m in _DIFILE.finditer(text, start):
        d, f = re.search(r'directory: "([^"]*)"', m.group(2)), re.search(r'filename: "([^"]*)"', m.group(2))
        paths[m.group(1)] = "/".join(x.group(1) for x in (d, f) if x and x.group(1))
    # a DILexicalBlockFile scope: a line of an inlined @jit helper from another file (lowering_core.DebugLines)
    other = {m.group(1): paths.get(_FILE_REF.search(m.group(2)).group(1)) for m in _BLOCKFILE.finditer(text, start)
             if _FILE_REF.search(m.group(2))}
    for m in _DILOC.finditer(text, start):
        line = _LINE.search(m.group(2))
        if line:
            lines_of[m.group(1)] = int(line.group(1))
            scope = _SCOPE.search(m.group(2))
            file_of[m.group(1)] = other.get(scope.group(1)) if scope else None
    source, loc, files = [], [], []
    for line in text.splitlines():
        i = line.rfind("!dbg !")
        key = line[i + 6:].rstrip() if i > 0 else None
        line_no = lines_of.get(key) if key else None
        files.append(file_of.get(key) if line_no is not None else None)
        if line_no is None:
            source.append(None)
            loc.append(None)
            continue
        start = line.rfind(",", 0, i)
        while start > 0 and line[start - 1] == " ":
            start -= 1
        source.append(line_no)
        loc.append((start, len(line)))
    return Positions(tuple(source), tuple(loc), tuple(files) if any(files) else ())


def ptx_positions(text: str, file_index: int | None = None) -> Positions:
    """Per line of PTX: the source line of the `.loc` in force for an instruction (the `.loc` line itself too);
    None for directives, labels and braces. `file_index` is the kernel's file (default: the first `.file`); a
    `.loc` of another `.file` (an inlined @jit helper's module) gives that file in `files`."""
    names = {int(m.group(1)): m.group(2) for m in _PTX_FILE.finditer(text)}
    if file_index is None:
        file_index = min(names) if names else 1
    source, files, current, cur_file = [], [], None, None
    for line in text.splitlines():
        m = _PTX_LOC.match(line)
        if m:
            idx = int(m.group(1))
            known = (idx == file_index or idx in names) and int(m.group(2)) > 0
            current = int(m.group(2)) if known else None
            cur_file = names.get(idx) if known and idx != file_index else None
            source.append(current)
            files.append(cur_file if current is not None else None)
            continue
        if line.startswith("}"):
            current = cur_file = None
            code = False
        else:  # instructions, inline-asm blocks and the comments around them; not directives, labels, blanks
            st = line.strip()
            code = st and not st.startswith(".") and not (st.endswith(":") and " " not in st)
        source.append(current if code else None)
        files.append(cur_file if code and current is not None else None)
    return Positions(tuple(source), (None,) * len(source), tuple(files) if any(files) else ())
