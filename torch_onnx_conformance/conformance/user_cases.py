"""Bring your own models: the public declaration of a model case in a user's case file.

A case file (``--cases cases.py``) or module (``--cases mypackage.cases``) defines
``model_cases()`` returning a list of :class:`ModelCase`::

    from torch_onnx_conformance.conformance.user_cases import ModelCase

    def build():
        return MyNet().eval(), (torch.randn(2, 3, 32, 32),), {}

    def model_cases():
        return [ModelCase("mine/net", build, dynamic_shapes=({0: "batch"},))]

Each case runs at every selected opset, provider, exporter and shape mode. A dynamic case
exports with ``dynamic_shapes`` (``torch.export``'s tree with axis *names* as strings:
``({0: "batch"},)`` for positional inputs, ``{"x": {0: "batch"}}`` for keywords) and is also
checked at second inputs, in which every named axis grows: by ``grow`` (one step for every axis,
or ``{"batch": 2}`` per axis), or given outright by ``second_inputs(args, kwargs) -> (args,
kwargs)``. ``rtol``/``atol`` replace the default model tolerance; ``family`` groups cases in the
reports. A case without ``dynamic_shapes`` (nor ``second_inputs``) has static cases only.

A local transformers model folder is a case too: ``--cases path/to/folder`` (a folder holding
``config.json``; weights optional, seeded random weights when absent) or
``ModelCase.from_transformers_folder(path)`` in a case file; its inputs are built from the
model's kind (``torch_onnx_conformance/conformance/transformers_folder.py``).

The file's folder is importable from the file (``import mymodels`` beside it works), a module
is imported with the current folder at the *end* of ``sys.path`` (the harness's own packages
win over folders of the same name). A model built on a GPU runs on CPU when the provider is
``cpu``: the case moves module and inputs there and its row says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from torch_onnx_conformance.model_zoo import TIERS

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
#: The family of a case that names none.
DEFAULT_FAMILY = "user"


@dataclasses.dataclass(frozen=True, eq=False)
class ModelCase:
    """One model of the user's, declared for the conformance harness (see the module doc)."""

    name: str
    build: Callable[[], tuple[Any, tuple[Any, ...], Mapping[str, Any]]]
    dynamic_shapes: Any = None
    second_inputs: Callable[[tuple[Any, ...], dict[str, Any]], Inputs] | None = None
    grow: int | Mapping[str, int] = 1
    rtol: float | None = None
    atol: float | None = None
    family: str = DEFAULT_FAMILY
    tier: str = "smoke"
    notes: str = ""
    #: () -> notes on what build() found (a transformers folder's newly initialised weights),
    #: asked after build() and kept in the rows after ``notes``
    build_notes: Callable[[], str] | None = None
    #: (eager outputs, ONNX outputs) -> problems, empty when they agree; replaces the compare
    compare: Callable[[Any, Any], list[str]] | None = None
    # What the runner reads from every case; a user case has none of the zoo's extras.
    capture: str | None = dataclasses.field(default=None, init=False)
    custom_translation_table_factory: None = dataclasses.field(default=None, init=False)
    greedy_prompt: None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "::" in self.name:
            raise ValueError(f"ModelCase name {self.name!r}: give a non-empty name without '::'")
        if not callable(self.build):
            raise ValueError(
                f"ModelCase {self.name!r}: build must be a function, got {self.build!r}"
            )
        if self.tier not in TIERS:
            raise ValueError(f"ModelCase {self.name!r}: unknown tier {self.tier!r}; use {TIERS}")
        if (self.rtol is None) != (self.atol is None):
            raise ValueError(f"ModelCase {self.name!r}: give both rtol and atol, or neither")

    @classmethod
    def from_transformers_folder(cls, folder, name: str | None = None, **options: Any):
        """The case of a local transformers folder (``config.json``, weights optional: seeded
        random weights when absent), named ``local/<folder name>`` unless ``name`` is given,
        its inputs built from the model's kind (``torch_onnx_conformance/conformance/transformers_folder.py``).
        ``options`` are this class's (``tier``, ``rtol``/``atol``, ``dynamic_shapes``...);
        a ``ValueError`` names a folder that cannot be a case and what to do."""
        from torch_onnx_conformance.conformance.transformers_folder import folder_case

        return folder_case(folder, name, **options)

    @property
    def tags(self) -> frozenset[str]:
        return frozenset(TIERS[TIERS.index(self.tier) :])

    def _build(self):
        built = self.build()
        if not (isinstance(built, tuple) and len(built) == 3):
            raise TypeError(
                f"{self.name}: build() must return (module, args, kwargs), got "
                f"{type(built).__name__}"
            )
        module, args, kwargs = built
        return module, tuple(args), dict(kwargs or {})

    @property
    def static_only(self) -> bool:
        return self.dynamic_shapes is None and self.second_inputs is None

    def runner_case(self) -> RunnerCase:
        """This case as the runner reads every case (``model_zoo.ModelCase``'s interface)."""
        return RunnerCase(self)

    def tolerance(self, dtype: str = "f32"):
        if self.rtol is None:
            return None
        from torch_onnx_conformance.model_zoo.registry import Tolerance

        return Tolerance(self.rtol, self.atol, f"set by case {self.name!r}")


class RunnerCase:
    """A user case seen through the zoo's ``ModelCase`` interface: ``build()`` gives the module
    in eval mode and the inputs, ``second_inputs(args, kwargs)`` the grown inputs."""

    def __init__(self, case: ModelCase):
        self.case = case

    def __getattr__(self, name: str) -> Any:
        return getattr(self.case, name)

    def build(self):
        module, args, kwargs = self.case._build()
        return module.eval(), args, kwargs

    @property
    def row_notes(self) -> str:
        """The case's notes and then what its build found, kept in each of its rows
        (``case_notes``); read after ``build()``."""
        found = self.case.build_notes() if self.case.build_notes is not None else ""
        return "; ".join(filter(None, [self.case.notes, found]))

    def second_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Inputs:
        if self.case.second_inputs is not None:
            new_args, new_kwargs = self.case.second_inputs(args, kwargs)
            return tuple(new_args), dict(new_kwargs)
        return grown_inputs(self.case.dynamic_shapes, args, kwargs, self.case.grow)


def grown_inputs(dynamic_shapes: Any, args: tuple, kwargs: dict, grow) -> Inputs:
    """Inputs like ``(args, kwargs)`` in which every axis named in ``dynamic_shapes`` is
    ``grow`` larger (a step for all axes, or ``{axis: step}``): new random floats, integers in
    the range the example used, random booleans; tensors without named axes are kept."""
    import torch

    from torch_onnx_conformance.model_zoo import shapes

    if dynamic_shapes is None:
        raise ValueError("a dynamic case needs dynamic_shapes (or second_inputs)")
    sizes = shapes.axis_sizes(dynamic_shapes, args, kwargs)
    steps = {name: (grow.get(name, 1) if isinstance(grow, Mapping) else grow) for name in sizes}
    for name, step in steps.items():
        if not isinstance(step, int) or step == 0 or sizes[name] + step < 1:
            raise ValueError(f"grow: axis {name!r} of size {sizes[name]} cannot grow by {step!r}")

    def regrow(value: Any, spec: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if not shapes.is_axis_spec(spec):
                return value
            shape = list(value.shape)
            for dim, name in spec.items():
                shape[dim] += steps[name]
            generator = torch.Generator().manual_seed(sum(shape))
            if value.is_floating_point():
                out = torch.randn(shape, generator=generator, dtype=value.dtype)
            elif value.dtype == torch.bool:
                out = torch.randint(0, 2, shape, generator=generator).bool()
            else:
                low, high = (int(value.min()), int(value.max())) if value.numel() else (0, 1)
                out = torch.randint(low, high + 1, shape, generator=generator, dtype=value.dtype)
            return out.to(value.device)
        if isinstance(value, Mapping):
            spec = spec or {}
            return {key: regrow(item, spec.get(key)) for key, item in value.items()}
        if isinstance(value, (tuple, list)):
            spec = spec or (None,) * len(value)
            return type(value)(regrow(item, s) for item, s in zip(value, spec))
        return value

    if isinstance(dynamic_shapes, Mapping):
        return tuple(args), regrow(dict(kwargs), dynamic_shapes)
    return regrow(tuple(args), tuple(dynamic_shapes)), dict(kwargs)


def on_cpu(module, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict, list[str]]:
    """Module and inputs on the CPU, and what had to move (empty when all was there); a
    ValueError for a meta module or input, which has nothing to run."""
    import torch
    import torch.utils._pytree as pytree

    moved = []
    tensors = [*module.parameters(), *module.buffers(), *pytree.tree_leaves((args, kwargs))]
    if any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in tensors):
        raise ValueError(
            "the model or its inputs are on the meta device (shapes without data): build them "
            "with real weights and values on the CPU or a GPU"
        )
    devices = {str(t.device) for t in [*module.parameters(), *module.buffers()]}
    if devices - {"cpu"}:
        moved.append(f"module from {', '.join(sorted(devices - {'cpu'}))}")
        module = module.to("cpu")
    leaves = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    devices = {str(t.device) for t in leaves} - {"cpu"}
    if devices:
        moved.append(f"inputs from {', '.join(sorted(devices))}")
        args, kwargs = pytree.tree_map(
            lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, (args, kwargs)
        )
    return module, args, kwargs, moved
