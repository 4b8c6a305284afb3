"""The one tolerance table: every bound a comparison uses, generated from where it is defined.

``exporter.diagnostics.compare.TOLERANCES`` (``verify=True`` and the model cases' defaults),
``torch_onnx_conformance/conformance/tolerances.toml`` (op cases, per dtype and per op), ``torch_onnx_conformance/model_zoo/tolerances.toml``
(per model) and the model cases' eager-noise rule (``conformance.model_cases``). The README holds
a copy between two markers; ``python -m torch_onnx_conformance.reports.tolerances --update README.md`` rewrites it and a
test checks it matches. Every report links to it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT.parent / "README.md"
OP_POLICY = ROOT / "conformance" / "tolerances.toml"
MODEL_OVERRIDES = ROOT / "model_zoo" / "tolerances.toml"
START = (
    "<!-- tolerance table: generated from the data by "
    "`python -m torch_onnx_conformance.reports.tolerances --update README.md`; edit the data, not this copy -->"
)
END = "<!-- end of the generated tolerance table -->"
#: The README heading the reports link to (GitHub's anchor for "## Tolerances").
ANCHOR = "tolerances"
PROVIDERS_NOTE = (
    "Providers share every bound except the rows marked with one (`on cuda`); float32 on CUDA "
    "runs with TF32 off (`use_tf32=0`), so it keeps the float32 rows."
)


def _number(value: float) -> str:
    return f"{value:g}"


#: The table's columns.
COLUMNS = ("where", "rule", "dtype", "rtol", "atol", "from")


def tolerance_rows() -> list[tuple[str, str, str, str, str, str]]:
    """One row per bound, in COLUMNS order, read from where each is defined."""
    import tomllib

    from torch_onnx_conformance.exporter.diagnostics.compare import (
        FALLBACK_TOLERANCE,
        TOLERANCES,
        load_policy,
        load_reference_rule,
    )

    policy = load_policy(OP_POLICY)
    rows = []

    def add(where: str, rule: str, dtype: str, rtol: float, atol: float, source: str) -> None:
        rows.append((where, rule, dtype, _number(rtol), _number(atol), source))

    compare = "torch_onnx_conformance/exporter/diagnostics/compare.py"
    for dtype, (rtol, atol) in TOLERANCES["export"].items():
        add("export(verify=True)", "element", dtype, rtol, atol, compare)
    add("export(verify=True)", "element", "other", *FALLBACK_TOLERANCE, compare)
    for dtype, (rtol, atol) in policy.by_dtype.items():
        add(
            "op cases",
            "element",
            dtype,
            rtol,
            atol,
            "torch_onnx_conformance/conformance/tolerances.toml",
        )
    for entry in policy.overrides:
        provider = f" on {entry['provider']}" if entry.get("provider") else ""
        add(
            f"op cases: {entry['op']}{provider}",
            "element",
            str(entry.get("dtype", "all")),
            float(entry["rtol"]),
            float(entry["atol"]),
            "torch_onnx_conformance/conformance/tolerances.toml override",
        )
    rule = load_reference_rule(OP_POLICY)
    add(
        f"op and model cases: float16 against {rule.reference}",
        "reference",
        "f16",
        rule.multiple,
        rule.floor,
        "torch_onnx_conformance/conformance/tolerances.toml [float16]",
    )
    for dtype, (rtol, atol) in TOLERANCES["model"].items():
        add("model cases", "scale", dtype, rtol, atol, compare)
    overrides = tomllib.loads(MODEL_OVERRIDES.read_text(encoding="utf-8")).get("cases", {})
    for name, table in sorted(overrides.items()):
        per_dtype = [("f32", table), *((k, v) for k, v in table.items() if isinstance(v, dict))]
        for dtype, entry in per_dtype:
            if "rtol" in entry and "atol" in entry:
                rtol, atol = float(entry["rtol"]), float(entry["atol"])
                add(
                    f"model {name}",
                    "scale",
                    dtype,
                    rtol,
                    atol,
                    "torch_onnx_conformance/model_zoo/tolerances.toml",
                )
    return rows


def tolerance_rules() -> list[str]:
    """The rules the numbers are used in, the eager-noise rule among them."""
    from torch_onnx_conformance.conformance.model_cases import NOISE_FACTOR, NOISE_RTOL_CAP

    return [
        "element: every element satisfies |actual - expected| <= atol + rtol * |expected|.",
        "scale (whole models): max |actual - expected| <= atol + rtol * scale, scale the "
        "output's largest finite |expected|.",
        "reference (float16 cases, op and model, unless an override names the op or model): "
        "eager runs again on the same inputs' values upcast to float64, and per element "
        "|ours - ref| <= rtol x max(|eager16 - ref|, one float16 step at |ref|) + atol (model "
        "cases: the output's maxima, the step taken at its scale); the rtol column is that "
        "multiple, atol the floor for exact zeros. Shapes, NaNs, infinities and integers are "
        "judged against eager float16 as above, except where eager overflowed inside the op "
        "(NaN or inf where the reference rounds to another value): there ours is judged by "
        "the reference alone.",
        "Integer and bool outputs compare exactly, NaNs must sit at the same positions and "
        "infinities match in position and sign, whatever the numbers above.",
        f"Eager noise (model cases): rtol is raised to {_number(NOISE_FACTOR)} x the model's "
        "own rounding noise (max |y - y64| / max |y64| of eager against a float64 run), at most "
        f"{_number(NOISE_RTOL_CAP)}, where that exceeds the rtol above; the row's "
        "tolerance_source says so.",
        PROVIDERS_NOTE,
        "Random ops (`[distribution]` in torch_onnx_conformance/conformance/tolerances.toml) are judged by "
        "distribution over many draws of eager and the model: means, variances and the "
        "two-sample Kolmogorov-Smirnov statistic within bounds set for a 1e-6 false-failure "
        "rate (torch_onnx_conformance/exporter/diagnostics/compare.py compare_distributions).",
        "The error chart (charts/error_vs_tolerance.png) plots each compare failure against the "
        "bound that failed: atol where atol >= rtol * |expected| at the worst element, rtol "
        "otherwise.",
    ]


def tolerance_markdown() -> str:
    """The table and the rules beside it, as markdown."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in tolerance_rows():
        cells = [f"`{row[0]}`" if row[0].startswith("export(") else row[0], *row[1:5]]
        lines.append("| " + " | ".join([*cells, f"`{row[5]}`"]) + " |")
    rules = [f"- {rule}" for rule in tolerance_rules()]
    return "\n".join(lines) + "\n\n" + "\n".join(rules) + "\n"


def readme_block(readme: str) -> str | None:
    """The generated table's copy in ``readme`` (between the markers), or None."""
    if START not in readme or END not in readme:
        return None
    return readme.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def updated_readme(readme: str, table: str) -> str:
    """``readme`` with the copy between the markers replaced by ``table``."""
    if readme_block(readme) is None:
        raise ValueError(f"the README lacks the markers {START!r} ... {END!r}")
    before, rest = readme.split(START, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{START}\n{table}{END}{after}"


def report_link(out_dir: str | Path | None) -> str:
    """A markdown link to the table from a report written into ``out_dir``."""
    import os

    if out_dir is None:
        return f"README.md, section Tolerances (`#{ANCHOR}`)"
    target = Path(os.path.relpath(README, Path(out_dir).resolve())).as_posix()
    return f"[the tolerance table]({target}#{ANCHOR})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_onnx_conformance.reports.tolerances", description=__doc__
    )
    parser.add_argument(
        "--update", type=Path, metavar="README", help="rewrite the copy between the markers"
    )
    options = parser.parse_args(argv)
    table = tolerance_markdown()
    if options.update is None:
        print(table, end="")
        return 0
    text = options.update.read_text(encoding="utf-8")
    options.update.write_text(updated_readme(text, table), encoding="utf-8")
    print(f"wrote the tolerance table into {options.update}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
