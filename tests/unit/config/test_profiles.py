"""Profiles: the resolution rule, the cluster profile as the one source of the cluster's values, and what
each deployment in prefect.yaml runs once its parameters are resolved (where each stage goes)."""

from __future__ import annotations

import json

import pytest
import yaml

from dualview_core.config import cluster
from dualview_core.config import DataSource, PipelineConfig, SweepConfig, SynthesisConfig, TrainingConfig
from dualview_core.config.cluster import ClusterConfig
from dualview_core.config.profiles import (
    EvaluationOverrides, PipelineOverrides, ProfileError, DataSourceOverrides, SweepOverrides, SynthesisOverrides,
    TrainingOverrides, explicit, names, for_evaluation, for_sweep, for_synthesis, for_training, merge, resolve,
)
from flows.commands import PROJECT_ROOT

CFG = ClusterConfig()
CLUSTER = resolve("cluster")


def test_the_shipped_profiles():
    assert names() == ("cluster", "cpu")
    assert resolve("cpu") == resolve(None) == PipelineConfig()


def test_an_unknown_profile_is_one_line_naming_the_profiles():
    with pytest.raises(ProfileError) as err:
        resolve("gpu")
    assert str(err.value) == "unknown profile 'gpu'; the profiles are cluster, cpu (profiles/*.yaml)"


def test_merge_is_deep_and_replaces_leaves():
    assert merge({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 3}, "d": [2]}) == {"a": {"b": 3, "c": 2}, "d": [2]}


def test_a_field_the_caller_set_wins_and_nothing_else_changes():
    mine = PipelineConfig(seeds=DataSource(path="s3://team/seeds/"))
    assert explicit(mine) == {"seeds": {"path": "s3://team/seeds/"}}
    got = resolve("cluster", explicit(mine))
    assert got.seeds.path == "s3://team/seeds/"
    assert got.model_copy(update={"seeds": CLUSTER.seeds}) == CLUSTER


def test_nested_fields_override_one_by_one():
    got = resolve("cluster", {"synthesis": {"vllm": {"replicas": 2}}, "training": {"max_steps": 10}})
    assert got.synthesis.vllm.replicas == 2 and got.synthesis.vllm.tensor_parallel_size == 4
    assert got.training.max_steps == 10 and got.training.model == CLUSTER.training.model
    # set to the default counts as set: the caller's value wins even where it equals the default
    assert resolve("cluster", {"synthesis": {"vllm": {"cpu": True}}}).synthesis.vllm.cpu is True


def _form(model) -> dict:
    """What a form sends when nothing is filled: every field, None, nested forms likewise."""
    return {name: _form(field.default_factory) if field.default_factory else None
            for name, field in model.model_fields.items()}


def test_a_form_sending_every_field_empty_but_the_seeds_path_changes_only_the_seeds():
    sent = _form(PipelineOverrides)
    sent["seeds"]["path"] = "s3://team/seeds/"
    assert sent["seeds"]["path"] == "s3://team/seeds/" and sent["synthesis"]["vllm"]["model"] is None
    got = resolve("cluster", explicit(PipelineOverrides.model_validate(sent)))
    assert got.model_copy(update={"seeds": CLUSTER.seeds}) == CLUSTER and got.seeds.path == "s3://team/seeds/"


def test_code_may_pass_the_config_models_where_flows_take_overrides():
    given = PipelineOverrides.model_validate(PipelineConfig(seeds=DataSource(path="a"), training=TrainingConfig(max_steps=3)))
    assert explicit(given) == {"seeds": {"path": "a"}, "training": {"max_steps": 3}}
    with pytest.raises(ValueError, match="extra"):
        PipelineOverrides.model_validate({"seeds": {"pth": "a"}})  # a misspelt field is refused


def test_a_config_built_with_defaults_only_takes_the_profile():
    assert resolve("cluster", explicit(PipelineConfig())) == CLUSTER
    assert for_synthesis("cluster", None, None, SynthesisConfig())[2] == CLUSTER.synthesis


def test_the_cluster_profile_is_what_the_cluster_config_derives():
    derived = cluster.pipeline_config(CFG, CLUSTER.seeds.path, CLUSTER.eval_set.path, CLUSTER.workdir)
    assert CLUSTER == derived
    assert CFG.synthesis == CLUSTER.synthesis.model_copy(update={"ray_job": None})
    assert CFG.training == CLUSTER.training and CLUSTER.train_processes == CFG.trainer_gpus
    assert cluster.consistency_errors(CFG) == []


def test_the_cluster_profile_drift_is_caught():
    other = CFG.model_copy(update={"namespace": "retrieval"})  # every service address moves
    assert cluster.pipeline_config(other, CLUSTER.seeds.path, CLUSTER.eval_set.path, CLUSTER.workdir) != CLUSTER


# --- prefect.yaml: what each deployment runs ---------------------------------------------------------


def _deployments() -> dict[str, dict]:
    return {d["name"]: d for d in yaml.safe_load((PROJECT_ROOT / "prefect.yaml").read_text())["deployments"]}


def effective(deployment: dict, run: dict | None = None) -> dict:
    """What the deployment's flow resolves its parameters to: the deployment's own, with a custom run's
    on top (Prefect merges them key by key), through the resolution the flows call."""
    params = {**(deployment.get("parameters") or {}), **(run or {})}
    profile = params.get("profile", "cpu")
    flow = deployment["entrypoint"].rsplit(":", 1)[1]
    seeds = DataSourceOverrides.model_validate(params.get("seeds") or {})
    if flow in ("synthesize", "watch_seeds"):
        cfg = SynthesisOverrides.model_validate(params.get("config") or {})
        seeds, out, synthesis = for_synthesis(profile, seeds, params.get("out"), cfg)
        return {"seeds": seeds, "out": out, "synthesis": synthesis}
    if flow == "train":
        cfg = TrainingOverrides.model_validate(params.get("config") or {})
        p = for_training(profile, seeds, cfg, params.get("processes"), params.get("tracking_uri"))
        return {"seeds": p.seeds, "training": p.training, "processes": p.train_processes, "tracking_uri": p.tracking_uri,
                "dual_views": p.layout().dual_views}
    if flow == "evaluate":
        cfg = EvaluationOverrides.model_validate(params.get("config") or {})
        p = for_evaluation(profile, DataSourceOverrides.model_validate(params.get("eval_set") or {}), cfg,
                           params.get("tracking_uri"))
        return {"eval_set": p.eval_set, "evaluation": p.evaluation, "model": params.get("model") or p.training.model,
                "tracking_uri": p.tracking_uri}
    if flow == "pipeline":
        return {"pipeline": resolve(profile, explicit(PipelineOverrides.model_validate(params.get("config") or {})))}
    assert flow in ("sweep", "paper_experiment"), flow
    return {"pipeline": for_sweep(profile, SweepOverrides.model_validate(params.get("config") or {})).pipeline}


def _synthesis_on_the_ray_cluster(s: SynthesisConfig) -> None:
    assert s.ray_job is not None and s.ray_address is None, "synthesis must be a Ray Job, never a Ray in the pod"
    assert s.ray_job.address == cluster.ray_address(CFG)
    assert s.engine == "vllm" and not s.vllm.cpu and s.vllm.model == "Qwen/Qwen3-Next-80B-A3B-Instruct"
    assert s.vllm.tensor_parallel_size == 4


K8S = [name for name, d in _deployments().items() if d["work_pool"]["name"] == "dualview-k8s"]


def test_every_flow_users_start_has_a_kubernetes_deployment():
    flows = {d["entrypoint"] for d in _deployments().values()}
    assert {_deployments()[n]["entrypoint"] for n in K8S} == flows
    assert {n.removesuffix("-k8s") for n in K8S} == set(cluster.DEPLOYMENTS)


@pytest.mark.parametrize("name", K8S)
def test_each_kubernetes_deployment_runs_each_stage_where_it_belongs(name):
    d = _deployments()[name]
    scale = {"scale": 1.0} if name == "paper-experiment-k8s" else {}  # the paper's sizes
    assert d["parameters"] == {"profile": "cluster", **scale}
    got, pod = effective(d), d["work_pool"].get("job_variables") or {}
    flow = name.removesuffix("-k8s")
    for key in ("seeds", "eval_set"):
        if key in got:
            assert got[key].path.startswith("s3://")
    if "synthesis" in got:
        _synthesis_on_the_ray_cluster(got["synthesis"])
        assert got["out"].startswith("s3://")
        assert pod.get("gpus", 0) == 0  # the flow-run pod only submits the job
    if flow == "train":
        assert got["processes"] == pod["gpus"] == CFG.trainer_gpus  # DeepSpeed launcher, a rank per GPU
        assert got["tracking_uri"] == cluster.mlflow_tracking_uri(CFG) and got["dual_views"].startswith("s3://")
    if flow == "evaluate":
        assert pod["gpus"] == 1 and got["evaluation"].max_length == 512 and got["model"] == CFG.training.model
        assert got["tracking_uri"] == cluster.mlflow_tracking_uri(CFG)
    if "pipeline" in got:
        p = got["pipeline"]
        _synthesis_on_the_ray_cluster(p.synthesis)
        assert p.train_processes == pod["gpus"] == CFG.trainer_gpus
        assert p.workdir.startswith("s3://") and p.tracking_uri == cluster.mlflow_tracking_uri(CFG)
        assert p.artifact_location == cluster.MLFLOW_ARTIFACTS and p.evaluation.max_length == 512


def test_editing_only_the_seeds_path_runs_the_papers_job_on_them():
    run = {"config": {"seeds": {"path": "s3://team/promptriever/"}}}
    p = effective(_deployments()["pipeline-k8s"], run)["pipeline"]
    assert p.seeds.path == "s3://team/promptriever/"
    assert p.model_copy(update={"seeds": CLUSTER.seeds}) == CLUSTER


def test_local_deployments_run_the_cpu_profile():
    for name, d in _deployments().items():
        if d["work_pool"]["name"] == "dualview-process":
            assert d["parameters"] == {"profile": "cpu"}, name


def test_the_ui_form_shows_no_path_of_the_deploying_machine():
    from prefect.utilities.callables import parameter_schema

    from flows.evaluate import evaluate
    from flows.pipeline import pipeline
    from flows.sweep import sweep
    from flows.synthesize import synthesize
    from flows.train import train
    from flows.watch_seeds import watch_seeds

    for flow in (synthesize, watch_seeds, train, evaluate, pipeline, sweep):
        schema = parameter_schema(flow.fn).model_dump(mode="json")
        fields = schema["properties"]
        assert fields.pop("profile")["default"] == "cpu"
        assert fields.pop("experiment", {"default": "x"})["default"] and fields.pop("on_change", {"default": "run"})["default"] == "run"
        # everything else starts empty: the profile's values, never the laptop's defaults over them
        assert all(map(_empty, _defaults(fields))), (flow.name, [d for d in _defaults(fields) if not _empty(d)])
        assert all(map(_empty, _defaults(schema.get("definitions", {})))), flow.name
        assert str(PROJECT_ROOT) not in json.dumps(schema), flow.name


def _empty(value) -> bool:
    return value is None or (isinstance(value, dict) and all(map(_empty, value.values())))


def _defaults(node):
    if isinstance(node, dict):
        if "default" in node:
            yield node["default"]
        for value in node.values():
            yield from _defaults(value)
    elif isinstance(node, list):
        for value in node:
            yield from _defaults(value)


def test_one_field_of_a_section_keeps_the_profiles_other_fields():
    demo = resolve("cpu").training  # the cpu profile's training is the demo's, not TrainingConfig()'s
    got = for_training("cpu", None, TrainingOverrides(max_steps=3), None, None).training
    assert got == demo.model_copy(update={"max_steps": 3})
    sampling = resolve("cpu", {"synthesis": {"sampling": {"max_tokens": 32}}}).synthesis.sampling
    assert sampling.prefill == resolve("cpu").synthesis.sampling.prefill and sampling.max_tokens == 32


def test_none_is_said_with_set_none_or_by_a_config_model_given_none():
    form = PipelineOverrides.model_validate({"set_none": ["synthesis.ray_job"], "synthesis": {"ray_address": "ray://h:10001"}})
    got = resolve("cluster", explicit(form)).synthesis
    assert got.ray_job is None and got.ray_address == "ray://h:10001"  # client mode on the cluster profile
    code = PipelineOverrides.model_validate(PipelineConfig(artifact_location=None, training=TrainingConfig(max_steps=None)))
    assert sorted(code.set_none) == ["artifact_location", "training.max_steps"]
    assert resolve("cpu", explicit(code)).artifact_location is None and resolve("cpu", explicit(code)).training.max_steps is None
    with pytest.raises(ValueError):
        resolve("cpu", explicit(PipelineOverrides(set_none=["no_such_field"])))


def test_storage_options_are_values_not_merged_key_by_key():
    profile = {"seeds": {"path": "s3://a/", "storage_options": {"client_kwargs": {"endpoint_url": "http://x"}}}}
    assert merge(profile, {"seeds": {"storage_options": {}}})["seeds"]["storage_options"] == {}
    given = PipelineOverrides.model_validate({"workdir_storage_options": {}})
    assert explicit(given) == {"workdir_storage_options": {}}  # given empty is given


def test_a_sweep_is_named_dualview_sweep_unless_the_caller_names_it():
    assert for_sweep("cpu", None).pipeline.name == SweepConfig().pipeline.name == "dualview-sweep"
    assert for_sweep("cpu", SweepOverrides.model_validate({"pipeline": {"name": "mine"}})).pipeline.name == "mine"


def test_plain_values_a_flow_is_given_override_the_profile():
    from dualview_core.config.profiles import for_evaluation, for_training

    p = for_training("cpu", None, None, 3, "http://mlflow.example:5000")
    assert p.train_processes == 3 and p.tracking_uri == "http://mlflow.example:5000"
    assert for_evaluation("cpu", None, None, "sqlite:///x.db").tracking_uri == "sqlite:///x.db"
