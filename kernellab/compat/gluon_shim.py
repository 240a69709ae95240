"""`triton.experimental.gluon`: importable, not compiled. Gluon is Triton's layout-explicit dialect; kernellab
compiles the tile language only. Libraries import gluon beside their tile-language kernels (vLLM's
`triton_utils` does `from triton.experimental import gluon` for a few architecture-specific kernels), so the
import must work and the tile-language kernels run; a Gluon kernel says at launch that it is not served."""
from __future__ import annotations

from ..errors import KernelLabError


class GluonNotServed(KernelLabError):
    """A Gluon kernel was launched: kernellab does not compile Gluon."""


class GluonKernel:
    """What `@gluon.jit` makes: the function, kept for introspection; launching it raises GluonNotServed."""

    def __init__(self, fn):
        self.fn, self.__name__, self.__doc__ = fn, fn.__name__, fn.__doc__

    def _refuse(self, *args, **kwargs):
        raise GluonNotServed(f"'{self.__name__}' is a Gluon kernel (@gluon.jit): kernellab compiles Triton's tile "
                             "language, not Gluon; use the library's tile-language (@triton.jit) path for this op")

    run = warmup = __call__ = _refuse

    def __getitem__(self, grid):
        return self._refuse


def jit(fn=None, **_):
    return GluonKernel(fn) if fn is not None else GluonKernel


class _Unserved:
    """A name of `gluon.language` (a layout class, a gluon builtin): usable in annotations and defaults, refused
    when called."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise GluonNotServed(f"gluon.language.{self._name}: Gluon is not served by kernellab")

    def __getattr__(self, attr):
        return _Unserved(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<gluon.language.{self._name}: not served>"


def modules(make_module) -> dict:
    """triton.experimental, triton.experimental.gluon and its language module."""
    from ..language import core
    from ..language.builtins import constexpr_function

    lang = make_module("triton.experimental.gluon.language", "Gluon's language: names only (not compiled).",
                       constexpr=core.constexpr, dtype=core.dtype)
    def unserved(name):  # the module's __getattr__ (PEP 562): any other gluon.language name
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unserved(name)

    lang.__getattr__ = unserved
    gluon = make_module("triton.experimental.gluon", __doc__, jit=jit, constexpr_function=constexpr_function,
                        language=lang, GluonNotServed=GluonNotServed)
    experimental = make_module("triton.experimental", "Triton's experimental dialects.", gluon=gluon)
    return {"triton.experimental": experimental, "triton.experimental.gluon": gluon,
            "triton.experimental.gluon.language": lang}
