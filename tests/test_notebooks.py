"""The teaching notebooks run top to bottom, headless, on the CPU path (the interpreter; GPU stages built
without a GPU; recorded H200 results) — and, marked `gpu`, live on a GPU.

Each notebook is executed with nbclient on the `python3` kernel of the Python running the tests (the
venv's), first as shipped (SOLUTION = True: every exercise holds its solution, so no cell may fail and every
check cell must report success), then with SOLUTION = False: every exercise uses its starting kernel, and
then each check cell, and only the check cells, must fail with an AssertionError — the checks really check.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernellab as kl
import kernellab.language as tl

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell; a whole notebook takes a few seconds on the CPU


@pytest.fixture(scope="module")
def gpu_stages(tmp_path_factory):
    """The notebooks build the GPU stages of their kernels (`compiled.build_gpu()`), which needs ptxas or
    nvJitLink even without a GPU; where neither exists they cannot run, so their tests skip (with why)."""
    import torch

    from kernellab.errors import ToolchainError

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELLAB_CACHE_DIR", str(tmp_path_factory.mktemp("probe-cache")))
        try:
            _probe_kernel.warmup(torch.zeros(16), BLOCK=16).build_gpu()
        except ToolchainError as e:
            pytest.skip(f"compiled.build_gpu() cannot assemble here (no ptxas or nvJitLink): {e}")


@kl.jit
def _probe_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


def _tags(cell) -> list:
    return list(cell.get("metadata", {}).get("tags", []))


def _code_cells(nb, tag):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and tag in _tags(c)]


def _execute(path: Path, tmp_path: Path, monkeypatch, solution: bool, gpu: bool = False, results_dir=None):
    nb = nbformat.read(path, as_version=4)
    if not solution:
        (i, params), = _code_cells(nb, "parameters")
        assert "SOLUTION = True" in params.source, f"{path.name}: the parameters cell must set SOLUTION = True"
        params.source = params.source.replace("SOLUTION = True", "SOLUTION = False")
    # a private compile cache for the GPU stages: every compile is cold, nothing leaks between runs
    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path / "kernellab-cache"))
    # the notebooks teach from the repository's recorded results: a benchmark run's own results folder
    # (KERNELLAB_RESULTS_DIR, set by a device script) must not hide them (session 15's device run 7)
    monkeypatch.delenv("KERNELLAB_RESULTS_DIR", raising=False)
    if results_dir is not None:
        monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(results_dir))
    if not gpu:  # the CPU path (interpreter, GPU stages built without a GPU, recorded results), also on a GPU machine
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=not solution,
                                     resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    client.execute()
    return nb


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    assert names[:4] == ["01_vector_add.ipynb", "02_softmax.ipynb", "03_layer_norm.ipynb", "04_matmul.ipynb"], names
    assert {"05_attention.ipynb", "07_debugging.ipynb", "08_porting.ipynb"} <= set(names), names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_has_checked_exercises(path):
    """Saved without outputs (small diffs, no stale results); a SOLUTION flag; exercises with assert checks."""
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, \
                f"{path.name}: saved with outputs; clear them before committing"
    nbf = nbformat.reads(path.read_text(), as_version=4)
    assert len(_code_cells(nbf, "parameters")) == 1
    checks = _code_cells(nbf, "check")
    assert len(checks) >= 2, f"{path.name}: expected at least two exercises with check cells"
    for _, cell in checks:
        assert "assert " in cell.source, f"{path.name}: a check cell that asserts nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_green(path, tmp_path, monkeypatch, gpu_stages):
    nb = _execute(path, tmp_path, monkeypatch, solution=True)  # raises CellExecutionError on any failing cell
    for i, cell in _code_cells(nb, "check"):
        text = _text(cell)
        assert "✓" in text, f"{path.name} cell {i}: the check did not report success:\n{text}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_recorded_results(path, tmp_path, monkeypatch, gpu_stages):
    """A working copy away from the checkout (or a results folder of another run) has no recorded figures:
    the cells that quote them say so in one line and the notebook still runs green, checks included."""
    empty = tmp_path / "no-results"
    empty.mkdir()
    nb = _execute(path, tmp_path, monkeypatch, solution=True, results_dir=empty)
    for i, cell in _code_cells(nb, "check"):
        assert "✓" in _text(cell), f"{path.name} cell {i}: the check did not report success:\n{_text(cell)}"
    quoting = [c for c in nb.cells if c.cell_type == "code" and "RECORDED on" in "".join(c.source)
               and "no_recorded(" in "".join(c.source)]
    for cell in quoting:
        assert "no recorded figures here" in _text(cell), _text(cell)


@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_live_on_the_gpu(path, tmp_path, monkeypatch, gpu_stages):
    """On a GPU the same notebooks launch on the GPU, time live and check the roofline fractions."""
    nb = _execute(path, tmp_path, monkeypatch, solution=True, gpu=True)
    texts = [_text(cell) for _, cell in _code_cells(nb, "check")]
    assert any("on the GPU" in t for t in texts), f"{path.name}: no check ran its GPU part"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_checks_fail_on_the_starting_kernels(path, tmp_path, monkeypatch, gpu_stages):
    nb = _execute(path, tmp_path, monkeypatch, solution=False)
    checks = {i for i, _ in _code_cells(nb, "check")}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = _errors(cell)
        if i in checks:
            assert errors and errors[0]["ename"] == "AssertionError", (
                f"{path.name} cell {i}: with SOLUTION = False this check should fail with an AssertionError; got "
                + (f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else f"success:\n{_text(cell)}"))
        else:
            assert not errors, (f"{path.name} cell {i} (not a check) failed with SOLUTION = False: "
                                f"{errors[0]['ename']}: {errors[0]['evalue']}")



@pytest.mark.parametrize("name", ["01_vector_add", "02_softmax", "04_matmul", "05_attention"])
def test_prose_quotes_no_unsourced_measurement(name):
    """A measured share or rate in the prose goes stale with the next benchmark run: the notebooks print the
    recorded ones from the benchmark JSON (roofline.recorded_benchmark), labelled RECORDED. Only the bars
    (`≥ 50%`) and ordinary numbers stay in the markdown and the comments; no figure "measured once" by hand
    (01 and 02 print benchmarks/teaching.py's)."""
    import re

    nb = json.loads((NOTEBOOKS_DIR / f"{name}.ipynb").read_text())
    for i, cell in enumerate(nb["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] == "code":  # comments only: the code computes its percentages
            text = "\n".join(x.split("#", 1)[1] for x in text.splitlines() if "#" in x and "f\"" not in x)
        for m in re.finditer(r"(\S+\s)?(\d+(\.\d+)?)\s?%", text):
            assert m.group(1) and m.group(1).strip() in ("≥", ">=", "**≥"), (name, i, m.group(0))
        assert not re.search(r"\b39\.[67]\b", text), (name, i)
        assert "one-off" not in text and "measured once" not in text.lower(), (name, i)
        assert not re.search(r"\d{3,}\s?GB/s", text), (name, i)
