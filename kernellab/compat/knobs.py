"""`triton.knobs`: Triton's settings objects, with their `scope()` context managers.

kernellab reads its own options (launch keywords, environment), so most knobs are accepted and kept
without effect; code that sets them in fixtures or scopes keeps running. `language.default_fp_fusion` is
honoured: it is the default of the `enable_fp_fusion` launch option (compat.install wires it)."""
from __future__ import annotations

import contextlib
import copy


class base_knobs:
    """A group of settings; attribute assignment sets a knob, `scope()` restores them on exit."""

    defaults: dict = {}

    def __init__(self):
        self.__dict__.update(copy.deepcopy(self.defaults))

    @property
    def knob_descriptors(self) -> dict:
        """Per knob, the environment variable Triton reads it from (`.key`), e.g. TRITON_DEBUG."""
        return {k: _Descriptor(f"TRITON_{k.upper()}") for k in self.defaults}

    def copy(self):
        return copy.copy(self)

    def reset(self):
        self.__dict__.update(copy.deepcopy(self.defaults))
        return self

    @contextlib.contextmanager
    def scope(self):
        saved = dict(self.__dict__)
        try:
            yield self
        finally:
            self.__dict__.clear()
            self.__dict__.update(saved)


class _Descriptor:
    def __init__(self, key: str):
        self.key = key


def _group(name: str, **defaults):
    return type(name, (base_knobs,), {"defaults": defaults})()


class _Ptxas:
    def __init__(self):
        import shutil

        self.path = shutil.which("ptxas")
        self.version = "13.0"


class _Nvdisasm:
    """NVIDIA's disassembler, where the lab finds it (KERNELLAB_NVDISASM, PATH, the CUDA and wheel directories).
    Without one, reading `.path` raises: code that probes for it (Triton's line-info tests) skips."""

    @property
    def path(self) -> str:
        from ..viz.data import find_nvdisasm

        found = find_nvdisasm()
        if found is None:
            raise RuntimeError("nvdisasm not found: `pip install nvidia-cuda-nvdisasm` or set KERNELLAB_NVDISASM")
        return found


def _env_flag(name: str) -> bool:
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes")


def module(make_module):
    return make_module(
        "triton.knobs", "Triton's settings objects (accepted; kernellab's own options decide).", package=False,
        base_knobs=base_knobs, propagate_env=True,
        cache=_group("cache_knobs", dir=None, dump_dir=None, override_dir=None, home_dir=None),
        compilation=_group("compilation_knobs", override=False, dump_ir=False, always_compile=False,
                           enable_fp_fusion=True, disable_line_info=False,
                           allow_non_constexpr_globals=_env_flag("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS")),
        runtime=_group("runtime_knobs", interpret=False, debug=False, override_arch=None, launch_enter_hook=None,
                       launch_exit_hook=None, jit_cache_hook=None, jit_post_compile_hook=None),
        language=_group("language_knobs", fp32_default=None, default_fp_fusion=True),
        autotuning=_group("autotuning_knobs", cache=False, print=False),
        nvidia=_group("nvidia_knobs", ptxas=_Ptxas(), nvdisasm=_Nvdisasm(), mock_ptx_version=None,
                      dump_nvptx=False),
        amd=_group("amd_knobs"),
        build=_group("build_knobs", backend_dirs=set()),
        proton=_group("proton_knobs"),
    )
