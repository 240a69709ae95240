"""The interpreter says early, once, when a launch will take minutes (issue 18): measured over its first
programs, not guessed from the grid alone."""
import warnings

import pytest
import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.runtime import interpreter as I


@kl.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def test_a_long_launch_is_announced_with_its_estimate(monkeypatch):
    monkeypatch.setattr(I, "SLOW_LAUNCH_SECONDS", 0.0)  # every launch is "long" here
    x = torch.zeros(200 * 16)
    with pytest.warns(I.SlowLaunchWarning, match=r"kernel 'add_one' runs 200 programs on the CPU interpreter; at "
                                                 r"\d+ ms per program \(measured over the first \d+\) the launch "
                                                 r"takes about \d+ s"):
        add_one[(200,)](x, x.numel(), BLOCK=16)
    assert torch.equal(x, torch.ones_like(x))  # and it still ran


def test_said_once_per_launch(monkeypatch):
    monkeypatch.setattr(I, "SLOW_LAUNCH_SECONDS", 0.0)
    x = torch.zeros(300 * 16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        add_one[(300,)](x, x.numel(), BLOCK=16)
    assert sum(issubclass(w.category, I.SlowLaunchWarning) for w in seen) == 1


def test_short_launches_are_quiet():
    x = torch.zeros(64 * 16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        add_one[(64,)](x, x.numel(), BLOCK=16)
    assert not [w for w in seen if issubclass(w.category, I.SlowLaunchWarning)]


def test_durations_read_in_units_people_use():
    assert I._duration(42) == "42 s"
    assert I._duration(600) == "10 minutes"
    assert I._duration(6.5 * 3600) == "6.5 hours"
