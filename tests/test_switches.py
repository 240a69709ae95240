"""kernellab.compiler.switches.switch: the one spelling of a codegen switch's on and off."""
from __future__ import annotations

import pytest

from kernellab.compiler.switches import switch

NAME = "KERNELLAB_TEST_SWITCH"


@pytest.mark.parametrize("value,default,on", [
    (None, True, True), (None, False, False),
    ("0", True, False), ("off", True, False), (" No ", True, False), ("1", True, True), ("", True, True),
    ("1", False, True), ("ON", False, True), (" yes", False, True), ("0", False, False), ("", False, False),
    ("maybe", True, True), ("maybe", False, False),
])
def test_switch(monkeypatch, value, default, on):
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert switch(NAME, default) is on
