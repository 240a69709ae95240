"""`kl.autotune`, `kl.Config`, `kl.heuristics`: Triton's tuning surface.

The autotuner times each config on the first launch for a new value of `key` and keeps the fastest.
A config whose kernel needs more shared memory than the GPU has at its num_stages (Triton refuses it with
OutOfResources; kernellab builds it with fewer stages, see CompiledKernel.build_gpu) is compiled and timed only
when no other config runs: it costs the GPU passes, not LLVM and ptxas (`deferred_configs` says which).
On the CPU interpreter timings say little about a GPU, so there it simply keeps the first config
that runs (and says so in `best_config_reason`).
"""
from __future__ import annotations

from ..errors import LaunchError
from .jit import KernelInterface, launches_on_gpu


class Config:
    """A set of constexpr values plus launch options to try."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None, **_):
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise LaunchError(f"kl.Config(kwargs, ...): kwargs must be a dict of constexpr name -> value, got "
                              f"{type(kwargs).__name__} {kwargs!r:.60}; e.g. kl.Config({{'BLOCK': 128}}, num_warps=4)")
        self.kwargs, self.num_warps, self.num_stages = dict(kwargs), num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook = num_ctas, maxnreg, pre_hook

    def all_kwargs(self):
        out = dict(self.kwargs)
        out.update(num_warps=self.num_warps, num_stages=self.num_stages)
        return out

    def __repr__(self):
        kv = ", ".join(f"{k}: {v}" for k, v in self.kwargs.items())
        return f"Config({kv}, num_warps: {self.num_warps}, num_stages: {self.num_stages})"


class Autotuner(KernelInterface):
    """Tunes a kernel's constexprs per `key`. The constructor and the methods a subclass may call or override
    (`prune_configs`, `_bench`, `pre_hook`/`post_hook`, `run`, `nargs`, `keys`, `cache`) are Triton's, so
    libraries that subclass `triton.runtime.Autotuner` (FlagGems' LibTuner) run unchanged on top of it."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None,
                 cache_results=False):
        self.fn, self.configs, self.key = fn, list(configs or []) or [Config({})], list(key)
        self.prune_configs_by = prune_configs_by or {}
        self.perf_model = self.prune_configs_by.get("perf_model")
        self.configs_top_k = self.prune_configs_by.get("top_k", 1.0)
        self.early_config_prune = self.prune_configs_by.get("early_config_prune")
        self.reset_to_zero, self.restore_value = list(reset_to_zero or []), list(restore_value or [])
        self.num_warmups, self.num_reps, self.use_cuda_graph = warmup, rep, use_cuda_graph
        self.cache_results = cache_results  # Triton's on-disk tuning cache: not kept here, tuning is per process
        self.cache: dict = {}
        self._warm: dict = {}  # the warm path's key of the key arguments -> (cache key, config)
        self.configs_timings: dict = {}
        self.bench_time = 0.0
        self.nargs = None
        self.best_config = None
        self.best_config_reason = ""
        self._do_bench = do_bench
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.arg_names = list(arg_names) if arg_names is not None else fn.arg_names
        self.failed_configs: dict = {}  # config -> why it could not compile or run (last tuning)
        # config -> why it was tried only after the others: over the shared memory at its num_stages (last tuning)
        self.deferred_configs: dict = {}
        # Triton's hooks around each benchmark run: a user's replace the reset/restore of the named tensors
        self.user_defined_pre_hook, self.user_defined_post_hook = pre_hook is not None, post_hook is not None
        self.pre_hook = pre_hook or self._reset_and_save
        self.post_hook = post_hook or self._restore
        self._restore_copies: dict = {}
        unknown = [k for k in self.key if k not in self.arg_names]
        if unknown:
            import difflib

            lower = {a.lower(): a for a in self.arg_names}
            hints = [f"'{k}'" + (f" (did you mean '{lower[m[0]]}'?)"
                                 if (m := difflib.get_close_matches(k.lower(), list(lower), 1)) else "")
                     for k in unknown]
            # Triton ignores key names that are not parameters (its own grouped-GEMM tutorial has a typo in one),
            # so code written for it must keep running: warn, and tune on the keys that exist.
            import warnings

            warnings.warn(f"kl.autotune for kernel '{self.__name__}': key {', '.join(hints)} is not a parameter "
                          f"of the kernel and is ignored; key names the arguments whose values pick a config, from: "
                          f"{', '.join(self.arg_names)}", UserWarning, stacklevel=3)
            self.key = [k for k in self.key if k in self.arg_names]

    @property
    def keys(self):
        """Triton's name for `key`."""
        return self.key

    @keys.setter
    def keys(self, value):
        self.key = list(value)

    @property
    def do_bench(self):
        """The benchmarker: the one given to autotune, else kernellab.testing.do_bench (Triton's attribute)."""
        if self._do_bench is not None:
            return self._do_bench
        from ..testing import do_bench

        return do_bench

    def _reset_and_save(self, kwargs, reset_only=False):
        """Triton's default pre_hook: zero `reset_to_zero`, keep copies of `restore_value` for the post_hook."""
        for n in self.reset_to_zero:
            if kwargs.get(n) is not None:  # an optional tensor argument passed as None: nothing to reset
                kwargs[n].zero_()
        if not reset_only:
            self._restore_copies = {n: kwargs[n].clone() for n in self.restore_value if kwargs.get(n) is not None}

    def _restore(self, kwargs, exception=None):
        """Triton's default post_hook: put back what `_reset_and_save` copied."""
        for n, t in self._restore_copies.items():
            kwargs[n].copy_(t)
        self._restore_copies = {}

    def prune_configs(self, kwargs):
        """Triton's pruning, from `self.nargs` (the positional arguments by name) and the keyword arguments:
        `early_config_prune(configs, nargs, **kwargs)`, then the `top_k` configs by `perf_model`."""
        configs = self.configs
        if self.early_config_prune:
            configs = self.early_config_prune(configs, self.nargs, **kwargs)
            if not configs:
                raise LaunchError(f"kl.autotune for kernel '{self.__name__}': early_config_prune returned no "
                                  "config; it must keep at least one")
        model, top_k = self.perf_model, self.configs_top_k
        # a performance model estimates GPU time from the GPU's clocks and bandwidth (nvidia-smi, device
        # properties); on the CPU interpreter it has nothing to estimate and no GPU to ask, so it is skipped
        if model and _on_gpu(tuple((self.nargs or {}).values()), kwargs):
            top_k = int(len(self.configs) * top_k) if isinstance(top_k, float) and top_k <= 1.0 else int(top_k)
            if len(configs) > top_k:
                est = {c: model(**self.nargs, **kwargs, **c.all_kwargs()) for c in configs}
                configs = sorted(configs, key=lambda c: est[c])[:max(top_k, 1)]
        return list(configs)

    def _bench(self, *args, config, **meta):
        """Triton's per-config benchmark, for subclasses that run their own tuning loop: [median, p20, p80] ms,
        inf for a config that does not compile. On the CPU interpreter (no CUDA tensor) timings say nothing
        about a GPU: a config that compiles gets 0.0, so the first of them wins, as in `run`."""
        from ..errors import KernelLabError

        conflicts = meta.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"kernel '{self.__name__}': conflicting meta-parameters: {', '.join(sorted(conflicts))}; "
                             "do not pass the values the autotuner tunes")
        current = dict(meta, **config.all_kwargs())
        full_nargs = {**(self.nargs or dict(zip(self.arg_names, args))), **current}
        if not _on_gpu(args, meta):
            try:
                if config.pre_hook:
                    config.pre_hook(full_nargs)
                self.fn.warmup(*args, **current)
                return [0.0, 0.0, 0.0]
            except KernelLabError as e:
                self.failed_configs[config] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
                return [float("inf")] * 3

        def kernel_call():
            if config.pre_hook:
                config.pre_hook(full_nargs)
            self.pre_hook(full_nargs)
            try:
                self.fn.run(*args, **current)
            except Exception as e:
                self.post_hook(full_nargs, exception=e)
                raise
            self.post_hook(full_nargs, exception=None)

        try:
            if getattr(self, "_do_bench", None) is None:  # the default: the GPU's work only, as in `run`'s tuning
                from ..testing import do_bench

                t = do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8), gpu_time=True)
            else:
                t = self.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        except KernelLabError as e:
            self.failed_configs[config] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            return [float("inf")] * 3
        return list(t) if isinstance(t, (list, tuple)) else [t, t, t]

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def _named(self, args, kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        return named

    def _prune(self, args, kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        return self.prune_configs(kwargs)

    def warmup(self, *args, **kwargs):
        """Compile the kernel for every config left after pruning, without running it; the compiled kernels, one
        per config, as Triton's Autotuner.warmup returns them."""
        configs = self._prune(args, kwargs)
        self.nargs = None
        return [self.fn.warmup(*args, **{**kwargs, **c.all_kwargs()}) for c in configs]

    def run(self, *args, grid, **kwargs):
        # the warm path: one dict lookup on the key arguments' values (dtype and shape of a tensor, type and value
        # of a number), checked against `cache` (which users may clear to retune), then the kernel's own launch
        warm_map = self.__dict__.get("_warm")
        if warm_map is None:  # a subclass whose __init__ did not run ours
            warm_map = self._warm = {}
        try:
            warm = warm_map.get(self._warm_key(args, kwargs))
        except Exception:  # an unhashable key argument: the string key below
            warm = None
        if warm is not None and self.cache.get(warm[0]) is warm[1]:
            cfg = self.best_config = warm[1]
            if cfg.pre_hook:
                cfg.pre_hook({**self._named(args, kwargs), **cfg.all_kwargs()})
            return self.fn.run(*args, grid=grid, **{**kwargs, **cfg.all_kwargs()}) if kwargs else \
                self.fn.run(*args, grid=grid, **cfg.all_kwargs())
        named = self._named(args, kwargs)
        key = tuple(str(getattr(named.get(k), "dtype", "")) + repr(named.get(k)) if not hasattr(named.get(k),
                    "data_ptr") else str(named[k].dtype) + str(tuple(named[k].shape)) for k in self.key)
        if key not in self.cache:
            configs = self._prune(args, kwargs)
            self.cache[key] = self._choose(configs, args, kwargs, grid)
        cfg = self.cache[key]
        self.best_config = cfg
        try:
            if len(warm_map) >= 1024:
                warm_map.clear()
            warm_map[self._warm_key(args, kwargs)] = (key, cfg)
        except Exception:
            pass
        if cfg.pre_hook:
            cfg.pre_hook({**named, **cfg.all_kwargs()})
        return self.fn.run(*args, grid=grid, **{**kwargs, **cfg.all_kwargs()})

    def _warm_key(self, args, kwargs):
        """The key arguments' values as the warm path keys them: at least as fine as `cache`'s string key (a
        tensor's dtype and shape; an int, bool, str or None by type and value; anything else by that string)."""
        out = []
        n = len(args)
        for i, k in self._key_positions():
            v = args[i] if i < n else kwargs.get(k)
            t = type(v)
            if t is int or t is bool or t is str or v is None:
                out.append((t, v))
            elif hasattr(v, "data_ptr"):
                out.append((v.dtype, tuple(v.shape)))
            else:
                out.append(str(getattr(v, "dtype", "")) + repr(v))
        return tuple(out)

    def _key_positions(self):
        kp = self.__dict__.get("_kp")
        if kp is None or kp[0] != self.key:
            index = {n: i for i, n in enumerate(self.arg_names)}
            kp = self._kp = (list(self.key), [(index[k], k) for k in self.key])
        return kp[1]

    def _compiles(self, configs, args, kwargs, first_only=False):
        """The configs that compile for these arguments (like Triton, a config whose compile fails, e.g. a tile
        too large or a bad option, is skipped); LaunchError naming every failure when none does. With
        `first_only`, stops at the first that compiles (the CPU interpreter keeps that one: compiling the rest,
        which can be dozens, would only cost time)."""
        from ..errors import KernelLabError

        self.failed_configs = {}
        self._compiled = {}
        ok = []
        named = self._named(args, kwargs)
        for cfg in configs:
            if ok and first_only:
                break
            try:
                if cfg.pre_hook:  # the hook may set what compiling needs (e.g. a descriptor's block shape)
                    cfg.pre_hook({**named, **cfg.all_kwargs()})
                self._compiled[cfg] = self.fn.warmup(*args, **{**kwargs, **cfg.all_kwargs()})
                ok.append(cfg)
            except KernelLabError as e:
                self.failed_configs[cfg] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        if not ok:
            why = "; ".join(f"{c} -> {w}" for c, w in self.failed_configs.items())
            raise LaunchError(f"kl.autotune for kernel '{self.__name__}': none of the {len(configs)} configs "
                              f"compiles: {why}")
        return ok

    def _choose(self, configs, args, kwargs, grid):
        on_gpu = _on_gpu(args, kwargs)
        configs = self._compiles(configs, args, kwargs, first_only=not on_gpu) if len(configs) > 1 else configs
        skipped = f" ({len(self.failed_configs)} failed to compile and were skipped)" if self.failed_configs else ""
        if len(configs) == 1 or not on_gpu:
            self.best_config_reason = ("CPU interpreter: timings do not predict a GPU, first config that compiles "
                                       "kept" if not on_gpu else "only one config") + skipped
            return configs[0]
        named = self._named(args, kwargs)
        fits, deferred = self._split_by_shared(configs)
        self._compiled = {}
        saved = {n: named[n].clone() for n in self.restore_value if named.get(n) is not None}
        timings = {cfg: float("inf") for cfg in configs}  # Triton's: inf for a config that cannot run
        try:
            for group in (fits, deferred):
                # the configs over the shared-memory budget only when no other runs: Triton refuses them
                # (OutOfResources), here they run with fewer stages, slower; compiling and timing them first
                # would cost their LLVM and ptxas time for configs that lose
                if any(t < float("inf") for t in timings.values()):
                    break
                for cfg in group:
                    try:
                        timings[cfg] = self._time_config(cfg, args, kwargs, grid, named, saved)
                    except LaunchError as e:  # e.g. too much shared memory for this GPU: skipped like Triton
                        timings[cfg] = float("inf")
                        self.failed_configs[cfg] = f"LaunchError: {str(e).splitlines()[0]}"
        finally:
            for n, t in saved.items():  # the benchmark runs must leave no trace in the caller's tensors
                named[n].copy_(t)
        # like Triton's pre_hook(reset_only=True): the real launch that follows starts from zeros too,
        # not from what the last benchmark run accumulated
        for n in self.reset_to_zero:
            if named.get(n) is not None:
                named[n].zero_()
        self.configs_timings = timings  # Triton's attribute: what each config measured (ms), for the curious
        best = min(timings, key=timings.get)
        if timings[best] == float("inf"):
            why = "; ".join(f"{c} -> {w}" for c, w in self.failed_configs.items())
            raise LaunchError(f"kl.autotune for kernel '{self.__name__}': no config could be launched: {why}")
        timed = len(fits) if best in fits else len(fits) + len(deferred)
        skipped = f" ({len(self.failed_configs)} failed to compile and were skipped)" if self.failed_configs else ""
        if deferred and best in fits:
            skipped += (f" ({len(deferred)} over the shared-memory budget at their num_stages were not tried: "
                        "they run only with fewer stages)")
        self.best_config_reason = f"fastest of {timed} configs ({timings[best] * 1e3:.3f} ms)" + skipped
        return best

    def _split_by_shared(self, configs):
        """(configs whose kernels fit the GPU's shared memory as asked, configs that fit only with fewer pipeline
        stages or less staging): each compiled config's GPU build is made without the shared-memory ladder, which
        for one over the budget stops after the GPU passes (no LLVM, no ptxas). A config whose GPU build fails is
        skipped (inf), as Triton skips a config that does not compile."""
        from ..errors import KernelLabError, SharedBudgetExceeded
        from . import compile_pool
        from . import jit as _jit

        fits, over, target = [], [], None
        self.deferred_configs = {}
        compiled = {cfg: getattr(ck, "_kl", ck) for cfg, ck in self.__dict__.get("_compiled", {}).items()}
        cks = [compiled.get(cfg) for cfg in configs]
        cks = [ck for ck in cks if isinstance(ck, _jit.CompiledKernel)]
        if len(cks) > 1:
            try:
                target = _jit.current_target()
            except Exception:  # no CUDA device to build for (the launches themselves say why)
                return list(configs), []
            # the configs' GPU builds, several at a time in worker processes, into the disk cache where the
            # builds below find them (compile_pool.py; KERNELLAB_COMPILE_WORKERS=0 turns it off)
            compile_pool.prebuild(cks, target)
        for cfg in configs:
            ck = compiled.get(cfg)
            if not isinstance(ck, _jit.CompiledKernel):
                fits.append(cfg)
                continue
            if target is None:
                try:
                    target = _jit.current_target()
                except Exception:  # no CUDA device to build for (the launches themselves say why)
                    return list(configs), []
            try:
                ck.build_gpu(target, ladder=False)
            except SharedBudgetExceeded as e:
                self.deferred_configs[cfg] = str(e).splitlines()[0]
                over.append(cfg)
                continue
            except KernelLabError as e:
                self.failed_configs[cfg] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
                continue
            fits.append(cfg)
        return fits, over

    def _time_config(self, cfg, args, kwargs, grid, named, saved):
        def call():
            """One benchmark run sees what the real launch would: zeroed and restored inputs, the config's hook."""
            for n in self.reset_to_zero:
                if named.get(n) is not None:  # an optional tensor argument passed as None
                    named[n].zero_()
            for n, t in saved.items():
                named[n].copy_(t)
            full = {**named, **cfg.all_kwargs()}
            if cfg.pre_hook:
                cfg.pre_hook(full)
            if self.user_defined_pre_hook:
                self.pre_hook(full)
            try:
                self.fn.run(*args, grid=grid, **{**kwargs, **cfg.all_kwargs()})
            except Exception as e:  # Triton's hooks come in pairs: the post_hook sees the failure
                if self.user_defined_post_hook:
                    self.post_hook(full, exception=e)
                raise
            if self.user_defined_post_hook:
                self.post_hook(full, exception=None)

        # the default benchmarker times the GPU's work only: configs share one launch path, so a launch-bound
        # kernel's host time would only add noise to the choice (a user's do_bench is called as given)
        if getattr(self, "_do_bench", None) is None:
            from ..testing import do_bench

            return do_bench(call, gpu_time=True) / 1e3
        return self.do_bench(call) / 1e3

    @property
    def base_fn(self):
        """The @jit function under this and any other autotune/heuristics wrappers (Triton's attribute)."""
        return _base_fn(self)

    @base_fn.setter
    def base_fn(self, value):  # Triton sets it in __init__; subclasses written for Triton 2 set it themselves
        self._base_fn = value


def _base_fn(wrapper):
    """The @jit function under a stack of autotune/heuristics wrappers (each holds the next in `.fn`)."""
    if getattr(wrapper, "_base_fn", None) is not None:
        return wrapper._base_fn
    fn = wrapper.fn
    while not hasattr(fn, "_kl_source") and hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def _on_gpu(args, kwargs) -> bool:
    """Whether this launch runs on a GPU, by the rule the launch itself follows (CUDA tensors or host descriptors
    over them; a GPU present and no tensor at all): only there are timings worth taking."""
    return launches_on_gpu((*args, *kwargs.values()))


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=False, **_):
    def deco(fn):
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         use_cuda_graph=use_cuda_graph, do_bench=do_bench, cache_results=cache_results)

    return deco


class Heuristics(KernelInterface):
    """Computes constexprs from the arguments; Triton's constructor `(fn, arg_names, values)`."""

    def __init__(self, fn, arg_names, values: dict):
        self.fn, self.values = fn, values
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.arg_names = list(arg_names) if arg_names is not None else fn.arg_names

    @property
    def base_fn(self):
        """The @jit function under this and any other autotune/heuristics wrappers (Triton's attribute)."""
        return _base_fn(self)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args, grid, **kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        for k, f in self.values.items():
            kwargs[k] = f(named)
            named[k] = kwargs[k]
        return self.fn.run(*args, grid=grid, **kwargs)

    def warmup(self, *args, **kwargs):
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        for k, f in self.values.items():
            kwargs[k] = f(named)
        return self.fn.warmup(*args, **kwargs)


def heuristics(values: dict):
    return lambda fn: Heuristics(fn, fn.arg_names, values)
