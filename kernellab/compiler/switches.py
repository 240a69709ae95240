"""Codegen switches read from the environment (KERNELLAB_...): one spelling of on and off for every pass.

Which variables change the code generated, and so key the compile caches, is runtime/codegen_env.py's list."""
from __future__ import annotations

import os

ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")


def switch(name: str, default: bool) -> bool:
    """Whether switch `name` is on: a switch on by default is on unless set to one of OFF, one off by default is
    off unless set to one of ON (case and surrounding spaces ignored)."""
    v = os.environ.get(name)
    if v is None:
        return default
    v = v.strip().lower()
    return v not in OFF if default else v in ON
