"""benchmarks/tools/tf32_model.py: every matrix product of a reference, forward and backward, with TF32 operands."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tf32_model as M  # noqa: E402


def test_tf32_rounds_to_ten_mantissa_bits():
    x = torch.tensor([1.0 + 2 ** -11, 1.0 + 2 ** -10 + 2 ** -12, -3.0, 1.0 + 2 ** -12], dtype=torch.float64)
    got = M.tf32(x)
    assert got.dtype == torch.float64
    assert got.tolist() == [1.0 + 2 ** -10, 1.0 + 2 ** -10, -3.0, 1.0]  # ties away; below half: down


def test_products_forward_and_backward_take_tf32_operands():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(16, 4, generator=g, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(8, 4, generator=g, dtype=torch.float64)
    with M.TF32Products():
        y = a @ b
    y.backward(gy)
    ta, tb, tg = M.tf32(a.detach()), M.tf32(b.detach()), M.tf32(gy)
    assert torch.equal(y.detach(), ta @ tb)
    assert torch.equal(a.grad, tg @ tb.T) and torch.equal(b.grad, ta.T @ tg)
    assert not torch.equal(y.detach(), a.detach() @ b.detach())  # the rounding shows


def test_fused_moe_model_runs_at_a_small_size(capsys):
    M.main(["fused_moe", "--size", "16,32,16,4,2"])
    out = capsys.readouterr().out
    assert "dgu" in out and "err/tol" in out
