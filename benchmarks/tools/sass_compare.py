"""Per config, kernellab's SASS against Triton's: the main loop's and the epilogue's instruction mix, from the
folder `benchmarks/compile_time.py --dump DIR --out JSON` wrote (both sides built for sm_90a on the CPU).

    PYTHONPATH=. python benchmarks/compile_time.py fused_moe --all-configs --kernel _fused_ --dump DIR --out J
    PYTHONPATH=. python benchmarks/tools/sass_compare.py J DIR [--kernel NAME] [--loop] [--detail]

One line per config and side: registers, spilled bytes, shared bytes (the compiled kernel's dynamic shared memory,
as compile_time.py records it: kernellab's `shared`, Triton's `metadata.shared`), SASS in all; then per innermost
loop (a label
up to a branch back to it; the longest is the main loop): instructions, HGMMA / HMMA, the wgmma waits
(`WARPGROUP.DEPBAR.LE gsb0, N`: the N of each, in order), cp.async (`LDGSTS` by width) and its commit /
wait (`LDGDEPBAR`, `DEPBAR.LE SB0, N`), `BAR.SYNC`, global loads by width, LDS / LDSM, and the integer address
arithmetic (IADD3, IMAD, LEA, SHF, SEL, MOV: what is left of the loop once the memory and math are taken out).
The epilogue (after the main loop): stores by width, STS / LDS (a round trip through shared memory), MUFU.
--detail adds the whole opcode count of the main loop; --loop prints the main loop's SASS of each side.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

INS = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"\s*(\.L_x_\d+):")
ADDR_OPS = ("IADD3", "IMAD", "LEA", "SHF", "SEL", "MOV", "LOP3", "ISETP", "IADD", "VIADD", "SGXT", "PRMT")


def parse(text: str):
    """(labels -> instruction index, instructions without their address)."""
    labels, ins = {}, []
    for ln in text.splitlines():
        m = LABEL.match(ln)
        if m:
            labels[m.group(1)] = len(ins)
        m = INS.match(ln)
        if m:
            ins.append(m.group(2))
    return labels, ins


def opcode(i: str) -> str:
    return re.sub(r"^@!?U?P[T\d]+\s+", "", i).split()[0]


def loops(labels, ins) -> list[tuple[int, int]]:
    """(first, last) instruction of every backward branch's loop, innermost ones only."""
    out = []
    for k, i in enumerate(ins):
        m = re.search(r"BRA.*?(\.L_x_\d+)", i)
        if m and labels.get(m.group(1), k) < k:
            out.append((labels[m.group(1)], k))
    return [lp for lp in out if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in out)]


def summary(body: list[str]) -> dict:
    """Counts over `body`; instructions under `@!PT` (never run: ptxas' padding) are left out."""
    body = [i for i in body if not i.startswith("@!PT ")]
    ops = [opcode(i) for i in body]
    c = collections.Counter(ops)

    def count(pred):
        return sum(v for k, v in c.items() if pred(k))

    def widths(base):
        w = collections.Counter()
        for k, v in c.items():
            if k.split(".")[0] == base:
                m = re.search(r"\.(128|64|U16|S16|U8|S8)\b", k)
                w[m.group(1) if m else "32"] += v
        return dict(sorted(w.items()))

    return {
        "n": len(body),
        "hgmma": count(lambda k: k.startswith("HGMMA")),
        "hmma": count(lambda k: k.startswith("HMMA")),
        "wgmma_waits": [int(re.search(r"0x([0-9a-f]+)", i).group(1), 16) for i in body
                        if opcode(i).startswith("WARPGROUP.DEPBAR")],
        "ldgsts": widths("LDGSTS"),
        "ldgdepbar": c.get("LDGDEPBAR", 0),
        "depbar": [int(re.search(r"0x([0-9a-f]+)", i).group(1), 16) for i in body if opcode(i).startswith("DEPBAR")],
        "bar": count(lambda k: k.startswith("BAR.SYNC") or k.startswith("BAR.ARV")),
        "ldg": widths("LDG"),
        "lds": widths("LDS"),
        "ldsm": count(lambda k: k.startswith("LDSM")),
        "sts": widths("STS"),
        "stg": widths("STG"),
        "mufu": count(lambda k: k.startswith("MUFU")),
        "addr": count(lambda k: k.split(".")[0] in ADDR_OPS or k.split(".")[0][1:] in ADDR_OPS),
        "ops": c,
    }


def _fmt(d) -> str:
    return ",".join(f"{k}:{v}" for k, v in d.items()) if d else "-"


def side_line(path: Path) -> tuple[str, dict | None, list[str]]:
    """(the printed line, the main loop's summary or None, the main loop's instructions) of one side's SASS."""
    line, m, body, _ = _side(path)
    return line, m, body


def _side(path: Path):
    if not path.exists():
        return "(no SASS)", None, [], None
    labels, ins = parse(path.read_text())
    lps = loops(labels, ins)
    if not lps:
        s = summary(ins)
        return f"sass {len(ins)} no loop; stg {_fmt(s['stg'])}", None, [], {"sass": len(ins), "all": s}
    a, b = max(lps, key=lambda lp: lp[1] - lp[0])
    m, e = summary(ins[a:b + 1]), summary(ins[b + 1:])
    others = [f"{y - x + 1}" for x, y in lps if (x, y) != (a, b)]
    line = (f"sass {len(ins):5} | loop {m['n']:4} hgmma {m['hgmma']:2} hmma {m['hmma']:3} "
            f"wait {m['wgmma_waits']} cp.async {_fmt(m['ldgsts'])} commit {m['ldgdepbar']} "
            f"depbar {m['depbar']} bar {m['bar']} ldg {_fmt(m['ldg'])} lds {_fmt(m['lds'])} ldsm {m['ldsm']} "
            f"sts {_fmt(m['sts'])} int {m['addr']}"
            f" | epi stg {_fmt(e['stg'])} sts {_fmt(e['sts'])} lds {_fmt(e['lds'])} mufu {e['mufu']} n {e['n']}"
            + (f" | other loops {' '.join(others)}" if others else ""))
    return line, m, ins[a:b + 1], {"sass": len(ins), "loop": m, "epilogue": e, "other_loops": [int(o) for o in others]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="the JSON compile_time.py --out wrote")
    ap.add_argument("dump")
    ap.add_argument("--kernel")
    ap.add_argument("--loop", action="store_true")
    ap.add_argument("--detail", action="store_true")
    ap.add_argument("--json", help="write the per config summaries (no opcode counts) here")
    a = ap.parse_args(argv)
    rows = json.loads(Path(a.results).read_text())
    rows = rows.get("kernels", rows) if isinstance(rows, dict) else rows
    dump = Path(a.dump)
    out = []
    for r in rows:
        if a.kernel and a.kernel not in r["kernel"]:
            continue
        tag = r.get("dump")
        if not tag:
            continue
        print(f"== {r['kernel']} {r.get('config', '')} ({tag})")
        rec = {"kernel": r["kernel"], "config": r.get("config")}
        for side in ("kernellab", "triton"):
            d = r.get(side) or {}
            head = f"  {side[:3]} regs {d.get('n_regs')} spill {d.get('n_spills')} smem {d.get('shared', '?')}"
            line, m, body, data = _side(dump / f"{tag}.{side}.sass")
            if data is not None:
                for part in ("loop", "epilogue", "all"):
                    if part in data:
                        data[part] = {k: v for k, v in data[part].items() if k != "ops"}
                rec[side] = {"regs": d.get("n_regs"), "spill_bytes": d.get("n_spills"), "shared": d.get("shared"),
                             **data}
            print(f"{head:<40} {line}")
            if a.detail and m:
                print("      " + " ".join(f"{k}:{v}" for k, v in m["ops"].most_common()))
            if a.loop:
                print("\n".join("      " + i for i in body))
        out.append(rec)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
