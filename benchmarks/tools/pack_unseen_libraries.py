"""A trimmed, carryable copy of the libraries `unseen_libraries.py` runs: exactly the files its cases import.

    PYTHONPATH=.:<libs> python benchmarks/tools/pack_unseen_libraries.py OUT [--triton-python P] [--tar]

The libraries as installed for the CPU check (`pip install --no-deps --target`, plus mamba-ssm's and
flash-attn's sources; the runner's docstring says how) take 1.6 GB, mostly vLLM's and SGLang's compiled
extensions, which no case loads. The GPU machine has no network and receives at most 64 MiB of carried
files, so this runs every case on the CPU interpreter (the kernellab side, and with `--triton-python` the
Triton side too, whose imports differ) with an audit hook and records the files that were imported
(`sys.modules`) or opened (data files such as FlagGems' YAML tuning tables) under the PYTHONPATH entries.
It copies those, every parent package's `__init__.py`, and the `METADATA` of their distributions
(`importlib.metadata.version` is asked at import) into OUT/site, one folder as on a PYTHONPATH; with
`--siblings` also every .py beside a copied one (margin for imports that only a GPU run takes). Left out:
what the GPU machine's image already holds (`IMAGE`: torch, triton, numpy, einops, yaml, regex, aiohttp, ...,
from .library/device/KINDS.md: the image's builds match its Python) and every compiled extension that no case
imports (vLLM's, xformers' and torchao's load optionally). The extensions that are imported (SGLang's imports
reach orjson, msgspec, pybase64, pydantic_core and pyzmq; FlagGems' SQLAlchemy has pure-Python fallbacks) are
copied, but they are built for this Python (3.11) and the GPU machine's is 3.12: `--wheels DIR` adds the
compiled files of the same versions built for it, fetched here with
`pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform
manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d DIR orjson==3.13.0 msgspec==0.22.0 pybase64==1.5.1
pydantic_core==2.50.5 pyzmq==27.3.0` (the versions MANIFEST.json's `compiled` came from). OUT/MANIFEST.json
lists what was copied, what the image has, and the extensions left built for this Python only.
With `--tar`, also OUT.tar.xz (the carry is plain files: unpack with `tar -xJf`).

The copy for the GPU run was made with (the library folders as installed for the CPU check):
`PYTHONPATH=.:/tmp/libs13/site:/tmp/libs13/site_sgl:/tmp/libs13/site_vllm:/tmp/libs13b/state-spaces+mamba:
/tmp/libs13b/fa python benchmarks/tools/pack_unseen_libraries.py /tmp/ulibs/pack --siblings --tar --wheels DIR
--triton-python /tmp/tri/bin/python --triton-path /tmp/libs13/site_tri` (site_tri: pyyaml for that Python).

The copy of the thirteenth session's libraries (SageAttention, bitsandbytes, GemLite, lmdeploy, Unsloth; installed
as the runner's docstring says) was made with `PYTHONPATH=.:/tmp/libs20/site python
benchmarks/tools/pack_unseen_libraries.py /work/ulibs20/pack sageattention bitsandbytes gemlite lmdeploy unsloth
--siblings --tar --triton-python /tmp/tri/bin/python` (2.5 MiB .tar.xz; benchmarks/NOTES.md, "More unseen
libraries").

Check the copy alone: `PYTHONPATH=.:OUT/site python benchmarks/tools/unseen_libraries.py` (no other library
folder on the path) must pass every case. The device command is in benchmarks/NOTES.md ("Unseen libraries").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "benchmarks" / "tools" / "unseen_libraries.py"

# import names of what the GPU machine's image holds (KINDS.md, "Python packages already there"): not carried
IMAGE = {
    "torch", "triton", "numpy", "einops", "yaml", "_yaml", "regex", "psutil", "tqdm", "aiohttp", "aiosignal",
    "aiohappyeyeballs", "frozenlist", "multidict", "propcache", "yarl", "packaging", "jinja2", "markupsafe",
    "sympy", "mpmath", "networkx", "filelock", "fsspec", "typing_extensions", "setuptools", "pkg_resources",
    "_distutils_hack", "requests", "urllib3", "idna", "certifi", "charset_normalizer", "attr", "attrs", "six",
    "dateutil", "pytest", "_pytest", "pluggy", "iniconfig", "pygments", "rich", "markdown_it", "mdurl", "click",
    "safetensors", "huggingface_hub", "transformers", "tokenizers", "sentencepiece", "psutil", "scipy", "pandas",
    "msgpack", "cloudpickle", "zipp", "pyarrow", "uvloop", "anyio", "h11", "httpx", "httpcore", "sniffio",
    "typing_inspect", "mypy_extensions", "tabulate", "xxhash", "wrapt", "protobuf", "google", "PIL", "cv2",
    "kernellab", "nvidia", "cuda", "jax", "jaxlib", "cupy", "numba", "llvmlite", "ml_dtypes",
    "torchgen", "functorch", "torchvision", "torchaudio", "py",  # torch's own (its 2.11 there), pytest's shim
}
# folders copied whole (no compiled extensions): what only a CUDA run imports, unseen by the CPU trace. FlagGems
# loads its vendor's arch folder by the device's capability (`_nvidia/hopper` on sm_90, `ampere` on sm_80: put on
# sys.path and imported as `hopper`); xformers imports `ops.fmha.triton_splitk` -> `ops.fmha._triton` (and other
# Triton-only modules) when it finds a GPU. Both are small (0.1 and 0.8 MiB).
GPU_WHOLE = ["flag_gems/runtime/backend/_nvidia", "xformers",
             # GemLite reads its tuned configs by GPU name (h100.json) on a GPU; Unsloth's kernels and
             # bitsandbytes' backends import more of themselves where CUDA is there (all pure Python, < 2 MiB)
             "gemlite/configs", "unsloth/kernels", "bitsandbytes/backends", "sageattention"]
PURE_FALLBACK = {"sqlalchemy"}  # their extensions are optional speed-ups (9 MiB of SQLAlchemy's): not carried


# ---------------------------------------------------------------------------------------------------- tracing

def trace_child(out: str, runner_args: list[str]) -> int:
    """Run the runner's main with an audit hook; write {modules, opened} (absolute paths) to `out`."""
    opened: set[str] = set()

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            p = args[0].decode() if isinstance(args[0], bytes) else args[0]
            opened.add(os.path.abspath(p))

    sys.addaudithook(hook)
    missing: set[tuple[str, str]] = set()

    class _Missing:
        """Last on sys.meta_path: a top-level module no finder found, and the file that asked for it."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if "." not in name:
                f = sys._getframe(1)
                while f is not None and f.f_code.co_filename.startswith("<frozen"):
                    f = f.f_back
                missing.add((name, f.f_code.co_filename if f is not None else ""))
            return None

    sys.meta_path.append(_Missing)
    sys.argv = [str(RUNNER), *runner_args]
    import importlib.util

    spec = importlib.util.spec_from_file_location("unseen_libraries", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["unseen_libraries"] = mod
    spec.loader.exec_module(mod)
    rc = mod.main(runner_args)
    modules = sorted({os.path.abspath(f) for m in list(sys.modules.values())
                      if isinstance(f := getattr(m, "__file__", None), str)})
    Path(out).write_text(json.dumps({"modules": modules, "opened": sorted(opened), "rc": rc,
                                     "missing": sorted(missing)}))
    return rc


def trace(python: str, side: str, libs: list[str], work: Path, env_extra: dict, reuse=False) -> dict:
    out = work / f"trace-{side}.json"
    log = work / f"trace-{side}.log"
    if reuse and out.exists():
        return json.loads(out.read_text())
    cmd = [python, __file__, "--trace-child", str(out), "--", *libs, "--side", side]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH")] if p))
    env.update(env_extra)
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT)).returncode
    text = log.read_text()
    passed, failed = text.count("\nPASS ") + text.startswith("PASS "), text.count("\nFAIL ") + text.startswith("FAIL ")
    print(f"traced the {side} side with {python}: rc {rc}, {passed} passed, {failed} failed, "
          f"{time.time() - t0:.0f} s (log: {log})", flush=True)
    return json.loads(out.read_text()) if out.exists() else {"modules": [], "opened": []}


# ---------------------------------------------------------------------------------------------------- packing

def _roots() -> list[Path]:
    """The library folders: PYTHONPATH entries (not this repository) and this Python's site-packages."""
    roots = []
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and Path(p).resolve() != ROOT and Path(p).is_dir():
            roots.append(Path(p).resolve())
    roots.append(Path(sysconfig.get_paths()["purelib"]).resolve())
    return roots


def _under(path: Path, roots: list[Path]):
    for r in roots:
        try:
            return r, path.relative_to(r)
        except ValueError:
            continue
    return None, None


def select(traces: list[dict], roots: list[Path], siblings: bool) -> tuple[dict, dict]:
    """{relative path: source path} to copy, and notes {compiled, skipped_image}."""
    files: dict[Path, Path] = {}
    compiled, image = set(), set()
    for t in traces:
        for f in t["modules"] + t["opened"]:
            src = Path(f)
            if src.suffix == ".pyc" and src.parent.name == "__pycache__":  # imports read the cached bytecode
                src = src.parent.parent / (src.name.split(".")[0] + ".py")
            if not src.is_file() or "__pycache__" in src.parts or src.suffix == ".pyc":
                continue
            root, rel = _under(src, roots)
            if root is None or rel.parts[0].endswith((".dist-info", ".egg-info")):
                continue
            top = rel.parts[0].split(".")[0]
            if top.startswith("__editable__"):  # this checkout's editable-install finder
                continue
            if top in IMAGE:
                image.add(top)
                continue
            if src.suffix in (".so", ".pyd"):
                source = src.with_name(src.name.split(".")[0] + ".py")  # Cython's pure-Python mode: its source
                if source.is_file():
                    files.setdefault(rel.with_name(source.name), source)
                if top in PURE_FALLBACK:  # the pure-Python path: every .py beside (sqlalchemy/util/cython.py)
                    for sib in src.parent.glob("*.py"):
                        files.setdefault(rel.parent / sib.name, sib)
                    continue
                compiled.add(str(rel))
            files.setdefault(rel, src)
    for rel, src in list(files.items()):  # parent packages' __init__.py (a bare-loaded package's too)
        root = Path(str(src)[: -len(str(rel))])
        for i in range(1, len(rel.parts)):
            init = rel.parents[len(rel.parts) - 1 - i] / "__init__.py"
            if (root / init).is_file():
                files.setdefault(init, root / init)
        if siblings and src.suffix == ".py":
            for sib in src.parent.glob("*.py"):
                files.setdefault(rel.parent / sib.name, sib)
    return files, {"compiled": sorted(compiled), "skipped_image": sorted(image)}


def _gpu_whole(roots: list[Path], files: dict) -> dict:
    """The files of the `GPU_WHOLE` folders (of the libraries that are copied at all), their parents' __init__."""
    out = {}
    tops = {rel.parts[0] for rel in files}
    for folder in GPU_WHOLE:
        if Path(folder).parts[0] not in tops:
            continue
        for root in roots:
            if (root / folder).is_dir():
                for f in sorted((root / folder).rglob("*")):
                    if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".so", ".pyd", ".pyc"):
                        out.setdefault(f.relative_to(root), f)
                break
    for rel, src in list(out.items()):
        root = Path(str(src)[: -len(str(rel))])
        for parent in list(rel.parents)[:-1]:
            if (root / parent / "__init__.py").is_file():
                out.setdefault(parent / "__init__.py", root / parent / "__init__.py")
    return out


def absent(trace: dict, roots: list[Path], files: dict) -> list[str]:
    """Top-level modules a library asked for that are not installed here (transformers, which fla's
    `__init__` tries for its optional layers): the GPU image may hold them, and a library that finds them
    imports modules this trace never saw. The runner blocks them (`UNSEEN_LIBRARIES_ABSENT`) so the GPU run
    takes the imports traced here."""
    tops = {rel.parts[0].split(".")[0] for rel in files}
    out = set()
    for name, importer in trace.get("missing", []):
        if name not in tops and _under(Path(importer), roots[:-1])[0] is not None:  # asked by a library's file
            out.add(name)
    return sorted(out)


def _with_libs(files: dict, roots: list[Path]) -> dict:
    """The `<dist>.libs` folders (shared libraries a wheel's extension links to, e.g. pyzmq.libs) of the
    distributions whose extensions are copied: the dynamic loader opens them, unseen by the audit hook."""
    out = {}
    tops = {rel.parts[0] for rel in files if rel.suffix in (".so", ".pyd")}
    for root in roots:
        for info in root.glob("*.dist-info"):
            libs = root / (info.name.split("-")[0] + ".libs")
            record = info / "RECORD"
            if libs.is_dir() and record.is_file() and any(
                    line.split("/")[0] in tops for line in record.read_text(errors="replace").splitlines()):
                for f in libs.rglob("*"):
                    if f.is_file():
                        out.setdefault(f.relative_to(root), f)
    return out


def _from_wheels(wheels: Path, site: Path, tops: set[str]) -> list[str]:
    """Extract the compiled files (extensions, `<dist>.libs/`) of the wheels in `wheels` whose packages are
    in the copy: builds for another Python (the GPU machine's 3.12) beside this one's (CPython picks the
    extension whose tag is its own: `x.cpython-311-...so` and `x.cpython-312-...so` can share a folder)."""
    import zipfile

    added = []
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                top = name.split("/")[0]
                if name.endswith("/") or not (top in tops or top.endswith(".libs")):
                    continue
                if name.endswith((".so", ".pyd")) or ".libs/" in name or ".so." in name:
                    target = site / name
                    if not target.exists():
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(name))
                        added.append(name)
    return added


def _dist_infos(files: dict, roots: list[Path]) -> dict:
    """The METADATA (and top_level/entry_points) of the distributions whose packages are copied."""
    tops = {rel.parts[0].split(".")[0] for rel in files}
    out = {}
    for root in roots:
        for info in root.glob("*.dist-info"):
            names = set()
            for meta in ("top_level.txt", "RECORD"):
                if (info / meta).is_file():
                    names |= {line.split("/")[0].split(",")[0].split(".")[0]
                              for line in (info / meta).read_text(errors="replace").splitlines() if line}
            if names & tops:
                for meta in ("METADATA", "top_level.txt", "entry_points.txt"):
                    rel = Path(info.name) / meta
                    if (info / meta).is_file():
                        out.setdefault(rel, info / meta)
    return out


def _image_stand_in(out: Path, work: Path) -> Path:
    """A folder standing in for the GPU image's packages that the traced run took from the library folders
    (einops, regex, tqdm, ... installed beside the libraries here): copied whole, for the check only."""
    image = work / "image"
    if image.exists():
        return image
    roots = [Path(r) for r in json.loads((out / "MANIFEST.json").read_text())["roots"]][:-1]  # not site-packages
    names = set(json.loads((out / "MANIFEST.json").read_text())["skipped_image"])
    for root in roots:
        for name in names:
            src = root / name
            if src.is_dir() and not (image / name).exists():
                shutil.copytree(src, image / name, ignore=shutil.ignore_patterns("__pycache__"))
            elif (root / f"{name}.py").is_file():
                image.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / f"{name}.py", image / f"{name}.py")
        # and their distributions' metadata, as the image has it (transformers checks tqdm's, regex's, ... versions
        # through importlib.metadata when imported: Unsloth's kernels import it)
        for info in root.glob("*.dist-info"):
            record = info / "RECORD"
            if record.is_file() and not (image / info.name).exists() and any(
                    line.split("/", 1)[0].split(",", 1)[0].removesuffix(".py") in names
                    for line in record.read_text(errors="replace").splitlines()):
                shutil.copytree(info, image / info.name)
    image.mkdir(parents=True, exist_ok=True)
    return image


def verify(out: Path, python: str, side: str, libs: list[str], extra_path=None) -> int:
    """Run the runner from OUT/site alone (PYTHONPATH = this repository and OUT/site) under the trace, and
    name every module it loaded from outside the copy, the standard library and the image's packages: such a
    module came from this machine's Python and would be missing on the GPU machine."""
    work = out.parent / (out.name + "-verify")
    work.mkdir(exist_ok=True)
    image = _image_stand_in(out, work)
    env = {"PYTHONPATH": os.pathsep.join(map(str, [ROOT, out / "site", image, *([extra_path] if extra_path else [])]))}
    env["UNSEEN_LIBRARIES_ABSENT"] = (out / "absent.txt").read_text().strip()
    if side == "triton":
        env["TRITON_INTERPRET"] = "1"
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env.pop("PYTHONPATH")
    try:
        t = trace(python, side, libs, work, env)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    stdlib = [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")]
    outside = set()
    for f in t["modules"]:
        p = Path(f).resolve()
        if not p.is_file():
            continue
        base = _under(p, [out.resolve(), work.resolve(), ROOT, *stdlib])[0]
        if base is not None and "site-packages" not in str(p.relative_to(base)):
            continue
        extra, rel = _under(p, [Path(extra_path).resolve()] if extra_path else [])
        if extra is None:
            top = next((part for part in reversed(p.parts[:-1]) if part == "site-packages"), None)
            rel = p.parts[p.parts.index(top) + 1:] if top else p.parts
        else:
            rel = rel.parts
        name = rel[0].split(".")[0]
        if name not in IMAGE and not name.startswith("_") and name != "kernellab":
            outside.add(name)
    print(f"loaded from outside the copy, not in the GPU image: {', '.join(sorted(outside)) or 'nothing'}")
    return 1 if outside else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--trace-child"]:
        return trace_child(argv[1], argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the folder to write (its site/ goes on PYTHONPATH)")
    ap.add_argument("libs", nargs="*", help="only these libraries (default: all the runner knows)")
    ap.add_argument("--triton-python", help="a Python with the real Triton: trace the Triton side too "
                    "(TRITON_INTERPRET=1)")
    ap.add_argument("--triton-path", help="a folder added to the Triton side's PYTHONPATH (while tracing and "
                    "checking) with what that Python lacks and the GPU image has, e.g. pyyaml")
    ap.add_argument("--siblings", action="store_true", help="also every .py beside a copied one")
    ap.add_argument("--wheels", help="a folder of wheels for the GPU machine's Python (see above): their compiled "
                    "files go beside this Python's")
    ap.add_argument("--tar", action="store_true", help="also write OUT.tar.xz")
    ap.add_argument("--reuse-traces", action="store_true", help="use OUT-trace/'s traces of an earlier run")
    ap.add_argument("--verify", action="store_true", help="run the cases from OUT/site alone (it must exist) and "
                    "name any module loaded from elsewhere that the GPU image lacks")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    if args.verify:
        rc = verify(out, sys.executable, "kernellab", args.libs)
        if args.triton_python:
            rc |= verify(out, args.triton_python, "triton", args.libs, args.triton_path)
        return rc
    work = out.parent / (out.name + "-trace")
    work.mkdir(parents=True, exist_ok=True)
    roots = _roots()
    traces = [trace(sys.executable, "kernellab", args.libs, work, {}, args.reuse_traces)]
    if args.triton_python:
        extra = {"TRITON_INTERPRET": "1"}
        if args.triton_path:  # packages the image has and that Python lacks (yaml): the Triton side gets further
            extra["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", ""), args.triton_path])
        traces.append(trace(args.triton_python, "triton", args.libs, work, extra, args.reuse_traces))
    files, notes = select(traces, roots, args.siblings)
    files.update(_gpu_whole(roots, files))
    files.update(_dist_infos(files, roots))
    files.update(_with_libs(files, roots))
    if out.exists():
        shutil.rmtree(out)
    site = out / "site"
    for rel, src in sorted(files.items()):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, site / rel)
    if args.wheels:
        notes["from_wheels"] = _from_wheels(Path(args.wheels), site, {rel.parts[0] for rel in files})
    notes["absent"] = absent(traces[0], roots, files)
    (out / "absent.txt").write_text(",".join(notes["absent"]) + "\n")
    tag = sysconfig.get_config_var("SOABI") or ""
    other = {Path(n).name.split(".")[0] for n in notes.get("from_wheels", [])}
    notes["compiled_for_this_python_only"] = [c for c in notes["compiled"] if tag and tag in c
                                              and Path(c).name.split(".")[0] not in other]
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    per_top: dict[str, int] = {}
    for rel, src in files.items():
        per_top[rel.parts[0]] = per_top.get(rel.parts[0], 0) + src.stat().st_size
    manifest = {"made_by": "benchmarks/tools/pack_unseen_libraries.py", "date": time.strftime("%Y-%m-%d"),
                "python": sys.version.split()[0], "roots": [str(r) for r in roots], "siblings": args.siblings,
                "files": len(files), "bytes": size, "bytes_per_top_level": dict(sorted(per_top.items())), **notes}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    print(f"{out}/site: {len(files)} files, {size / 2**20:.1f} MiB")
    for top, n in sorted(per_top.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {top:40s} {n / 2**20:7.2f} MiB")
    print(f"not carried (the GPU image has them): {', '.join(notes['skipped_image']) or '-'}")
    print(f"absent here, asked for by a library (OUT/absent.txt, for UNSEEN_LIBRARIES_ABSENT): "
          f"{', '.join(notes['absent']) or '-'}")
    print(f"compiled extensions imported here, carried: {len(notes['compiled'])}; for the GPU machine's Python "
          f"from --wheels: {len(notes.get('from_wheels', []))} files")
    print("built for this Python only (they will not load on another): "
          f"{', '.join(notes['compiled_for_this_python_only']) or '-'}")
    if args.tar:
        tar = out.parent / (out.name + ".tar.xz")
        with tarfile.open(tar, "w:xz", preset=9) as tf:
            tf.add(out, arcname=out.name)
        print(f"{tar}: {tar.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
