"""The model zoo: registry contents, case contracts, re-initialisation and vacuity."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils._pytree as pytree
import torchvision
from torch import nn

from torch_onnx_conformance import model_zoo
from torch_onnx_conformance.model_zoo import registry, shapes, vacuity
from torch_onnx_conformance.model_zoo.init import calibrate_batch_norm_, reinit_

CHEAP_CASES = [case.name for case in model_zoo.cases("default")]


@functools.cache
def _run(name: str) -> dict[str, Any]:
    """Build a case once per session and run it eagerly at both input sets."""
    case = model_zoo.get(name)
    module, args, kwargs = case.build()
    second_args, second_kwargs = case.second_inputs(args, kwargs)
    with torch.no_grad():
        outputs = module(*args, **kwargs)
        second_outputs = module(*second_args, **second_kwargs)
    return {
        "case": case,
        "module": module,
        "inputs": (args, kwargs),
        "second_inputs": (second_args, second_kwargs),
        "outputs": outputs,
        "second_outputs": second_outputs,
    }


# --- registry ----------------------------------------------------------------------------------


def test_case_names_are_unique_and_prefixed_by_source():
    names = [case.name for case in model_zoo.cases("full")]
    assert len(names) == len(set(names))
    for case in model_zoo.cases("full"):
        source = case.family.split("-")[0]
        assert case.name.startswith(f"{source}/"), case.name


def test_every_torchvision_classification_model_is_registered():
    listed = torchvision.models.list_models(module=torchvision.models)
    registered = {
        case.name.removeprefix("torchvision/")
        for case in model_zoo.cases("full", family="torchvision-classification")
    }
    assert len(listed) > 50
    assert set(listed) <= registered


@pytest.mark.parametrize(
    "family, expected",
    [
        (
            "torchvision-segmentation",
            {"fcn_resnet50", "deeplabv3_mobilenet_v3_large", "deeplabv3_resnet50"}
            | {"lraspp_mobilenet_v3_large"},
        ),
        (
            "torchvision-detection",
            {"fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_resnet50_fpn"}
            | {"retinanet_resnet50_fpn", "ssd300_vgg16", "ssdlite320_mobilenet_v3_large"}
            | {"fcos_resnet50_fpn", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"},
        ),
        (
            "torchvision-video",
            {"r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v1_b", "mvit_v2_s", "swin3d_t"},
        ),
        ("torchvision-optical-flow", {"raft_small"}),
        (
            "transformers-encoder",
            {"bert", "roberta", "distilbert", "albert", "electra", "deberta-v2"}
            | {"xlm-roberta", "mobilebert"},
        ),
        (
            "transformers-decoder",
            {
                variant
                for base in ("gpt2", "gpt-neox", "llama", "mistral", "qwen2", "qwen3", "phi3")
                + ("gemma", "gemma2")
                for variant in (base, f"{base}-kv")
            },
        ),
        ("transformers-seq2seq", {"t5", "bart", "whisper"}),
        ("transformers-vision", {"vit", "swin", "convnext", "clip"}),
        ("transformers-audio", {"wav2vec2"}),
    ],
)
def test_family_holds_the_models_the_issue_lists(family, expected):
    registered = {case.name.split("/", 1)[1] for case in model_zoo.cases("full", family=family)}
    assert expected <= registered


def test_tiers_are_nested_and_small_where_they_should_be():
    smoke = {case.name for case in model_zoo.cases("smoke")}
    default = {case.name for case in model_zoo.cases("default")}
    full = {case.name for case in model_zoo.cases("full")}
    assert smoke < default < full
    assert {"torchvision/resnet18", "transformers/bert", "transformers/gpt2"} <= smoke
    assert {"transformers/llama-kv", "torchvision/ssdlite320_mobilenet_v3_large"} <= default
    assert len(default) < len(full) // 3
    for case in model_zoo.cases("full"):
        assert case.tags == frozenset(registry.TIERS[registry.TIERS.index(case.tier) :])


def test_families_lists_every_registered_family_once():
    assert model_zoo.families() == list(registry.FAMILIES)


def test_cases_filters_by_family_and_rejects_unknown_values():
    assert all(case.family == "synthetic" for case in model_zoo.cases("full", family="synthetic"))
    with pytest.raises(ValueError, match="unknown tier 'huge'"):
        model_zoo.cases("huge")
    with pytest.raises(ValueError, match="unknown family"):
        model_zoo.cases("full", family="timm")


def test_get_unknown_name_suggests_close_names():
    with pytest.raises(model_zoo.UnknownCaseError, match="torchvision/resnet18"):
        model_zoo.get("torchvision/resnet19")


def test_register_rejects_duplicates_and_unchanged_second_sizes():
    existing = model_zoo.get("synthetic/mlp")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(existing)
    renamed = _replace(existing, name="synthetic/test-only", second_sizes=existing.sizes)
    with pytest.raises(ValueError, match="second_sizes must change"):
        registry.register(renamed)


def _replace(case: model_zoo.ModelCase, **changes: Any) -> model_zoo.ModelCase:
    import dataclasses

    return dataclasses.replace(case, **changes)


# --- case contracts (smoke + default tiers) ----------------------------------------------------


def _containers_as_lists(tree: Any) -> Any:
    """A registered container (a transformers cache) as the list of its children: its
    dynamic-shapes entry lists one spec per child, as torch.export takes it."""
    children = shapes.node_children(tree)
    if children is not None:
        return [_containers_as_lists(child) for child in children]
    if isinstance(tree, (tuple, list)):
        return type(tree)(_containers_as_lists(item) for item in tree)
    if isinstance(tree, dict):
        return {key: _containers_as_lists(value) for key, value in tree.items()}
    return tree


@pytest.mark.parametrize("name", CHEAP_CASES)
def test_dynamic_shapes_tree_matches_inputs(name):
    case = model_zoo.get(name)
    args, kwargs = _run(name)["inputs"]
    inputs = _containers_as_lists(shapes.inputs_tree(case.dynamic_shapes, args, kwargs))
    input_leaves, input_spec = pytree.tree_flatten(inputs)
    shape_leaves, shape_spec = pytree.tree_flatten(
        case.dynamic_shapes, is_leaf=shapes.is_shape_leaf
    )
    assert input_spec == shape_spec
    for value, spec in zip(input_leaves, shape_leaves):
        assert spec is None or (isinstance(value, torch.Tensor) and shapes.is_axis_spec(spec))
    assert shapes.axis_sizes(case.dynamic_shapes, args, kwargs).keys() == case.axis_names


@pytest.mark.parametrize("name", CHEAP_CASES)
def test_second_inputs_change_every_named_axis_consistently(name):
    run = _run(name)
    case = run["case"]
    first = shapes.axis_sizes(case.dynamic_shapes, *run["inputs"])
    second = shapes.axis_sizes(case.dynamic_shapes, *run["second_inputs"])
    assert first.keys() == second.keys() == case.axis_names
    assert all(first[axis] != second[axis] for axis in first), (first, second)
    # Applied again, the same steps move the sizes further: second_inputs follows its input.
    third = shapes.axis_sizes(case.dynamic_shapes, *case.second_inputs(*run["second_inputs"]))
    assert all(third[axis] != second[axis] for axis in case.sizes)


@pytest.mark.parametrize("name", CHEAP_CASES)
def test_case_runs_eagerly_at_both_input_sets_with_the_same_output_tree(name):
    run = _run(name)
    first_leaves, first_spec = pytree.tree_flatten(run["outputs"])
    second_leaves, second_spec = pytree.tree_flatten(run["second_outputs"])
    assert first_spec == second_spec
    assert any(isinstance(leaf, torch.Tensor) for leaf in first_leaves)
    assert not run["module"].training


@pytest.mark.parametrize("name", CHEAP_CASES)
def test_case_is_not_vacuous_after_reinit(name):
    run = _run(name)
    assert not vacuity.is_vacuous(run["outputs"]), vacuity.describe(run["outputs"])
    assert not vacuity.is_vacuous(run["second_outputs"]), vacuity.describe(run["second_outputs"])


@pytest.mark.parametrize("name", ["synthetic/mlp_dict_list", "transformers/gpt2-kv"])
def test_build_is_deterministic(name):
    case = model_zoo.get(name)
    outputs = []
    for _ in range(2):
        module, args, kwargs = case.build()
        with torch.no_grad():
            outputs.append(pytree.tree_leaves(module(*args, **kwargs)))
    for first, second in zip(*outputs):
        torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_cond_second_inputs_take_the_other_branch():
    run = _run("synthetic/cond")
    first_x = run["inputs"][0][0]
    second_x = run["second_inputs"][0][0]
    assert bool(first_x.sum() > 0) != bool(second_x.sum() > 0)


def test_custom_op_translation_matches_the_op():
    case = model_zoo.get("synthetic/custom_op")
    table = case.custom_translation_table_factory()
    assert list(table) == [torch.ops.zoo.scaled_add.default]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 4.0, dtype=np.float32)
    translated = table[torch.ops.zoo.scaled_add.default](x, y, 0.5)
    expected = torch.ops.zoo.scaled_add(torch.from_numpy(x), torch.from_numpy(y), 0.5)
    np.testing.assert_allclose(translated.value, expected.numpy())


def test_mutated_buffer_case_mutates_but_stays_repeatable():
    case = model_zoo.get("synthetic/mutated_buffer")
    module, args, kwargs = case.build()
    before = module.running_mean.clone()
    with torch.no_grad():
        first = module(*args, **kwargs)
        second = module(*args, **kwargs)
    assert not torch.equal(before, module.running_mean)
    assert int(module.calls) == 2
    torch.testing.assert_close(first, second, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torchvision/mnasnet0_5", "transformers/electra"])
def test_a_full_tier_case_builds_and_runs(name):
    run = _run(name)
    assert model_zoo.get(name).tier == "full"
    assert not vacuity.is_vacuous(run["outputs"])


# --- dynamic-shape specs -----------------------------------------------------------------------


def test_axis_sizes_names_the_path_of_a_mismatch():
    x = torch.zeros(2, 3)
    with pytest.raises(shapes.DynamicShapesError, match=r"inputs\[1\]"):
        shapes.axis_sizes(({0: "batch"}, [{0: "batch"}]), (x, x), {})
    with pytest.raises(shapes.DynamicShapesError, match="one axis name must mean one size"):
        shapes.axis_sizes(({0: "batch"}, {1: "batch"}), (x, x), {})
    with pytest.raises(shapes.DynamicShapesError, match="out of range"):
        shapes.axis_sizes(({2: "batch"},), (x,), {})
    with pytest.raises(shapes.DynamicShapesError, match="pass every input as a keyword"):
        shapes.axis_sizes({"x": {0: "batch"}}, (x,), {"x": x})


def test_export_dynamic_shapes_replaces_names_only():
    spec = ({0: "batch"}, {"tensor_x": {0: "batch", 1: "width"}}, [None])
    converted = shapes.to_export_dynamic_shapes(spec)
    assert converted == (
        {0: torch.export.Dim.DYNAMIC},
        {"tensor_x": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}},
        [None],
    )


# --- tolerances --------------------------------------------------------------------------------


def test_tolerance_overrides_name_registered_cases_and_carry_a_reason():
    for (name, dtype), tolerance in registry.tolerance_overrides().items():
        assert dtype in registry.DTYPES
        assert tolerance.rtol > 0 and tolerance.atol > 0 and tolerance.reason
        assert model_zoo.get(name).tolerance(dtype) == tolerance


def test_load_tolerances_reads_dtype_tables_and_inherits_the_reason(tmp_path):
    path = tmp_path / "tolerances.toml"
    path.write_text(
        '[cases."synthetic/mlp"]\nrtol = 1e-3\natol = 2e-4\nreason = "observed 5e-4"\n'
        '[cases."synthetic/mlp".f16]\nrtol = 1e-2\natol = 1e-2\n'
    )
    assert registry.load_tolerances(path) == {
        ("synthetic/mlp", "f32"): model_zoo.Tolerance(1e-3, 2e-4, "observed 5e-4"),
        ("synthetic/mlp", "f16"): model_zoo.Tolerance(1e-2, 1e-2, "observed 5e-4"),
    }
    assert model_zoo.get("synthetic/mlp").tolerance("f32") is None  # the shipped file is unchanged


@pytest.mark.parametrize(
    "text, message",
    [
        ('[cases."x"]\nrtol = 1e-3\natol = 1e-3\n', "needs rtol, atol and a reason"),
        ('[cases."x"]\nrtoll = 1e-3\n', "unknown keys \\['rtoll'\\]"),
        ("[defaults]\nrtol = 1e-3\n", "unknown top-level keys"),
    ],
)
def test_load_tolerances_rejects_malformed_entries(tmp_path, text, message):
    path = tmp_path / "tolerances.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        registry.load_tolerances(path)


# --- vacuity -----------------------------------------------------------------------------------


class _Zeros(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


class _Constant(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x * 0 + 3.0, None


def test_vacuity_flags_all_zero_and_constant_outputs_but_not_a_real_one():
    x = torch.randn(5, 4)
    assert vacuity.is_vacuous(_Zeros()(x))
    assert vacuity.is_vacuous(_Constant()(x))
    assert not vacuity.is_vacuous(nn.Linear(4, 3)(x))


def test_vacuity_rule_edge_cases():
    informative = torch.randn(4)
    assert vacuity.is_vacuous(torch.full((4,), 1e-9) * torch.randn(4))  # below abs threshold
    assert vacuity.is_vacuous((torch.ones(3), torch.empty(0), None))
    assert not vacuity.is_vacuous({"mask": torch.ones(3), "logits": informative})
    assert not vacuity.is_vacuous(torch.tensor([0, 3, 3]))  # integers with two values
    assert vacuity.is_vacuous(torch.tensor([True, True]))
    assert not vacuity.is_vacuous(torch.tensor(2.5))  # one non-zero element
    assert vacuity.is_vacuous(torch.tensor([float("nan"), float("nan")]))
    assert vacuity.output_scale(torch.tensor([-3.0, 2.0, float("inf")])) == 3.0
    assert vacuity.is_vacuous(())


@pytest.mark.slow
def test_vacuity_flags_torchvision_vit_with_its_own_zero_head():
    # torchvision zero-initialises ViT's classifier head: without re-initialisation every
    # comparison against this model passes.
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None, image_size=64).eval()
    with torch.no_grad():
        assert vacuity.is_vacuous(model(torch.randn(2, 3, 64, 64)))


# --- re-initialisation -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "torchvision/vit_b_16",
        "torchvision/efficientnet_b0",
        "torchvision/mobilenet_v2",
        "torchvision/mobilenet_v3_large",
    ],
)
def test_reinit_gives_models_known_to_be_degenerate_real_spread(name):
    output = _run(name)["outputs"]
    assert output.std() > 1e-3
    assert not vacuity.is_vacuous(output)
    assert torch.unique(output.argmax(dim=-1)).numel() >= 1
    assert not torch.allclose(output[0], output[1])


def test_reinit_is_deterministic_and_seed_dependent():
    def weights(seed: int) -> list[torch.Tensor]:
        module = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
        reinit_(module, seed)
        return [t.clone() for t in module.state_dict().values() if t.is_floating_point()]

    for first, again in zip(weights(1), weights(1)):
        torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(weights(1), weights(2)))
    conv, norm, linear = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
    reinit_(nn.Sequential(conv, norm, linear), 0)
    assert bool((linear.bias != 0).all()) and bool((norm.running_var != 1).all())


def test_calibration_makes_deep_batch_norm_stacks_keep_their_scale():
    layers = []
    for _ in range(30):
        layers += [nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Hardswish()]
    model = nn.Sequential(*layers).eval()
    x = torch.randn(2, 4, 8, 8)
    reinit_(model, 0)
    calibrate_batch_norm_(model, (x,))
    with torch.no_grad():
        output = model(x)
    assert 0.05 < float(output.std()) < 20
    assert not model.training


def test_calibration_on_one_value_per_channel_keeps_the_channels():
    # A 1x1 map of one image: centring on its own mean would zero every channel (and the
    # variance floor would then scale rounding up 100x); the channels keep their values.
    conv, norm = nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8)
    model = nn.Sequential(conv, norm).eval()
    reinit_(model, 0)
    x = torch.randn(1, 4, 1, 1)
    calibrate_batch_norm_(model, (x,))
    with torch.no_grad():
        output = model(x)
        before_norm = conv(x)
    assert bool((norm.running_mean == 0).all())
    expected = before_norm / torch.sqrt(norm.running_var[None, :, None, None] + norm.eps)
    expected = expected * norm.weight[None, :, None, None] + norm.bias[None, :, None, None]
    torch.testing.assert_close(output, expected)
    assert float((output - norm.bias[None, :, None, None]).abs().max()) > 0.1
