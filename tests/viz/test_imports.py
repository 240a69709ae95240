"""The lab reads the CompileTrace and the public layout model, nothing else of the compiler (DESIGN.md: the
trace is the seam), and the trace module itself is plain data that imports nothing of the compiler."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "kernellab"
ALLOWED = {"kernellab.compiler.trace", "kernellab.compiler.layout_model"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in a file of the kernellab package, top-level or nested;
    `from pkg import name` counts as importing `pkg.name` too, since a name may be a submodule."""
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def _compiler_imports(path: Path) -> list[tuple[int, str]]:
    return [(n, m) for n, m in _imports(path) if m == "kernellab.compiler" or m.startswith("kernellab.compiler.")]


def test_resolver_sees_relative_and_nested_imports():
    found = dict((m, n) for n, m in _imports(ROOT / "viz" / "html.py"))
    assert "kernellab.compiler.layout_model" in found and "kernellab.viz.data" in found


def test_viz_imports_only_the_trace_and_the_layout_model_from_the_compiler():
    files = sorted((ROOT / "viz").glob("*.py"))
    assert len(files) >= 6
    bad = []
    for path in files:
        for line, mod in _compiler_imports(path):
            # `from ..compiler import layout_model` imports the package too: the names it takes must be allowed
            if mod != "kernellab.compiler" and mod not in ALLOWED and not any(mod.startswith(a + ".") for a in ALLOWED):
                bad.append(f"{path.name}:{line}: {mod}")
    assert not bad, "viz reaches into the compiler:\n" + "\n".join(bad)
    assert any(_compiler_imports(p) for p in files)  # the check sees the imports it allows


def test_the_trace_module_is_plain_data():
    mods = {m for _, m in _imports(ROOT / "compiler" / "trace.py")}
    assert not {m for m in mods if m.startswith("kernellab")}, mods
