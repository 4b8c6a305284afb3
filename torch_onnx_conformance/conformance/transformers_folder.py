"""A local transformers model folder as a user case: ``--cases path/to/folder`` or
``ModelCase.from_transformers_folder(path)`` in a case file.

The folder is what ``save_pretrained`` writes: a ``config.json`` and, optionally, the weights
(``model.safetensors``, ``pytorch_model.bin`` or their sharded index). Everything is read from
the folder only (``local_files_only``, ``HF_HUB_OFFLINE=1``; never a download, never the
folder's own code: ``trust_remote_code`` stays off). With weights the model is
``from_pretrained`` in float32; without, it is built ``from_config`` with seeded random weights
(``model_zoo.init.reinit_``: the same weights in every process). The case's notes, kept in each
row as ``case_notes``, say which, and name the weights the class has but the folder lacks
(newly initialised at random by transformers, which only logs a warning: base-model weights
under a config naming ``...ForSequenceClassification``) and those the folder has but the class
does not use.

The model class is the config's first ``architectures`` entry (``BertForMaskedLM``...), or,
when the config names none, the first Auto class of ``FALLBACK_AUTO_CLASSES`` whose mapping
knows the model type. Inputs follow the class's main input (``INPUT_KINDS`` of
``model_zoo.transformers_auto``): ``input_ids`` of a 2 x 7 batch drawn below the config's
``vocab_size`` with an ``attention_mask`` (and ``token_type_ids``, ``decoder_input_ids`` for an
encoder-decoder) when ``forward`` takes them, or ``pixel_values`` at the config's
``num_channels`` x ``image_size``; dynamic axes ``batch`` and ``sequence`` (``decoder_sequence``),
checked again at 3 x 10. Decoders run with ``use_cache`` off; the outputs are the model's own
(``logits``...).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

CONFIG = "config.json"
#: Files whose presence means the folder holds weights (``save_pretrained``'s names).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: Auto classes tried in order for a config without ``architectures``: the first whose
#: mapping holds the config's type builds the model (an encoder like BERT is in both the masked
#: and the causal LM mappings, and is a masked LM).
FALLBACK_AUTO_CLASSES = (
    "AutoModelForSeq2SeqLM",
    "AutoModelForImageClassification",
    "AutoModelForMaskedLM",
    "AutoModelForCausalLM",
    "AutoModelForSequenceClassification",
    "AutoModel",
)
#: How many weight names a case's notes list, of those newly initialised or unused.
LISTED_WEIGHTS = 8
#: The family of a folder's case.
FAMILY = "transformers-folder"
#: What to do when a folder cannot be a case.
_INSTEAD = (
    "or bring the model with a case file: a ModelCase whose build() loads it "
    "(torch_onnx_conformance/conformance/user_cases.py)"
)


class FolderError(ValueError):
    """A folder that cannot be a case; the message names the folder and what to do."""


def is_folder(entry: str | os.PathLike) -> bool:
    return Path(entry).is_dir()


class FolderModel:
    """What a folder's case is built from, read once from its ``config.json``: the class, the
    input kind, whether weights are there. ``build()`` loads the model; ``inputs(second)`` the
    example (or second) inputs."""

    def __init__(self, folder: str | os.PathLike, name: str | None = None):
        self.folder = Path(folder).resolve()
        if not self.folder.is_dir():
            raise FolderError(f"{folder}: no such folder; give a folder holding {CONFIG}")
        if not (self.folder / CONFIG).is_file():
            raise FolderError(
                f"{folder}: no {CONFIG} in this folder; give a transformers model folder (what "
                f"save_pretrained writes: {CONFIG}, weights optional), {_INSTEAD}"
            )
        self.name = name or f"local/{self.folder.name}"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.config = self._config()
        self.model_class, self.chosen_by = self._model_class()
        self.weights = next((f for f in WEIGHT_FILES if (self.folder / f).is_file()), None)
        self.accepted = set(inspect.signature(self.model_class.forward).parameters)
        self.kind = self._input_kind()
        #: What the last build() found of the folder's weights (see ``loading_notes``).
        self.loaded = ""

    def _config(self) -> Any:
        import transformers

        try:
            return transformers.AutoConfig.from_pretrained(
                self.folder, local_files_only=True, trust_remote_code=False
            )
        except Exception as exc:  # noqa: BLE001 - any reason is the user's to read
            message = " ".join(str(exc).split())
            raise FolderError(
                f"{self.folder / CONFIG}: transformers {transformers.__version__} cannot read "
                f"it: {type(exc).__name__}: {message} -- fix the file, upgrade transformers when "
                f"the model type is newer than it, {_INSTEAD}"
            ) from exc

    def _model_class(self) -> tuple[type, str]:
        import transformers

        architectures = getattr(self.config, "architectures", None) or []
        if architectures:
            model_class = getattr(transformers, architectures[0], None)
            if not isinstance(model_class, type):
                raise FolderError(
                    f"{self.folder / CONFIG}: architecture {architectures[0]!r} is not a class of "
                    f"transformers {transformers.__version__} (code shipped in the folder is not "
                    "run); upgrade transformers, remove 'architectures' to build the model "
                    f"type's default class, {_INSTEAD}"
                )
            return model_class, f"config.json architectures {architectures[0]}"
        for auto_name in FALLBACK_AUTO_CLASSES:
            mapping = getattr(transformers, auto_name)._model_mapping
            if type(self.config) in mapping:
                return mapping[type(self.config)], (
                    f"{auto_name} for model type {self.config.model_type}"
                )
        raise FolderError(
            f"{self.folder / CONFIG}: no Auto class of transformers {transformers.__version__} "
            f"builds model type {self.config.model_type!r}; name the class in 'architectures', "
            f"{_INSTEAD}"
        )

    def _input_kind(self) -> str:
        main = getattr(self.model_class, "main_input_name", "input_ids")
        if main == "input_ids":
            encoder_decoder = getattr(self.config, "is_encoder_decoder", False)
            if encoder_decoder and "decoder_input_ids" in self.accepted:
                return "seq2seq"
            return "text" if "attention_mask" in self.accepted else "ids"
        if main == "pixel_values":
            return "image"
        raise FolderError(
            f"{self.folder}: {self.model_class.__name__} takes {main!r} first; inputs are built "
            f"for input_ids (text) and pixel_values (vision) models only, {_INSTEAD}"
        )

    @property
    def notes(self) -> str:
        weights = (
            f"weights from {self.weights}"
            if self.weights
            else "no weights in the folder: seeded random weights (model_zoo.init.reinit_)"
        )
        return (
            f"{self.model_class.__name__} from {self.folder} ({self.chosen_by}); {weights}; "
            f"{self.kind} inputs"
        )

    def loading_notes(self, info: dict[str, Any]) -> str:
        """What ``from_pretrained``'s loading info says of weights the class has and the folder
        lacks (``missing_keys``: newly initialised at random) or the folder has and the class
        does not use (``unexpected_keys``); empty when they match."""
        name = self.model_class.__name__
        parts = []
        for key, what in (
            ("missing_keys", f"of {name} not in {self.weights}, newly initialised at random"),
            ("unexpected_keys", f"in {self.weights} not used by {name}"),
        ):
            keys = sorted(info.get(key) or ())
            if keys:
                listed = ", ".join(keys[:LISTED_WEIGHTS])
                more = len(keys) - LISTED_WEIGHTS
                listed += f", ... ({more} more)" if more > 0 else ""
                parts.append(f"{len(keys)} weight{'s' * (len(keys) > 1)} {what}: {listed}")
        return "; ".join(parts)

    def dynamic_shapes(self) -> dict[str, Any]:
        from torch_onnx_conformance.model_zoo.transformers_auto import INPUT_KINDS

        axes = {name: dict(spec) for name, spec in INPUT_KINDS[self.kind][0].items()}
        if self._token_types():
            axes["token_type_ids"] = dict(axes["input_ids"])
        return axes

    def _token_types(self) -> int:
        """Token type ids to feed: the config's count of them when ``forward`` takes them."""
        if "token_type_ids" not in self.accepted or self.kind not in ("text", "ids"):
            return 0
        count = getattr(self.config, "type_vocab_size", 0)
        return count if isinstance(count, int) and count > 0 else 0

    def inputs(self, second: bool = False) -> tuple[tuple, dict[str, Any]]:
        import torch

        from torch_onnx_conformance.model_zoo.transformers_auto import INPUT_KINDS, make_inputs_for

        sizes = dict(INPUT_KINDS[self.kind][2 if second else 1])
        longest = getattr(self.config, "max_position_embeddings", None)
        if isinstance(longest, int) and longest > 0 and "sequence" in sizes:
            sizes["sequence"] = min(sizes["sequence"], longest)
        _, inputs = make_inputs_for(self.name, self.kind, self.config, sizes)
        if token_types := self._token_types():
            ids = torch.zeros_like(inputs["input_ids"])
            if token_types > 1:
                ids[:, ids.shape[1] // 2 :] = 1  # a second segment makes the ids matter
            inputs["token_type_ids"] = ids
        return (), inputs

    def build(self) -> Any:
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()
        if self.weights:
            model, info = self.model_class.from_pretrained(
                self.folder, local_files_only=True, dtype=torch.float32, output_loading_info=True
            )
            self.loaded = self.loading_notes(info)
        else:
            from torch_onnx_conformance.model_zoo._common import seed_for
            from torch_onnx_conformance.model_zoo.init import reinit_

            model = self.model_class(self.config)
            reinit_(model, seed_for(self.name))
        for part in model.modules():  # outputs without a key/value cache; an encoder-decoder's
            config = getattr(part, "config", None)  # decoder has a config of its own
            if hasattr(config, "use_cache"):
                config.use_cache = False
        return model.eval()


def folder_case(folder: str | os.PathLike, name: str | None = None, **options: Any):
    """The ``user_cases.ModelCase`` of a transformers folder (see the module doc); ``options``
    are ``ModelCase``'s (``tier``, ``rtol``/``atol``, ``family``...)."""
    from torch_onnx_conformance.conformance.user_cases import ModelCase

    model = FolderModel(folder, name)

    def build():
        args, kwargs = model.inputs()
        return model.build(), args, kwargs

    notes = options.pop("notes", "")
    return ModelCase(
        model.name,
        build,
        dynamic_shapes=options.pop("dynamic_shapes", model.dynamic_shapes()),
        second_inputs=options.pop("second_inputs", lambda args, kwargs: model.inputs(second=True)),
        family=options.pop("family", FAMILY),
        notes="; ".join(filter(None, [notes, model.notes])),
        build_notes=options.pop("build_notes", lambda: model.loaded),
        **options,
    )
