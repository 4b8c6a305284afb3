"""Quantized models: torchvision CNNs quantized with PT2E (torchao's ``prepare_pt2e`` /
calibration / ``convert_pt2e``, X86InductorQuantizer's default scheme: uint8 activations, int8
weights per channel), a tiny BERT after torchao's ``quantize_`` with int8 dynamic
activation + int8 weight, and a small LLaMA with int4 weight-only (``IntxWeightOnlyConfig``,
group 32, the embedding too): at opset 21+ int4 initializers and blocked DequantizeLinear,
which onnxruntime runs as MatMulNBits (it quantizes activations to int8 per block there,
accuracy_level 4: about one 1/16 "step" off on logits of size 4); the int4 embedding table
becomes com.microsoft GatherBlockQuantized (only the rows gathered are dequantized).

Family ``quantized``. Default tier: resnet18, mobilenet_v2, mobilenet_v3_large and
efficientnet_b0 with the ``_qadd`` scheme below (the one onnxruntime fuses), the BERT and the
LLaMA; full tier adds resnet18 and mobilenet_v2 with X86InductorQuantizer's scheme as it ships,
and efficientnet_b0 with ``_qadd_qact`` (below).
Static and dynamic: PT2E captures the model with a dynamic batch before ``prepare_pt2e`` (the
converted program then exports at either), the BERT and LLaMA take the text axes (batch,
sequence). torchao is optional: without it the cases are not registered.

resnet18: torchao 0.18's X86InductorQuantizer stops inside ``prepare_pt2e`` on torchvision's
BasicBlock ("Input partition has more than one output node"): the block calls one ``nn.ReLU``
module twice, so the quantizer's ReLU partition has two outputs. No quantizer setting avoids it
(global, per module type, per function type, QAT all stop there); the case gives each block a
ReLU that calls ``F.relu`` (the same function, one partition per call) and keeps the default
X86 config.

``*_qadd``: the same models quantized for onnxruntime rather than Inductor. The X86 scheme
annotates conv + residual add (+ relu) as one pattern for Inductor's fused kernel and leaves the
conv's output float: onnxruntime has no kernel for a quantized conv with a float output, so
those convs (8 of resnet18's 20, 10 of mobilenet_v2's 52) run in float with their int8 weights
dequantized on every run, which alone keeps the model slower than float in onnxruntime. The
``_qadd`` quantizer quantizes both inputs of each residual add instead (onnxruntime's own
quantization tool's choice), so every conv fuses into QLinearConv and every add into QLinearAdd.

``*_qadd_qact`` (full tier: efficientnet_b0): ``_qadd`` leaves what lies
between two convs in float: onnxruntime dequantizes each conv's output, runs efficientnet's SiLU
(Sigmoid, Mul) and the squeeze-excitation's pool, sigmoid and product in float and quantizes
again; at one thread those islands took more time than the convs (efficientnet_b0: 1.05x
faster than float). ``_qact`` also quantizes, inputs and output, each sigmoid, product and
global average pool (SiLU written as ``x * sigmoid(x)`` before ``prepare_pt2e``, its
definition): onnxruntime then runs them as QLinearSigmoid, QLinearMul and
QLinearGlobalAveragePool, and efficientnet_b0 runs on uint8 from its first QuantizeLinear to
its classifier. A user targeting onnxruntime would choose it; it changes the model (more
rounding points), so it is a case of its own. Not for mobilenet_v3_large: its activation is
hardswish, for which onnxruntime has no quantized kernel (HardSwish, HardSigmoid), and its
squeeze-excitations are small; with ``_qact`` it measured 1.42x faster than float against
``_qadd``'s 1.41x (bench/quantized_latency.py), and what keeps it there is onnxruntime's uint8
depthwise QLinearConv, slower than its float NCHWc depthwise Conv.

Comparison (``exporter.diagnostics.compare.compare_in_steps``): every output within
``QUANTIZED_CASE_STEPS`` quantization steps of eager (the step is the scale of the last
activation quantized before the output), and a classifier's top-1 equal wherever eager's top
two logits are further apart than that tolerance. Then ``check_quantized_export`` (the case's
``check_export``): the Q/DQ structure against the program's (``compare.
compare_quantization_structure``) and onnxruntime's fusion into the kernels the program's QDQ
groups should become (``ort_fusion.check_fusion``); the row's ``export_checks`` holds both.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from torch_onnx_conformance.model_zoo._common import generator_for
from torch_onnx_conformance.model_zoo.registry import Inputs, ModelCase, register

#: Output steps allowed for a quantized model: onnxruntime's fused integer kernels round each
#: requantization once where eager rounds it in float, and one code flipped early moves later
#: layers by a few steps.
QUANTIZED_CASE_STEPS = 8.0

#: Each case's float model before quantization (for bench/quantized_latency.py).
FLOAT_MODULES: dict[str, Callable[[], nn.Module]] = {}

#: The step of each case's output, found when its module is built.
_STEP: dict[str, float] = {}

#: The torchvision (PT2E) cases: their ``make_module`` / ``FLOAT_MODULES`` entry take sizes with
#: an ``image`` side (default ``_IMAGE_SIZE``) and a ``batch``, for the bench's serving size.
IMAGE_CASES: set[str] = set()
_IMAGE_SIZE = 64


def _torchao_available() -> bool:
    """Whether torchao is installed; looked up without importing it (registering stays cheap)."""
    return importlib.util.find_spec("torchao") is not None


class _Relu(nn.Module):
    """``F.relu`` in a module of its own: a block calling it twice gives two partitions."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.relu(x)


def _unshare_relus(module: nn.Module) -> None:
    for sub in module.modules():
        if isinstance(getattr(sub, "relu", None), nn.ReLU):
            sub.relu = _Relu()


def _last_quantize_scale(graph_module: torch.fx.GraphModule) -> float:
    scales = [
        float(node.args[1])
        for node in graph_module.graph.nodes
        if node.op == "call_function"
        and getattr(node.target, "namespace", "") == "quantized_decomposed"
        and node.target.__name__.startswith("quantize_per_tensor")
        and isinstance(node.args[1], float)
    ]
    return scales[-1]


def _residual_add_quantizer(activations: bool = False):
    """X86InductorQuantizer's scheme with each residual add quantized on both inputs, as
    onnxruntime's own quantization tool does it, instead of the conv+add(+relu) pattern the
    Inductor scheme annotates for its fused kernel (the conv's output stays float there, so
    onnxruntime cannot make that conv a QLinearConv). The conv feeding the add then ends in a
    QuantizeLinear (QLinearConv) and the add becomes QLinearAdd.

    ``activations``: also the ops between convs that onnxruntime has quantized kernels for
    (``_annotate_activations``: sigmoid, mul, the global average pool), inputs and output."""
    from torch.fx import Node
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    adds = (torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor)
    convs = (torch.ops.aten.conv2d.default,)
    activations = (
        torch.ops.aten.relu.default,
        torch.ops.aten.relu_.default,
        torch.ops.aten.hardtanh.default,
        torch.ops.aten.hardtanh_.default,
    )

    class ResidualAddQuantizer(x86.X86InductorQuantizer):
        def _annotate_conv2d_binary_unary(self, *args, **kwargs) -> None:
            pass

        def _annotate_conv2d_binary(self, *args, **kwargs) -> None:
            pass

        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            super().annotate(model)
            activation = x86.get_default_x86_inductor_quantization_config().input_activation
            key = x86.QUANT_ANNOTATION_KEY
            for node in model.graph.nodes:
                inputs = node.args[:2]
                if node.target in adds and all(isinstance(a, Node) for a in inputs):
                    node.meta[key] = x86._X86InductorQuantizationAnnotation(
                        input_qspec_map={a: activation for a in inputs}, _annotated=True
                    )
            if activations:
                _annotate_activations(model, activation)
            for node in model.graph.nodes:
                if node.target not in convs or key not in node.meta:
                    continue
                # the conv's output (after the relu annotated with it) quantized, whatever
                # reads it (once: not again where every reader quantizes its input already):
                # QLinearConv takes its output scale from that QuantizeLinear
                last = node
                users = list(node.users)
                if len(users) == 1 and users[0].target in activations:
                    last = users[0]
                if all(key in u.meta and last in u.meta[key].input_qspec_map for u in last.users):
                    continue
                annotation = last.meta.get(key)
                if annotation is None:
                    last.meta[key] = x86._X86InductorQuantizationAnnotation(
                        output_qspec=activation, _annotated=True
                    )
                elif annotation.output_qspec is None:
                    annotation.output_qspec = activation
            return model

    return ResidualAddQuantizer()


#: Ops between convs that onnxruntime runs on uint8 when a DequantizeLinear feeds them and a
#: QuantizeLinear reads them (its QDQ rules: QLinearSigmoid, QLinearMul, QLinearAdd,
#: QLinearGlobalAveragePool).
_QUANTIZED_ELEMENTWISE = (
    torch.ops.aten.sigmoid.default,
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.adaptive_avg_pool2d.default,
)


def _split_silu(graph_module: torch.fx.GraphModule) -> None:
    """Each ``silu(x)`` written as ``x * sigmoid(x)`` (its definition), so that the sigmoid and
    the product can each be quantized (onnxruntime has a quantized kernel for both, none for
    SiLU)."""
    graph = graph_module.graph
    for node in list(graph.nodes):
        if node.target not in (torch.ops.aten.silu.default, torch.ops.aten.silu_.default):
            continue
        # only its value, not where it came from (source_fn_stack, torch_fn, nn_module_stack):
        # the X86 quantizer would take the pair for the SiLU it annotates with the conv before it
        meta = {"val": node.meta["val"]}
        with graph.inserting_after(node):
            sigmoid = graph.call_function(torch.ops.aten.sigmoid.default, (node.args[0],))
        with graph.inserting_after(sigmoid):
            product = graph.call_function(torch.ops.aten.mul.Tensor, (node.args[0], sigmoid))
        sigmoid.meta.update(meta)
        product.meta.update(meta)
        node.replace_all_uses_with(product)
        graph.erase_node(node)
    graph_module.recompile()


def _annotate_activations(model: torch.fx.GraphModule, activation) -> None:
    """Quantize the inputs and the output of every op of ``_QUANTIZED_ELEMENTWISE`` (the
    product of a SiLU and of a squeeze-excitation's scale, its sigmoid, its pool)."""
    from torch.fx import Node
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    for node in model.graph.nodes:
        if node.target not in _QUANTIZED_ELEMENTWISE:
            continue
        count = 2 if node.target is torch.ops.aten.mul.Tensor else 1
        inputs = node.args[:count]
        if not all(isinstance(a, Node) for a in inputs):
            continue
        node.meta[x86.QUANT_ANNOTATION_KEY] = x86._X86InductorQuantizationAnnotation(
            input_qspec_map={a: activation for a in inputs},
            output_qspec=activation,
            _annotated=True,
        )


def _pt2e(
    module: nn.Module,
    name: str,
    make_inputs,
    sizes,
    residual_adds: bool = False,
    activations: bool = False,
) -> nn.Module:
    """``module`` quantized with PT2E, captured with a dynamic batch (axis 0 of every input),
    so that the converted program exports at static and at dynamic shapes alike (an example
    batch of 1, which torch.export specializes, captures a static program)."""
    from torchao.quantization import pt2e
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    args, _ = make_inputs(sizes)
    batch = torch.export.Dim("batch")
    captured = torch.export.export(
        module.eval(), args, dynamic_shapes=tuple({0: batch} if len(a) > 1 else {} for a in args)
    ).module()
    if activations:
        _split_silu(captured)
    quantizer = (
        _residual_add_quantizer(activations) if residual_adds else x86.X86InductorQuantizer()
    )
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(captured, quantizer)
    for seed in range(4):  # calibration: inputs like the example, other draws
        generator = torch.Generator().manual_seed(seed)
        prepared(*(torch.randn(a.shape, generator=generator) for a in args))
    converted = convert_pt2e(prepared)
    pt2e.move_exported_model_to_eval(converted)
    pt2e.allow_exported_model_train_eval(converted)
    _STEP[name] = _last_quantize_scale(converted)
    return _Converted(converted)


class _Converted(nn.Module):
    """A converted PT2E program as an ordinary module (its own ``eval()`` returns None)."""

    def __init__(self, program: torch.fx.GraphModule) -> None:
        super().__init__()
        self.program = program

    def forward(self, x: torch.Tensor) -> Any:
        return self.program(x)


def _classifier_compare(name: str) -> Callable[[Any, Any], list[str]]:
    def compare(expected, actual) -> list[str]:
        from torch_onnx_conformance.exporter.diagnostics.compare import compare_in_steps

        step = _STEP[name]
        steps = QUANTIZED_CASE_STEPS
        problems = []
        for index, (want, got) in enumerate(zip(expected, actual)):
            want, got = np.asarray(want), np.asarray(got)
            result = compare_in_steps(want, got, step=step, steps=steps)
            if not result.ok:
                problems.append(f"output {index}: {result.message}")
            if want.ndim == 2 and want.shape == got.shape:
                top2 = np.sort(want, axis=-1)[:, -2:]
                clear = (top2[:, 1] - top2[:, 0]) > 2 * steps * step
                differ = (want.argmax(-1) != got.argmax(-1)) & clear
                if differ.any():
                    problems.append(
                        f"output {index}: top-1 differs on rows {np.flatnonzero(differ).tolist()}"
                    )
        return problems

    return compare


def check_quantized_export(module, args, kwargs, path, opset: int) -> tuple[list[str], dict]:
    """The quantized export's own checks, beyond its outputs: the structure rule
    (``compare.compare_quantization_structure``: the graph's Q/DQ against the program's
    quantize/dequantize, zero points, axes, integer initializers) and onnxruntime's fusion
    (``ort_fusion.check_fusion``: the quantized kernels the program's QDQ groups should become,
    at ORT_ENABLE_ALL, and why each float Conv/Gemm/MatMul left did not fuse). The program is
    the converted PT2E graph, or the torchao model captured by torch.export."""
    import onnx

    from torch_onnx_conformance.exporter.diagnostics import ort_fusion
    from torch_onnx_conformance.exporter.diagnostics import quantized_structure as qs
    from torch_onnx_conformance.exporter.diagnostics.compare import compare_quantization_structure

    if isinstance(module, _Converted):
        program = module.program
    else:
        program = torch.export.export(module, tuple(args), dict(kwargs), strict=False)
    model = onnx.load(str(path))
    wanted = qs.program_quantization(program)
    # int4 types and blocked DequantizeLinear come with opset 21: below it an exporter writes
    # torch's formula for those, and the structure rule has nothing to compare them with
    beyond = [n for n in wanted if opset < 21 and not qs.representable_at(n, opset)]
    wanted = [n for n in wanted if n not in beyond]
    structure = compare_quantization_structure(wanted, qs.graph_quantization(model))
    expected = qs.expected_kernels(program, opset)
    fusion = ort_fusion.check_fusion(model, expected)
    fused = {k: v for k, v in sorted(fusion.counts.items()) if k in ort_fusion.QUANTIZED_KERNELS}
    facts = {
        "structure": structure.message,
        "kernels_expected": expected,
        "kernels_fused": fused,
        "not_fused": fusion.unfused[:_LISTED_UNFUSED],
        "not_fused_count": len(fusion.unfused),
    }
    if beyond:
        facts["structure_not_compared"] = (
            f"{len(beyond)} int4/blocked dequantizes: opset {opset} has no int4 "
            "DequantizeLinear and no block_size (opset 21)"
        )
    problems = [] if structure.ok else [f"Q/DQ structure: {structure.message}"]
    if not fusion.ok:
        why = "; ".join(fusion.unfused[:_LISTED_UNFUSED])
        problems.append(f"onnxruntime did not fuse: {', '.join(fusion.missing)} (not fused: {why})")
    return problems, facts


#: Unfused nodes a row lists, at most (the count beside it is complete).
_LISTED_UNFUSED = 4


def _register_quantized(
    name,
    make_float,
    make_module,
    make_inputs,
    notes: str,
    *,
    tier: str,
    sizes: Mapping[str, int],
    second_sizes: Mapping[str, int],
    dynamic_shapes: Any,
) -> None:
    """One quantized zoo case and its float model for the bench."""
    FLOAT_MODULES[name] = make_float
    register(
        ModelCase(
            name=name,
            family="quantized",
            tier=tier,
            make_module=make_module,
            make_inputs=make_inputs,
            sizes=dict(sizes),
            second_sizes=dict(second_sizes),
            dynamic_shapes=dynamic_shapes,
            compare=_classifier_compare(name),
            notes=notes,
            check_export=check_quantized_export,
            dtypes=("f32",),
        )
    )


def _register_pt2e(
    model_name: str,
    prepare: Callable[[nn.Module], None] | None,
    notes: str,
    residual_adds: bool = False,
    tier: str = "full",
    activations: bool = False,
):
    import torchvision

    from torch_onnx_conformance.model_zoo.torchvision_cases import _deterministic

    name = (
        f"quantized/{model_name}_pt2e_x86"
        + ("_qadd" if residual_adds else "")
        + ("_qact" if activations else "")
    )
    sizes = {"batch": 2}

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        generator = generator_for(name, axis_sizes)
        image = axis_sizes.get("image", _IMAGE_SIZE)
        shape = (axis_sizes.get("batch", 2), 3, image, image)
        return (torch.randn(shape, generator=generator),), {}

    # ``at`` (the bench's --image-size): BN calibration, PT2E calibration and inputs at other
    # sizes, e.g. {"batch": 1, "image": 224}; the zoo case builds at ``sizes``
    def make_float(at: Mapping[str, int] = sizes) -> nn.Module:
        module = torchvision.models.get_model(model_name, weights=None)
        module = _deterministic(module, name, make_inputs(at))
        if prepare is not None:
            prepare(module)
        return module.eval()

    def make_module(at: Mapping[str, int] = sizes) -> nn.Module:
        return _pt2e(make_float(at), name, make_inputs, at, residual_adds, activations)

    IMAGE_CASES.add(name)

    _register_quantized(
        name,
        make_float,
        make_module,
        make_inputs,
        notes,
        tier=tier,
        sizes=sizes,
        second_sizes={"batch": 3},
        dynamic_shapes=({0: "batch"},),
    )


def _text_axes() -> dict[str, Any]:
    from torch_onnx_conformance.model_zoo import transformers_cases as hf

    return {
        "tier": "default",
        "sizes": hf._SEQUENCE_SIZES,
        "second_sizes": hf._SEQUENCE_SECOND_SIZES,
        "dynamic_shapes": hf._TEXT_SHAPES,
    }


def _register_bert_int8_dynamic() -> None:
    from torch_onnx_conformance.model_zoo import transformers_cases as hf

    name = "quantized/bert_int8_dynamic"
    make_text = hf._text_inputs(name)

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        return make_text({**hf._SEQUENCE_SIZES, **axis_sizes})

    def make_float() -> nn.Module:
        return hf._encoder("BertConfig", "BertModel", {**hf._TEXT, **hf._TOKEN_IDS}, name)

    def make_module() -> nn.Module:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        module = make_float()
        quantize_(module, Int8DynamicActivationInt8WeightConfig())
        # dynamic per-row activation scales: the step of a hidden state of this size
        _STEP[name] = 1.0 / 127
        return module

    _register_quantized(
        name,
        make_float,
        make_module,
        make_inputs,
        (
            "BertModel (2 layers, hidden 32) after torchao quantize_ with "
            "Int8DynamicActivationInt8WeightConfig: per-row symmetric int8 activations "
            "(QuantizeLinear per axis 0 of [rows, hidden]), int8 weights, aten._int_mm as "
            "MatMulInteger."
        ),
        **_text_axes(),
    )


#: The int4 LLaMA: large enough that its weights, not the graph, fill the file.
_LLAMA_INT4 = {
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _register_llama_int4(group: int = 32) -> None:
    from torch_onnx_conformance.model_zoo import transformers_cases as hf

    name = f"quantized/llama_int4_weight_only_g{group}"
    make_text = hf._text_inputs(name)

    def make_inputs(axis_sizes: Mapping[str, int]) -> Inputs:
        return make_text({**hf._SEQUENCE_SIZES, **axis_sizes})

    def make_float() -> nn.Module:
        return hf._decoder("LlamaConfig", "LlamaForCausalLM", _LLAMA_INT4, name)

    def make_module() -> nn.Module:
        from torchao.quantization import IntxWeightOnlyConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        module = make_float()
        config = IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group))
        # every Linear (the lm_head too) and the token embedding
        quantize_(module, config, filter_fn=lambda m, _: isinstance(m, (nn.Linear, nn.Embedding)))
        # weight-only: activations stay float; a logit's step is about one int4 code of a
        # weight times an activation, taken as 1/16 of the logits' typical size
        _STEP[name] = 1.0 / 16
        return module

    _register_quantized(
        name,
        make_float,
        make_module,
        make_inputs,
        (
            f"LlamaForCausalLM (2 layers, hidden 256, vocab 2048) after torchao quantize_ with "
            f"IntxWeightOnlyConfig(int4, PerGroup({group})) on every Linear and the embedding: "
            "int4 initializers, blocked DequantizeLinear (opset 21+; MatMulNBits in onnxruntime)."
        ),
        **_text_axes(),
    )


@functools.cache
def _register_all() -> None:
    if not _torchao_available():
        return
    # default tier: one scheme per CNN, the one onnxruntime fuses (residual adds quantized);
    # the Inductor scheme as it ships stays in the full tier
    _register_pt2e(
        "resnet18",
        _unshare_relus,
        "torchvision resnet18 (each BasicBlock given a ReLU of its own: the shared nn.ReLU stops prepare_pt2e), PT2E with X86InductorQuantizer's "
        "default config except that each residual add is quantized on both inputs (as "
        "onnxruntime's quantization tool does) instead of annotated with its conv for "
        "Inductor: every conv becomes a QLinearConv, the adds QLinearAdd.",
        residual_adds=True,
        tier="default",
    )
    for model_name in ("mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0"):
        _register_pt2e(
            model_name,
            None,
            f"torchvision {model_name} (weights=None, BN-calibrated), PT2E with "
            "X86InductorQuantizer's default config except that each residual add is quantized "
            "on both inputs (as onnxruntime's quantization tool does), 64x64 inputs.",
            residual_adds=True,
            tier="default",
        )
    _register_pt2e(
        "efficientnet_b0",
        None,
        "torchvision efficientnet_b0 (weights=None, BN-calibrated), PT2E with the _qadd "
        "quantizer that also quantizes, inputs and output, each SiLU's sigmoid and product "
        "(SiLU written as x*sigmoid(x) first) and each squeeze-excitation's pool, sigmoid and "
        "product (_qact): onnxruntime runs them as QLinearSigmoid, QLinearMul and "
        "QLinearGlobalAveragePool instead of dequantizing to float between the convs. "
        "64x64 inputs.",
        residual_adds=True,
        activations=True,
        tier="full",
    )
    _register_bert_int8_dynamic()
    _register_llama_int4()
    _register_pt2e(
        "resnet18",
        _unshare_relus,
        "torchvision resnet18, PT2E with X86InductorQuantizer's default config after giving "
        "each BasicBlock a ReLU of its own (the shared nn.ReLU stops prepare_pt2e).",
    )
    _register_pt2e(
        "mobilenet_v2",
        None,
        "torchvision mobilenet_v2 (weights=None, BN-calibrated), PT2E with X86InductorQuantizer's "
        "default config, 64x64 inputs.",
    )


_register_all()
