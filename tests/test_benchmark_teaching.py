"""benchmarks/teaching.py on a CPU: its cases are the ones notebooks 01 and 02 print, its kernels are their
texts and compute the right thing (interpreter) with the vector widths the prose explains (GPU stages built
without a GPU), the PTX width counter, the JSON it writes as the notebooks read it, and a loud stop without
CUDA. The timing itself runs only on a GPU: `python benchmarks/teaching.py`."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from benchmarks import teaching as T
from kernellab.viz import roofline

BY_ID = {c.id: c for c in T.CASES}


def _quoted_ids() -> set:
    """Every case id the notebooks pass to describe_teaching."""
    ids = set()
    for path in sorted(T.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for call in re.findall(r"describe_teaching\((.*?)\]\)", "".join(cell["source"]), re.S):
                ids |= set(re.findall(r"\"(\w+)\"", call.split("[", 1)[1]))
    return ids


def test_cases_are_exactly_the_ones_the_notebooks_print():
    assert len(BY_ID) == len(T.CASES)
    assert _quoted_ids() == set(BY_ID)
    assert {c.notebook for c in T.CASES} == {"01_vector_add", "02_softmax"}


def test_bytes_moved():
    assert BY_ID["vadd_vec4"].nbytes == 12 * 2**26
    assert BY_ID["vadd_vec4"].shape[0] % 16 == 0 and BY_ID["vadd_vec1"].shape[0] % 16 != 0
    assert BY_ID["softmax_one_row"].nbytes == 8 * 524288 * 128
    assert BY_ID["colsum_once"].nbytes == 4 * (2048 * 65536 + 65536)  # x read once, one sum per column


def test_kernel_sources_are_the_notebooks_text():
    src = T.kernel_source("01_vector_add", "add_kernel")
    assert src.startswith("@kl.jit\ndef add_kernel(") and "%%kernel" not in src
    assert "tl.store(z_ptr + offs, x + y, mask=mask)" in src
    cells = ["".join(c["source"]) for c in json.loads((T.NOTEBOOKS / "02_softmax.ipynb").read_text())["cells"]]
    for name in ("softmax_row_kernel", "softmax_rows_kernel", "col_sum_kernel", "col_sum_once_kernel"):
        body = T.kernel_source("02_softmax", name)
        assert any(body.strip() in c for c in cells), name
    with pytest.raises(LookupError, match="no_such_kernel"):
        T.kernel_source("02_softmax", "no_such_kernel")


def _small(case):
    """The case on a CPU-sized shape that keeps what the compiler specializes on (n mod 16, the row length)."""
    if case.kernel == "add_kernel":
        return dataclasses.replace(case, shape=(4096 - (2**26 - case.shape[0]),))
    if case.column_sums:  # rows and columns multiples of 16 as on the GPU, the last row tile ragged
        return dataclasses.replace(case, shape=(48, 320))
    return dataclasses.replace(case, shape=(37, case.shape[1]))


@pytest.fixture(scope="module")
def kl_kernels(tmp_path_factory):
    return T.load_kernels("kernellab", where=str(tmp_path_factory.mktemp("teaching")))


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.id)
def test_case_runs_correctly_on_the_interpreter(case, kl_kernels):
    small = _small(case)
    t = T.inputs(small, "cpu")
    T.launch(small, kl_kernels[case.kernel], t, "kernellab")
    bound = 1e-4 if small.column_sums else 1e-6  # 48 fp32 additions per column sum, in another order
    assert T.max_error(small, t["out"]["kernellab"], t) < bound
    assert T.max_error(small, T.torch_fn(small, t)(), t) < bound
    with pytest.raises(AssertionError, match="max error"):  # an unwritten (NaN-poisoned) output fails the check
        T.max_error(small, t["out"]["triton"], t)


# (loads, stores); the column sums store one float per thread (128 sums, 128 threads)
EXPECTED_WIDTH = {"vadd_vec4": ("v4", "v4"), "vadd_vec1": ("v1", "v1"), "softmax_one_row": ("v1", "v1"),
                  "softmax_rows": ("v4", "v4"), "colsum_every_iteration": ("v4", "v1"), "colsum_once": ("v4", "v1")}
# the column sums' [BLOCK_N] result goes from the tile's slice layout to the store's, once, after the loop
EXPECTED_CONVERTS = {"colsum_every_iteration": 1, "colsum_once": 1}


@pytest.mark.parametrize("case", T.CASES, ids=lambda c: c.id)
def test_vector_widths_in_the_ptx_are_the_ones_the_prose_explains(case, kl_kernels, tmp_path, monkeypatch):
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    small = _small(case)
    t = T.inputs(small, "cpu")
    try:
        compiled = T.launch(small, kl_kernels[case.kernel], t, "kernellab").build_gpu()
    except ToolchainError as e:
        pytest.skip(f"no ptxas or nvJitLink here: {e}")
    widths = T.ptx_access_widths(compiled.asm["ptx"])
    ld, st = EXPECTED_WIDTH[case.id]
    assert set(widths["ld"]) == {ld} and set(widths["st"]) == {st}, widths
    assert set(T.gpu_ir_vecs(compiled)) == {4 if w == "v4" else 1 for w in (ld, st)}
    assert compiled.asm["gpu"].count("ttg.convert_layout") == EXPECTED_CONVERTS.get(case.id, 0)


def test_exercise_2_start_reduces_across_warps_in_its_loop_and_the_solution_after_it(kl_kernels, tmp_path,
                                                                                      monkeypatch):
    """What notebook 02's exercise 2 says of the two kernels: the start's loop holds a shared-memory reduction
    (and a barrier before it), the solution's loop neither; both keep one cross-warp reduction buffer."""
    from kernellab.errors import ToolchainError

    monkeypatch.setenv("KERNELLAB_CACHE_DIR", str(tmp_path))
    for cid, in_loop in (("colsum_every_iteration", True), ("colsum_once", False)):
        small = _small(BY_ID[cid])
        t = T.inputs(small, "cpu")
        try:
            compiled = T.launch(small, kl_kernels[small.kernel], t, "kernellab").build_gpu()
        except ToolchainError as e:
            pytest.skip(f"no ptxas or nvJitLink here: {e}")
        gpu = compiled.asm["gpu"]
        loop = gpu[gpu.index("scf.for"):gpu.index("scf.yield")]
        assert ("smem_bytes" in loop) == in_loop and ("ttg.barrier" in loop) == in_loop, loop
        assert [b["reason"] for b in compiled.shared_plan if "cross-warp" in b["reason"]] == [
            "cross-warp reduction over 4 warps"]


def test_ptx_access_widths():
    ptx = """
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.v4.b32 {%f1, %f2, %f3, %f4}, [%rd2];
    ld.global.L1::evict_last.b32 %r9, [%rd3];
    ld.global.nc.v2.f32 {%f5, %f6}, [%rd4];
    ld.shared.v4.b32 {%r5, %r6, %r7, %r8}, [%r10];
    cp.async.cg.shared.global [%r11], [%rd5], 16;
    @%p2 st.global.b32 [ %rd6 + 0 ], { %r12 };
    st.global.v4.b32 [%rd7], {%f1, %f2, %f3, %f4};
    """
    assert T.ptx_access_widths(ptx) == {"ld": {"v4": 2, "v1": 1, "v2": 1}, "st": {"v1": 1, "v4": 1}}


def _fake_rows():
    rows = []
    for i, case in enumerate(T.CASES):
        fig = T.figures(case, 1e-3 * (i + 1), 4.0e12)
        rows.append({"id": case.id, "what": case.what, "torch_op": case.torch_op, "bytes": case.nbytes,
                     "kernellab": dict(fig, max_err=0.0, ptx_accesses={"ld": {"v4": 4}, "st": {"v4": 2}}),
                     "triton": dict(fig, max_err=0.0, ptx_accesses={"ld": {"v1": 16}, "st": {"v1": 8}}),
                     "torch": dict(fig, max_err=0.0, op=case.torch_op)})
    rows[1]["triton"] = {"error": "CompilationError: made up"}
    rows[2]["triton"] = None
    return rows


def test_the_json_as_the_notebooks_read_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    peaks = {"gpu": "NVIDIA H200", "bytes_per_s": 4.0e12, "flops_per_s": 7.7e14}
    result = T.make_result(_fake_rows(), peaks, "NVIDIA H200", {"torch": "x"}, 12.0)
    path = T.write_results(result, "teaching")
    assert path.name.endswith("-NVIDIA_H200-teaching.json")
    rec = roofline.recorded_benchmark("teaching")
    assert rec["file"] == f"benchmarks/results/{path.name}" and rec["rows"][0]["id"] == "vadd_vec4"
    # not a roofline file: the recorded roofline (the %%kernel magic, the CLI) keeps reading the others
    assert roofline.recorded_results() == []
    text = roofline.describe_teaching(rec, ["vadd_vec4", "vadd_vec1", "softmax_one_row", "not_recorded"])
    lines = text.splitlines()
    assert lines[0].startswith(f"RECORDED on NVIDIA H200, {result['date']} (benchmarks/results/{path.name}")
    assert lines[1] == "copy bandwidth measured in the same run: 4.00 TB/s"
    assert lines[2] == BY_ID["vadd_vec4"].what
    gbps = 12 * 2**26 / 1e-3 / 1e9
    assert re.search(rf"kernellab\s+{gbps:.0f} GB/s =\s+{gbps / 4000:.0%} of the copy bandwidth", text)
    assert "PTX: ld.global 4x v4, st.global 2x v4" in text and "ld.global 16x scalar" in text
    assert "Triton        ERROR: CompilationError: made up" in text
    assert "Triton        not run" in text and "torch.softmax" in text
    assert lines[-1] == "not_recorded: not in this file (recorded before the case existed)"


def test_no_file_yet_is_one_line_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    assert roofline.recorded_benchmark("teaching") is None
    assert roofline.describe_teaching(None, ["vadd_vec4"]).startswith("no recorded figures yet")


def test_without_cuda_it_stops_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_RESULTS_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        T.main()
    assert not list(tmp_path.iterdir())


def test_the_recorded_file_when_there_is_one():
    """The committed JSON (once run on the H200): every case, every side timed, the widths as the prose says."""
    rec = roofline.recorded_benchmark("teaching")
    if rec is None:
        pytest.skip("no benchmarks/results/*-NVIDIA_H200-teaching.json yet")
    rows = {r["id"]: r for r in rec["rows"]}
    assert rec["peaks"]["bytes_per_s"] > 1e12
    for cid, row in rows.items():
        for impl in T.IMPLS:
            r = row.get(impl) or {}
            assert r.get("gbps", 0) > 0 and r.get("of_copy", 0) > 0, (cid, impl, r.get("error"))
        want = EXPECTED_WIDTH.get(cid)
        # kernellab's widths are the ones the prose explains; Triton's only where the prose says it does the same
        # (the vector add: integer arguments specialized on multiples of 16)
        for impl in ("kernellab", "triton") if cid.startswith("vadd") else ("kernellab",):
            if want:
                assert set(row[impl]["ptx_accesses"]["ld"]) == {want[0]}, (cid, impl, row[impl]["ptx_accesses"])
    missing = sorted(set(BY_ID) - set(rows))
    if missing:
        pytest.skip(f"the recorded file predates cases {missing}: rerun benchmarks/teaching.py on the GPU")
