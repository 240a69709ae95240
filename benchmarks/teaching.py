"""The figures the teaching notebooks quote, measured on the kernels the notebooks define.

Notebook 01 compares a vector add with 16-byte (`vec = 4`) and 4-byte (`vec = 1`) accesses; notebook 02 a
softmax with one row per program against several rows per program, and (exercise 2) column sums that reduce
across warps, through shared memory, in every iteration of their loop against ones that reduce once after it.
Each case is compiled from the kernel text in the notebook itself (read from the .ipynb, so the figures mean
what its prose says), by kernellab and by Triton, next to torch's op on the same data. Every output is checked
against float64 before it is timed.

Per case and implementation the JSON records GB/s, the fraction of the copy bandwidth measured in the same run
(`kernellab.viz.roofline.measure_peaks`, as the notebooks' live cells and the recorded peaks measure it) and,
for the two compilers, the widths of the global loads and stores in the PTX, so the file shows which cases
got 16-byte accesses. Writes benchmarks/results/<date>-<gpu>-teaching.json; the notebooks print it through
`kernellab.viz.roofline.recorded_benchmark("teaching")` and `describe_teaching`.

    python benchmarks/teaching.py   # needs a CUDA GPU, torch and (for the comparison) triton; tens of seconds
"""
from __future__ import annotations

import ast
import datetime
import importlib.util
import json
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.idioms import _warm_up_the_gpu  # noqa: E402
from benchmarks.memory_bound import bench, write_results  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
ROUNDS = 3  # each implementation timed in alternating rounds; the median round is recorded
IMPLS = ("kernellab", "triton", "torch")


def cdiv(a, b):
    return (a + b - 1) // b


@dataclass(frozen=True)
class Case:
    """One figure a notebook quotes: `kernel` (a function the notebook defines) on `shape`, launched as the
    notebook launches it; `torch_op` is torch's same operation on the same data."""

    id: str
    notebook: str
    kernel: str
    what: str
    shape: tuple
    torch_op: str
    params: dict = field(default_factory=dict)

    @property
    def column_sums(self) -> bool:
        return self.torch_op == "torch.sum"

    @property
    def out_shape(self) -> tuple:
        return self.shape[1:] if self.column_sums else self.shape

    @property
    def nbytes(self) -> int:
        """Bytes the operation must move: every input read once and the output written once (fp32)."""
        n = 1
        for s in self.shape:
            n *= s
        if self.column_sums:
            return (n + self.shape[1]) * 4
        return (3 if self.kernel == "add_kernel" else 2) * n * 4


N26 = 1 << 26
CASES = [
    Case("vadd_vec4", "01_vector_add", "add_kernel", "vector add, n = 2^26 (a multiple of 16: vec = 4)",
         (N26,), "torch.add", {"BLOCK": 1024}),
    Case("vadd_vec1", "01_vector_add", "add_kernel",
         "vector add, n = 2^26 - 4 (not a multiple of 16: vec = 1)", (N26 - 4,), "torch.add", {"BLOCK": 1024}),
    Case("softmax_one_row", "02_softmax", "softmax_row_kernel",
         "softmax, one row per program, M = 524288, N = 128", (524288, 128), "torch.softmax", {"BLOCK": 128}),
    Case("softmax_rows", "02_softmax", "softmax_rows_kernel",
         "softmax, several rows per program (exercise 1), M = 524288, N = 128", (524288, 128), "torch.softmax",
         {"BLOCK": 128, "ROWS": 4}),
    Case("colsum_every_iteration", "02_softmax", "col_sum_kernel",
         "column sums, a cross-warp tl.sum in every iteration (exercise 2's start), M = 2048, N = 65536",
         (2048, 65536), "torch.sum", {"BLOCK_M": 32, "BLOCK_N": 128}),
    Case("colsum_once", "02_softmax", "col_sum_once_kernel",
         "column sums, one cross-warp tl.sum after the loop (exercise 2's solution), M = 2048, N = 65536",
         (2048, 65536), "torch.sum", {"BLOCK_M": 32, "BLOCK_N": 128}),
]


# ------------------------------------------------------------------------------------ the notebooks' kernels
def kernel_source(notebook: str, name: str) -> str:
    """The text of `@...jit def name(...)` as notebook `notebook` (a stem under notebooks/) defines it: its
    decorator, signature and body, from the first code cell that defines it. Cell magics (`%%kernel ...`,
    `%load_ext`) are blanked before parsing. Raises LookupError when the notebook has no such kernel."""
    nb = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        lines = ["" if line.lstrip().startswith("%") else line for line in lines]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name and node.decorator_list:
                first = min(d.lineno for d in node.decorator_list)
                return "\n".join(lines[first - 1:node.end_lineno]) + "\n"
    raise LookupError(f"notebooks/{notebook}.ipynb defines no jitted kernel named {name!r}")


def load_kernels(jit_module: str, names=None, where: str | None = None) -> dict:
    """The notebooks' kernels compiled by `jit_module` ("kernellab" or "triton"): the notebooks' text, with
    `kl` and `tl` bound to that module and its language, in a module file of its own (Triton reads a kernel's
    source from its file). Returns {kernel name: jitted function}."""
    wanted = dict.fromkeys((c.notebook, c.kernel) for c in CASES if names is None or c.kernel in names)
    header = f"import {jit_module} as kl\nimport {jit_module}.language as tl\n\n\n"
    text = header + "\n\n".join(kernel_source(nb, k) for nb, k in wanted)
    folder = Path(where or tempfile.mkdtemp(prefix="kernellab-teaching-"))
    path = folder / f"teaching_kernels_{jit_module}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"teaching_kernels_{jit_module}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return {k: getattr(mod, k) for _, k in wanted}


# ------------------------------------------------------------------------------------ inputs, launches, checks
def inputs(case: Case, device: str, seed: int = 0) -> dict:
    """Random fp32 inputs and a NaN-poisoned output per implementation (an unwritten element shows)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(case.shape, device=device, generator=g)
    t = {"x": x, "out": {impl: torch.full(case.out_shape, float("nan"), device=device) for impl in IMPLS}}
    if case.kernel == "add_kernel":
        t["y"] = torch.randn(case.shape, device=device, generator=g)
    return t


def launch(case: Case, kernel, t: dict, impl: str):
    """`kernel` launched as the notebook launches it (grid, arguments, default num_warps); returns what the
    launch returns (the compiled kernel, for both compilers)."""
    x, out, p = t["x"], t["out"][impl], case.params
    if case.kernel == "add_kernel":
        n = x.numel()
        return kernel[(cdiv(n, p["BLOCK"]),)](x, t["y"], out, n, BLOCK=p["BLOCK"])
    M, N = x.shape
    if case.column_sums:
        return kernel[(cdiv(N, p["BLOCK_N"]),)](out, x, M, N, x.stride(0), BLOCK_M=p["BLOCK_M"],
                                                BLOCK_N=p["BLOCK_N"])
    if case.kernel == "softmax_row_kernel":
        return kernel[(M,)](out, x, x.stride(0), N, BLOCK=p["BLOCK"])
    return kernel[(cdiv(M, p["ROWS"]),)](out, x, x.stride(0), M, N, ROWS=p["ROWS"], BLOCK=p["BLOCK"])


def torch_fn(case: Case, t: dict):
    """torch's same operation on the same data; the closure returns its output."""
    import torch

    if case.torch_op == "torch.add":
        return lambda: torch.add(t["x"], t["y"], out=t["out"]["torch"])
    if case.column_sums:
        return lambda: torch.sum(t["x"], dim=0, out=t["out"]["torch"])
    return lambda: torch.softmax(t["x"], dim=1)


def reference(case: Case, t: dict):
    import torch

    if case.torch_op == "torch.add":
        return t["x"].double() + t["y"].double()
    if case.column_sums:
        return t["x"].double().sum(dim=0)
    return torch.softmax(t["x"].double(), dim=1)


def max_error(case: Case, got, t: dict) -> float:
    """Largest |got - float64 reference|; raises AssertionError beyond fp32 rounding (or on NaN: unwritten).
    A column sum of M standard normals adds M roundings of values up to about sqrt(M): its bound grows with M."""
    err = (got.double() - reference(case, t)).abs().max().item()
    if not err <= (1e-6 * t["x"].shape[0] if case.column_sums else 1e-5):
        raise AssertionError(f"{case.id}: max error {err:.3g} against float64")
    return err


_ACCESS = re.compile(r"\b(ld|st)\.global((?:\.[A-Za-z0-9_:]+)*)")


def ptx_access_widths(ptx: str) -> dict:
    """Global loads and stores in `ptx` counted by vector width: {"ld": {"v4": 2, "v1": 0, ...}, "st": {...}}
    (`v1`: scalar instructions). A 16-byte fp32 access is `v4`."""
    out = {"ld": {}, "st": {}}
    for op, suffix in _ACCESS.findall(ptx):
        m = re.search(r"\.v(\d)\b", suffix)
        key = f"v{m.group(1) if m else 1}"
        out[op][key] = out[op].get(key, 0) + 1
    return out


def gpu_ir_vecs(compiled) -> list[int]:
    """kernellab's `{vec = N}` on every tt.load / tt.store of the GPU IR, in order."""
    return [int(v) for v in re.findall(r"tt\.(?:load|store) [^\n]*\{vec = (\d+)\}", compiled.asm.get("gpu", ""))]


def figures(case: Case, seconds: float, copy_bytes_per_s: float) -> dict:
    gbps = case.nbytes / seconds / 1e9
    return {"seconds": seconds, "gbps": gbps, "of_copy": gbps * 1e9 / copy_bytes_per_s}


# ------------------------------------------------------------------------------------ the run
def run_case(case: Case, kernels: dict, copy_bytes_per_s: float) -> dict:
    """One case: check each implementation, then time them in ROUNDS alternating rounds (`bench`: L2 flushed,
    launch hidden, median of 200). A failing implementation is recorded with its error, not timed."""
    import torch

    t = inputs(case, "cuda")
    row = {"id": case.id, "notebook": case.notebook, "kernel": case.kernel, "what": case.what,
           "shape": list(case.shape), "params": case.params, "bytes": case.nbytes, "torch_op": case.torch_op}
    fns = {}
    for impl in IMPLS:
        try:
            if impl == "torch":
                fn = torch_fn(case, t)
                row[impl] = {"max_err": max_error(case, fn(), t), "op": case.torch_op}
            else:
                if kernels.get(impl) is None:
                    row[impl] = None
                    continue
                k = kernels[impl][case.kernel]
                compiled = launch(case, k, t, impl)
                torch.cuda.synchronize()
                row[impl] = {"max_err": max_error(case, t["out"][impl], t),
                             "ptx_accesses": ptx_access_widths(compiled.asm["ptx"])}
                if impl == "kernellab":
                    row[impl]["gpu_ir_vec"] = gpu_ir_vecs(compiled)
                fn = (lambda k=k, impl=impl, t=t: launch(case, k, t, impl))
            fns[impl] = fn
        except Exception as e:  # recorded, and printed: a figure that is not there is not faked
            row[impl] = {"error": f"{type(e).__name__}: {e}"[:400]}
    times = {impl: [] for impl in fns}
    _warm_up_the_gpu(0.3)
    for r in range(ROUNDS):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for impl in order:
            times[impl].append(bench(fns[impl]))
    for impl, ts in times.items():
        med = sorted(ts)[len(ts) // 2]
        row[impl].update(figures(case, med, copy_bytes_per_s), rounds=ts)
    return row


def _fmt(row) -> str:
    def one(impl):
        r = row.get(impl)
        if not r:
            return f"{impl} -"
        if "error" in r:
            return f"{impl} ERROR"
        return f"{impl} {r['gbps']:5.0f} GB/s {r['of_copy']:4.0%}"

    widths = ""
    if isinstance(row.get("kernellab"), dict) and "ptx_accesses" in row["kernellab"]:
        widths = f"  kl PTX ld {row['kernellab']['ptx_accesses']['ld']}"
    return f"{row['id']:<22} " + "   ".join(one(i) for i in IMPLS) + widths


def make_result(rows: list, peaks: dict, gpu: str, versions: dict, wall_s: float) -> dict:
    """The JSON the notebooks read (see `kernellab.viz.roofline.describe_teaching`)."""
    return {"benchmark": "teaching", "date": datetime.date.today().isoformat(), "gpu": gpu, "versions": versions,
            "peaks": peaks,
            "figure": "gbps = bytes the operation must move (inputs read once, output written once) / median "
                      "seconds; of_copy = gbps / the copy bandwidth in `peaks` (measure_peaks, same run); "
                      "ptx_accesses = global loads/stores in the PTX by vector width (v4: 16-byte fp32 accesses)",
            "rows": rows, "wall_s": wall_s}


def main() -> int:
    try:
        import torch
    except ImportError:
        raise SystemExit("benchmarks/teaching.py needs torch and a CUDA GPU; nothing was measured") from None
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/teaching.py needs a CUDA GPU and none is available here; nothing was "
                         "measured (the notebooks keep printing the last recorded file)")
    import kernellab
    from kernellab.viz import roofline

    t0 = time.time()
    kernels = {"kernellab": load_kernels("kernellab"), "torch": None}
    try:
        import triton

        kernels["triton"] = load_kernels("triton")
        triton_version = triton.__version__
    except ImportError:
        kernels["triton"], triton_version = None, None
        print("triton is not installed: its column stays empty", file=sys.stderr)
    _warm_up_the_gpu()
    peaks = roofline.measure_peaks(force=True)  # the copy bandwidth of this run, measured as the notebooks do
    rows = []
    for case in CASES:
        rows.append(run_case(case, kernels, peaks["bytes_per_s"]))
        torch.cuda.empty_cache()  # the case's tensors are gone with its closures
        print(_fmt(rows[-1]), flush=True)
    versions = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
                "kernellab": kernellab.__version__, "cuda": torch.version.cuda}
    result = make_result(rows, peaks, torch.cuda.get_device_name(), versions, time.time() - t0)
    path = write_results(result, "teaching")
    print(f"\ncopy bandwidth {peaks['bytes_per_s'] / 1e12:.2f} TB/s; wrote {path} in {result['wall_s']:.0f} s")
    errors = [f"{r['id']} {impl}" for r in rows for impl in IMPLS if isinstance(r.get(impl), dict)
              and "error" in r[impl]]
    if errors:
        print("FAILED (recorded as errors): " + ", ".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
