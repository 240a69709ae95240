"""`kernellab` command line: info without a GPU, lab, demo."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kernellab import cli


def _has_cuda():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def test_info_runs(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for key in ("kernellab", "python", "torch", "llvmlite", "cuda-bindings", "triton", "ptxas", "libdevice", "GPU"):
        assert any(line.startswith(key) for line in out.splitlines()), key
    assert "peaks" in out


@pytest.mark.skipif(_has_cuda(), reason="checks what is printed without a GPU")
def test_info_without_gpu_prints_recorded_peaks_and_results(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "GPU            none" in out or "none:" in out
    assert "recorded, not measured here" in out and "NVIDIA H200, 2026-11-21" in out
    assert "vector_add 2^28 fp32" in out  # the recorded results table
    # matmul and attention rows in TFLOP/s with numbers, not "-" (they have FLOPs, no bytes)
    mm = next(line for line in out.splitlines() if line.strip().startswith("float16 4096x4096x4096"))
    assert all(float(v) > 100 for v in mm.split()[2:4]), mm
    assert "kernellab TFLOP/s" in out
    assert cli.main(["info", "--measure"]) == 1
    assert "--measure needs a CUDA GPU" in capsys.readouterr().out


@pytest.fixture()
def fake_gpu(fake_gpu, monkeypatch):
    """`kernellab info` also sees that fake GPU (tests/conftest.py)."""
    monkeypatch.setattr(cli, "_gpu_line", lambda: ("Fake GPU 9000 (sm_90, 132 SMs, 141 GiB)", True))
    return fake_gpu


def test_info_measures_the_peaks_once_and_caches_them(fake_gpu, tmp_path, capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert fake_gpu == ["Fake GPU 9000"] and "peaks: measuring this GPU" in out
    assert "measured on Fake GPU 9000, 2026-01-01" in out and "recorded" not in out
    assert str(tmp_path / "peaks-Fake_GPU_9000.json") in out
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert fake_gpu == ["Fake GPU 9000"] and "measuring" not in out  # the cache
    assert "measured on Fake GPU 9000" in out
    assert cli.main(["info", "--measure"]) == 0 and len(fake_gpu) == 2  # --measure measures again
    assert "measuring" in capsys.readouterr().out


def test_info_when_measuring_fails(fake_gpu, monkeypatch, capsys):
    from kernellab.viz import roofline

    def out_of_memory(*args):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(roofline, "_measure", out_of_memory)
    assert cli.main(["info"]) == 0  # the versions were printed; the next run measures again
    assert "peaks: measuring failed: RuntimeError: CUDA out of memory" in capsys.readouterr().out
    assert cli.main(["info", "--measure"]) == 1  # asked for explicitly


def test_info_without_gpu_never_measures(monkeypatch, capsys):
    from kernellab.viz import roofline

    monkeypatch.setattr(cli, "_gpu_line", lambda: ("none: kernels run on the CPU interpreter", False))
    monkeypatch.setattr(roofline, "gpu_name", lambda device=0: None)
    monkeypatch.setattr(roofline, "_measure", lambda *a: pytest.fail("measured without a GPU"))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "recorded, not measured here" in out and "measuring" not in out


def test_info_as_a_program():
    res = subprocess.run([sys.executable, "-m", "kernellab.cli", "info"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "llvmlite" in res.stdout


def test_lab_help():
    res = subprocess.run([sys.executable, "-m", "kernellab.cli", "lab", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0
    for opt in ("--port", "--no-browser", "--dir", "--ip"):
        assert opt in res.stdout


class _FakeProc:
    """Stands in for JupyterLab's process: already exited, so `kernellab lab` prints no banner and returns."""

    def __init__(self, cmd):
        self.cmd, self.returncode = cmd, 0

    def poll(self):
        return 0

    def wait(self):
        return 0


def _fake_popen(monkeypatch):
    import importlib.util

    calls = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "jupyterlab" else None)
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, *a, **k: calls.append(cmd) or _FakeProc(cmd))
    return calls


def test_lab_starts_jupyterlab_on_a_working_copy(monkeypatch, tmp_path):
    calls = _fake_popen(monkeypatch)
    assert cli.main(["lab", "--port", "8899", "--no-browser", "--dir", str(tmp_path)]) == 0
    (cmd,) = calls
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path.resolve()}" in cmd
    assert "--ServerApp.port=8899" in cmd and "--no-browser" in cmd
    assert "--ServerApp.ip=127.0.0.1" in cmd  # not every interface unless asked
    assert any(a.startswith("--IdentityProvider.token=") for a in cmd)  # ours, so the banner can show it
    # the repository's notebooks are copied once into my-notebooks/ and served from there
    src = tmp_path / "repo" / "notebooks"
    src.mkdir(parents=True)
    (src / "01_a.ipynb").write_text("original")
    monkeypatch.setattr(cli, "notebooks_dir", lambda: src)
    calls.clear()
    assert cli.main(["lab"]) == 0
    copy = tmp_path / "repo" / cli.WORKING_COPY
    assert f"--ServerApp.root_dir={copy}" in calls[0] and (copy / "01_a.ipynb").read_text() == "original"
    (copy / "01_a.ipynb").write_text("the learner's edit")
    (src / "02_b.ipynb").write_text("new upstream")
    assert cli.main(["lab"]) == 0
    assert (copy / "01_a.ipynb").read_text() == "the learner's edit"  # never overwritten
    assert (copy / "02_b.ipynb").read_text() == "new upstream"  # missing files are copied in


def test_lab_passes_extra_arguments_to_jupyterlab(monkeypatch, tmp_path):
    calls = _fake_popen(monkeypatch)
    assert cli.main(["lab", "--dir", str(tmp_path), "--ip", "0.0.0.0", "--ServerApp.foo=1",
                     "--IdentityProvider.token=abc"]) == 0
    (cmd,) = calls
    assert cmd[-4:] == ["--ip", "0.0.0.0", "--ServerApp.foo=1", "--IdentityProvider.token=abc"]
    assert "--ServerApp.ip=127.0.0.1" not in cmd
    assert sum(a.startswith("--IdentityProvider.token") for a in cmd) == 1  # the user's token only
    with pytest.raises(SystemExit):
        cli.main(["info", "--ip", "0.0.0.0"])  # only lab takes extra arguments
    import signal

    before = signal.getsignal(signal.SIGTERM)
    calls.clear()
    assert cli.main(["lab", "--dir", str(tmp_path), "--ServerApp.port=9123"]) == 0
    (cmd,) = calls
    assert "--ServerApp.port_retries=0" in cmd  # the port the banner names, or JupyterLab's error
    assert signal.getsignal(signal.SIGTERM) is before  # the handler that stops JupyterLab is gone again


def test_lab_as_root_allows_root(monkeypatch, tmp_path):
    import os

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "--allow-root" in cli.lab_command(None, False, tmp_path)
    assert cli.lab_command(None, False, tmp_path, ["--allow-root"]).count("--allow-root") == 1
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--allow-root" not in cli.lab_command(None, False, tmp_path)


def test_lab_banner_names_the_url_once():
    text = cli._banner("http://127.0.0.1:8890/lab?token=t", "/x/my-notebooks", ["01.ipynb"], "127.0.0.1", 8890)
    assert text.count("http://127.0.0.1:8890/lab?token=t") == 1 and "my-notebooks" in text
    assert "ssh -L 8890:127.0.0.1:8890" in text


def test_lab_without_jupyterlab_says_how_to_install(monkeypatch, capsys):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert cli.main(["lab"]) == 1
    assert "pip install -e '.[lab]'" in capsys.readouterr().err


def test_lab_with_a_missing_dir(monkeypatch, capsys, tmp_path):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert cli.main(["lab", "--dir", str(tmp_path / "nope")]) == 1
    assert "no such directory" in capsys.readouterr().err


def test_demo_still_works(capsys):
    pytest.importorskip("torch")
    assert cli.main(["demo"]) == 0
    assert "max |kernellab - torch(float64)|" in capsys.readouterr().out


@pytest.mark.slow
def test_lab_really_starts_and_prints_one_banner(tmp_path):
    """`kernellab lab` end to end: JupyterLab answers on the banner's URL (token included), once."""
    pytest.importorskip("jupyterlab")
    import os
    import re
    import signal
    import time
    import urllib.request

    (tmp_path / "nb").mkdir()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "kernellab.cli", "lab", "--no-browser", "--dir", str(tmp_path / "nb")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if line.startswith("=" * 20) and sum(ln.startswith("=" * 20) for ln in out) == 2:
                break
        text = "".join(out)
        urls = re.findall(r"http://127\.0\.0\.1:\d+/lab\?token=\w+", text)
        assert len(urls) == 1, text  # one URL, in our banner only
        with urllib.request.urlopen(urls[0].replace("/lab?", "/api/status?"), timeout=10) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)  # stops JupyterLab too
        proc.wait(timeout=30)
