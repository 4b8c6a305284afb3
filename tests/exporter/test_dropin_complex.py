"""Complex tensors export in torch.onnx's real-pair layout, or fail at export naming the op.

Complex values travel as real tensors with a trailing axis of 2 (torch.view_as_real), in
inputs, weights and outputs alike. Each case runs the exported model in onnxruntime and compares
it with eager; the cases torch.onnx 2.14 gets right run through it too, so a torch bump that
changes its behaviour shows up here.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from torch_onnx_conformance import exporter
from torch_onnx_conformance.exporter._errors import UnsupportedOpError

real_view = torch.view_as_real
as_complex = torch.view_as_complex


class Lambda(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class ComplexWeightMatmul(torch.nn.Module):
    """The model that came back off by up to 984 before complex ops had their own table."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 5, dtype=torch.complex64) * 10)

    def forward(self, x):
        return real_view(x.to(torch.complex64) @ self.weight)


class ComplexWeightScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, dtype=torch.complex64))
        self.register_buffer("shift", torch.randn(4, dtype=torch.complex128))

    def forward(self, x):
        return real_view(as_complex(x) * self.weight + self.shift)


class ComplexConstant(torch.nn.Module):
    def forward(self, x):
        c = torch.tensor([1 + 2j, 3 - 1j, 0.5j, 2], dtype=torch.complex64)
        return real_view(as_complex(x) * c)


def _pair(*shape):
    return torch.randn(*shape, 2)


def _cases():
    torch.manual_seed(0)
    x, x2, y = _pair(3, 4), _pair(3, 4), torch.randn(3, 4)
    return {
        "weight_matmul": (ComplexWeightMatmul(), (torch.randn(3, 4),)),
        "weight_and_buffer": (ComplexWeightScale(), (x,)),
        "constant": (ComplexConstant(), (x,)),
        "complex_input_and_output": (
            Lambda(lambda z: z * z - 1j),
            (torch.randn(5, dtype=torch.complex64),),
        ),
        "abs": (Lambda(lambda a: as_complex(a).abs()), (x,)),
        "abs_huge": (Lambda(lambda a: as_complex(a * 1e30).abs()), (x,)),
        "angle": (Lambda(lambda a: as_complex(a).angle()), (x,)),
        "mul_real": (Lambda(lambda a, b: real_view(as_complex(a) * b)), (x, y)),
        "add_real": (Lambda(lambda a, b: real_view(as_complex(a) + b)), (x, y)),
        "rsub_real": (Lambda(lambda a, b: real_view(b - as_complex(a))), (x, y)),
        "real_times_complex_scalar": (Lambda(lambda b: real_view(b * (2 - 1j))), (y,)),
        "matmul": (
            Lambda(lambda a, b: real_view(as_complex(a) @ as_complex(b).transpose(0, 1))),
            (x, x2),
        ),
        "div": (Lambda(lambda a, b: real_view(as_complex(a) / as_complex(b))), (x, x2)),
        "div_real": (Lambda(lambda a, b: real_view(as_complex(a) / b)), (x, y.abs() + 1)),
        "div_by_zero_and_huge": (
            Lambda(lambda a, b: real_view(as_complex(a) / as_complex(b))),
            (x, torch.tensor([[0.0, 0.0], [1e30, -1e30], [0.0, 2.0], [-3.0, 0.0]]).expand(3, 4, 2)),
        ),
        "square_and_powers": (
            Lambda(lambda a: real_view(torch.cat([as_complex(a) ** 2, as_complex(a) ** -1.5]))),
            (x,),
        ),
        "sqrt_on_the_branch_cut": (
            Lambda(lambda a: real_view(torch.sqrt(as_complex(a)))),
            (torch.tensor([[-4.0, -0.0], [-4.0, 0.0], [0.0, 0.0], [3.0, -1.0]]),),
        ),
        "reciprocal": (Lambda(lambda a: real_view(torch.reciprocal(as_complex(a)))), (x,)),
        "exp": (Lambda(lambda a: real_view(torch.exp(as_complex(a)))), (x,)),
        "sum_last_dim": (Lambda(lambda a: real_view(as_complex(a).sum(-1))), (x,)),
        "mean_keepdim": (Lambda(lambda a: real_view(as_complex(a).mean(-1, True))), (x,)),
        "reshape_cat_stack": (
            Lambda(
                lambda a: real_view(
                    torch.stack([torch.cat([as_complex(a), as_complex(a)], -1).reshape(-1)], -1)
                )
            ),
            (x,),
        ),
        "select_slice_unsqueeze": (
            Lambda(lambda a: real_view(as_complex(a)[1:, -1].unsqueeze(-1))),
            (x,),
        ),
        "expand": (Lambda(lambda a: real_view(as_complex(a)[:1].expand(3, -1))), (x,)),
        "eq": (Lambda(lambda a, b: as_complex(a) == as_complex(b)), (x, x.clone())),
        "real_imag_conj": (
            Lambda(lambda a: as_complex(a).conj().imag * as_complex(a).real),
            (x,),
        ),
    }


CASES = _cases()
#: Cases torch.onnx 2.14.1 exports and computes right (it fails on complex exp and on a
#: complex64 weight next to a complex128 buffer).
TORCH_ONNX_CORRECT = ["weight_matmul", "constant", "abs", "angle", "div", "mul_real"]


def _expected(module, args):
    out = module(*args)
    return real_view(out) if out.is_complex() else out


@pytest.mark.parametrize("name", list(CASES))
def test_complex_case_matches_eager(name):
    module, args = CASES[name]
    module.eval()
    program = exporter.export(module, args)
    (got,) = program(*args)
    torch.testing.assert_close(got, _expected(module, args), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", TORCH_ONNX_CORRECT)
def test_complex_case_matches_torch_onnx_side_by_side(name):
    module, args = CASES[name]
    module.eval()
    expected = _expected(module, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.onnx.export(module, args, dynamo=True, verbose=False)
    torch.testing.assert_close(theirs(*args)[0], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(exporter.export(module, args)(*args)[0], expected)


class ReshapeTimesI(torch.nn.Module):
    def forward(self, a):
        return real_view(as_complex(a).reshape(a.shape[0], -1) * 2j)


def test_complex_reshape_under_dynamic_batch():
    module = ReshapeTimesI()
    program = exporter.export(module, (_pair(3, 4),), dynamic_shapes=({0: "batch"},))
    other = _pair(6, 4)
    torch.testing.assert_close(program(other)[0], _expected(module, (other,)))


@pytest.mark.parametrize(
    ("fn", "op"),
    [
        (lambda a: real_view(torch.sin(as_complex(a))), "aten.sin.default"),
        (lambda a: real_view(torch.flip(as_complex(a), [0])), "aten.flip.default"),
    ],
)
def test_complex_op_without_translation_fails_at_export_naming_it(fn, op):
    with pytest.raises(UnsupportedOpError, match=f"{op} on complex tensors"):
        exporter.export(Lambda(fn), (_pair(3, 4),))


class ComplexUnderNoGrad(torch.nn.Module):
    """Llama 4's rotary table: complex values made and multiplied inside a no_grad block, which
    torch.export keeps as one wrap_with_set_grad_enabled node with a complex result."""

    def forward(self, angles):
        with torch.no_grad():
            freqs = torch.polar(torch.ones_like(angles), angles)
        return torch.view_as_real(freqs * freqs)


def test_a_no_grad_region_with_complex_results_is_translated():
    angles = torch.randn(4, 3)
    captured = torch.export.export(ComplexUnderNoGrad(), (angles,))
    assert any(
        node.target is torch.ops.higher_order.wrap_with_set_grad_enabled
        for node in captured.graph.nodes
    )
    program = exporter.export(ComplexUnderNoGrad().eval(), (angles,))
    (got,) = program(angles)
    torch.testing.assert_close(got, ComplexUnderNoGrad()(angles))
