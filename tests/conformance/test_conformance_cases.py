"""Case identity, sampling, sample-to-module conversion and second-shape inputs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from torch_onnx_conformance.conformance import case as cases
from torch_onnx_conformance.conformance import op_cases, planted, shapes
from torch_onnx_conformance.conformance.families import op_family
from torch_onnx_conformance.conformance.modules import CallModule, flatten_outputs, split_call
from torch_onnx_conformance.conformance.op_cases import select_samples
from torch_onnx_conformance.conformance.runner import run_case
from torch_onnx_conformance.exporter.diagnostics import second_shape
from torch_onnx_conformance.exporter.stages import CASE_STAGES


def test_case_id_round_trip():
    case = op_cases.OpCase("nn.functional.conv2d", 3, "f32", "dynamic", 20, "cpu", "ours")
    assert case.id == "op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours"
    assert op_cases.parse_case_id(case.id) == case


@pytest.mark.parametrize(
    ("bad", "complaint"),
    [
        ("abs", "not an op case id"),
        ("op::abs::s000::f99::static::opset20::cpu::ours", "unknown dtype 'f99'"),
        ("op::abs::s000::f32::static::opset20::tpu::ours", "unknown provider 'tpu'"),
        ("op::abs::s000::f32::static::opset20::cpu::mine", "unknown exporter 'mine'"),
    ],
)
def test_bad_case_ids_say_what_is_wrong(bad, complaint):
    with pytest.raises(ValueError, match=complaint):
        op_cases.parse_case_id(bad)


def test_parse_case_gives_the_case_kind_its_id_names():
    op = "op::abs::s000::f32::static::opset20::cpu::ours"
    model = "model::torchvision/resnet18::f32::dynamic::opset20::cpu::ours::opt"
    assert cases.parse_case(op) == op_cases.parse_case_id(op)
    assert cases.parse_case(model).model == "torchvision/resnet18"
    assert cases.parse_case(model).id == model
    with pytest.raises(ValueError, match="not a model case id"):
        cases.parse_case("model::resnet18")


def test_op_facts_are_the_id_fields_and_the_sample_facts():
    case = op_cases.OpCase(
        "abs", 2, "f32", "static", 20, "cpu", "ours", sample_facts={"index": 2, "max_ndim": 0}
    )
    assert case.facts() == {
        "id": case.id,
        "op": "abs",
        "dtype": "f32",
        "shapes": "static",
        "opset": 20,
        "provider": "cpu",
        "exporter": "ours",
        "sample": 2,
        "max_ndim": 0,
    }
    # The facts a run learns at collection are not part of the case's identity.
    assert case == op_cases.OpCase("abs", 2, "f32", "static", 20, "cpu", "ours")


@pytest.mark.parametrize(
    ("fault", "shapes", "status", "stage"),
    [
        ("pass", "dynamic", "pass", None),
        ("wrong", "static", "fail", "compare"),
        ("specialise", "dynamic", "fail", "second-shape"),
    ],
)
def test_the_one_loop_runs_a_case_to_its_row(tmp_path, fault, shapes, status, stage):
    case = op_cases.OpCase(planted.PREFIX + fault, 0, "f32", shapes, 20, "cpu", "ours")
    announced = []
    outcome = run_case(case, tmp_path / "scratch", announce=announced.append)
    assert (outcome.status, outcome.stage) == (status, stage)
    assert (outcome.id, outcome.kind, outcome.family) == (case.id, "op", "planted")
    assert announced == list(CASE_STAGES[: CASE_STAGES.index(stage or "second-shape") + 1])
    assert (tmp_path / "scratch" / "model.onnx").is_file()


def test_seed_is_shared_by_exporters_and_stable():
    ours = op_cases.OpCase("abs", 1, "f32", "static", 20, "cpu", "ours")
    theirs = ours.replace(exporter="torch-dynamo", shapes="dynamic", opset=18)
    assert ours.seed == theirs.seed
    assert ours.seed != ours.replace(sample=2).seed
    assert cases.stable_hash("x") == cases.stable_hash("x")  # not salted per process


def test_shards_partition_the_cases():
    ids = [f"op::op{i}::s000::f32::static::opset20::cpu::ours" for i in range(200)]
    shards = [[i for i in ids if cases.in_shard(i, (k, 3))] for k in range(3)]
    assert sorted(sum(shards, [])) == sorted(ids)
    assert all(shards)


@pytest.mark.parametrize("text", ["3/3", "a/b", "1/0", "-1/2"])
def test_bad_shards_are_rejected(text):
    with pytest.raises(ValueError):
        cases.parse_shard(text)


def test_sanitised_ids_are_file_names():
    name = cases.sanitise_id("op::nn.functional.conv2d::s003::f32::dynamic::opset20::cpu::ours")
    assert "/" not in name and ":" not in name and name.startswith("op__nn.functional.conv2d")


@pytest.mark.parametrize(
    ("op", "family"),
    [
        ("nn.functional.conv2d", "nn"),
        ("linalg.svd", "linalg"),
        ("fft.rfft", "fft"),
        ("special.erfcx", "special"),
        ("sum", "reduction"),
        ("amax", "reduction"),
        ("cumsum_", "scan"),
        ("matmul", "matmul"),
        ("div_.trunc_rounding", "elementwise"),
        ("gather", "indexing"),
        ("reshape", "shape"),
        ("bernoulli", "random"),
        ("abs", "elementwise"),
        # Not pointwise, so not "elementwise" (the fallback for names no family lists).
        ("softmax", "normalization"),
        ("native_batch_norm", "normalization"),
        ("matrix_exp", "linalg"),
        ("permute_copy", "shape"),
        ("resize_", "shape"),
        ("quantile", "statistics"),
        ("grid_sampler_2d", "nn"),
    ],
)
def test_op_families(op, family):
    assert op_family(op) == family


def _facts(index, ndim, *, scalar=False, empty=False, dense=True, broadcasts=False):
    return {
        "index": index,
        "max_ndim": ndim,
        "has_scalar": scalar,
        "has_empty": empty,
        "dense": dense,
        "broadcasts_input": broadcasts,
    }


def test_sample_selection_prefers_variety_and_is_deterministic():
    facts = [
        _facts(0, 1),
        _facts(1, 1),
        _facts(2, 2),
        _facts(3, 0, scalar=True),
        _facts(4, 2, empty=True),
        _facts(5, 3),
        _facts(6, 4, dense=False),
    ]
    assert select_samples(facts, 3) == [2, 3, 4]  # typical, 0-d, empty
    assert select_samples(facts, 4) == [0, 2, 3, 4]  # then a rank not yet covered
    assert select_samples(facts, None) == [0, 1, 2, 3, 4, 5]  # sparse samples never
    assert select_samples(facts, 3) == select_samples(list(facts), 3)


def test_inplace_selection_skips_samples_that_broadcast_the_input():
    facts = [_facts(0, 2, broadcasts=True), _facts(1, 2)]
    assert select_samples(facts, 1, inplace=True) == [1]
    assert select_samples(facts, 1) == [0]


def test_call_module_takes_tensors_and_bakes_the_rest():
    a, b, c = torch.ones(2, 3), torch.zeros(2, 3), torch.full((2, 3), 2.0)
    spec, leaves, tensors = split_call(([a, b], 1), {"out_dtype": None})
    assert len(tensors) == 2
    module = CallModule(lambda ts, dim, out_dtype: torch.cat(ts, dim=dim), spec, leaves, False)
    (out,) = module(a, c)
    assert out.shape == (2, 6)
    assert torch.equal(out[:, 3:], c)


def test_inplace_call_never_mutates_the_graph_input():
    x = torch.tensor([-1.0, 2.0])
    spec, leaves, tensors = split_call((x,), {})
    module = CallModule(torch.Tensor.abs_, spec, leaves, True)
    (out,) = module(*tensors)
    assert torch.equal(out, torch.tensor([1.0, 2.0]))
    assert torch.equal(tensors[0], x)


def test_outputs_are_flattened_to_real_tensors():
    z = torch.complex(torch.ones(2), torch.zeros(2))
    flat = flatten_outputs((z, None, [torch.ones(1), 3], torch.max(torch.ones(2, 2), dim=0)))
    assert flat[0].shape == (2, 2) and not flat[0].is_complex()
    assert [t.shape for t in flat[1:]] == [(1,), (), (2,), (2,)]


def test_dynamic_spec_marks_dims_of_size_two_and_more():
    (spec,) = shapes.dynamic_shapes_spec((torch.ones(1, 3), torch.ones(()), torch.ones(0, 2)))
    assert [sorted(s) for s in spec] == [[1], [], [1]]
    assert not second_shape.has_dynamic_dims((torch.ones(1, 1), torch.ones(())))


def test_second_shape_grows_equal_sizes_together_and_keeps_values_valid():
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(3, 4) + 1.0  # a positive domain
    w = torch.rand(4, 5)
    index = torch.tensor([[0, 2], [1, 1]])
    scalar = torch.tensor(2.0)
    gx, gw, gi, gs = second_shape.grown_inputs((x, w, index, scalar), 1, generator)
    assert (gx.shape, gw.shape, gi.shape, gs.shape) == ((4, 5), (5, 6), (3, 3), ())
    assert torch.equal(gx[:3, :4], x)  # original values in the leading block
    assert bool((gx >= 1.0).all())  # new elements stay within the original range
    assert set(gi.flatten().tolist()) <= {0, 1, 2}  # indices stay valid
    assert torch.matmul(gx, gw).shape == (4, 6)  # shared sizes still agree


def test_specialised_dims_are_named():
    found = shapes.specialised_inputs({"input_0": [3, "s0"]}, ["input_0"], (torch.ones(3, 4),))
    assert found == ["input_0 dim 0 fixed to 3"]


def test_growth_plans_try_every_group_then_fewer():
    inputs = (torch.ones(3, 4), torch.ones(4, 5))
    assert second_shape.size_groups(inputs) == [3, 4, 5]
    plans = second_shape.growth_plans(inputs)
    assert plans[0] is None
    assert plans[1:4] == [frozenset({4, 5}), frozenset({3, 5}), frozenset({3, 4})]
    assert plans[4:] == [frozenset({3}), frozenset({4}), frozenset({5})]
    assert second_shape.growth_plans((torch.ones(3, 3),)) == [None]
    assert second_shape.grown_dims(inputs, frozenset({4})) == {(0, 1), (1, 0)}


def test_a_plan_grows_only_its_sizes_and_only_those_dims_must_be_dynamic():
    generator = torch.Generator().manual_seed(0)
    x, w = torch.rand(3, 4), torch.rand(4, 5)
    gx, gw = second_shape.grown_inputs((x, w), 1, generator, frozenset({4}))
    assert (gx.shape, gw.shape) == ((3, 5), (5, 5))
    onnx_shapes = {"input_0": [3, "s0"], "input_1": ["s0", 5]}
    grown = second_shape.grown_dims((x, w), frozenset({4}))
    assert shapes.specialised_inputs(onnx_shapes, ["input_0", "input_1"], (x, w), grown) == []
    assert len(shapes.specialised_inputs(onnx_shapes, ["input_0", "input_1"], (x, w))) == 2


class _Unbind(torch.nn.Module):
    def forward(self, x):
        return torch.unbind(x, 0)


def test_second_shape_keeps_the_output_count_of_the_first():
    from torch_onnx_conformance.conformance.op_cases import second_shape_inputs

    x = torch.rand(3, 4)
    expected = _Unbind()(x)
    outcome = SimpleNamespace(extra={})
    inputs2, expected2, grown, note = second_shape_inputs(_Unbind(), (x,), expected, 0, outcome)
    # Growing dim 0 would give unbind a fourth output; only dim 1 may grow.
    assert inputs2[0].shape == (3, 5) and len(expected2) == 3
    assert grown == {(0, 1)} and note is None
    assert outcome.extra["second_shape_grows_sizes"] == [4]

    square = torch.rand(3, 3)
    none = second_shape_inputs(
        _Unbind(), (square,), _Unbind()(square), 0, SimpleNamespace(extra={})
    )
    assert none[0] is None
    assert "output count depends on a dynamic size" in none[3]


def test_a_sorted_input_stays_sorted_at_the_second_shape():
    generator = torch.Generator().manual_seed(0)
    boundaries, offsets = torch.tensor([-1.0, 0.0, 0.5, 2.0]), torch.tensor([0, 3])
    grown_boundaries, grown_offsets = second_shape.grown_inputs((boundaries, offsets), 1, generator)
    assert bool((grown_boundaries.diff() >= 0).all()) and grown_boundaries.shape == (5,)
    assert bool((grown_offsets.diff() >= 0).all()) and set(grown_offsets.tolist()) <= {0, 3}


def test_base_id_drops_only_the_opset():
    op = "op::abs::s000::f32::static::opset20::cpu::ours"
    model = "model::torchvision/resnet18::f32::dynamic::opset23::cpu::ours::opt"
    assert cases.base_id(op) == "op::abs::s000::f32::static::cpu::ours"
    assert cases.base_id(model) == "model::torchvision/resnet18::f32::dynamic::cpu::ours::opt"
    assert cases.base_id(op) == cases.base_id(op.replace("opset20", "opset23"))


def test_the_opsets_of_one_op_case_are_collected_next_to_each_other():
    """worksteal keeps contiguous cases on one worker: a case process then captures each base
    once (exporters.capture_cache)."""
    options = SimpleNamespace(
        ops_enabled=True,
        planted=("pass", "wrong"),
        shapes=("static", "dynamic"),
        opsets=(18, 20, 23, 26),
        providers=("cpu",),
        exporters=("ours",),
        shard=None,
    )
    ids = [case.id for case in op_cases.collect_cases(options)]
    bases = [cases.base_id(case_id) for case_id in ids]
    runs = [base for i, base in enumerate(bases) if i == 0 or bases[i - 1] != base]
    assert len(runs) == len(set(bases)) == 4 and len(ids) == 16


def test_ours_captures_each_base_once_per_process(monkeypatch):
    from torch_onnx_conformance.conformance import exporters

    module, inputs = planted.build_planted("pass")
    module.eval()
    exporters.capture_cache.cache_clear()
    monkeypatch.setenv(exporters.CAPTURE_CACHE_ENV, "2")
    try:
        for opset in (20, 23):
            exporters.export_case(
                "ours", module, inputs, dynamic=False, opset=opset, capture_key="b"
            )
        assert exporters.capture_cache().stats.hits == 1
        exporters.capture_cache.cache_clear()
        monkeypatch.setenv(exporters.CAPTURE_CACHE_ENV, "0")
        exporters.export_case("ours", module, inputs, dynamic=False, opset=20, capture_key="b")
        assert len(exporters.capture_cache()) == 0
    finally:
        exporters.capture_cache.cache_clear()


def _row(outcome) -> dict:
    """A row without what timing changes (seconds, and the opset the id and fields name)."""
    row = outcome.to_dict()
    for field in ("id", "opset", "export_s", "run_s", "session_create_s"):
        row.pop(field)
    row["extra"] = {k: v for k, v in row["extra"].items() if k not in ("cpu_s", "model_opset")}
    return row


@pytest.mark.parametrize("fault", ["pass", "wrong"])
def test_the_opsets_of_a_case_share_one_prepare_and_report_as_if_alone(
    tmp_path, monkeypatch, fault
):
    """The second opset of a case takes the sample, eager's outputs and the row fields that
    preparing wrote from the first (op_cases._prepare_shared): its row is the row it has when
    it is prepared alone, and a shape mode that skips skips at every opset."""
    prepares = []
    real = op_cases._prepare
    monkeypatch.setattr(op_cases, "_prepare", lambda *a: prepares.append(a[0].id) or real(*a))
    monkeypatch.setattr(op_cases, "_shared_prepares", type(op_cases._shared_prepares)())
    opsets = (20, 23)
    shared = [
        run_case(
            op_cases.OpCase(planted.PREFIX + fault, 0, "f32", "static", o, "cpu", "ours"), tmp_path
        )
        for o in opsets
    ]
    assert len(prepares) == 1
    assert [o.id.split("::")[5] for o in shared] == ["opset20", "opset23"]
    monkeypatch.setattr(op_cases, "SHARED_PREPARED", 0)
    alone = run_case(
        op_cases.OpCase(planted.PREFIX + fault, 0, "f32", "static", 23, "cpu", "ours"), tmp_path
    )
    assert len(prepares) == 2
    assert shared[1].id == alone.id and _row(shared[1]) == _row(alone) == _row(shared[0])


def test_a_random_ops_eager_draws_are_drawn_once_for_every_opset():
    """_compare_draws keeps eager's further draws (each follows its own seed) for the case's
    other opsets: the second comparison draws nothing from eager and judges the same."""
    import numpy as np

    from torch_onnx_conformance.exporter.diagnostics.compare import Tolerance

    calls = []

    def noisy(x):
        calls.append(1)
        return (x + torch.rand(x.shape),)

    class Session:  # the model's draws: the same noise from a fixed generator
        def __init__(self):
            self.random = np.random.default_rng(0)

        def run(self, feeds):
            return [feeds["x"] + self.random.random(feeds["x"].shape, dtype=np.float32)]

    x, tolerance = torch.zeros(50), Tolerance(1e-5, 1e-5, "test")
    kept, draws, results = {}, [], []
    for _ in range(2):
        calls.clear()
        torch.manual_seed(0)
        first = ([noisy(x)[0].numpy()], Session().run({"x": x.numpy()}))
        results.append(
            op_cases._compare_draws(
                "noisy", noisy, (x,), {"x": x.numpy()}, first, Session(), 7, tolerance, kept
            )
        )
        draws.append(len(calls) - 1)
    assert draws[0] == len(kept) >= op_cases.MIN_DRAWS - 1 and draws[1] == 0
    assert results[0] == results[1] and results[0].ok
