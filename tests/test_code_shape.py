"""The code's shape, checked: short functions and no import cycles hidden inside functions.

A newcomer reads a function at a time. In ``torch_onnx_conformance/conformance/`` and ``torch_onnx_conformance/exporter/`` no function is
80 lines or longer, except the op kernels listed in ``LONG_KERNELS``, which follow a published
algorithm step by step (splitting them would scatter one algorithm over several places).
Between ``torch_onnx_conformance/conformance/`` modules, an import made inside a function must not be an import back
into a module that imports the function's own module: that is an import cycle which only the
laziness of the inner import hides.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("torch_onnx_conformance/conformance", "torch_onnx_conformance/exporter")
MAX_LINES = 80

# (module path, function) -> the algorithm the kernel follows step by step.
LONG_KERNELS = {
    (
        "torch_onnx_conformance/exporter/ops/vision.py",
        "_roi_align_by_gathers",
    ): "torchvision's RoIAlign sampling grid",
    (
        "torch_onnx_conformance/exporter/ops/linalg_more.py",
        "_ldl_step",
    ): "Bunch-Kaufman pivoting (LAPACK sytrf)",
    (
        "torch_onnx_conformance/exporter/ops/linalg_more.py",
        "linalg_ldl_solve",
    ): "LAPACK sytrs, the solve after sytrf",
    (
        "torch_onnx_conformance/exporter/ops/linalg_spectral.py",
        "_jacobi",
    ): "the cyclic Jacobi eigenvalue sweep",
    (
        "torch_onnx_conformance/exporter/ops/fft.py",
        "istft",
    ): "the inverse STFT's overlap-add with window envelope",
    (
        "torch_onnx_conformance/exporter/ops/nn.py",
        "_embedding_bag",
    ): "embedding_bag's offsets/per-sample-weights modes",
}


def _sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _long_functions() -> dict[tuple[str, str], int]:
    found = {}
    for package in PACKAGES:
        for path in _sources(package):
            for fn in _functions(ast.parse(path.read_text())):
                length = fn.end_lineno - fn.lineno + 1
                if length >= MAX_LINES:
                    found[(path.relative_to(ROOT).as_posix(), fn.name)] = length
    return found


def test_no_function_of_80_lines_or_more():
    long = _long_functions()
    unlisted = {key: n for key, n in long.items() if key not in LONG_KERNELS}
    assert not unlisted, (
        f"functions of {MAX_LINES}+ lines (split them by meaning, or list an op kernel that "
        f"follows a published algorithm in LONG_KERNELS): {unlisted}"
    )


def test_every_listed_kernel_is_still_long():
    """The exemption list shrinks when a kernel gets short or goes (no stale entries)."""
    stale = sorted(set(LONG_KERNELS) - set(_long_functions()))
    assert not stale, f"LONG_KERNELS entries no longer {MAX_LINES}+ lines long: {stale}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> set[str]:
    """The conformance modules an import statement loads (relative imports resolved): for
    ``from package import name``, the submodule when ``name`` is one, else the package."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = module.split(".")
            anchor = anchor if is_package else anchor[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
            for alias in node.names
        ]
    return {name for name in names if name in known}


def _import_graph():
    """module -> (modules imported at module level, [(function, module) imported inside])."""
    graph = {}
    paths = _sources("torch_onnx_conformance/conformance")
    known = {_module_name(p) for p in paths}
    for path in paths:
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        inner_nodes = {
            id(n)
            for fn in _functions(tree)
            for n in ast.walk(fn)
            if isinstance(n, (ast.Import, ast.ImportFrom))
        }
        top, inner = set(), []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = _imported(node, module, path.name == "__init__.py", known)
                if id(node) in inner_nodes:
                    inner.extend((node.lineno, name) for name in names)
                else:
                    top |= names
        graph[module] = (top - {module}, inner)
    return graph


def _hidden_cycles() -> list[str]:
    graph = _import_graph()
    return [
        f"{module}:{line} imports {target} inside a function, and {target} imports {module}"
        for module, (_, inner) in graph.items()
        for line, target in inner
        if target != module and module in graph.get(target, (set(), []))[0]
    ]


def test_no_import_cycle_hidden_in_a_function():
    hidden = _hidden_cycles()
    assert not hidden, "\n".join(hidden)


def test_the_cycle_rule_finds_an_inner_back_import(tmp_path, monkeypatch):
    package = tmp_path / "torch_onnx_conformance" / "conformance"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from torch_onnx_conformance.conformance import b\n")
    (package / "b.py").write_text(
        "def f():\n    from torch_onnx_conformance.conformance import a\n    return a\n"
    )
    (package / "c.py").write_text("def g():\n    from . import a\n    return a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _hidden_cycles() == [
        "torch_onnx_conformance.conformance.b:2 imports torch_onnx_conformance.conformance.a inside a function, and "
        "torch_onnx_conformance.conformance.a imports torch_onnx_conformance.conformance.b"
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n" + "    x = 1\n" * 90, {("pkg/m.py", "f"): 91}),
        ("def f():\n    return 1\n", {}),
    ],
)
def test_the_length_rule_counts_lines(tmp_path, monkeypatch, source, expected):
    """The measure the rule applies: a def's lines from ``def`` to its last statement."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(source)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("pkg",))
    assert _long_functions() == expected
