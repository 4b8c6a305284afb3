"""Result rows the dashboard tests build sites from: a small run with markup planted in a case's
id, message and expectation reason."""

from __future__ import annotations

from torch_onnx_conformance.reports.rows import CaseResult

PLANTED = "<img src=x onerror=window.__pwned=1><script>window.__pwned=1</script>"
TOLERANCE_MESSAGE = (
    "AssertionError: output 0: 12/64 elements exceed rtol=1e-05 atol=1e-05; max abs error 2.1e-05"
)


def row(case_id: str, status: str, **fields) -> CaseResult:
    parts = case_id.split("::")
    base = dict(
        id=case_id,
        kind=parts[0],
        subject=parts[1],
        family=fields.pop("family", "elementwise"),
        dtype="f32",
        shapes=parts[4] if parts[0] == "op" else parts[3],
        opset=20,
        provider="cpu",
        exporter="ours",
        status=status,
    )
    base.update(fields)
    return CaseResult(**base)


def small_run() -> list[CaseResult]:
    rows = [
        row("op::abs::s000::f32::static::opset20::cpu::ours", "pass"),
        row("op::abs::s000::f32::dynamic::opset20::cpu::ours", "pass"),
        row(
            "op::add::s001::f32::static::opset20::cpu::ours",
            "fail",
            stage="compare",
            error=TOLERANCE_MESSAGE,
            max_abs=2.1e-05,
            atol=1e-05,
            max_rel=0.3,
            rtol=1e-05,
        ),
        row(
            "op::add::s002::f32::static::opset20::cpu::ours",
            "xfail",
            stage="export",
            error="NotImplementedError: no lowering for aten.add.Tensor with alpha=2",
            expectation="alpha other than 1 is not lowered yet",
        ),
        row(
            f"op::evil{PLANTED}::s000::f32::static::opset20::cpu::ours",
            "fail",
            family="nn",
            stage="run",
            error=f"RuntimeError: {PLANTED}",
            expectation=PLANTED,
        ),
        row(
            "model::torchvision/resnet18::f32::static::opset20::cpu::ours::opt",
            "pass",
            family="torchvision",
        ),
    ]
    rows += [
        row(
            "op::abs::s000::f32::static::opset18::cpu::torch-dynamo",
            "pass",
            opset=18,
            exporter="torch-dynamo",
        )
    ]
    return rows


def synthetic_run(count: int) -> list[CaseResult]:
    """``count`` op cases over 40 families: 5 samples × 2 shapes × 2 exporters × 2 opsets per
    op, one in 20 failing with a long message."""
    rows = []
    statuses = ["pass"] * 17 + ["fail", "xfail", "skip"]
    index = 0
    op = 0
    while len(rows) < count:
        for exporter in ("ours", "torch-dynamo"):
            for opset in (18, 20):
                for shapes in ("static", "dynamic"):
                    for sample in range(5):
                        status = statuses[index % len(statuses)]
                        index += 1
                        case_id = f"op::op{op}::s{sample:03d}::f32::{shapes}::opset{opset}::cpu::{exporter}"
                        rows.append(
                            row(
                                case_id,
                                status,
                                family=f"family{op % 40}",
                                opset=opset,
                                exporter=exporter,
                                sample=sample,
                                stage=None if status == "pass" else "compare",
                                error=None if status == "pass" else TOLERANCE_MESSAGE * 3,
                            )
                        )
        op += 1
    return rows[:count]
