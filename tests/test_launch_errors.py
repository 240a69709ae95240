"""Bad launches get clear kernellab errors (GPU cases run where CUDA is available), and a machine
without a GPU says once that kernels run on the interpreter."""
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.runtime import jit as J

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@kl.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@kl.jit
def big_dot_kernel(a_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, a))


def test_interpreter_notice_once(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the notice is for machines without a GPU")
    monkeypatch.setattr(J, "_NOTICE", [])
    x = torch.randn(10)
    y = torch.empty_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copy_kernel[(1,)](x, y, 10, BLOCK=16)
        copy_kernel[(1,)](x, y, 10, BLOCK=16)
    notices = [w for w in caught if issubclass(w.category, J.InterpreterNotice)]
    assert len(notices) == 1 and "CPU interpreter" in str(notices[0].message)


def test_cpu_tensors_on_a_gpu_machine_say_they_run_on_the_interpreter(monkeypatch):
    """With a GPU present, CPU tensors still run (on the interpreter), but never silently."""
    monkeypatch.setattr(J, "_NOTICE", [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    x = torch.randn(10)
    y = torch.full_like(x, float("nan"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copy_kernel[(1,)](x, y, 10, BLOCK=16)
    notices = [w for w in caught if issubclass(w.category, J.InterpreterNotice)]
    assert len(notices) == 1 and "'copy_kernel' was given CPU tensors" in str(notices[0].message)
    assert "x.cuda()" in str(notices[0].message) and torch.equal(y, x)


@pytest.mark.gpu
@gpu
def test_mixed_devices():
    x = torch.randn(10, device="cuda")
    y = torch.empty(10)
    with pytest.raises(kl.LaunchError, match="CPU and some on the GPU|different devices"):
        copy_kernel[(1,)](x, y, 10, BLOCK=16)


@pytest.mark.gpu
@gpu
def test_grid_too_large():
    x = torch.randn(10, device="cuda")
    with pytest.raises(kl.LaunchError, match="grid"):
        copy_kernel[(1, 1 << 20)](x, x, 10, BLOCK=16)


@pytest.mark.gpu
@gpu
def test_too_much_shared_memory():
    a = torch.randn(256, 256, device="cuda")
    c = torch.empty_like(a)
    with pytest.raises(kl.KernelLabError, match="shared memory") as ei:
        big_dot_kernel[(1,)](a, c, N=256)
    assert "big_dot_kernel" in str(ei.value)


@pytest.mark.gpu
@gpu
def test_illegal_address_names_kernel_and_says_restart(tmp_path):
    src = textwrap.dedent('''
        import torch, kernellab as kl, kernellab.language as tl
        @kl.jit
        def bad(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK).to(tl.int64) + (1 << 40)
            tl.store(x_ptr + offs * 1024, 1.0)
        x = torch.zeros(16, device="cuda")
        try:
            bad[(1,)](x, BLOCK=16)
            kl.synchronize()
        except Exception as e:
            print(type(e).__name__, e)
    ''')
    script = tmp_path / "crash.py"
    script.write_text(src)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert "KernelCrashError" in text and "bad" in text and "restart" in text.lower(), text[-2000:]
