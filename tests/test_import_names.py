"""The import names live under one package, ``torch_onnx_conformance``: a user's own packages
named ``exporter``, ``reports``, ``conformance`` and ``model_zoo`` (common folder names in ML
repositories) import beside ours in one process, and ours still exports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The user's packages, each named like one of ours (written as strings: nothing here imports them).
USER_PACKAGES = ("exporter", "reports", "conformance", "model_zoo")

CHECK = textwrap.dedent(
    """
    import importlib, json, sys

    names = %r
    users = [importlib.import_module(name) for name in names]

    import numpy as np
    import torch

    import torch_onnx_conformance
    from torch_onnx_conformance import exporter as ours
    from torch_onnx_conformance.conformance import case
    from torch_onnx_conformance.model_zoo import registry
    from torch_onnx_conformance.reports import rows

    model = torch.nn.Linear(3, 2).eval()
    x = torch.randn(4, 3)
    program = ours.export(model, (x,), optimize=False)
    (got,) = program(x)
    np.testing.assert_allclose(got.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    print(json.dumps({
        "markers": [sys.modules[name].MARKER for name in names],
        "ours": [m.__name__ for m in (ours, case, registry, rows)],
        "files": [m.__file__ for m in (torch_onnx_conformance, ours, case, registry, rows)],
        "outputs": [o.name for o in program.model_proto.graph.output],
    }))
    """
)


def test_user_packages_named_like_ours_import_beside_ours(tmp_path):
    for name in USER_PACKAGES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MARKER = 'the user package {name}'\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    # `python -c` puts the current folder, the user's, first on sys.path: theirs win by name.
    done = subprocess.run(
        [sys.executable, "-c", CHECK % (USER_PACKAGES,)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["markers"] == [f"the user package {name}" for name in USER_PACKAGES]
    assert seen["ours"] == [
        "torch_onnx_conformance.exporter",
        "torch_onnx_conformance.conformance.case",
        "torch_onnx_conformance.model_zoo.registry",
        "torch_onnx_conformance.reports.rows",
    ]
    package = Path(seen["files"][0]).parent
    assert all(Path(f).is_relative_to(package) for f in seen["files"])
    assert not package.is_relative_to(tmp_path)
    assert len(seen["outputs"]) == 1


def test_importing_the_top_package_loads_nothing_heavy():
    code = "import sys, torch_onnx_conformance; print(sorted(m for m in ('torch', 'numpy', 'onnx') if m in sys.modules))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
