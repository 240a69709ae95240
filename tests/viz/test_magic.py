"""The `%%kernel` cell magic, driven through a real IPython shell with its display output captured.

Results of runs are checked against torch (the independent reference), not against the magic's own
messages; the messages are checked for what a user must be told (cell line, caret, pass/fail, no GPU).
"""
from __future__ import annotations

import re
import shlex

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("IPython")

from IPython.testing.globalipapp import start_ipython  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

import kernellab  # noqa: E402
import kernellab.viz  # noqa: E402
from kernellab.runtime.jit import CompiledKernel, JITFunction  # noqa: E402
from kernellab.viz import magic  # noqa: E402

ADD = '''def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
'''
RUN = '--args "x, y, z, n" -c BLOCK=256 --grid "(cdiv(n, BLOCK),)"'
HAS_GPU = torch.cuda.is_available()
pytestmark = pytest.mark.filterwarnings("ignore::kernellab.runtime.jit.InterpreterNotice")


class Cell:
    """What one cell did: the shell's result and the text (plain) of everything it displayed."""

    def __init__(self, result, cap):
        self.result, self.cap = result, cap
        self.texts = [o.data.get("text/plain", "") for o in cap.outputs]
        self.htmls = [o.data.get("text/html", "") for o in cap.outputs]

    @property
    def text(self) -> str:
        return "\n".join(self.texts) + self.cap.stdout

    def has(self, pattern: str) -> bool:
        return re.search(pattern, self.text) is not None


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython()
    shell.run_line_magic("load_ext", "kernellab")
    return shell


@pytest.fixture()
def run(ip):
    def go(src: str) -> Cell:
        with capture_output() as cap:
            result = ip.run_cell(src)
        cell = Cell(result, cap)
        # the magic never raises out of the cell: the notebook's kernel survives everything below
        assert result.error_in_exec is None, cell.text
        assert result.error_before_exec is None, cell.text
        return cell

    return go


@pytest.fixture()
def data(ip):
    g = torch.Generator().manual_seed(0)
    n = 1000
    ip.user_ns.update(x=torch.rand(n, generator=g), y=torch.rand(n, generator=g), z=torch.full((n,), float("nan")),
                      n=n, torch=torch)
    ip.user_ns.pop("_kl_last", None)
    return ip.user_ns


@pytest.fixture()
def views(monkeypatch):
    """Record what the magic asks kernellab.viz.show to draw (whether or not show exists yet)."""
    calls = []

    def fake_show(compiled, views=()):
        calls.append((compiled, tuple(views)))

    # through the module's dict: kernellab.viz makes `show` lazily, and without ipywidgets looking it up raises
    monkeypatch.setitem(vars(kernellab.viz), "show", fake_show)
    return calls


# ------------------------------------------------------------------ defining kernels
def test_defines_plain_and_decorated_kernels(run, ip):
    cell = run('''%%kernel
@kl.jit
def decorated(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK))

def plain(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK) * 2)
''')
    assert isinstance(ip.user_ns["decorated"], JITFunction)
    assert isinstance(ip.user_ns["plain"], JITFunction)  # wrapped with kernellab.jit
    assert cell.has(r"defined decorated, plain") and cell.has("--args")
    # their source is findable (linecache), so they compile and run like kernels from a file
    assert "def plain" in ip.user_ns["plain"].src
    buf = torch.zeros(8, dtype=torch.int32)
    ip.user_ns["plain"][(1,)](buf, BLOCK=8)
    assert buf.tolist() == [2 * i for i in range(8)]


def test_returns_none_and_stores_last_compiled(run, ip, data, views):
    cell = run(f"%%kernel {RUN}\n{ADD}")
    assert cell.result.result is None
    ck = ip.user_ns["_kl_last"]
    assert isinstance(ck, CompiledKernel) and ck.trace.kernel == "add_kernel"
    assert "tensor<256x" in ck.asm["tile"]  # -c BLOCK=256 reached the compile
    assert torch.isnan(data["z"]).all()  # compiled only: no --run, nothing launched


def test_helper_device_function_in_the_same_cell(run, ip, data, views):
    run(f'''%%kernel {RUN} --run
def add2(a, b):
    return a + b

def add_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, add2(tl.load(x_ptr + offs, mask=m), tl.load(y_ptr + offs, mask=m)), mask=m)
''')
    torch.testing.assert_close(data["z"], data["x"] + data["y"])


def test_kernel_option_picks_one_of_several(run, ip, data, views):
    two = ADD + '''
def sub_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=m) - tl.load(y_ptr + offs, mask=m), mask=m)
'''
    run(f"%%kernel {RUN} --run\n{two}")  # default: the last kernel of the cell
    assert ip.user_ns["_kl_last"].trace.kernel == "sub_kernel"
    torch.testing.assert_close(data["z"], data["x"] - data["y"])
    run(f"%%kernel {RUN} --run --kernel add_kernel\n{two}")
    assert ip.user_ns["_kl_last"].trace.kernel == "add_kernel"
    torch.testing.assert_close(data["z"], data["x"] + data["y"])
    cell = run(f"%%kernel {RUN} --kernel nope\n{two}")
    assert cell.has("no kernel named 'nope'") and cell.has("add_kernel, sub_kernel")


# ------------------------------------------------------------------ running and checking
def test_run_on_cpu_tensors_and_check_passes(run, ip, data, views):
    cell = run(f'%%kernel {RUN} --run --check "torch.allclose(z, x + y)"\n{ADD}')
    torch.testing.assert_close(data["z"], data["x"] + data["y"], rtol=0, atol=0)
    assert cell.has(r"ran add_kernel\[\(4,\)\] on the CPU interpreter")
    assert cell.has(r"check passed: torch\.allclose\(z, x \+ y\)")
    assert not cell.has("check failed")


def test_check_fails_with_a_message(run, data, views):
    cell = run(f'%%kernel {RUN} --check "torch.allclose(z, x - y)"\n{ADD}')  # --check implies --run
    assert cell.has(r"check failed: torch\.allclose\(z, x - y\)")
    assert cell.has("evaluated to False")
    # what was compared, and by how much it is off (2*y at the worst element)
    worst = float((2 * data["y"]).abs().max())
    assert cell.has(r"compared z with x - y \(allclose\)")
    m = re.search(r"max \|z - \(x - y\)\| = (\S+) at index \((\d+),\)", cell.text)
    assert m and abs(float(m.group(1)) - worst) <= 1e-3 * worst, cell.text
    assert int(m.group(2)) == int((2 * data["y"]).abs().argmax())
    assert cell.has(r"\d+ of 1000 elements differ by more than atol \+ rtol")


def test_check_sees_torch_and_the_notebooks_names_without_importing_them(run, ip, data, views):
    """--check is evaluated in the notebook's namespace plus torch: a notebook that imported torch under
    another name (or not at all) and defined its own reference still checks (the GPU test failed on that)."""
    ip.user_ns.pop("torch")
    try:
        run("def reference(a, b):\n    return a + b")
        cell = run(f'%%kernel {RUN} --check "torch.allclose(z, reference(x, y))"\n{ADD}')
        assert cell.has("check passed"), cell.text
        assert "torch" not in ip.user_ns  # the scope is a copy: nothing leaks into the notebook
    finally:
        ip.user_ns["torch"] = torch


def test_failed_check_as_a_method_and_with_nans(run, ip, data, views):
    ip.user_ns["bad_ref"] = data["x"] + data["y"]
    ip.user_ns["bad_ref"][7] = float("nan")
    cell = run(f'%%kernel {RUN} --check "z.eq(bad_ref).all()"\n{ADD}')
    assert cell.has("check failed") and cell.has(r"compared z with bad_ref \(eq\)")
    assert cell.has(r"at index \(7,\)") and cell.has("NaN: 0 in z, 1 in bad_ref") and cell.has("1 of 1000 elements")


def test_strict_makes_a_failed_check_raise(ip, data, views):
    from kernellab.errors import CheckFailedError, KernelLabError

    with capture_output() as cap:
        res = ip.run_cell(f'%%kernel {RUN} --strict --check "torch.allclose(z, x - y)"\n{ADD}')
    assert isinstance(res.error_in_exec, CheckFailedError) and isinstance(res.error_in_exec, AssertionError)
    assert "max |z - (x - y)|" in str(res.error_in_exec)
    assert any("check failed" in o.data.get("text/plain", "") for o in cap.outputs)  # shown in the cell too
    with capture_output():
        res = ip.run_cell(f'%%kernel {RUN} --strict --check "torch.allclose(z, x + y)"\n{ADD}')
    assert res.error_in_exec is None  # a passing check does not raise
    with capture_output():  # any error the cell shows raises under --strict (a compile error here)
        res = ip.run_cell(f'%%kernel --args "x, y, z" -c BLOCK=256 --strict\n{ADD}')
    assert isinstance(res.error_in_exec, KernelLabError) and not isinstance(res.error_in_exec, AssertionError)


def test_strict_from_the_environment(ip, data, views, monkeypatch):
    from kernellab.errors import CheckFailedError

    monkeypatch.setenv("KERNELLAB_STRICT", "1")
    with capture_output():
        res = ip.run_cell(f'%%kernel {RUN} --check "torch.allclose(z, x - y)"\n{ADD}')
    assert isinstance(res.error_in_exec, CheckFailedError)
    monkeypatch.setenv("KERNELLAB_STRICT", "0")
    with capture_output():
        res = ip.run_cell(f'%%kernel {RUN} --check "torch.allclose(z, x - y)"\n{ADD}')
    assert res.error_in_exec is None


@pytest.mark.parametrize("expr, expect", [
    ("a == b", r"compared a with b \(==\)\n  a = 1.0, b = 2.0"),
    ("torch.allclose(u, v, atol=0.5)", r"max \|u - \(v\)\| = 1 at index \(1, 2\).*1 of 6 elements differ by more "
                                       r"than atol \+ rtol \* \|v\| \(atol=0.5, rtol=1e-05\)"),
    ("torch.equal(u, w)", r"shapes differ: u is \(2, 3\), w is \(4,\)"),
    ("ok()", r"evaluated to False\n\(write the check as torch.allclose"),
])
def test_explain_failed_check(expr, expect):
    u = torch.zeros(2, 3)
    v = u.clone()
    v[1, 2] = 1.0
    scope = {"torch": torch, "a": 1.0, "b": 2.0, "u": u, "v": v, "w": torch.zeros(4), "ok": lambda: False}
    text = magic.explain_failed_check(expr, False, scope)
    assert re.search(expect, text, re.S), text
    assert text.endswith("evaluated to False") or "write the check" in text


def test_check_against_a_reference_with_out(run, data, views):
    ok = run(f'%%kernel {RUN} --out z --check "x.double() + y.double()"\n{ADD}')
    assert ok.has(r"check passed: z matches x\.double\(\) \+ y\.double\(\)") and ok.has(r"max \|error\|")
    bad = run(f'%%kernel {RUN} --out z --check "x + 2 * y" --atol 1e-6 --rtol 0\n{ADD}')
    assert bad.has(r"check failed: z does not match x \+ 2 \* y") and bad.has("Mismatched elements")


def test_check_with_assert_close_returning_none_passes(run, data, views):
    cell = run(f'%%kernel {RUN} --check "torch.testing.assert_close(z, x + y)"\n{ADD}')
    assert cell.has("check passed")
    cell = run(f'%%kernel {RUN} --check "torch.testing.assert_close(z, x * y)"\n{ADD}')
    assert cell.has("check failed")


def test_grid_lambda_keywords_and_launch_options(run, ip, data, views):
    run('%%kernel --args "x, y, z, n=n" -c BLOCK=128 --num-warps 8 --num-stages 2 --target sm_80 '
        '--grid "lambda meta: (cdiv(meta[\'n\'], meta[\'BLOCK\']),)" --run\n' + ADD)
    torch.testing.assert_close(data["z"], data["x"] + data["y"])
    ck = ip.user_ns["_kl_last"]
    assert ck.options["num_warps"] == 8 and ck.options["num_stages"] == 2
    assert ck._built_for == "sm_80" and "cubin" in ck.asm  # GPU stages built without a GPU
    assert ".target sm_80" in ck.asm["ptx"] and ck.num_warps == 8


def test_default_target_builds_gpu_stages_for_the_views(run, ip, data, views):
    run(f"%%kernel {RUN}\n{ADD}")
    ck = ip.user_ns["_kl_last"]
    assert "ptx" in ck.asm and ck._built_for is not None
    assert views[-1][0] is ck and views[-1][1] == ("passes", "linked", "layout", "smem", "code")


def test_views_option(run, data, views):
    run(f"%%kernel {RUN} --views passes,graph\n{ADD}")
    assert views[-1][1] == ("passes", "graph")
    run(f"%%kernel {RUN} --views none\n{ADD}")
    run(f"%%kernel {RUN} --views all\n{ADD}")
    assert views[-1][1] == ("passes", "linked", "layout", "smem", "code", "graph")  # perf is drawn by the magic itself
    assert len(views) == 2  # 'none' showed nothing


def test_quiet_shows_only_results(run, ip, data, views):
    cell = run(f'%%kernel {RUN} -q --check "torch.allclose(z, x + y)"\n{ADD}')
    assert not views and not cell.has("ran add_kernel")
    assert cell.texts == ["check passed: torch.allclose(z, x + y)"]
    assert isinstance(ip.user_ns["_kl_last"], CompiledKernel)


def test_views_fall_back_to_the_pass_summary(run, data, monkeypatch):
    from kernellab.viz import magic

    monkeypatch.setattr(magic, "find_show", lambda: None)  # before the views land, or without ipywidgets
    cell = run(f"%%kernel {RUN} --views passes\n{ADD}")
    assert cell.has("add_kernel: passes") and cell.has(r"frontend\s+yes")


def test_views_that_fail_fall_back_too(run, data, monkeypatch):
    def broken(compiled, views=()):
        raise RuntimeError("view bug")

    monkeypatch.setitem(vars(kernellab.viz), "show", broken)
    cell = run(f"%%kernel {RUN} --views passes\n{ADD}")
    assert cell.has("view bug") and cell.has(r"frontend\s+yes")


# ------------------------------------------------------------------ errors become messages
def test_compile_error_shows_cell_line_and_caret_and_the_shell_survives(run, ip, data, views):
    cell = run(f'''%%kernel {RUN}
def bad_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    q = tl.no_such_builtin(offs)
''')
    # line 1 is the %%kernel line, as the notebook numbers the cell
    assert cell.has(r"CompilationError in kernel 'bad_kernel' at cell line 4")
    lines = cell.texts[0].splitlines()
    src = next(i for i, ln in enumerate(lines) if "q = tl.no_such_builtin(offs)" in ln)
    caret = lines[src + 1]
    assert caret.strip() == "^"
    assert lines[src][caret.index("^"):].startswith("tl.no_such_builtin")
    assert "no_such_builtin" in cell.texts[0].splitlines()[-1]
    assert "_kl_last" not in ip.user_ns
    assert not views
    after = run("40 + 2")
    assert after.result.result == 42


def test_syntax_error_in_the_cell(run):
    cell = run("%%kernel\ndef k(x_ptr):\n    tl.store(x_ptr, )))\n")
    assert cell.has("SyntaxError in the cell at cell line 3") and cell.has(r"\^")


def test_python_error_while_defining(run):
    cell = run("%%kernel\nimport math\nvalue = 1 / 0\ndef k(x_ptr):\n    pass\n")
    assert cell.has("ZeroDivisionError while running the cell at cell line 3") and cell.has("value = 1 / 0")


def test_interpreter_error_is_a_message(run, data, views):
    cell = run(f'''%%kernel {RUN} --run
def oob_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(z_ptr + offs, tl.load(x_ptr + offs))
''')
    assert cell.has("InterpreterError") and cell.has("out of bounds")


def test_sanitize_flag_reports_a_race_and_passes_a_correct_kernel(run, data, views):
    cell = run(f'''%%kernel {RUN} --sanitize
def racy_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    tl.store(z_ptr, tl.program_id(0).to(tl.float32))
''')
    assert cell.has("SanitizerError") and cell.has(r"race \(write-write\)") and cell.has(r"program \(1, 0, 0\)")
    maps = [h for h in cell.htmls if 'aria-label="access map of z_ptr"' in h]
    assert maps and 'stroke="#d62728"' in maps[0]  # the access map, the raced element outlined
    cell = run(f"%%kernel {RUN} --sanitize --check 'torch.equal(z, x + y)'\n{ADD}")
    assert cell.has("sanitizer found no races") and cell.has("check passed")
    assert any('aria-label="access map of z_ptr"' in h and "no findings" in h for h in cell.htmls)


@pytest.mark.parametrize("line, expect", [
    ("--bogus", "bad options.*unrecognized arguments: --bogus"),
    ("--num-warps four", "bad options.*invalid int value"),
    ('--args "x, y', "bad options.*(closing quotation|No closing)"),
    (f"{RUN} --views passes,flames", "unknown view 'flames'.*passes, linked, layout, smem, code, graph, perf"),
    (f"{RUN} --target gfx90a", "bad --target 'gfx90a'"),
    (f"{RUN} --target sm_20", "bad --target"),
    (f"{RUN} -c BLOCK", r"bad -c/--const 'BLOCK'"),
    (f"{RUN} -c BLOCK=undefined_name", "evaluating -c BLOCK failed.*NameError"),
    ('--args "x,, y"', "--args is not a Python expression"),
    ('--args "x, y, z, nope"', "evaluating --args failed.*NameError.*nope"),
    ('--args "x, y, z, n" -c BLOCK=256 --run', "--run needs --grid"),
    (f'{RUN} --grid "(cdiv(n, BLOK),)" --run', "evaluating --grid failed.*BLOK"),
    ("--run", "need --args"),
    (f'{RUN} --out z', "--out needs --check"),
    (f'{RUN} --sizes "n=[1, 2]"', "--sizes needs --bench"),
    (f'{RUN} --bench "x + y" --sizes "n=[1, 2]"', "--sizes needs --setup"),
    (f'{RUN} --check "torch.allclose(z,"', "--check is not a Python expression"),
    (f'{RUN} --check "object()"', "cannot tell whether object\\(\\) passed"),
    ('--args "x, y, z" -c BLOCK=256', "CompilationError.*missing a required argument: 'n'"),
    ('--args "x, y, z, n"', "CompilationError.*missing constexpr argument.*BLOCK"),
])
def test_bad_input_is_a_message_not_an_exception(run, ip, data, views, line, expect):
    cell = run(f"%%kernel {line}\n{ADD}")
    assert re.search(expect, cell.text, re.S), cell.text
    assert "Traceback" not in cell.text and "internal error" not in cell.text
    assert run("1 + 1").result.result == 2


def test_error_messages_render_as_html(run, data):
    cell = run("%%kernel --bogus\n" + ADD)
    assert cell.htmls and "kl-error" in cell.htmls[0] and "--bogus" in cell.htmls[0]


def _declarations(css: str) -> dict:
    """{property: value} of a CSS declaration list ("a:b;c:d")."""
    out = {}
    for decl in css.split(";"):
        name, colon, value = decl.partition(":")
        if colon:
            out[name.strip().lower()] = value.strip()
    return out


def test_every_message_style_with_a_background_sets_a_text_colour():
    """A background without a text colour is light-on-light in a dark theme: each style sets both."""
    styles = list(magic._STYLES.values()) + [magic._PRE_STYLE]
    for kind in list(magic._STYLES) + ["unknown"]:
        page = magic.Message(kind, "title", "text")._repr_mimebundle_()["text/html"]
        styles += re.findall(r'style="([^"]*)"', page)
    with_background = [s for s in styles if {"background", "background-color"} & set(_declarations(s))]
    assert len(with_background) >= len(magic._STYLES) + 1
    for s in with_background:
        assert _declarations(s).get("color"), s


def _cell(ip, line):
    """A %%kernel cell's state with `line` parsed, for driving one step of it."""
    return magic._KernelCell(ip, magic.KernelMagics.kernel.parser.parse_args(shlex.split(line)), line, "")


def _rows(flops):
    return [{"case": "add_kernel", "bytes": 12_000, "flops": flops, "kernellab": {"seconds": 2e-6, "gbps": 6.0},
             "torch": {"seconds": 3e-6, "gbps": 4.0}}]


def add_kernel():
    pass




def test_bench_measures_the_gpu_peaks_once_for_its_roofline(ip, fake_gpu):
    cell = _cell(ip, '--bench "x + y" --flops n')
    with capture_output() as cap:
        cell.report(add_kernel, _rows(1000))
    text = "\n".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert fake_gpu == ["Fake GPU 9000"] and "measuring this GPU's peaks" in text
    assert "peaks: 3.00 TB/s copy" in text and "measured on Fake GPU 9000, 2026-01-01" in text  # the view's caption
    assert any("image/png" in o.data for o in cap.outputs) and "no roofline point" not in text
    with capture_output() as cap:
        cell.report(add_kernel, _rows(1000))
    assert fake_gpu == ["Fake GPU 9000"]  # cached: not measured again
    assert "measuring" not in "\n".join(o.data.get("text/plain", "") for o in cap.outputs)


def test_bench_peaks_that_fail_to_measure_cost_only_the_roofs(ip, fake_gpu, monkeypatch):
    from kernellab.viz import roofline

    def out_of_memory(*args):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(roofline, "_measure", out_of_memory)
    with capture_output() as cap:
        _cell(ip, '--bench "x + y" --flops n').report(add_kernel, _rows(1000))
    text = "\n".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert "measuring this GPU's peaks failed" in text and "CUDA out of memory" in text
    assert "benchmark on Fake GPU 9000" in text and any("image/png" in o.data for o in cap.outputs)


def test_bench_without_flops_says_why_there_is_no_roofline_point(ip, fake_gpu):
    with capture_output() as cap:
        _cell(ip, '--bench "x + y"').report(add_kernel, _rows(None))
    text = "\n".join(o.data.get("text/plain", "") for o in cap.outputs)
    assert "no roofline point: --flops was not given" in text and "Add --flops EXPR" in text
    assert "benchmark on Fake GPU 9000" in text  # the timings are still shown
    assert not any("image/png" in o.data for o in cap.outputs) and fake_gpu == []  # nothing drawn, nothing measured


def test_no_point_note():
    assert magic.no_point_note(_rows(1000)) is None
    assert "--flops" in repr(magic.no_point_note(_rows(None)))
    assert "--bytes" in repr(magic.no_point_note([dict(_rows(1000)[0], bytes=0)]))
    sweep = [dict(_rows(None)[0], case=f"add_kernel n={n}", size={"n": n}) for n in (2**10, 2**12)]
    assert "--flops" in repr(magic.no_point_note(sweep))


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a machine without a GPU")
def test_bench_without_gpu_says_so_and_shows_recorded_results(run, data, views):
    cell = run(f'%%kernel {RUN} --bench "x + y" -q\n{ADD}')
    assert cell.has("--bench needs a CUDA GPU, and this machine has none")
    assert cell.has("recorded on NVIDIA H200, 2026-11-21")  # the recorded view, labeled as such
    assert any("image/png" in o.data for o in cell.cap.outputs)
    torch.testing.assert_close(data["z"], data["x"] + data["y"])  # it still ran on the interpreter


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU fallback of --bench")
def test_bench_on_a_cpu_draws_the_recorded_roofline_once_with_the_kernel_placed(run, data, views, monkeypatch):
    from kernellab.viz import roofline

    made = []
    orig = roofline.PerformanceView.__init__

    def spy(self, *a, **k):
        orig(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(roofline.PerformanceView, "__init__", spy)
    cell = run(f'%%kernel {RUN} --bench "x + y" --flops n --views passes,perf\n{ADD}')
    pngs = [o for o in cell.cap.outputs if "image/png" in o.data]
    assert len(made) == 1 and len(pngs) == 1, "the recorded roofline is drawn once"
    (k,) = made[0].placed
    assert k.label == "add_kernel" and k.flops == 1000 and k.bytes == 3 * 1000 * 4  # x, y, z float32
    assert cell.has("recorded on NVIDIA H200")
    # without --flops: estimated from the tile IR and the grid (4 tiles of 256 adds), labelled so
    cell = run(f'%%kernel {RUN} --bench "x + y" --views passes\n{ADD}')
    (k,) = made[-1].placed
    assert k.label == "add_kernel (estimated)" and k.flops == 4 * 256 and k.bytes == 3 * 1000 * 4
    assert cell.has("estimated from its tile IR")
    # --bench and the perf view share one roofline, and the estimate is said once (it was said twice)
    n = len(made)
    cell = run(f'%%kernel {RUN} --bench "x + y" --views passes,perf\n{ADD}')
    said = [o for o in cell.cap.outputs if "FLOPs and" in o.data.get("text/plain", "")]
    assert len(made) == n + 1 and len(said) == 1
    assert cell.has("Nothing was timed")


def test_compare_two_option_sets(run, ip, data, views):
    cell = run(f'%%kernel {RUN} --compare "BLOCK=128, num_warps=4" "BLOCK=512, num_warps=8"\n{ADD}')
    view = ip.user_ns["_kl_compare"]
    a, b = view.profiles
    assert (a["options"]["BLOCK"], b["options"]["BLOCK"]) == (128, 512) and (a["num_warps"], b["num_warps"]) == (4, 8)
    assert a["cost"]["flops"] == 8 * 128 and b["cost"]["flops"] == 2 * 512  # the grid follows each side's BLOCK
    assert not view.same and cell.has("compare add_kernel") and any("what changed" in h for h in cell.htmls)
    assert isinstance(ip.user_ns["_kl_last"], CompiledKernel)
    cell = run(f'%%kernel {RUN} --compare "num_warps=4" "num_warps=4"\n{ADD}')
    assert cell.has("no differences")
    cell = run(f'%%kernel {RUN} --compare "128" "BLOCK=512"\n{ADD}')
    assert cell.has("--compare takes NAME=VALUE pairs")


def test_perf_view_without_bench_shows_recorded_results(run, data, views):
    cell = run(f"%%kernel {RUN} --views perf\n{ADD}")
    assert cell.has("recorded on NVIDIA H200")


def test_the_real_views_render_or_fall_back(run, ip, data):
    """With kernellab.viz.show as it is (ipywidgets or not), the cell shows something and never raises."""
    cell = run(f"%%kernel {RUN} --run\n{ADD}")
    assert len(cell.cap.outputs) >= 2 and "internal error" not in cell.text


# ------------------------------------------------------------------ documentation
def test_help_lists_every_option(run, ip):
    doc = ip.find_cell_magic("kernel").__doc__
    options = ["--args", "--grid", "-c", "--const", "--num-warps", "--num-stages", "--kernel", "--run", "--check",
               "--out", "--atol", "--rtol", "--bench", "--sizes", "--setup", "--bytes", "--flops", "--views",
               "--target", "--quiet"]
    for opt in options:
        assert re.search(rf"(^|\s|\[){re.escape(opt)}\b", doc), opt
    assert "%%kernel" in doc
    cell = run("%%kernel?")
    for opt in options:
        assert opt in cell.text, opt


@pytest.mark.gpu
def test_run_check_and_bench_on_the_gpu(run, ip, views):
    ip.user_ns.update(x=torch.rand(4096, device="cuda"), y=torch.rand(4096, device="cuda"),
                      z=torch.empty(4096, device="cuda"), n=4096)
    cell = run(f'%%kernel {RUN} --check "torch.allclose(z, x + y)" --bench "x + y" '
               '--sizes "n=[2**12, 2**16]" --flops n '
               '--setup "x = torch.rand(n, device=\'cuda\'); y = torch.rand_like(x); z = torch.empty_like(x)"\n'
               + ADD)
    assert cell.has("on the GPU") and cell.has("check passed")
    assert cell.has("benchmark on") and cell.has("add_kernel n=65536")
    assert any("image/png" in o.data for o in cell.cap.outputs)
