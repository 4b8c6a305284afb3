"""The optimize stage's rewrite rules cost what the graph costs and match what they matched."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript import rewriter
from onnxscript.rewriter import pattern

from torch_onnx_conformance.exporter import _passes


def _two_halves_and_others(others: int) -> ir.Model:
    """x -> Slice[:, :4], Slice[:, 4:] -> Add, then a chain of Relu: the form onnxscript's
    SlicesSplit (a pattern of two output nodes) is written for."""
    x = ir.val("x", ir.DataType.FLOAT, [2, 8])
    nodes = []

    def const(name, values):
        node = ir.node("Constant", [], attributes={"value": ir.tensor(values, name=name)})
        node.outputs[0].name = name
        node.outputs[0].const_value = ir.tensor(values, name=name)
        nodes.append(node)
        return node.outputs[0]

    axes = const("axes", [1])
    first = ir.node("Slice", [x, const("b0", [0]), const("e0", [4]), axes])
    second = ir.node("Slice", [x, const("b1", [4]), const("e1", [8]), axes])
    for node in (first, second):
        node.outputs[0].shape = ir.Shape([2, 4])
        node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    nodes += [first, second]
    value = ir.node("Add", [first.outputs[0], second.outputs[0]])
    nodes.append(value)
    value = value.outputs[0]
    for _ in range(others):
        relu = ir.node("Relu", [value])
        nodes.append(relu)
        value = relu.outputs[0]
    graph = ir.Graph([x], [value], nodes=nodes, opset_imports={"": 20}, name="g")
    return ir.Model(graph, ir_version=10)


def _slices_split_rules() -> list:
    """onnxscript's default rules of several output nodes (its SlicesSplit)."""
    return [
        rule
        for rule in rewriter._DEFAULT_REWRITE_RULES
        if not rule._matcher.pattern.has_single_output_node
    ]


def test_local_rules_rewrite_what_onnxscripts_rules_rewrite():
    original, local = _two_halves_and_others(3), _two_halves_and_others(3)
    rules = _slices_split_rules()
    assert rules, "onnxscript's default rules hold no pattern of several output nodes"
    counts = (
        pattern.RewriteRuleSet(rules).apply_to_model(original),
        pattern.RewriteRuleSet(_passes.local_rules(rules)).apply_to_model(local),
    )
    # onnxscript 0.7's matcher pairs the first Slice with itself first, whose condition
    # fails, and looks no further: it rewrites nothing here, and neither may the local rules.
    assert counts[0] == counts[1]
    assert [n.op_type for n in original.graph] == [n.op_type for n in local.graph]


class _Unlisted:
    """A graph whose nodes must not be listed: listing them fails the test."""

    graph = None

    def __iter__(self):
        pytest.fail("the matcher listed the whole graph for a node of another op type")


@pytest.mark.parametrize("op_type", ["Relu", "Add"])
def test_a_node_of_another_op_type_is_a_miss_without_listing_the_graph(op_type):
    model = _two_halves_and_others(1)
    (rule,) = _passes.local_rules(_slices_split_rules()[:1])
    node = next(n for n in model.graph if n.op_type == op_type)
    match = rule._matcher.match(model, _Unlisted(), node)
    assert not match


def test_local_rules_keep_the_rules_they_are_given():
    rules = list(rewriter._DEFAULT_REWRITE_RULES)
    matchers = [rule._matcher for rule in rules]
    local = _passes.local_rules(rules)
    assert [rule.name for rule in local] == [rule.name for rule in rules]
    assert all(r._matcher is not rule._matcher for r, rule in zip(local, rules))
    # onnxscript's own rules keep their matchers: other users of onnxscript see no change.
    assert [rule._matcher for rule in rules] == matchers


def test_a_rule_set_rewrites_what_onnxscripts_set_rewrites():
    original, local = _two_halves_and_others(3), _two_halves_and_others(3)
    rules = list(rewriter._DEFAULT_REWRITE_RULES)
    counts = (
        pattern.RewriteRuleSet(rules).apply_to_model(original),
        _passes.rule_set(rules).apply_to_model(local),
    )
    assert counts[0] == counts[1]
    assert [n.op_type for n in original.graph] == [n.op_type for n in local.graph]


def test_a_rule_asked_about_a_node_of_another_op_type_answers_without_matching():
    model = _two_halves_and_others(1)
    (rule,) = _passes.local_rules(_slices_split_rules()[:1])
    relu = next(n for n in model.graph if n.op_type == "Relu")
    assert rule.try_rewrite(model, _Unlisted(), relu) is None


def test_a_rule_set_without_a_node_to_start_from_does_not_walk_the_graph(monkeypatch):
    model = _two_halves_and_others(2)
    rules = _passes.rule_set([r for r in rewriter._DEFAULT_REWRITE_RULES if r.name == "CastCast"])
    assert rules.triggers == {("", "Cast")}

    def asked(*_, **__):
        pytest.fail("a rule was asked about a graph without a Cast")

    for rule in rules.rules:
        monkeypatch.setattr(rule, "try_rewrite", asked)
    assert rules.apply_to_model(model) == 0
    cast = ir.node("Cast", [model.graph.outputs[0]], attributes={"to": ir.DataType.DOUBLE})
    model.graph.append(cast)
    with pytest.raises(pytest.fail.Exception, match="a rule was asked"):
        rules.apply_to_model(model)


def test_a_rule_set_asks_each_node_only_the_rules_that_start_at_its_op_type(monkeypatch):
    model = _two_halves_and_others(2)
    rules = _passes.rule_set(rewriter._DEFAULT_REWRITE_RULES)
    asked = []
    for rule in rules.rules:
        start = _passes._first_node(rule)[0].value()

        def ask(model, graph, node, *, rewrite=rule.try_rewrite, start=start, **options):
            asked.append((start, node.op_type))
            return rewrite(model, graph, node, **options)

        monkeypatch.setattr(rule, "try_rewrite", ask)
    starts = {_passes._first_node(rule)[0].value() for rule in rules.rules}
    present = {node.op_type for node in model.graph} & starts
    rules.apply_to_model(model)
    assert present, "no rule of onnxscript's defaults starts at a Slice, an Add or a Relu"
    assert all(start == op_type for start, op_type in asked)
    assert {op_type for _, op_type in asked} == present


def _relu_of(shape, op_type: str = "Relu") -> ir.Model:
    x = ir.val("x", ir.DataType.FLOAT, [2, 8])
    relu = ir.node(op_type, [x])
    relu.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    relu.outputs[0].shape = None if shape is None else ir.Shape(shape)
    graph = ir.Graph([x], relu.outputs, nodes=[relu], opset_imports={"": 20}, name="g")
    return ir.Model(graph, ir_version=10)


def test_the_folder_infers_no_shape_the_outputs_have(monkeypatch):
    import onnx.shape_inference

    inferred = []
    infer = onnx.shape_inference.infer_node_outputs

    def counting(schema, node, *args, **kwargs):
        inferred.append(node.op_type)
        return infer(schema, node, *args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_node_outputs", counting)
    unknown = _relu_of(None, "Elu")  # an op the folder asks ONNX about
    _passes._onnxscript_optimizer(inline=True)(unknown)
    assert inferred == ["Elu"]
    assert unknown.graph.outputs[0].shape == ir.Shape([2, 8])
    inferred.clear()
    known = _relu_of([2, 8], "Elu")
    _passes._onnxscript_optimizer(inline=True)(known)
    assert inferred == []
    assert known.graph.outputs[0].shape == ir.Shape([2, 8])
    simple = _relu_of(None)  # a Relu's shape is its input's: the folder's own answer
    _passes._onnxscript_optimizer(inline=True)(simple)
    assert inferred == []
    assert simple.graph.outputs[0].shape == ir.Shape([2, 8])


def test_a_symbolic_dim_is_still_inferred():
    model = _relu_of(["n", 8])
    assert not _passes._fixed(model.graph.outputs[0])
    assert _passes._fixed(_relu_of([2, 8]).graph.outputs[0])


def _relu_of_op(op_type: str) -> ir.Model:
    x = ir.val("x", ir.DataType.FLOAT, [2, 8])
    inner = ir.node(op_type, [x])
    relu = ir.node("Relu", inner.outputs)
    graph = ir.Graph([x], relu.outputs, nodes=[inner, relu], opset_imports={"": 20}, name="g")
    return ir.Model(graph, ir_version=10)


def _relu_of_neg(op, x):
    return op.Relu(op.Neg(x))


def _relu(op, x, **_):
    return op.Relu(x)


def _relu_of_neg_or_abs(op, x):
    return op.Relu(pattern.OrValue([op.Neg(x), op.Abs(x)], tag_var="which"))


@pytest.mark.parametrize(
    ("target", "matched", "other"),
    [(_relu_of_neg, ["Neg"], "Abs"), (_relu_of_neg_or_abs, ["Neg", "Abs"], "Sigmoid")],
)
def test_a_rule_turns_away_a_node_whose_producer_is_of_none_of_its_op_types(
    monkeypatch, target, matched, other
):
    # A producer of a fixed op type, or an alternative of producers of fixed op types.
    rules = _passes.rule_set([pattern.RewriteRule(target, _relu)])
    (rule,) = rules.rules
    ops = frozenset(("", op) for op in matched)
    assert _passes._producer_checks(rule._matcher.pattern.output_nodes[0]) == ((((0, 0),), ops),)
    for op_type in matched:
        model = _relu_of_op(op_type)
        assert rules.apply_to_model(model) == 1
        assert [n.op_type for n in model.graph] == ["Relu"]

    def asked(*_, **__):
        pytest.fail(f"the matcher was asked about a Relu of a {other}")

    monkeypatch.setattr(rule._matcher, "match", asked)
    model = _relu_of_op(other)
    assert rules.apply_to_model(model) == 0
    assert [n.op_type for n in model.graph] == [other, "Relu"]
    with pytest.raises(pytest.fail.Exception, match="the matcher was asked"):
        rules.apply_to_model(_relu_of_op(matched[0]))


class _Recording(ir.passes.InPlacePass):
    def __init__(self, name: str, log: list, changes: list[bool]):
        super().__init__()
        self.name, self.log, self.changes = name, log, changes

    def call(self, model):
        self.log.append(self.name)
        return ir.passes.PassResult(model, self.changes.pop(0) if self.changes else False)


@pytest.mark.parametrize(
    ("rewrites", "rounds"), [([False], ["fold", "rewrite", "clean"]), ([True, False], None)]
)
def test_the_second_round_runs_only_after_a_rewrite(rewrites, rounds):
    log: list[str] = []
    passes = _passes._FoldRewriteAgainIfRewritten(
        _Recording("fold", log, [True, True]),
        _Recording("rewrite", log, list(rewrites)),
        [_Recording("clean", log, [True, True])],
    )
    result = passes(_two_halves_and_others(0))
    assert result.modified
    assert log == (rounds or ["fold", "rewrite", "clean"] * 2)


def _conv_or_gemm_then_batch_norm(op_type: str, seed: int) -> ir.Model:
    """x -> Conv (or Gemm) with constant weights -> BatchNormalization of constant stats."""
    rng = np.random.default_rng(seed)
    channels = 6
    shape = [channels, 4, 3, 3] if op_type == "Conv" else [4, channels]
    x = ir.val("x", ir.DataType.FLOAT, [2, 4, 5, 5] if op_type == "Conv" else [2, 4])

    def initializer(name, values):
        value = ir.Value(name=name, const_value=ir.tensor(values.astype(np.float32), name=name))
        value.shape, value.type = ir.Shape(values.shape), ir.TensorType(ir.DataType.FLOAT)
        return value

    weight = initializer("w", rng.standard_normal(shape))
    bias = initializer("b", rng.standard_normal(channels))
    stats = [initializer(n, rng.random(channels) + 0.5) for n in ("gamma", "beta", "mean", "var")]
    inbound = ir.node(op_type, [x, weight, bias])
    norm = ir.node("BatchNormalization", [inbound.outputs[0], *stats], {"epsilon": 1e-3})
    graph = ir.Graph(
        [x],
        norm.outputs,
        nodes=[inbound, norm],
        initializers=[weight, bias, *stats],
        opset_imports={"": 20},
        name="g",
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("op_type", ["Conv", "Gemm"])
def test_batch_norm_folds_into_the_weights_onnxscript_folds_it_into(op_type):
    # The rules replaced for where the folded weights live compute the same values, bit for
    # bit, and keep onnxscript's names.
    default = list(rewriter._DEFAULT_REWRITE_RULES)
    ours = list(_passes._default_rewrite_rules())
    assert [rule.name for rule in ours] == [rule.name for rule in default]
    assert sum(a is not b for a, b in zip(ours, default)) == 2
    original, folded = (_conv_or_gemm_then_batch_norm(op_type, seed=3) for _ in range(2))
    assert pattern.RewriteRuleSet(default).apply_to_model(original) == 1
    assert pattern.RewriteRuleSet(ours).apply_to_model(folded) == 1
    assert [n.op_type for n in folded.graph] == [op_type]
    expected = {name: v.const_value.numpy() for name, v in original.graph.initializers.items()}
    got = {name: v.const_value.numpy() for name, v in folded.graph.initializers.items()}
    assert expected.keys() == got.keys()
    for name, array in expected.items():
        assert got[name].dtype == array.dtype and got[name].tobytes() == array.tobytes(), name


def _sums_of_constants(sizes: list[int]) -> ir.Model:
    """x + (a + b) per size: the folder folds each a + b into an initializer (the largest
    past its output limit, when ``a`` and ``b`` are used elsewhere too)."""
    x = ir.val("x", ir.DataType.FLOAT, [1])
    nodes, initializers, outputs = [], [], []
    for i, size in enumerate(sizes):
        pair = []
        for name in (f"a{i}", f"b{i}"):
            value = ir.Value(name=name, const_value=ir.tensor(np.full(size, i, np.float32)))
            value.shape, value.type = ir.Shape([size]), ir.TensorType(ir.DataType.FLOAT)
            initializers.append(value)
            pair.append(value)
        total = ir.node("Add", pair)
        total.outputs[0].name = f"total{i}"
        out = ir.node("Add", [x, total.outputs[0]])
        kept = ir.node("Mul", pair)  # a second use of a and b
        nodes += [total, out, kept]
        outputs += [out.outputs[0], kept.outputs[0]]
    graph = ir.Graph(
        [x], outputs, nodes=nodes, initializers=initializers, opset_imports={"": 20}, name="g"
    )
    return ir.Model(graph, ir_version=10)


def test_the_folder_makes_the_tensors_onnxscripts_folder_makes():
    from onnxscript.optimizer import _constant_folding

    limit = 16
    options = dict(shape_inference=True, input_size_limit=1024, output_size_limit=limit)
    ours, theirs = (_sums_of_constants([2, 3, limit + 1]) for _ in range(2))
    _passes._known_shapes_first()(**options)(ours)
    _constant_folding.FoldConstantsPass(**options)(theirs)
    assert ir.to_proto(ours) == ir.to_proto(theirs)
    folded = {name: v.const_value for name, v in ours.graph.initializers.items()}
    assert {"total0", "total1"} <= folded.keys() and "total2" not in folded
    assert type(folded["total0"]) is ir.Tensor and folded["total0"].name == "total0"


def test_an_op_type_is_found_in_subgraphs_and_functions():
    model = _two_halves_and_others(1)
    assert _passes._holds_any(model, frozenset({("", "Relu")}))
    assert not _passes._holds_any(model, frozenset({("", "Where")}))

    def branch(op_type):
        inner = ir.node(op_type, [model.graph.inputs[0]])
        return ir.Graph([], inner.outputs, nodes=[inner], name=op_type)

    condition = ir.val("c", ir.DataType.BOOL, [])
    model.graph.append(
        ir.node("If", [condition], {"then_branch": branch("Abs"), "else_branch": branch("Where")})
    )
    assert _passes._holds_any(model, frozenset({("", "Where")}))
    other = _two_halves_and_others(0)
    graph = ir.Graph([], [], nodes=[ir.node("Erf", [])])
    function = ir.Function("custom", "f", graph=graph, attributes=[])
    other.functions[function.identifier()] = function
    assert _passes._holds_any(other, frozenset({("", "Erf")}))
    assert not _passes._holds_any(other, frozenset({("", "Relu")}))


def _times(other: ir.Value) -> ir.Model:
    x = ir.val("x", ir.DataType.FLOAT, [2])
    inputs = [x] if other.const_value is not None else [x, other]
    initializers = [other] if other.const_value is not None else []
    mul = ir.node("Mul", [x, other])
    graph = ir.Graph(
        inputs, mul.outputs, nodes=[mul], initializers=initializers, opset_imports={"": 20}
    )
    return ir.Model(graph, ir_version=10)


def test_a_rule_turns_away_a_node_whose_input_is_not_the_constant_its_pattern_has(monkeypatch):
    def times_one(op, x):
        return op.Mul(x, 1.0)

    rules = _passes.rule_set([pattern.RewriteRule(times_one, _relu)])
    (rule,) = rules.rules
    assert _passes._producer_checks(rule._matcher.pattern.output_nodes[0]) == (
        (((1, None),), None),
    )
    one = ir.Value(name="one", const_value=ir.tensor(np.array(1.0, np.float32)))
    matched = _times(one)
    assert rules.apply_to_model(matched) == 1
    assert [n.op_type for n in matched.graph] == ["Relu"]

    def asked(*_, **__):
        pytest.fail("the matcher was asked about a Mul of two inputs")

    monkeypatch.setattr(rule._matcher, "match", asked)
    other = _times(ir.val("y", ir.DataType.FLOAT, [2]))
    assert rules.apply_to_model(other) == 0
    assert [n.op_type for n in other.graph] == ["Mul"]


def _fill(dtype: ir.DataType) -> ir.Model:
    shape = ir.Value(name="shape", const_value=ir.tensor(np.array([2, 3], np.int64)))
    fill = ir.node("ConstantOfShape", [shape], {"value": ir.tensor(np.array([0.5], dtype.numpy()))})
    fill.outputs[0].dtype, fill.outputs[0].shape = dtype, ir.Shape([2, 3])
    relu = ir.node("Relu", fill.outputs)  # not a fill: left as it is
    graph = ir.Graph(
        [], relu.outputs, nodes=[fill, relu], initializers=[shape], opset_imports={"": 20}
    )
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("dtype", [ir.DataType.FLOAT8E4M3FN, ir.DataType.FLOAT16])
def test_a_float8_fill_is_filled_in_float32_then_cast(dtype):
    model = _fill(dtype)
    _passes.widen_float8_fills(model)
    nodes = list(model.graph)
    if dtype == ir.DataType.FLOAT16:
        assert [n.op_type for n in nodes] == ["ConstantOfShape", "Relu"]
        return
    assert [n.op_type for n in nodes] == ["ConstantOfShape", "Cast", "Relu"]
    fill, cast, relu = nodes
    assert fill.attributes["value"].as_tensor().dtype == ir.DataType.FLOAT
    assert fill.attributes["value"].as_tensor().numpy().tolist() == [0.5]
    assert cast.attributes["to"].as_int() == dtype and relu.inputs[0] is cast.outputs[0]


def _calling_a_function() -> ir.Model:
    x = ir.val("x", ir.DataType.FLOAT, [2])
    inner_x = ir.val("a", ir.DataType.FLOAT, [2])
    inner = ir.node("Relu", [inner_x])
    body = ir.Graph([inner_x], inner.outputs, nodes=[inner], opset_imports={"": 20})
    function = ir.Function("local", "f", graph=body, attributes=[])
    call = ir.node("f", [x], domain="local")
    call.outputs[0].dtype, call.outputs[0].shape = ir.DataType.FLOAT, ir.Shape([2])
    graph = ir.Graph([x], call.outputs, nodes=[call], opset_imports={"": 20, "local": 1})
    return ir.Model(graph, ir_version=10, functions=[function])


def test_functions_are_inlined_when_not_kept_and_no_inlining_runs_without_any(monkeypatch):
    model = _calling_a_function()
    _passes.optimize(model, keep_functions=False)
    assert [n.op_type for n in model.graph] == ["Relu"] and not model.functions
    kept = _calling_a_function()
    _passes.optimize(kept)
    assert [n.op_type for n in kept.graph] == ["f"] and kept.functions

    def inlining(*_):
        pytest.fail("InlinePass ran on a model without functions")

    monkeypatch.setattr(ir.passes.common.InlinePass, "call", inlining)
    plain = _relu_of([2, 8])
    _passes.optimize(plain, keep_functions=False)
    assert [n.op_type for n in plain.graph] == ["Relu"]


_INFERRED_OPS = [
    *[(op, 1, {}) for op in ("Sigmoid", "Sqrt", "Relu", "Neg", "Erf", "Cos", "Not", "Abs")],
    ("Softmax", 1, {"axis": -1}),
    ("Softmax", 1, {"axis": 5}),
    ("Softmax", 1, {}),
    *[(op, 1, {}) for op in ("Floor", "IsNaN", "IsInf", "Identity")],
    ("IsInf", 1, {"detect_negative": 0}),
    *[(op, 2, {}) for op in ("Add", "Mul", "Div", "Equal", "Less", "And", "MatMul", "Pow")],
    *[(op, 2, {}) for op in ("GreaterOrEqual", "Min", "Max")],
    ("Where", 3, {}),
    ("Transpose", 1, {}),
    ("Transpose", 1, {"perm": [1, 0, 2]}),
    ("Transpose", 1, {"perm": [0, 0, 1]}),
    ("Cast", 1, {"to": ir.DataType.FLOAT16}),
    ("Cast", 1, {"to": ir.DataType.BFLOAT16}),
    ("Cast", 1, {"to": ir.DataType.FLOAT8E4M3FN}),
    ("Add", 2, {"alpha": 1.0}),
    ("Unsqueeze", 1, {}),
]
_INFERRED_DTYPES = [
    ir.DataType.FLOAT,
    ir.DataType.FLOAT16,
    ir.DataType.BFLOAT16,
    ir.DataType.INT64,
    ir.DataType.INT8,
    ir.DataType.BOOL,
]


_SYMBOLS = ["n", "m", None]  # named symbols and an unknown dim, as a dynamic export has


def _random_node(rng, op, arity, attributes, symbolic: bool = False) -> ir.Node:
    base = [int(d) for d in rng.integers(0, 4, size=rng.integers(0, 4))]
    if symbolic:
        base = [_SYMBOLS[rng.integers(0, 3)] if rng.random() < 0.5 else d for d in base]
    if op in ("Min", "Max") and rng.random() < 0.3:
        arity = int(rng.integers(1, 4))  # any number of inputs
    inputs = []
    for i in range(arity):
        shape = list(base[rng.integers(0, len(base) + 1) :]) if base else []
        shape = [1 if rng.random() < 0.3 else d for d in shape]
        if symbolic and rng.random() < 0.2:
            shape = [_SYMBOLS[rng.integers(0, 3)] if rng.random() < 0.5 else d for d in shape]
        if rng.random() < 0.15:
            shape = [*shape, int(rng.integers(1, 4))]
        if symbolic and rng.random() < 0.15:
            shape = None  # unknown rank, as a Loop body's inputs have
        if op == "Transpose" and "perm" in attributes:
            shape = [int(d) for d in rng.integers(1, 4, size=3)]
        if op == "Where" and i == 0:
            dtype = ir.DataType.BOOL if rng.random() < 0.8 else ir.DataType.FLOAT
        elif i and rng.random() < 0.8:
            dtype = inputs[0].dtype
        else:
            dtype = _INFERRED_DTYPES[rng.integers(0, len(_INFERRED_DTYPES))]
        inputs.append(ir.val(f"in{i}", dtype, shape))
    node = ir.node(op, inputs, attributes)
    node.outputs[0].name = "out"
    if rng.random() < 0.2:
        node.outputs[0].dtype = inputs[0].dtype  # a dtype without a shape
    if rng.random() < 0.2:  # dims unknown, of a rank that may not be the answer's
        node.outputs[0].shape = ir.Shape([None] * int(rng.integers(0, 4)))
    return node


@pytest.mark.parametrize("symbolic", [False, True], ids=["fixed", "symbolic"])
@pytest.mark.parametrize("opset", [13, 17, 18, 23])
def test_the_folder_infers_simple_shapes_as_onnx_does(opset, symbolic):
    # The folder's own answer for an elementwise op, a broadcast, a Transpose, a Cast or a
    # MatMul, against ONNX shape inference on the same node (for a node whose outputs are
    # not all fixed already): the same dtype and shape, or no answer of its own (ONNX asked).
    # Symbolic: dims also named symbols or unknown, as in a dynamic export.
    from onnxscript.optimizer import _constant_folding

    options = dict(shape_inference=True, input_size_limit=1024, output_size_limit=1024)
    ours, theirs = (
        _passes._known_shapes_first()(**options),
        _constant_folding.FoldConstantsPass(**options),
    )
    ours._opset_imports = theirs._opset_imports = {"": opset}
    rng = np.random.default_rng(opset + 100 * symbolic)
    answered = named = alone = 0
    for _ in range(40):
        for op, arity, attributes in _INFERRED_OPS:
            seed = int(rng.integers(0, 2**31))
            mine, onnx_s = (
                _random_node(np.random.default_rng(seed), op, arity, attributes, symbolic)
                for _ in range(2)
            )
            answer = _passes._infer_simply(mine)
            answered += answer is not None
            dims = None if answer is None else answer[1]
            named += dims is not None and not all(isinstance(d, int) for d in dims)
            alone += answer is not None and dims is None
            ours._do_inference(mine)
            if not all(_passes._fixed(value) for value in onnx_s.outputs):  # as before
                _constant_folding.FoldConstantsPass._do_inference(theirs, onnx_s)
            got, want = mine.outputs[0], onnx_s.outputs[0]
            case = (op, attributes, [(v.dtype, v.shape) for v in onnx_s.inputs])
            assert got.type == want.type, case
            assert got.shape == want.shape, case
            assert ir.to_proto(got) == ir.to_proto(want), case
    assert answered > 300
    assert named > 40 if symbolic else named == 0  # symbols answered, not only sizes
    assert alone > 40 if symbolic else alone == 0  # and the dtype alone of an unknown shape


def test_a_rule_set_built_once_keeps_nothing_of_the_model_it_rewrote():
    import gc
    import weakref

    rules = _passes._default_rule_set()
    model = _conv_or_gemm_then_batch_norm("Conv", seed=1)
    assert rules.apply_to_model(model) == 1  # a match, and many misses
    graph = weakref.ref(model.graph)
    del model
    gc.collect()
    assert graph() is None
