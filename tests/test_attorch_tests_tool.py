"""benchmarks/tools/attorch_tests.py (attorch's own tests under kernellab) on a CPU, without attorch: which cases
it selects, how it maps code written for 'cuda' onto the CPU, and a whole run of a tiny stand-in suite written
the way attorch's tests are (a `subset` switch, 'cuda' tensors, `autocast('cuda')`, a kernel through
`import triton`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "benchmarks", "tools", "attorch_tests.py")
sys.path.insert(0, os.path.dirname(TOOL))
import attorch_tests as tool  # noqa: E402  (the tool is a script, not a package)

sys.path.remove(os.path.dirname(TOOL))


def test_selection_drops_the_cases_attorch_returns_from_at_once():
    import torch

    subset = {(96,), (8, 1024)}
    assert tool._runs({"shape": (96,), "amp": True, "input_dtype": torch.float16}, subset, 0)
    assert not tool._runs({"shape": (96,), "amp": False, "input_dtype": torch.float16}, subset, 0)  # returns
    assert not tool._runs({"shape": (4, 2000), "amp": False, "input_dtype": torch.float32}, subset, 0)
    assert tool._runs({"shape": (4, 2000)}, None, 0)
    assert not tool._runs({"shape": (8, 1024)}, subset, 4096)  # over --max-numel
    assert tool._numel({"act": "relu", "x": (3, 5)}) == 15  # a test that names its shape otherwise


def test_cuda_code_runs_on_the_cpu_with_cpu_autocast_in_fp16():
    code = textwrap.dedent("""
        import torch, attorch_tests as t
        t._cuda_to_cpu()
        x = torch.randn(4, 8, device='cuda')
        w = torch.nn.Linear(8, 3, device='cuda')
        assert x.device.type == 'cpu' and w.weight.device.type == 'cpu'
        assert x.to('cuda').device.type == 'cpu' and x.cuda() is x
        with torch.autocast('cuda', enabled=True):
            assert torch.is_autocast_enabled() and torch.get_autocast_dtype('cuda') == torch.float16
            assert w(x).dtype == torch.float16
        assert not torch.is_autocast_enabled()
        assert torch.cuda.get_device_capability() == (9, 0)
        print('ok')
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(TOOL), ROOT]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "ok", r.stderr[-2000:]


SUITE_UTILS = '''
def default_shapes(min_dim=0, max_dim=4, subset=False):
    shapes = [(96,), (4, 200)] if subset else [(96,), (128,), (4, 200), (8, 300)]
    return [s for s in shapes if min_dim <= len(s) <= max_dim]
'''

SUITE_CONFTEST = '''
import pytest

def pytest_addoption(parser):
    parser.addoption('--subset', action='store_true')

@pytest.fixture
def subset(request):
    return request.config.getoption('--subset')
'''

SUITE_LIB = '''
import triton
import triton.language as tl

@triton.jit
def twice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

def twice(x):
    import torch
    y = torch.empty_like(x)
    twice_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
'''

SUITE_TEST = '''
import pytest
import torch
from torch import autocast

import attorch
from .utils import default_shapes


@pytest.mark.parametrize('shape', default_shapes())
@pytest.mark.parametrize('input_dtype', [torch.float32, torch.float16])
@pytest.mark.parametrize('amp', [False, True])
def test_twice(shape, input_dtype, amp, subset):
    if subset and shape not in default_shapes(subset=True):
        return
    if input_dtype is torch.float16 and not amp:
        return
    x = torch.randn(shape, dtype=input_dtype, device='cuda')
    with autocast('cuda', enabled=amp):
        y = attorch.twice(x)
    assert torch.equal(y, x * 2)
    assert shape != (4, 200) or input_dtype is torch.float32, 'a failure to report'


@pytest.mark.parametrize('shape', [(2049, 2)])
def test_without_the_switch(shape):
    x = torch.randn(shape, device='cuda')
    assert torch.equal(attorch.twice(x), x * 2)
'''


def test_a_run_of_a_stand_in_suite_counts_what_ran(tmp_path):
    (tmp_path / "attorch").mkdir()
    (tmp_path / "attorch" / "__init__.py").write_text(SUITE_LIB)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "conftest.py").write_text(SUITE_CONFTEST)
    (tmp_path / "tests" / "utils.py").write_text(SUITE_UTILS)
    (tmp_path / "tests" / "test_twice.py").write_text(SUITE_TEST)
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, TOOL, "--device", "cpu", "--side", "kernellab", "--quick", "--src",
                        str(tmp_path), "--out", str(out)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(out.read_text())["sides"]["kernellab"]
    d = res["files"]["test_twice.py"]
    # subset shapes (96,), (4, 200) x (fp32 no amp, fp32 amp, fp16 amp) + the test without the switch
    assert (d["cases"], d["passed"], d["failed"], d["not_run"]) == (7, 6, 1, 0), d
    (failure,) = d["failures"]
    assert "float16" in failure or "input_dtype1" in failure
    assert "a failure to report" in d["failures"][failure]
