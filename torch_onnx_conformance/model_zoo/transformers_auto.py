"""Every architecture of transformers' ``AutoModel`` mapping, built generically from a small config.

For each model type of ``MODEL_MAPPING_NAMES`` that ``transformers_cases`` does not hand-write,
the builder takes the config class's defaults, shrinks every common size field it finds (in
nested text/vision/audio sub-configs too), builds ``AutoModel.from_config`` with seeded weights
(`reinit_`) and feeds the inputs of one of a few input kinds (`INPUT_KINDS`). Which kind a type
takes, or why it cannot be built on CPU from a small config, is data: ``transformers_auto.toml``,
written by the survey below (build + eager only, no export) and read at registration, so that
registering stays cheap (transformers is imported only by ``build()``).

    python -m torch_onnx_conformance.model_zoo.transformers_auto survey [TYPE ...]   # rewrites transformers_auto.toml

Per-type config overrides go in `CONFIG_OVERRIDES`, the one table of exceptions.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torch_onnx_conformance.model_zoo._common import generator_for, randint, seed_for
from torch_onnx_conformance.model_zoo.init import reinit_
from torch_onnx_conformance.model_zoo.registry import Inputs, ModelCase, register

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FAMILY = "transformers-auto"
DATA_PATH = Path(__file__).with_name("transformers_auto.toml")

#: Model types that ``transformers_cases`` builds by hand (with wrappers and -kv decode cases).
HAND_WRITTEN = frozenset(
    "bert roberta distilbert albert electra deberta-v2 xlm-roberta mobilebert gpt2 gpt_neox "
    "llama mistral qwen2 qwen3 phi3 gemma gemma2 gemma3_text falcon opt t5 bart whisper vit "
    "swin convnext clip wav2vec2".split()
)

#: Size fields and the value they are shrunk to (never grown): a field missing from a config is
#: left alone. Head counts keep head_dim = 8 at hidden 32 and 2 KV heads divide 4 heads.
_SIZE_FIELDS = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "d_embed"), 32),
    **dict.fromkeys(("word_embed_proj_dim", "projection_dim", "text_embed_dim"), 32),
    **dict.fromkeys(
        (
            "num_hidden_layers",
            "n_layer",
            "n_layers",
            "num_layers",
            "encoder_layers",
            "decoder_layers",
            "num_decoder_layers",
            "num_encoder_layers",
        ),
        2,
    ),
    **dict.fromkeys(
        (
            "num_attention_heads",
            "n_head",
            "n_heads",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ),
        4,
    ),
    **dict.fromkeys(("num_key_value_heads", "n_kv_heads", "num_kv_heads"), 2),
    **dict.fromkeys(
        (
            "head_dim",
            "d_kv",
            "d_head",
            "attention_head_size",
            "kv_channels",
            "rotary_dim",
            "v_head_dim",
            "mamba_d_head",
        ),
        8,
    ),
    "mamba_n_heads": 8,
    # linear-attention layers (bailing_hybrid: 32 x 128 by default, whose chunked scan then
    # holds (batch, heads, chunks, 64, 64, head dim) floats, 192 MiB each at batch 3)
    "linear_num_heads": 4,
    "linear_head_dim": 8,
    **dict.fromkeys(("qk_nope_head_dim", "qk_rope_head_dim"), 4),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 16),
    "num_heads": 4,
    **dict.fromkeys(
        (
            "intermediate_size",
            "ffn_dim",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "d_ff",
            "n_inner",
            "hidden_dim",
            "ffn_hidden_size",
        ),
        64,
    ),
    **dict.fromkeys(
        (
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_intermediate_size",
        ),
        32,
    ),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "moe_topk", "top_k"), 2),
    "vocab_size": 512,
    "max_position_embeddings": 128,
    "n_positions": 128,
    "image_size": 32,
    "patch_size": 8,
    "num_mel_bins": 16,
}
#: Per-stage lists (hierarchical vision models): each entry shrunk to this value at most.
_STAGE_LIST_FIELDS = {
    "depths": 1,
    "num_heads": 2,
    "num_attention_heads": 2,
    "hidden_sizes": 32,
    "embed_dims": 32,
}
_LAYER_COUNT_FIELDS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
#: Fields derived from a default depth that a shrunk depth invalidates; the config recomputes them.
_DROPPED_FIELDS = ("out_features", "out_indices", "stage_names")
_TOKEN_ID_FIELDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_VOCAB = 512
#: A config whose shrunk model still has more parameters than this is not "small": its size
#: lives in fields the generic builder does not know, so it is classified, not built.
MAX_PARAMETERS = 8_000_000

#: The one table of per-type exceptions: config fields the generic shrinking gets wrong.
CONFIG_OVERRIDES: dict[str, dict[str, Any]] = {
    # attention_types is a run-length list ([[kinds], repeats]) that must cover num_layers
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # Mamba-2 heads must tile hidden_size * expand (64 at hidden 32): 8 heads of 8
    "mamba2": {"num_heads": 8},
    # its Mamba width is given outright (mamba_d_ssm 1024); it must be heads x head size, 8 x 8
    "falcon_h1": {"mamba_d_ssm": 64},
    # No grouped-query attention in the real configs (as many KV heads as heads), and these
    # models build keys for every query head whatever num_key_value_heads says. With a shrunk
    # 2 against 4 heads, eager's SDPA still runs (enable_gqa, 4 key heads), but under
    # torch.export transformers repeats the keys 4/2 times into 8 heads and the capture stops
    # ("Attempting to broadcast a dimension of length 8 ... [2, 4]").
    **dict.fromkeys(
        (
            "esmc",
            "glm4_moe_lite",
            "minicpm3",
            "mistral4",
            "nemotron3_5_transcribe_asr_audio",
            "nemotron3_diarization_audio",
        ),
        {"num_key_value_heads": 4},
    ),
}


# --- the mapping ------------------------------------------------------------------------------


@functools.cache
def model_types() -> dict[str, str]:
    """``MODEL_MAPPING_NAMES`` (model type -> AutoModel class name) without importing it.

    Importing ``transformers.models.auto.modeling_auto`` costs seconds; registering the zoo must
    not, so the literal table is read from the installed source.
    """
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return {}
    source = Path(spec.submodule_search_locations[0], "models", "auto", "modeling_auto.py")
    for node in ast.parse(source.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "MODEL_MAPPING_NAMES" for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            return dict(ast.literal_eval(node.value.args[0]))
    raise RuntimeError(f"{source}: no MODEL_MAPPING_NAMES literal; update model_types()")


# --- config shrinking -------------------------------------------------------------------------


def shrink(values: Mapping[str, Any]) -> dict[str, Any]:
    """A config dict with every known size field shrunk, recursing into sub-config dicts.

    Per-layer lists (``layer_types``, per-layer sizes) as long as the default depth are cut to
    the shrunk depth, and tables keyed by layer index keep the indices that still exist.
    """
    depth = next((values[k] for k in _LAYER_COUNT_FIELDS if type(values.get(k)) is int), None)
    new_depth = min(depth, 2) if depth else None
    small = {}
    for key, value in values.items():
        if key in _DROPPED_FIELDS:
            continue
        if depth and new_depth != depth and isinstance(value, list) and len(value) == depth:
            small[key] = value[:new_depth]
        elif (
            new_depth
            and isinstance(value, Mapping)
            and value
            and all(str(k).isdigit() for k in value)
        ):
            small[key] = {k: v for k, v in value.items() if int(k) < new_depth}
        elif isinstance(value, Mapping):
            small[key] = shrink(value)
        elif key in _SIZE_FIELDS and type(value) is int and value > 0:
            small[key] = min(value, _SIZE_FIELDS[key])
        elif key in _SIZE_FIELDS and isinstance(value, (list, tuple)) and key == "image_size":
            small[key] = [min(v, _SIZE_FIELDS[key]) for v in value]
        elif key in _STAGE_LIST_FIELDS and isinstance(value, (list, tuple)) and value:
            if all(type(v) is int for v in value):
                small[key] = [min(v, _STAGE_LIST_FIELDS[key]) for v in value]
            else:
                small[key] = value
        elif key in _TOKEN_ID_FIELDS and type(value) is int and value >= _VOCAB:
            small[key] = _TOKEN_ID_FIELDS[key]
        else:
            small[key] = value
    return small


def small_config(model_type: str) -> Any:
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    values = shrink(default.to_dict())
    values.update(CONFIG_OVERRIDES.get(model_type, {}))
    values.pop("model_type", None)
    values.pop("transformers_version", None)
    return type(default).from_dict(values)


def build_model(model_type: str) -> nn.Module:
    """``AutoModel.from_config`` of the small config, seeded weights, eval mode."""
    from transformers import AutoModel

    config = small_config(model_type)
    with torch.device("meta"):
        meta_model = AutoModel.from_config(config)
    count = sum(parameter.numel() for parameter in meta_model.parameters())
    if count > MAX_PARAMETERS:
        raise TooLarge(
            f"the shrunk config still has {count / 1e6:.0f}M parameters: its size lives in "
            "fields the generic builder does not shrink"
        )
    model = AutoModel.from_config(config)
    reinit_(model, seed_for(case_name(model_type)))
    return model.eval()


class TooLarge(RuntimeError):
    pass


# --- inputs -----------------------------------------------------------------------------------

_TEXT_AXES = {0: "batch", 1: "sequence"}
#: Input kind -> (input names, dynamic axes per input, sizes, second sizes).
INPUT_KINDS: dict[str, tuple[dict[str, Any], dict[str, int], dict[str, int]]] = {
    "text": (
        {"input_ids": _TEXT_AXES, "attention_mask": _TEXT_AXES},
        {"batch": 2, "sequence": 7},
        {"batch": 3, "sequence": 10},
    ),
    "ids": ({"input_ids": _TEXT_AXES}, {"batch": 2, "sequence": 7}, {"batch": 3, "sequence": 10}),
    "seq2seq": (
        {
            "input_ids": _TEXT_AXES,
            "attention_mask": _TEXT_AXES,
            "decoder_input_ids": {0: "batch", 1: "decoder_sequence"},
        },
        {"batch": 2, "sequence": 7, "decoder_sequence": 4},
        {"batch": 3, "sequence": 10, "decoder_sequence": 6},
    ),
    "image": ({"pixel_values": {0: "batch"}}, {"batch": 2}, {"batch": 3}),
    "text-image": (
        {"input_ids": _TEXT_AXES, "attention_mask": _TEXT_AXES, "pixel_values": {0: "batch"}},
        {"batch": 2, "sequence": 7},
        {"batch": 3, "sequence": 10},
    ),
    "waveform": (
        {"input_values": {0: "batch", 1: "samples"}},
        {"batch": 2, "samples": 1600},
        {"batch": 3, "samples": 2000},
    ),
    "features": ({"input_features": {0: "batch"}}, {"batch": 2}, {"batch": 3}),
    # (batch, frames, bins): speech_to_text-style front ends, frames dynamic
    "frames": (
        {"input_features": {0: "batch", 1: "frames"}},
        {"batch": 2, "frames": 32},
        {"batch": 3, "frames": 40},
    ),
    "features-seq2seq": (
        {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "decoder_sequence"}},
        {"batch": 2, "decoder_sequence": 4},
        {"batch": 3, "decoder_sequence": 6},
    ),
}


def _first_int(config: Any, *names: str, default: int) -> int:
    for sub in (config, *_sub_configs(config)):
        for name in names:
            value = getattr(sub, name, None)
            if isinstance(value, (list, tuple)) and value and type(value[0]) is int:
                return value[0]
            if type(value) is int and value > 0:
                return value
    return default


def _sub_configs(config: Any) -> list[Any]:
    return [
        value
        for name in ("vision_config", "audio_config", "text_config", "encoder", "decoder")
        if (value := getattr(config, name, None)) is not None and not isinstance(value, dict)
    ]


def make_inputs_for(model_type: str, kind: str, config: Any, sizes: Mapping[str, int]) -> Inputs:
    names = INPUT_KINDS[kind][0]
    generator = generator_for(case_name(model_type), sizes)
    batch = sizes["batch"]
    inputs: dict[str, torch.Tensor] = {}
    if "input_ids" in names:
        vocab = _first_int(config, "vocab_size", default=_VOCAB)
        inputs["input_ids"] = randint(generator, max(vocab - 3, 1), batch, sizes["sequence"]) + 3
    if "attention_mask" in names:
        mask = torch.ones((batch, sizes["sequence"]), dtype=torch.int64)
        mask[-1, -1] = 0  # one padded position makes the mask matter
        inputs["attention_mask"] = mask
    if "decoder_input_ids" in names:
        vocab = _first_int(config, "vocab_size", default=_VOCAB)
        inputs["decoder_input_ids"] = (
            randint(generator, max(vocab - 3, 1), batch, sizes["decoder_sequence"]) + 3
        )
    if "pixel_values" in names:
        channels = _first_int(config, "num_channels", default=3)
        side = _first_int(config, "image_size", default=32)
        inputs["pixel_values"] = torch.randn((batch, channels, side, side), generator=generator)
    if "input_values" in names:
        inputs["input_values"] = torch.randn((batch, sizes["samples"]), generator=generator)
    if "input_features" in names and kind == "frames":
        bins = _first_int(
            config, "input_feat_per_channel", "feature_size", "num_mel_bins", default=16
        )
        inputs["input_features"] = torch.randn((batch, sizes["frames"], bins), generator=generator)
    elif "input_features" in names:
        bins = _first_int(
            config, "num_mel_bins", "feature_size", "input_feat_per_channel", default=16
        )
        frames = 2 * _first_int(config, "max_source_positions", default=16)
        inputs["input_features"] = torch.randn((batch, bins, frames), generator=generator)
    return (), inputs


class AutoModelOutputs(nn.Module):
    """Keyword inputs in, the model output's tensor fields out, as a flat tuple."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        import inspect

        accepted = inspect.signature(model.forward).parameters
        self.extra = {"use_cache": False} if "use_cache" in accepted else {}

    def forward(
        self,
        *,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        input_values: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        given = {
            name: value
            for name, value in (
                ("input_ids", input_ids),
                ("attention_mask", attention_mask),
                ("decoder_input_ids", decoder_input_ids),
                ("pixel_values", pixel_values),
                ("input_values", input_values),
                ("input_features", input_features),
            )
            if value is not None
        }
        output = self.model(**given, **self.extra, return_dict=True)
        values = output.to_tuple() if hasattr(output, "to_tuple") else tuple(output)
        return tuple(value for value in values if isinstance(value, torch.Tensor))


# --- classification data ----------------------------------------------------------------------


@functools.cache
def load_data(path: Path = DATA_PATH) -> dict[str, dict[str, str]]:
    """``{"zoo": {type: input kind}, "not_buildable": {type: reason}}`` from the TOML file."""
    if not path.exists():
        return {"zoo": {}, "not_buildable": {}}
    with path.open("rb") as file:
        data = tomllib.load(file)
    unknown = set(data) - {"zoo", "not_buildable"}
    if unknown:
        raise ValueError(f"{path}: unknown tables {sorted(unknown)}; use zoo and not_buildable")
    for model_type, kind in data.get("zoo", {}).items():
        if kind not in INPUT_KINDS:
            raise ValueError(f"{path}: {model_type}: unknown input kind {kind!r}")
    return {"zoo": data.get("zoo", {}), "not_buildable": data.get("not_buildable", {})}


def case_name(model_type: str) -> str:
    return f"transformers/auto/{model_type}"


def _register_all() -> None:
    classes = model_types()
    for model_type, kind in load_data()["zoo"].items():
        if model_type not in classes:
            continue  # a type this transformers does not have: the test names it
        axes, sizes, second = INPUT_KINDS[kind]
        register(
            ModelCase(
                name=case_name(model_type),
                family=FAMILY,
                tier="full",
                make_module=functools.partial(_module, model_type),
                make_inputs=functools.partial(_inputs, model_type, kind),
                sizes=dict(sizes),
                second_sizes=dict(second),
                dynamic_shapes={name: dict(spec) for name, spec in axes.items()},
                notes=f"{classes[model_type]} from its config's defaults shrunk by "
                f"torch_onnx_conformance.model_zoo.transformers_auto (input kind {kind!r}); returns its tensor "
                "outputs as a tuple.",
            )
        )


def _module(model_type: str) -> nn.Module:
    return AutoModelOutputs(build_model(model_type)).eval()


@functools.cache
def _config(model_type: str) -> Any:
    return small_config(model_type)


def _inputs(model_type: str, kind: str, sizes: Mapping[str, int]) -> Inputs:
    return make_inputs_for(model_type, kind, _config(model_type), sizes)


# --- the survey: build + eager, which input kind works ----------------------------------------

#: Input kinds to try, in order, by the model's main input name.
_KINDS_BY_MAIN_INPUT = {
    "input_ids": ("text", "ids", "seq2seq", "text-image"),
    "pixel_values": ("image", "text-image"),
    "input_values": ("waveform",),
    "input_features": ("features", "frames", "features-seq2seq"),
}


class _Timeout(Exception):
    pass


def survey_type(model_type: str, seconds: int = 120) -> tuple[str, str]:
    """``("zoo", kind)`` for a type that builds and runs eager, else ``("not_buildable", why)``."""

    def expire(*_):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        return _survey(model_type)
    except _Timeout:
        return "not_buildable", f"build + eager took more than {seconds} s on CPU"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _one_line(error: BaseException) -> str:
    # validators put the actual complaint on a later line: keep every line, joined
    lines = [line.strip() for line in f"{type(error).__name__}: {error}".splitlines()]
    return " ".join(line for line in lines if line)[:240]


def _survey(model_type: str) -> tuple[str, str]:
    try:
        model = build_model(model_type)
    except TooLarge as error:
        return "not_buildable", str(error)
    except ImportError as error:
        return "not_buildable", f"needs a package this environment lacks: {_one_line(error)}"
    except Exception as error:
        return "not_buildable", f"building from the shrunk default config fails: {_one_line(error)}"
    wrapper = AutoModelOutputs(model).eval()
    main = getattr(model, "main_input_name", "input_ids")
    kinds = _KINDS_BY_MAIN_INPUT.get(main) if isinstance(main, str) else None
    if kinds is None:
        return "not_buildable", f"main input {main!r} has no generic input kind"
    config = model.config
    errors = []
    for kind in kinds:
        sizes, second = INPUT_KINDS[kind][1:]
        try:
            with torch.no_grad():
                outputs = [
                    wrapper(**make_inputs_for(model_type, kind, config, s)[1])
                    for s in (sizes, second)
                ]
        except Exception as error:
            errors.append(f"{kind}: {_one_line(error)}")
            continue
        if not outputs[0]:
            errors.append(f"{kind}: no tensor outputs")
            continue
        return "zoo", kind
    return "not_buildable", "eager fails on every generic input kind: " + "; ".join(errors)


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_data(results: Mapping[str, tuple[str, str]], path: Path = DATA_PATH) -> None:
    lines = [
        "# Written by `python -m torch_onnx_conformance.model_zoo.transformers_auto survey` (build + eager on CPU, no",
        "# export): [zoo] maps each generically buildable model type to its input kind",
        "# (model_zoo.transformers_auto.INPUT_KINDS), [not_buildable] gives the reason a type",
        "# cannot be built on CPU from a small config. Types hand-written in transformers_cases",
        "# are in neither. Export failures are expectations: torch_onnx_conformance/conformance/expectations/.",
        "",
        "[zoo]",
    ]
    for model_type, (verdict, detail) in sorted(results.items()):
        if verdict == "zoo":
            lines.append(f"{_toml_string(model_type)} = {_toml_string(detail)}")
    lines += ["", "[not_buildable]"]
    for model_type, (verdict, detail) in sorted(results.items()):
        if verdict == "not_buildable":
            lines.append(f"{_toml_string(model_type)} = {_toml_string(detail)}")
    path.write_text("\n".join(lines) + "\n")


def _main(argv: list[str]) -> int:
    if not argv or argv[0] != "survey":
        print(__doc__)
        return 2
    import json

    wanted = argv[1:] or [t for t in model_types() if t not in HAND_WRITTEN]
    log = Path(os.environ.get("SURVEY_LOG", "/tmp/transformers_auto_survey.jsonl"))
    done = {}
    # The log resumes an interrupted survey of the whole mapping; types named on the command
    # line are surveyed afresh (a logged verdict may predate a builder change).
    if log.exists() and not argv[1:]:
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            done[entry["type"]] = (entry["verdict"], entry["detail"])
    for model_type in wanted:
        if model_type in done:
            continue
        verdict, detail = survey_type(model_type)
        done[model_type] = (verdict, detail)
        with log.open("a") as file:
            file.write(
                json.dumps({"type": model_type, "verdict": verdict, "detail": detail}) + "\n"
            )
        print(model_type, verdict, detail[:120], flush=True)
    current = dict(load_data()["zoo"].items())
    results = {t: ("zoo", k) for t, k in current.items()}
    results |= {t: ("not_buildable", r) for t, r in load_data()["not_buildable"].items()}
    results |= {t: v for t, v in done.items() if t in wanted or t not in results}
    write_data(results)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

_register_all()
