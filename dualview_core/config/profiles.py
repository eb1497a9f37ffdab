"""Read and resolve a named profile (profiles/<name>.yaml) and the fields a caller gave into the config a flow runs.

The rule, one for every flow and the CLI: a field the caller gave wins; any other field takes the
profile's value; what neither names keeps the config's default.

Flows take their config as an *overrides* model (`overrides_model`): the same fields, every one
optional with None meaning "not given, the profile's". Prefect's custom-run form fills every field
of a parameter with its schema default and sends them all, so with the config models themselves a
form opened on the cluster profile would send the laptop's defaults back over it. With overrides
models the form starts empty, a user who fills only `seeds.path` changes the seeds and nothing else,
and no path of the deploying machine appears in it. Since an empty field means "the profile's", a
None over a profile's value is said by naming the field in the root model's `set_none`.

    >>> resolve("cluster", {"seeds": {"path": "s3://b/mine/"}}).seeds.path
    's3://b/mine/'
    >>> resolve("cluster", {}).synthesis.vllm.tensor_parallel_size
    4
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

import yaml

from dualview_core.config import EvaluationConfig, PipelineConfig, DataSource, SweepConfig, SynthesisConfig, TrainingConfig

DEFAULT = "cpu"
PROFILES = "profiles"  # the package holding one YAML file per profile (package data)


class ProfileError(ValueError):
    """An unknown profile, or a file that is not a mapping of config fields."""


def names() -> tuple[str, ...]:
    from importlib.resources import files

    return tuple(sorted(p.name.removesuffix(".yaml") for p in files(PROFILES).iterdir() if p.name.endswith(".yaml")))


def load(name: str) -> dict:
    """The profile's fields as written (nested dicts), without defaults."""
    from importlib.resources import files

    if name not in names():
        raise ProfileError(f"unknown profile {name!r}; the profiles are {', '.join(names())} (profiles/*.yaml)")
    doc = yaml.safe_load((files(PROFILES) / f"{name}.yaml").read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        raise ProfileError(f"profiles/{name}.yaml must be a mapping of PipelineConfig fields, not {type(doc).__name__}")
    return doc


def _dict_fields(model: type[BaseModel]) -> set[str]:
    """Names of the dict-valued fields (storage options, measures) in `model` and the models it nests."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        for kind in (field.annotation, *typing.get_args(field.annotation)):
            if typing.get_origin(kind) is dict:
                names.add(name)
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= _dict_fields(kind)
    return names


VALUE_DICTS = frozenset(_dict_fields(SweepConfig))  # values, replaced whole: never merged key by key


def merge(base: dict, override: dict) -> dict:
    """`override` on top of `base`; nested configs merge field by field, anything else is replaced.

        >>> merge({"a": {"b": 1, "c": 2}, "storage_options": {"k": 1}}, {"a": {"b": 3}, "storage_options": {}})
        {'a': {'b': 3, 'c': 2}, 'storage_options': {}}
    """
    out = dict(base)
    for key, value in override.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict) and key not in VALUE_DICTS
        out[key] = merge(out[key], value) if nested else value
    return out


SET_NONE = "set_none"


class Overrides(BaseModel):
    """Base of the overrides models. Accepts the config model itself too (the fields it was given),
    so code can pass a `PipelineConfig` where a flow takes `PipelineConfigOverrides`; a field given
    as None there lands in `set_none`."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _from_config(cls, data: Any) -> Any:
        if not isinstance(data, BaseModel) or isinstance(data, Overrides):
            return data
        given = data.model_dump(exclude_unset=True)
        nones = list(_none_paths(given))
        for path in nones:
            _pop(given, path)
        return {**given, SET_NONE: nones} if nones and SET_NONE in cls.model_fields else given


def _none_paths(d: dict, prefix: str = "") -> Iterator[str]:
    for key, value in d.items():
        if value is None:
            yield prefix + key
        elif isinstance(value, dict) and key not in VALUE_DICTS:
            yield from _none_paths(value, f"{prefix}{key}.")


def _pop(d: dict, path: str) -> None:
    *parents, last = path.split(".")
    for key in parents:
        d = d[key]
    d.pop(last)


def _put(d: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        d = d.setdefault(key, {})
    d[last] = value


@functools.cache
def overrides_model(model: type[BaseModel], root: bool = True) -> type[Overrides]:
    """`model`'s fields, each optional with default None, nested models replaced by their overrides
    models (expanded in the form: a nested model that cannot be None defaults to an empty one).
    Descriptions and choices carry over; bounds are checked when the config is resolved. A root model
    (a flow parameter) also has `set_none`: the fields to set to None over the profile's values."""
    fields: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        annotation = _sparse(field.annotation)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            fields[name] = (annotation, Field(default_factory=annotation, description=field.description))
        else:
            fields[name] = (annotation | None, Field(None, description=field.description))
    if root:
        fields[SET_NONE] = (list[str] | None, Field(None, description="Fields to set to None over the profile's "
                                                   "values, dotted (e.g. artifact_location, training.max_steps): "
                                                   "an empty field means 'the profile's', so None is said here."))
    suffix = "Overrides" if root else "Fields"
    return create_model(f"{model.__name__}{suffix}", __base__=Overrides, __doc__=model.__doc__, **fields)


def _sparse(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return overrides_model(annotation, root=False)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return functools.reduce(lambda a, b: a | b, [_sparse(a) for a in typing.get_args(annotation)])
    return annotation


def explicit(value: Any) -> dict:
    """What the caller gave, JSON-shaped: an overrides model's non-None fields and its `set_none` as
    Nones, a config model's set fields, at every level; None: nothing."""
    if value is None:
        return {}
    if isinstance(value, Overrides):
        given = _given(value)
        for path in getattr(value, SET_NONE, None) or ():
            _put(given, path, None)
        return given
    return value.model_dump(mode="json", exclude_unset=True)


def _given(value: Overrides) -> dict:
    out, dumped = {}, value.model_dump(mode="json")
    for name in type(value).model_fields:
        field = getattr(value, name)
        if name == SET_NONE or field is None:
            continue
        if isinstance(field, Overrides):
            if nested := _given(field):
                out[name] = nested
        else:
            out[name] = dumped[name]
    return out


Profile = Literal[names()]  # a drop-down in the UI form
PipelineOverrides = overrides_model(PipelineConfig)
SweepOverrides = overrides_model(SweepConfig)
SynthesisOverrides = overrides_model(SynthesisConfig)
TrainingOverrides = overrides_model(TrainingConfig)
EvaluationOverrides = overrides_model(EvaluationConfig)
DataSourceOverrides = overrides_model(DataSource, root=False)


def resolve(name: str | None, fields: dict | None = None) -> PipelineConfig:
    """The profile `name` (None: cpu), resolved in full, with `fields` (a partial PipelineConfig,
    JSON-shaped) on top: a caller's `training.max_steps` keeps the profile's other training fields."""
    profile = PipelineConfig.model_validate(load(name or DEFAULT)).model_dump(mode="json")
    return PipelineConfig.model_validate(merge(profile, fields or {}))


def _set(**fields: Any) -> dict:
    """The fields a flow was given: models as what they set, plain values (a URI, a count) as they are."""
    given = {k: v if v is None or isinstance(v, (str, int, float, bool)) else explicit(v) for k, v in fields.items()}
    return {k: v for k, v in given.items() if v not in (None, {})}


# --- each flow's parameters, resolved ------------------------------------------------------------------
# Each takes what the flow was given: overrides models, config models (their set fields) or None.


def for_synthesis(profile: str | None, seeds: Any, out: str | None, config: Any) -> tuple[DataSource, str, SynthesisConfig]:
    """`synthesize` and `watch-seeds`: the output defaults to the profile's `<workdir>/synthesis`."""
    p = resolve(profile, _set(seeds=seeds, synthesis=config))
    return p.seeds, out or p.layout().synthesis, p.synthesis


def for_training(profile: str | None, seeds: Any, config: Any, processes: int | None, tracking_uri: str | None,
                 registered_model: str | None = None, register_alias: str | None = None) -> PipelineConfig:
    return resolve(profile, _set(seeds=seeds, training=config, train_processes=processes, tracking_uri=tracking_uri,
                                 registered_model=registered_model, register_alias=register_alias))


def for_evaluation(profile: str | None, eval_set: Any, config: Any, tracking_uri: str | None) -> PipelineConfig:
    return resolve(profile, _set(eval_set=eval_set, evaluation=config, tracking_uri=tracking_uri))


def for_sweep(profile: str | None, config: Any) -> SweepConfig:
    """The grid's own fields as set; its `pipeline` resolved like a pipeline run's, named dualview-sweep
    unless the caller names it."""
    fields = explicit(config)
    default_name = SweepConfig.model_fields["pipeline"].default_factory().name
    pipeline = merge({"name": default_name}, fields.pop("pipeline", {}))
    return SweepConfig.model_validate({**fields, "pipeline": resolve(profile, pipeline).model_dump(mode="json")})
