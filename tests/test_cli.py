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
    assert cli.main(["info", "--measure"]) == 1
    assert "--measure needs a CUDA GPU" in capsys.readouterr().out


def test_info_as_a_program():
    res = subprocess.run([sys.executable, "-m", "kernellab.cli", "info"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "llvmlite" in res.stdout


def test_lab_help():
    res = subprocess.run([sys.executable, "-m", "kernellab.cli", "lab", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0
    for opt in ("--port", "--no-browser", "--dir"):
        assert opt in res.stdout


def test_lab_starts_jupyterlab_on_the_notebooks(monkeypatch, tmp_path):
    import importlib.util

    calls = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "jupyterlab" else None)
    monkeypatch.setattr(subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    assert cli.main(["lab", "--port", "8899", "--no-browser", "--dir", str(tmp_path)]) == 0
    (cmd,) = calls
    assert cmd[:3] == [sys.executable, "-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={tmp_path.resolve()}" in cmd
    assert "--ServerApp.port=8899" in cmd and "--no-browser" in cmd
    nb = cli.notebooks_dir()
    if nb is not None:
        calls.clear()
        assert cli.main(["lab"]) == 0
        assert calls[0][3] == f"--ServerApp.root_dir={nb}" and nb.name == "notebooks"


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
