"""Per-kernel SASS facts of a `compile_time.py --dump DIR` folder, kernellab beside Triton: instructions (no NOPs),
the main loop's instructions (a backward branch's span: the innermost one holding the most tensor-core instructions,
else the largest),
global load / store widths, tensor-core instructions (HGMMA = wgmma, HMMA/IMMA = mma.sync), cp.async (LDGSTS) and
TMA (UTMALDG / UTMASTG) counts, barriers, shared-memory traffic; with registers and spills from the run's JSON.

    python benchmarks/tools/sass_summary.py DIR                 # one line per kernel of DIR
    python benchmarks/tools/sass_summary.py DIR RESULT.json     # a markdown table with registers and spills
"""
from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):", re.M)


def parse(text: str):
    insns, labels = [], {}
    pending = []
    for line in text.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSN.search(line)
        if m:
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            insns.append((addr, m.group(3), m.group(4)))
    return insns, labels


def summary(text: str) -> dict:
    insns, labels = parse(text)
    real = [i for i in insns if i[1] != "NOP"]
    loops = []
    for addr, op, rest in insns:
        if op.startswith("BRA"):
            m = re.search(r"(\.L_x_\d+)", rest)
            if m and m.group(1) in labels and labels[m.group(1)] < addr:
                lo = labels[m.group(1)]
                body = [i for i in real if lo <= i[0] <= addr]
                loops.append(body)
    tc = lambda body: sum(1 for i in body if i[1].split(".")[0] in ("HGMMA", "HMMA", "IMMA", "QGMMA", "IGMMA"))  # noqa: E731
    # the main loop: the innermost one holding the most tensor-core instructions (a persistent kernel's tile loop
    # holds the K loop's too), else the largest
    most = max((tc(b) for b in loops), default=0)
    loop = min((b for b in loops if tc(b) == most), key=len) if most else max(loops, key=len, default=[])
    ops = collections.Counter(i[1] for i in real)

    def widths(prefix):
        c = collections.Counter()
        for _, op, _ in real:
            if op.split(".")[0] == prefix:
                w = [p for p in op.split(".")[1:] if p in ("64", "128", "U8", "S8", "U16", "S16")]
                c[w[-1] if w else "32"] += 1
        return dict(sorted(c.items()))

    first = lambda *names: sum(v for k, v in ops.items() if k.split(".")[0] in names)  # noqa: E731
    return {"sass": len(real), "loop": len(loop), "loop_tc": tc(loop), "ldg": widths("LDG"), "stg": widths("STG"),
            "hgmma": first("HGMMA", "QGMMA", "IGMMA"), "hmma": first("HMMA", "IMMA"), "ldgsts": first("LDGSTS"),
            "tma": first("UTMALDG", "UTMASTG"), "bar": first("BAR"), "lds": first("LDS", "LDSM"),
            "sts": first("STS"), "atom": first("ATOM", "RED", "ATOMG", "REDG"), "shfl": first("SHFL")}


def fmt_w(d):
    return " ".join(f"{k}x{v}" for k, v in d.items()) or "-"


def flags(k, t, kr=None, tr=None) -> list:
    """Where kernellab's build looks worse than Triton's: spills where Triton has none, more than 1.2x the main
    loop's (or the whole kernel's) SASS, narrower or more global accesses, mma.sync where Triton has wgmma, no
    cp.async / TMA where Triton pipelines, many more registers."""
    out = []
    if kr and tr and kr.get("n_spills") and not tr.get("n_spills"):
        out.append("SPILL")
    if kr and tr and kr.get("n_regs") and tr.get("n_regs") and kr["n_regs"] > 1.3 * tr["n_regs"] and \
            kr["n_regs"] - tr["n_regs"] >= 16:
        out.append("REGS")
    if k["loop"] > 1.2 * max(t["loop"], 1) and k["loop"] > 20:
        out.append("LOOP")
    if k["sass"] > 1.2 * t["sass"]:
        out.append("SASS")
    if t["hgmma"] and not k["hgmma"]:
        out.append("MMA")
    if t["ldgsts"] + t["tma"] and not (k["ldgsts"] + k["tma"]):
        out.append("NOPIPE")
    for key, name in (("ldg", "LDG"), ("stg", "STG")):
        if sum(k[key].values()) > sum(t[key].values()):
            out.append(name)
    if k["bar"] > t["bar"] + 2:
        out.append("BAR")
    return out


def table(dump: Path, result: Path):
    """A markdown table: one row per kernel build of `result` (compile_time.py's JSON), SASS facts from `dump`."""
    data = json.loads(result.read_text())
    seen = collections.Counter()
    rows = []
    for r in data["kernels"]:
        i = seen[r["case"]]
        seen[r["case"]] += 1
        stem = f"{r['case']}-{i}-{r['kernel']}"
        kf, tf = dump / f"{stem}.kernellab.sass", dump / f"{stem}.triton.sass"
        kr, tr = r.get("kernellab") or {}, r.get("triton") or {}
        if not kf.exists() or not tf.exists():
            rows.append(f"| {r['case'][3:]} | {r['config']} {r['options']} | {kr.get('error', '')[:40]} "
                        f"{tr.get('error', '')[:40]} | | | | | | |")
            continue
        k, t = summary(kf.read_text()), summary(tf.read_text())
        tc = lambda x: (f"wgmma {x['hgmma']}" if x["hgmma"] else f"mma {x['hmma']}" if x["hmma"] else "-")  # noqa: E731
        pipe = lambda x: (f"cp.async {x['ldgsts']}" if x["ldgsts"] else f"TMA {x['tma']}" if x["tma"] else "-")  # noqa: E731
        opts = r["options"]
        cfg = f"{r['config'].split(' ', 1)[-1] if ' ' in r['config'] else ''} {opts.get('num_warps', 4)}w" \
              f"{opts.get('num_stages', '') and str(opts.get('num_stages')) + 's'}"
        rows.append(
            f"| {r['case'][3:]} | {cfg.strip()} | {kr.get('n_regs')}/{kr.get('n_spills')} | "
            f"{tr.get('n_regs')}/{tr.get('n_spills')} | {k['sass']} / {t['sass']} | {k['loop']} / {t['loop']} | "
            f"{fmt_w(k['ldg'])} / {fmt_w(t['ldg'])}; {fmt_w(k['stg'])} / {fmt_w(t['stg'])} | {tc(k)} / {tc(t)} | "
            f"{pipe(k)} / {pipe(t)} | {k['bar']} / {t['bar']} | {' '.join(flags(k, t, kr, tr))} |")
    head = ("| case | config | kl regs/spill B | Triton regs/spill B | SASS kl / Tri | loop kl / Tri | LDG; STG widths "
            "kl / Tri | tensor cores | pipelining | BAR | flags |\n|---|---|---|---|---|---|---|---|---|---|---|")
    return head + "\n" + "\n".join(rows)


def main():
    dump = Path(sys.argv[1])
    if len(sys.argv) > 2:
        print(table(dump, Path(sys.argv[2])))
        return
    for f in sorted(dump.glob("*.kernellab.sass")):
        stem = f.name[: -len(".kernellab.sass")]
        tf = dump / f"{stem}.triton.sass"
        k = summary(f.read_text())
        t = summary(tf.read_text()) if tf.exists() else None
        t = t or {"sass": 0, "loop": 0, "ldg": {}, "stg": {}, "hgmma": 0, "hmma": 0, "ldgsts": 0, "tma": 0, "bar": 0}
        print(f"{stem[:58]:<58} sass {k['sass']:5}/{t['sass']:5} loop {k['loop']:4}/{t['loop']:4} "
              f"ldg {fmt_w(k['ldg'])}/{fmt_w(t['ldg'])} stg {fmt_w(k['stg'])}/{fmt_w(t['stg'])} "
              f"gmma {k['hgmma']}/{t['hgmma']} mma {k['hmma']}/{t['hmma']} cpasync {k['ldgsts']}/{t['ldgsts']} "
              f"tma {k['tma']}/{t['tma']} bar {k['bar']}/{t['bar']} {' '.join(flags(k, t)) if t['sass'] else ''}")


if __name__ == "__main__":
    main()
