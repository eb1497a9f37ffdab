"""Prefect tasks: thin adapters around the stage functions (read → core → write), one per stage.

The stage functions themselves (`tasks.synthesis.driver.run_synthesis`, `tasks.training.trainer.train`,
`tasks.evaluation.runner.evaluate_task`) run without Prefect, which is how the CLI calls them. Here they get
names, retries where a retry is safe, and a concurrency slot per synthesis output, so two runs on
the same output (a schedule and a manual trigger, say) queue instead of interleaving writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from dualview_core.config import DataSource, EvaluationConfig, PipelineConfig, SynthesisConfig, TrainingConfig
from dualview_core.keys import digest
from dualview_core.storage.layout import REJECTIONS, dual_views_of, output_options
from dualview_core.storage.filesystems import filesystem, storage_defaults
from dualview_core.training.sweep_grid import point_training
from tasks.artifacts import Artifact, Link, Markdown, Table
from tasks.tracking.runs import (BASE_MODEL, MIXTURE, REGISTERED_MODEL, RunRef, flow_run_tracked, pipeline_lineage,
                                 stage_run)
from tasks.tracking.mlflow_access import flatten, log_datasets, log_dict, log_metrics, mlflow_client, synthesis_metrics

SEEDS_CHANGED_EVENT = "dualview.seeds.changed"


def synthesis_slot(out: str) -> str:
    """The global concurrency limit guarding one synthesis output folder."""
    return f"dualview-synthesis-{digest(out.encode(), size=6)}"


def _hold_slot(name: str):
    """Occupy the global concurrency limit `name` (created with limit 1 the first time)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
            except ObjectAlreadyExists:  # another run created it in between
                pass
    return concurrency(name, occupy=1, strict=True)


@task(name="synthesize seeds", task_run_name="synthesize {seeds.path}", cache_policy=NO_CACHE)
def synthesize_seeds(seeds: DataSource, out: str, config: SynthesisConfig, out_options: dict | None = None) -> dict:
    """Not retried: a failed run resumes from its published shards when run again. With
    `config.ray_job` the run is a Ray Job whose log lines become this task's log."""
    from tasks.synthesis.ray_job import run_as_job
    from tasks.synthesis.driver import run_synthesis

    logger = get_run_logger()
    with _hold_slot(synthesis_slot(out)):
        if config.ray_job:  # the driver runs on the cluster; this task submits it and follows its log
            return run_as_job(seeds.path, dict(seeds.storage_options), out, out_options, config, progress=logger.info)
        return run_synthesis(seeds.path, out, config, dict(seeds.storage_options), progress=logger.info,
                             out_storage_options=out_options)


@task(name="fingerprint seeds", retries=3, retry_delay_seconds=2)
def fingerprint_seeds(seeds: DataSource) -> str:
    from dualview_core.data.sources import source_fingerprint

    return source_fingerprint(seeds.path, dict(seeds.storage_options))


@task(name="last synthesized fingerprint", retries=3, retry_delay_seconds=2)
def last_fingerprint(out: str, storage_options: dict) -> str | None:
    from tasks.synthesis.record_store import RecordStore

    return RecordStore(out, storage_options).manifest().get("summary", {}).get("source_fingerprint")


# --- what a flow run leaves on its page ----------------------------------------------------------


def artifact_scope() -> str:
    """The name artifact keys are stable under: the deployment's, when this flow run is a run of one
    (`pipeline-k8s`), else the flow's — so a synthesize subflow of watch-seeds is `synthesize`."""
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        raise RuntimeError("artifacts belong to a flow run: call this inside a flow")
    return deployment.name if context.flow_run.deployment_id else context.flow.name


def publish_artifacts(artifacts: Iterable[Artifact]) -> None:
    """Create the flow run's artifacts (tasks/artifacts.py builds them): they show on its Artifacts
    tab, and under their keys on the Artifacts page."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    for a in artifacts:
        if isinstance(a, Table):
            create_table_artifact(a.rows, key=a.key, description=a.description)
        elif isinstance(a, Markdown):
            create_markdown_artifact(a.text, key=a.key, description=a.description)
        elif isinstance(a, Link):
            create_link_artifact(a.url, link_text=a.text, key=a.key, description=a.description)
        else:
            raise TypeError(f"not an artifact: {a!r}")


# --- pipeline stages: each opens its own nested MLflow run under the flow's parent run ------------


@contextlib.contextmanager
def pipeline_run(config: PipelineConfig, name: str, lineage=None) -> Iterator[RunRef]:
    """The parent MLflow run of a pipeline-shaped flow, tagged with `lineage` (tags, params);
    by default the pipeline's own."""
    tags, params = lineage or pipeline_lineage(config)
    with flow_run_tracked(config.name, config.tracking_uri, config.artifact_location, name, tags, params) as run:
        yield run


@task(name="synthesize (tracked)", cache_policy=NO_CACHE)
def synthesize_tracked(parent: RunRef, seeds: DataSource, out: str, config: SynthesisConfig,
                       out_options: dict | None = None) -> dict:
    with stage_run(parent, "synthesize") as run:
        summary = synthesize_seeds.fn(seeds, out, config, out_options)
        log_metrics(run.tracking_uri, run.run_id, synthesis_metrics(summary))
        log_dict(run.tracking_uri, run.run_id, summary, "synthesis/summary.json")
        options = output_options(out_options, seeds.storage_options)
        log_dict(run.tracking_uri, run.run_id, _sample(out, options), "synthesis/sample.json")
        if summary.get("report"):
            _log_text_file(run, summary["report"], options, "synthesis")
        tags = {"dualview.prompt_version": summary["prompt_version"], "dualview.seed_fingerprint": summary["seed_fingerprint"],
                "dualview.source_fingerprint": summary["source_fingerprint"]}
        run.set_tags(tags)
        parent.set_tags(tags)
    return summary


def _sample(out: str, storage_options: dict, rows: int = 20) -> dict:
    """The first dual-view rows and rejections, for a look in the MLflow UI."""
    from dualview_core.contracts import DUAL_VIEW_ROW, SYNTHESIS_RECORD
    from dualview_core.storage.tables import read_table

    options = dict(storage_options)
    dual_views = read_table(dual_views_of(out), DUAL_VIEW_ROW, options).slice(0, rows).to_pylist()
    rejections = read_table(f"{out.rstrip('/')}/{REJECTIONS}", SYNTHESIS_RECORD, options).slice(0, rows).to_pylist()
    keep = ("seed_key", "query_id", "query", "original_instruction", "target_index", "rejection", "raw_response", "instruction")
    return {"dual_views": dual_views, "rejections": [{k: r[k] for k in keep} for r in rejections]}


def _log_text_file(run: RunRef, path: str, storage_options: dict, folder: str) -> None:
    """A text file of the output (local or s3://) as an artifact of the run."""
    import posixpath

    import fsspec

    with fsspec.open(path, "r", encoding="utf-8", **storage_defaults(path, dict(storage_options))) as f:
        text = f.read()
    mlflow_client(run.tracking_uri).log_text(run.run_id, text, f"{folder}/{posixpath.basename(path)}")


@task(name="train", cache_policy=NO_CACHE)
def train_tracked(parent: RunRef, seeds: DataSource, dual_views: str, out: str, config: TrainingConfig,
                  processes: int = 1, out_options: dict | None = None) -> dict:
    from tasks.training.worker import run as train_run
    from tasks.training.trainer import TrainProgress

    with stage_run(parent, "train", params=flatten(config, "training")) as run:
        # one set of fsspec options serves the seeds, the dual views and the output (one store)
        logger, lines = get_run_logger(), TrainProgress()

        def signals(step: int, metrics: dict) -> None:
            log_metrics(run.tracking_uri, run.run_id, metrics, step)
            if line := lines(step, metrics):
                logger.info(line)

        result = train_run(config, seeds.path, dual_views, out, processes=processes,
                           storage_options=output_options(out_options, seeds.storage_options),
                           callback=signals)
        log_dict(run.tracking_uri, run.run_id, result.composition, "training/composition.json")
        run.set_tags({"dualview.data_digest": result.digest, "dualview.train_device": result.device,
                      "dualview.train_precision": result.precision})
        parent.set_tags({"dualview.data_digest": result.digest, "dualview.checkpoint": result.checkpoint})
    return {"checkpoint": result.checkpoint, "steps": result.steps, "seconds": result.seconds,
            "composition": result.composition, "digest": result.digest, "history": result.history}


@task(name="check eval set", cache_policy=NO_CACHE)
def check_eval_set(eval_set: DataSource, config: EvaluationConfig) -> None:
    """Refuse a suite with a missing task folder and, with strict evaluation, an eval set with
    quarantined rows, before synthesis and training are paid for (evaluation refuses them again)."""
    from dualview_core.data.evalsets import load_eval_set
    from tasks.evaluation.runner import evaluation_plan

    options = dict(eval_set.storage_options)
    _, folders = evaluation_plan(eval_set.path, config, options)  # a suite's missing folder, before any cost
    if config.strict:
        for folder in folders.values() or [eval_set.path]:
            load_eval_set(folder, storage_options=options).refuse_drops(folder)


@task(name="evaluate", task_run_name="evaluate {label}", cache_policy=NO_CACHE)
def evaluate_tracked(parent: RunRef, label: str, model: str, eval_set: DataSource, config: EvaluationConfig,
                     out: str, out_options: dict | None = None):
    from tasks.evaluation.runner import evaluate_task, log_evaluation, write_outputs

    with stage_run(parent, f"evaluate-{label}", tags={"dualview.model": model}) as run:
        with _local_model(model, out_options or {}, run) as local:
            report = evaluate_task(local, eval_set.path, config, storage_options=dict(eval_set.storage_options),
                                   progress=get_run_logger().info, label=f"evaluate {label}")
        write_outputs(report, out, {"model": model, "config": config.model_dump()}, out_options)
        log_evaluation(run.tracking_uri, run.run_id, report)
        parent.set_tags({"dualview.eval_digest": report.digest})
    return report


@task(name="log headline", cache_policy=NO_CACHE)
def log_headline(run: RunRef, config: PipelineConfig, synthesis: dict, trained: dict, reports: dict) -> dict[str, float]:
    """The pipeline's headline numbers and its inputs (seeds, dual views, training mixture, eval set)
    on the parent run, so the experiment's table compares pipeline runs row by row."""
    from dualview_core.evaluation.headline import TRAINED, evaluation_headline, synthesis_headline, training_headline
    from dualview_core.data.sources import source_fingerprint
    from tasks.training.trainer import LOSS

    from tasks.evaluation.runner import metric_values

    e = config.evaluation
    metrics = (metric_values(reports[TRAINED])  # the run's own model under the suite's names: the paper's columns
               | evaluation_headline(reports, e.bootstrap_resamples, e.bootstrap_seed, e.confidence)
               | synthesis_headline(synthesis) | training_headline(trained["history"], trained["steps"], LOSS))
    run.log_metrics(metrics)
    dual_views = dual_views_of(synthesis["out"])
    eval_report = reports[TRAINED]
    log_datasets(run.tracking_uri, run.run_id, [
        ("seeds", config.seeds.path, synthesis["seed_fingerprint"], "synthesis"),
        ("dual_views", dual_views, source_fingerprint(dual_views, config.output_options()), "training"),
        (f"mixture/{config.training.mixture.name}", trained["checkpoint"], trained["digest"], "training"),
    ] + [(f"{r.benchmark}/{task}", str(r.details.get("source", task)), r.digest, "eval")
         for task, r in eval_report.reports.items()])
    return metrics


@task(name="register model", cache_policy=NO_CACHE)
def register_trained(run: RunRef, config: PipelineConfig, checkpoint: str, report=None) -> dict:
    """The trained checkpoint as an MLflow model of `run`, registered as a new version of the config's
    registered model, tagged with the suite's headline numbers when `report` evaluated it, the alias
    moved to it when the config asks. Not retried: a second attempt would register a second version."""
    from tasks.evaluation.runner import metric_values
    from tasks.tracking.registry import log_and_register, version_tags

    tags = {MIXTURE: config.training.mixture.name, BASE_MODEL: config.training.model, "dualview.checkpoint": checkpoint}
    if report is not None:
        tags |= version_tags(metric_values(report), report.headline)
    with _local_model(checkpoint, config.output_options()) as local:
        version = log_and_register(run.tracking_uri, run.experiment_id, run.run_id, local, config.registered_name(),
                                   query_template=config.training.query_template, tags=tags,
                                   alias=config.register_alias)
    run.set_tags({REGISTERED_MODEL: version.uri})
    return {"name": version.name, "version": version.version, "uri": version.uri, "alias": config.register_alias,
            "model_id": version.model_id}


@contextlib.contextmanager
def _local_model(model: str, options: dict, run: RunRef | None = None) -> Iterator[str]:
    """A checkpoint on s3:// is copied to a local temporary folder (transformers loads from disk),
    removed when the evaluation is done; a `models:/` URI is the version's folder in the project's
    cache, fetched from `run`'s tracking server, and `run` is tagged with the version it named."""
    from dualview_core.storage.filesystems import is_remote
    from tasks.tracking.registry import fetch_registered, is_models_uri

    if is_models_uri(model):
        if run is None:
            raise ValueError(f"{model}: a registered model is resolved on a run's tracking server; none given")
        local, version = fetch_registered(model, run.tracking_uri)
        run.set_tags({REGISTERED_MODEL: version.uri})
        yield local
        return
    if not is_remote(model):
        yield model
        return
    import tempfile

    fs, root = filesystem(model, options)
    with tempfile.TemporaryDirectory(prefix="dualview-model-") as local:
        fs.get(root.rstrip("/") + "/", local + "/", recursive=True)
        yield local


# --- sweep ----------------------------------------------------------------------------------------


def train_point(parent: RunRef, point: dict, p: PipelineConfig) -> dict:
    """Train and evaluate one grid point inside its own nested run, under the sweep's folder."""
    layout, training = p.layout(), point_training(p.training, point)
    with stage_run(parent, point["name"], tags={"dualview.sweep_point": point["name"]}) as run:
        options = p.output_options()
        trained = train_tracked(run, p.seeds, layout.dual_views, layout.sweep_point(parent.run_id, point["name"]),
                                training, p.train_processes, options)
        report = evaluate_tracked(run, "trained", trained["checkpoint"], p.eval_set, p.evaluation,
                                  layout.sweep_point_evaluation(parent.run_id, point["name"]), options)
    return {**point, "run_id": run.run_id, "metrics": report.as_dict(with_per_query=False)["metrics"]}


@task(name="sweep figure", cache_policy=NO_CACHE)
def log_sweep_figure(run: RunRef, results: list[dict], base) -> None:
    from tasks.evaluation.summary import sweep_figure
    figure = sweep_figure(results, base.as_dict(with_per_query=False)["metrics"], {k: base.columns[k] for k in base.headline})
    mlflow_client(run.tracking_uri).log_figure(run.run_id, figure, "sweep/summary.png")
