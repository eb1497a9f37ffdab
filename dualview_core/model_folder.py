"""What a model folder declares about turning token states into one vector: read, never guessed.

Owns the reading of a sentence-transformers folder (modules.json and each module's config, in the
layouts of sentence-transformers 2.x to 6.x) or a plain Hugging Face folder into one `FolderSpec`:

    Transformer (path, max_seq_length, do_lower_case) -> Pooling (modes, include_prompt)
        -> Dense / Normalize steps, in folder order;  prompts (config_sentence_transformers.json)

Pooling configs come in two spellings: the current `{"pooling_mode": "lasttoken"}` (or a list of
modes, concatenated) and the older booleans `pooling_mode_cls_token`, `pooling_mode_mean_tokens`, ...
(several true: concatenated in the order sentence-transformers lists them; none true: mean).
A module this project cannot run (Router, LayerNorm, a custom class) is a clear error, not skipped.
A plain Hugging Face folder has no pooling of its own: the caller declares one (mean by default).

Prompts follow sentence-transformers 6.2's `encode_query` / `encode_document`: the query prompt is
`prompts["query"]`, the document prompt `prompts["document"]` (a folder with only a "passage" prompt
gets none for documents there too); plain `encode` uses `default_prompt_name`. The prompt goes
before the whole text, so a query is `prompt + query_text(query, instruction)`.

Pure JSON reading: no torch, no transformers.

    >>> pooling_modes({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    ('cls',)
    >>> pooling_modes({"pooling_mode": "lasttoken"})
    ('lasttoken',)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# the older boolean keys, in the order sentence-transformers concatenates them
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SUPPORTED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
ROLES = ("query", "document")
SENTENCE_EMBEDDING = "sentence_embedding"


class ModelFolderError(ValueError):
    """The folder declares something this project cannot embed faithfully."""


@dataclass(frozen=True)
class DenseSpec:
    """One Dense module: `activation(linear(x))` (+ x, or a projection of x, with use_residual)."""

    path: str  # the module's folder, relative to the model folder
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "torch.nn.modules.activation.Tanh"
    use_residual: bool = False


@dataclass(frozen=True)
class FolderSpec:
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    steps: tuple[DenseSpec | str, ...] = ()  # after pooling, in order: a DenseSpec or "normalize"
    transformer_path: str = ""  # where the Hugging Face model sits inside the folder
    max_seq_length: int | None = None  # None: the tokenizer's model_max_length, capped by the model
    do_lower_case: bool = False
    prompts: dict[str, str | None] = field(default_factory=dict)
    default_prompt_name: str | None = None
    sentence_transformers: bool = False  # False: a plain Hugging Face folder

    def prompt(self, role: str | None) -> str:
        """The text put before every input of `role` ('query', 'document', None for plain encode)."""
        if role is None:
            name = self.default_prompt_name
            return (self.prompts.get(name) or "") if name else ""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {ROLES} or None")
        return self.prompts.get(role) or ""

    @property
    def normalized(self) -> bool:
        """Whether the folder's last step makes unit vectors."""
        return bool(self.steps) and self.steps[-1] == "normalize"


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelFolderError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None


def pooling_modes(config: dict) -> tuple[str, ...]:
    """A 1_Pooling/config.json (either spelling) -> the pooling modes, in concatenation order."""
    if "pooling_mode" in config:
        raw = config["pooling_mode"]
        modes = (raw,) if isinstance(raw, str) else tuple(raw)
    else:
        modes = tuple(mode for key, mode in LEGACY_POOLING_KEYS.items() if config.get(key)) or ("mean",)
    check_pooling(modes)
    return modes


def check_pooling(modes: tuple[str, ...]) -> None:
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise ModelFolderError(f"unknown pooling {unknown or modes!r}; expected one of {POOLING_MODES}")


def _dense(root: Path, path: str) -> DenseSpec:
    cfg = _json(root / path / "config.json")
    for key in ("module_input_name", "module_output_name"):
        if cfg.get(key, SENTENCE_EMBEDDING) not in (SENTENCE_EMBEDDING, None):
            raise ModelFolderError(f"{root / path}: a Dense module on {cfg[key]!r} is not supported "
                                   f"(only on {SENTENCE_EMBEDDING!r})")
    activation = cfg.get("activation_function", DenseSpec.activation)
    if not activation.startswith("torch."):
        raise ModelFolderError(f"{root / path}: activation {activation!r} is not a torch.nn module")
    return DenseSpec(path, cfg["in_features"], cfg["out_features"], cfg.get("bias", True), activation,
                     cfg.get("use_residual", False))


def _transformer_config(root: Path, path: str) -> dict:
    for name in ("sentence_bert_config.json", "sentence_xlnet_config.json"):
        if (root / path / name).is_file():
            return _json(root / path / name)
    return {}


def read_model_folder(path: str | Path, pooling: str | None = None) -> FolderSpec:
    """The folder's embedding recipe. `pooling` overrides the folder's (and is a plain folder's)."""
    root = Path(path)
    override = None if pooling is None else (pooling,)
    if override:
        check_pooling(override)
    if not (root / "modules.json").is_file():
        return FolderSpec(pooling=override or ("mean",), steps=("normalize",))
    modules = sorted(_json(root / "modules.json"), key=lambda m: m.get("idx", 0))
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    unsupported = [m["type"] for m, k in zip(modules, kinds) if k not in SUPPORTED_MODULES]
    if unsupported or kinds[:2] != ["Transformer", "Pooling"]:
        raise ModelFolderError(f"{root}: modules {unsupported or kinds} are not supported; expected "
                               "Transformer, Pooling, then Dense / Normalize modules")
    transformer, pool_cfg = modules[0]["path"], _json(root / modules[1]["path"] / "config.json")
    steps = tuple(_dense(root, m["path"]) if k == "Dense" else "normalize" for m, k in zip(modules[2:], kinds[2:]))
    tcfg = _transformer_config(root, transformer)
    st_cfg = _json(root / "config_sentence_transformers.json") if (root / "config_sentence_transformers.json").is_file() else {}
    return FolderSpec(pooling=override or pooling_modes(pool_cfg), include_prompt=pool_cfg.get("include_prompt", True),
                      steps=steps, transformer_path=transformer, max_seq_length=tcfg.get("max_seq_length"),
                      do_lower_case=tcfg.get("do_lower_case", False), prompts=dict(st_cfg.get("prompts") or {}),
                      default_prompt_name=st_cfg.get("default_prompt_name"), sentence_transformers=True)
