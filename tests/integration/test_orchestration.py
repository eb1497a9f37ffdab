"""The whole product as a user drives it, on real local services.

A Prefect server (SQLite), an MLflow server, and an S3-compatible server holding the seeds; the
deployments from prefect.yaml on a process work pool with a real worker. `pipeline` is triggered
through the Prefect API with custom parameters (as the UI's custom run does); then two seed rows
change in S3 and `watch-seeds` re-synthesizes exactly those two; run again, it does nothing.
Every service is stopped by its process id.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import s3fs

from dualview_core import sample
from tests.helpers.prefect_server import (BIN, REPO, flow_run_artifacts, prefect_api, run_deployment, start, stop,
                                         wait_prefect_ready)
from tests.helpers.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SECRETS = {"AWS_ACCESS_KEY_ID": "AKIADUALVIEWTEST", "AWS_SECRET_ACCESS_KEY": "dualview-secret-do-not-log",
           "OPENAI_API_KEY": "sk-dualview-do-not-log"}


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    root = tmp_path_factory.mktemp("services")
    s3_port, mlflow_port, prefect_port = free_port(), free_port(), free_port()
    env = {**os.environ, **SECRETS, "AWS_DEFAULT_REGION": "us-east-1", "PREFECT_HOME": str(root / "prefect"),
           "PREFECT_API_URL": f"http://127.0.0.1:{prefect_port}/api", "PREFECT_CLI_PROMPT": "false",
           "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{root}/prefect.db",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "INFO",
           "PREFECT_WORKER_QUERY_SECONDS": "2"}  # the worker picks a triggered run up within 2 s, not 10
    procs = []
    try:
        procs.append(start([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)], root / "s3.log", env, s3_port))
        procs.append(start([str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
                            "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
                            "--port", str(mlflow_port), "--workers", "1"], root / "mlflow.log", env, mlflow_port))
        procs.append(start([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
                           root / "prefect.log", env, prefect_port, timeout=180))
        wait_prefect_ready(env)
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", "dualview-process", "--type", "process"],
                       env=env, cwd=REPO, check=True, capture_output=True)
        # the Kubernetes pool with the cluster's base job template: pipeline-k8s's form is the user's
        # way to the paper's job (no worker serves this pool here: its runs stay scheduled)
        subprocess.run([str(BIN / "prefect"), "work-pool", "create", "dualview-k8s", "--type", "kubernetes",
                        "--base-job-template", str(REPO / "infra" / "prefect" / "k8s-work-pool.json")],
                       env=env, cwd=REPO, check=True, capture_output=True)
        deploy = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "pipeline", "--name", "watch-seeds",
                                 "--name", "pipeline-k8s"], env=env, cwd=REPO, capture_output=True, text=True)
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        _pause_schedules(env, "watch-seeds/watch-seeds")  # no scheduled run may interleave with the test's
        procs.append(start([str(BIN / "prefect"), "worker", "start", "--pool", "dualview-process", "--limit", "1"],
                           root / "worker.log", env))
        yield {"env": env, "s3": f"http://127.0.0.1:{s3_port}", "mlflow": f"http://127.0.0.1:{mlflow_port}", "root": root}
    finally:
        for proc in reversed(procs):
            stop(proc)


def _pause_schedules(env: dict, deployment: str) -> None:
    prefect_api(env, f"""
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as c:
    d = c.read_deployment_by_name({deployment!r})
    for s in c.read_deployment_schedules(d.id):
        c.update_deployment_schedule(d.id, s.id, active=False)
print("ok")
""")


@pytest.fixture(scope="module")
def story(services, vllm_server):
    """What a user does over a day, through the deployments: a pipeline run on seeds in S3; two seed
    rows change and `watch-seeds` re-synthesizes them; `watch-seeds` again finds nothing to do; a
    second pipeline run (its synthesis all cached) to compare with the first in MLflow."""
    env, s3 = services["env"], services["s3"]
    options = {"client_kwargs": {"endpoint_url": s3}}
    fs = s3fs.S3FileSystem(**options, key=SECRETS["AWS_ACCESS_KEY_ID"], secret=SECRETS["AWS_SECRET_ACCESS_KEY"])
    bucket = f"dualview-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    fs.put(sample.seeds_path(), f"{bucket}/seeds/seeds.jsonl")
    seeds = {"path": f"s3://{bucket}/seeds/seeds.jsonl", "storage_options": options}
    # the engine is vLLM's OpenAI-compatible server (shared with the synthesis tests), as a cluster's
    # would be; the in-process vLLM engine is tested in test_synthesis and run by the demo
    synthesis = {"engine": "openai", "openai": {"base_url": f"{vllm_server}/v1", "model": "smollm2", "concurrency": 4},
                 "limit": 8, "shard_rows": 4}
    config = {
        "name": "it-pipeline", "seeds": seeds, "workdir": f"s3://{bucket}/runs", "synthesis": synthesis,
        "training": {"mixture": {"name": "ins-orig", "size": 4}, "max_length": 64, "batch_size": 4, "max_steps": 2, "eval_every": 0},
        "evaluation": {"max_length": 64, "bootstrap_resamples": 200},
        "tracking_uri": services["mlflow"], "set_none": ["artifact_location"],  # the server's own root
    }
    first = run_deployment(env, "pipeline/pipeline", {"config": config})
    assert first["state"] == "COMPLETED", first
    [parent] = [r for r in _mlflow_runs(services["mlflow"], "it-pipeline") if "mlflow.parentRunId" not in r.data.tags]

    rows = [json.loads(line) for line in fs.cat_file(f"{bucket}/seeds/seeds.jsonl").decode().splitlines()]
    for r in [r for r in rows if r["has_instruction"]][1:3]:
        r["only_instruction"] += " Recent sources only."
    fs.pipe_file(f"{bucket}/seeds/seeds.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    watch = {"seeds": seeds, "out": f"s3://{bucket}/runs/synthesis", "config": synthesis}
    changed = run_deployment(env, "watch-seeds/watch-seeds", watch)
    assert changed["state"] == "COMPLETED", changed
    manifest = json.loads(fs.cat_file(f"{bucket}/runs/synthesis/manifest.json"))["summary"]
    etag = fs.info(f"{bucket}/runs/synthesis/manifest.json")["ETag"]
    unchanged = run_deployment(env, "watch-seeds/watch-seeds", watch)
    assert unchanged["state"] == "COMPLETED", unchanged
    fs.invalidate_cache()
    etags = (etag, fs.info(f"{bucket}/runs/synthesis/manifest.json")["ETag"])

    # the second run asks for the alias the user promotes from: it moves to that run's model version
    second = run_deployment(env, "pipeline/pipeline", {"config": {**config, "register_alias": "candidate"}})
    assert second["state"] == "COMPLETED", second
    return {"fs": fs, "bucket": bucket, "first": first, "first_parent": parent, "watch_manifest": manifest,
            "unchanged": unchanged, "etags": etags, "second": second}


def test_pipeline_through_its_deployment(services, story):
    fs, bucket, parent = story["fs"], story["bucket"], story["first_parent"]
    children = {r.info.run_name: r for r in _mlflow_runs(services["mlflow"], "it-pipeline")
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"synthesize", "train", "evaluate-base", "evaluate-trained"}
    for label in ("evaluate-base", "evaluate-trained"):
        metrics = children[label].data.metrics
        for name in ("sample/p-MRR", "sample/score", "sample/p-MRR_ci_low", "sample/score_ci_high"):
            assert name in metrics, (label, sorted(metrics))
    assert children["synthesize"].data.metrics["synthesis/engine_rows"] == 8
    assert children["train"].data.metrics["train/loss"] > 0
    assert parent.data.params["synthesis.limit"] == "8"
    assert {"dualview.git_commit", "dualview.prompt_version", "dualview.seed_fingerprint",
            "dualview.data_digest", "dualview.eval_digest"} <= set(parent.data.tags)
    artifacts = _artifact_texts(services["mlflow"], [parent, *children.values()])
    assert {"synthesis/sample.json", "synthesis/summary.json", "evaluation/ci.png"} <= {a.split(":", 1)[0] for a in artifacts}
    run_id = parent.info.run_id
    for path in ("runs/synthesis/dual_views.parquet", "runs/synthesis/rejections.parquet", "runs/synthesis/manifest.json",
                 f"runs/models/{run_id}/config.json", f"runs/models/{run_id}/modules.json",
                 f"runs/eval/{run_id}/trained/report.json", f"runs/eval/{run_id}/base/run_og.trec"):
        assert fs.exists(f"{bucket}/{path}"), path
    _assert_no_secrets(parent, children.values(), artifacts, story["first"]["logs"] + story["second"]["logs"])


def test_a_pipeline_run_leaves_its_results_as_prefect_artifacts(services, story):
    """The flow run's Artifacts tab, read back through the Prefect API: the results table holds the
    numbers MLflow logged (each model's nested evaluate run, the parent's paired difference), the
    synthesis and training tables those stages' numbers, and a link opens the parent MLflow run. The
    second pipeline run leaves the same keys, so the Artifacts page follows each result across runs."""
    parent = story["first_parent"]
    children = {r.info.run_name: r.data.metrics for r in _mlflow_runs(services["mlflow"], "it-pipeline")
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    artifacts = flow_run_artifacts(services["env"], story["first"]["id"])
    keys = {f"dualview-pipeline-{kind}" for kind in ("results", "synthesis", "training", "summary", "mlflow-run",
                                                     "model-version")}
    assert set(artifacts) == keys
    assert set(flow_run_artifacts(services["env"], story["second"]["id"])) == keys

    rows = artifacts["dualview-pipeline-results"]["data"]
    for label in ("base", "trained"):
        logged = children[f"evaluate-{label}"]
        mine = [r for r in rows if r["model"] == label]
        assert {r["metric"] for r in mine} >= {"sample/p-MRR", "sample/score", "sample/score_mteb1"}
        for row in mine:
            for column, suffix in (("value", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high")):
                assert row[column] == pytest.approx(logged[row["metric"] + suffix], abs=1e-4), (label, row, column)
    [delta] = [r for r in rows if r["model"] == "trained-base" and r["metric"] == "sample/p-MRR"]
    for column, suffix in (("value", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"), ("p_value", "_p_value")):
        assert delta[column] == pytest.approx(parent.data.metrics["delta/sample/p-MRR" + suffix], abs=1e-4), column

    synthesis = {r["measure"]: r["value"] for r in artifacts["dualview-pipeline-synthesis"]["data"]}
    assert synthesis["synthesis/engine_rows"] == children["synthesize"]["synthesis/engine_rows"] == 8
    assert synthesis["synthesis/dual_views"] == children["synthesize"]["synthesis/dual_views"]
    training = {r["measure"]: r["value"] for r in artifacts["dualview-pipeline-training"]["data"]}
    assert training["train/steps"] == 2 and training["train/final_loss"] == pytest.approx(
        parent.data.metrics["train/final_loss"], abs=1e-4)
    assert artifacts["dualview-pipeline-mlflow-run"]["data"] == (
        f"[MLflow run {parent.info.run_id}]({services['mlflow']}/#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id})")
    assert "| trained-base |" in artifacts["dualview-pipeline-summary"]["data"]
    version = artifacts["dualview-pipeline-model-version"]["data"]  # the version this run registered
    assert version.startswith("[dualview-") and f"{services['mlflow']}/#/models/dualview-" in version


def test_the_flow_runs_artifacts_tab_shows_the_results_in_the_browser(services, story, browser, tmp_path):
    """Prefect UI → the first pipeline run → Artifacts: each key is listed, and the results table opens
    with the suite's metrics as MLflow logged them."""
    env = services["env"]
    ui = env["PREFECT_API_URL"].removesuffix("/api")
    page = browser.new_page(viewport={"width": 1600, "height": 1600})
    page.goto(f"{ui}/runs/flow-run/{story['first']['id']}")
    tab = page.get_by_text("Artifacts", exact=True).first
    tab.wait_for(timeout=60_000)
    page.wait_for_timeout(2_000)  # a first visit may open Prefect's community dialog over the page: skip it
    if page.get_by_role("button", name="Skip").count():
        page.get_by_role("button", name="Skip").first.click()
    tab.click()
    page.get_by_text("dualview-pipeline-results").first.wait_for(timeout=60_000)
    body = page.inner_text("body")
    for kind in ("results", "synthesis", "training", "summary", "mlflow-run"):
        assert f"dualview-pipeline-{kind}" in body, kind
    page.get_by_text("dualview-pipeline-results").first.click()
    page.get_by_text("sample/p-MRR").first.wait_for(timeout=60_000)
    page.screenshot(path=str(tmp_path / "prefect-artifacts.png"), full_page=True)
    table = page.inner_text("body")
    assert "sample/score" in table and "trained-base" in table
    page.close()


def test_watch_seeds_resynthesizes_exactly_the_changed_rows(story):
    manifest = story["watch_manifest"]  # after two seed rows changed in S3
    assert manifest["plan"]["pending"] == 2 and manifest["plan"]["changed"] == 2 and manifest["cost"]["engine_rows"] == 2
    assert any("nothing to do" in m for m in story["unchanged"]["logs"]), story["unchanged"]["logs"]
    assert story["etags"][0] == story["etags"][1]  # the second watch ran no synthesis


def test_a_second_pipeline_run_reuses_the_synthesis(services, story):
    parents = [r for r in _mlflow_runs(services["mlflow"], "it-pipeline") if "mlflow.parentRunId" not in r.data.tags]
    [second] = [r for r in parents if r.info.run_id != story["first_parent"].info.run_id]
    [synthesize] = [r for r in _mlflow_runs(services["mlflow"], "it-pipeline")
                    if r.data.tags.get("mlflow.parentRunId") == second.info.run_id and r.info.run_name == "synthesize"]
    assert synthesize.data.metrics["synthesis/engine_rows"] == 0
    assert not any(m.startswith("synthesis: starting the") for m in story["second"]["logs"])


def _mlflow_runs(uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    return client.search_runs([exp.experiment_id])


def _artifact_texts(uri: str, runs) -> list[str]:
    """'path:content' for every artifact of the runs (binary ones by path only)."""
    from mlflow.tracking import MlflowClient

    client, out = MlflowClient(tracking_uri=uri), []

    def walk(run_id: str, path: str | None = None) -> None:
        for item in client.list_artifacts(run_id, path):
            if item.is_dir:
                walk(run_id, item.path)
                continue
            local = client.download_artifacts(run_id, item.path)
            data = Path(local).read_bytes()
            out.append(f"{item.path}:{data.decode('utf-8', errors='ignore') if not item.path.endswith('.png') else ''}")

    for run in runs:
        walk(run.info.run_id)
    return out


def _assert_no_secrets(parent, children, artifacts: list[str], logs: list[str]) -> None:
    haystack = json.dumps([dict(r.data.params) | dict(r.data.tags) for r in (parent, *children)]) + "".join(artifacts) + "".join(logs)
    for name, secret in SECRETS.items():
        assert secret not in haystack, f"{name} leaked"


# --- the two surfaces users work in, in a real browser -------------------------------------------


def _deployment_id(env: dict, name: str) -> str:
    return prefect_api(env, f"""
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as c:
    print(c.read_deployment_by_name({name!r}).id)
""")


def test_the_kubernetes_custom_run_form_needs_only_the_seeds_path(services, browser, tmp_path):
    """Deployments → pipeline-k8s → Run → Custom run: the profile (cluster), then the typed config with
    every field empty (the profile's). Filling only the seeds path and submitting makes a run whose
    parameters resolve to the cluster profile with those seeds: the paper's job on the user's data."""
    from dualview_core.config.profiles import PipelineOverrides, explicit, resolve

    env = services["env"]
    ui = env["PREFECT_API_URL"].removesuffix("/api")
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    page.goto(f"{ui}/deployments/deployment/{_deployment_id(env, 'pipeline/pipeline-k8s')}/run")
    page.get_by_text("Seeds (Optional)", exact=True).wait_for(timeout=60_000)
    labels = set(page.inner_text("body").splitlines())
    assert {"Parameters", "profile (Optional)", "cluster", "Seeds (Optional)", "Path (Optional)", "Synthesis (Optional)",
            "Training (Optional)", "Mixture (Optional)", "Tracking Uri (Optional)"} <= labels, sorted(labels)[:80]
    assert not any(str(REPO) in v for v in page.eval_on_selector_all("input, textarea", "els => els.map(e => e.value)"))
    seeds = page.get_by_text("Seeds (Optional)", exact=True).locator(
        "xpath=ancestor::div[.//text()[normalize-space()='Path (Optional)']][1]")
    seeds.get_by_role("button", name="str", exact=True).first.click()
    seeds.locator("input[type=text], textarea").first.fill("s3://team/seeds/")
    page.screenshot(path=str(tmp_path / "prefect-custom-run.png"), full_page=True)
    # the deployment's runs, filtered by the server: an unfiltered read is one page of every flow run
    runs = """
import json, time
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
with get_client(sync_client=True) as c:
    deployment = c.read_deployment_by_name("pipeline/pipeline-k8s")
    def of_deployment():
        return c.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])))
    runs = of_deployment()
"""
    before = json.loads(prefect_api(env, runs + "print(json.dumps([str(r.id) for r in runs]))"))
    form = page.url
    page.get_by_role("button", name="Submit").click()
    try:  # the UI leaves the form once the API has made the run
        page.wait_for_url(lambda url: url != form, timeout=120_000)
    except Exception:
        page.screenshot(path=str(tmp_path / "prefect-custom-run-submitted.png"), full_page=True)
        raise AssertionError("the form stayed open after Submit; it says:\n" + page.inner_text("body")[-3000:]) from None
    sent = json.loads(prefect_api(env, runs + f"""
    deadline = time.monotonic() + 60
    while not (new := [r for r in of_deployment() if str(r.id) not in {before!r}]):
        assert time.monotonic() < deadline, "the form made no flow run"
        time.sleep(0.5)
    [run] = new
    c.delete_flow_run(run.id)  # nothing serves the Kubernetes pool here: it would stay scheduled
print(json.dumps(run.parameters))
"""))
    page.close()
    assert sent["profile"] == "cluster" and sent["config"]["synthesis"]["ray_job"] is None  # the form sends every field
    given = explicit(PipelineOverrides.model_validate(sent["config"]))
    assert given == {"seeds": {"path": "s3://team/seeds/"}}
    got = resolve(sent["profile"], given)
    assert got.seeds.path == "s3://team/seeds/"
    assert got.model_copy(update={"seeds": resolve("cluster").seeds}) == resolve("cluster")
    assert got.synthesis.ray_job is not None and got.synthesis.vllm.model == "Qwen/Qwen3-Next-80B-A3B-Instruct"


UI_HEADLINE = ("sample/p-MRR", "sample/score")  # the suite's own names: the trained model's, on the parent


def test_mlflow_experiment_page_compares_two_pipeline_runs(services, story, browser, tmp_path):
    """The story's two pipeline runs: the experiment's run table (in the browser) shows both parents
    with their p-MRR and Score once those columns are picked, with the logged values; the model
    registry holds a version of the trained model per run, tagged with its numbers, and shows both."""
    from mlflow.tracking import MlflowClient

    uri = services["mlflow"]
    logs = [story["first"]["logs"], story["second"]["logs"]]
    # the flow-run log says what each long stage waits for, then how fast it goes
    assert any(m.startswith("synthesis: starting the Ray Data client stage (http://127.0.0.1:") for m in logs[0]), logs[0]
    assert any(m.startswith("synthesis: engine ready after") for m in logs[0]), logs[0]
    assert any(m.startswith("train: 2 optimizer steps to run") for m in logs[1]), logs[1]
    assert any(m.startswith("evaluate trained: ") for m in logs[1]), logs[1]

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("it-pipeline")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    parents = client.search_runs([exp.experiment_id], filter_string="tags.`dualview.run_kind` = 'pipeline'")
    assert len(parents) == 2  # one comparable row per pipeline run, nested stage runs excluded
    for run in parents:
        m = run.data.metrics
        for name in ("sample/p-MRR", "trained/sample/p-MRR", "trained/sample/p-MRR_ci_low", "trained/sample/p-MRR_ci_high",
                     "base/sample/p-MRR", "trained/sample/score", "base/sample/score", "delta/sample/p-MRR",
                     "delta/sample/p-MRR_p_value", "delta/sample/score", "train/final_loss", "train/steps"):
            assert name in m, (name, sorted(m))
        assert m["trained/sample/p-MRR_ci_low"] <= m["trained/sample/p-MRR"] <= m["trained/sample/p-MRR_ci_high"]
        assert m["sample/p-MRR"] == m["trained/sample/p-MRR"]
        assert 0 <= m["delta/sample/p-MRR_p_value"] <= 1 and m["train/steps"] == 2
        assert {d.dataset.name for d in run.inputs.dataset_inputs} == {
            "seeds", "dual_views", "mixture/ins-orig", "followir/sample"}
        assert run.data.tags["dualview.synthesis_model"] == "smollm2" and run.data.tags["dualview.base_model"] == "minilm"
    assert "synthesis/acceptance" in parents[0].data.metrics or "synthesis/acceptance" in parents[1].data.metrics
    # dataset digests are of content: the same eval set shows the same digest, the edited seeds another
    digests = [{d.dataset.name: d.dataset.digest for d in run.inputs.dataset_inputs} for run in parents]
    assert digests[0]["followir/sample"] == digests[1]["followir/sample"]
    assert digests[0]["seeds"] != digests[1]["seeds"]

    page = browser.new_page(viewport={"width": 2400, "height": 1200})
    page.goto(f"{uri}/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning")
    for run in parents:
        page.get_by_text(run.info.run_name, exact=True).first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Columns").click()  # as a person does: pick the headline columns
    for metric in UI_HEADLINE:
        page.get_by_placeholder("Search columns").fill(metric)
        # the list highlights the searched text inside every name holding it (base/sample/p-MRR, ...):
        # pick the entry whose whole name is the metric
        found = page.get_by_text(metric, exact=True)
        found.first.wait_for(timeout=30_000)
        [entry] = [found.nth(i) for i in range(found.count())
                   if found.nth(i).evaluate("e => e.parentElement.innerText.trim()") == metric]
        entry.click()
    page.keyboard.press("Escape")
    for metric in UI_HEADLINE:
        page.locator(f"[role=columnheader][col-id='metrics.`{metric}`']").wait_for(timeout=30_000)
    page.screenshot(path=str(tmp_path / "mlflow-runs.png"), full_page=True)
    table = _rendered_rows(page)
    for run in parents:
        index, row = next(((i, cells) for i, cells in table.items()
                           if run.info.run_name in cells.get("attributes.`Run Name`", "")), (None, None))
        assert row is not None, (run.info.run_name, table)
        for metric in UI_HEADLINE:
            shown = row.get(f"metrics.`{metric}`", "")
            assert shown and abs(float(shown) - run.data.metrics[metric]) < 1e-6, (metric, shown, run.data.metrics[metric])
        page.locator(f"[role=row][row-index='{index}'] input[type=checkbox]").first.check()

    # ticked, then Compare: the compare view lists every metric with one column per run
    page.get_by_role("button", name="Compare").first.click()
    page.get_by_text("Comparing 2 Runs", exact=False).wait_for(timeout=60_000)
    compared = _compare_view_metrics(page)
    page.screenshot(path=str(tmp_path / "mlflow-compare.png"), full_page=True)
    columns = page.get_by_text("Run ID:", exact=True).first.evaluate("e => e.closest('tr').innerText").split("\t")[1:]
    by_id = {run.info.run_id: run for run in parents}
    assert sorted(c.strip() for c in columns) == sorted(by_id), columns
    for metric in (*UI_HEADLINE, "delta/sample/p-MRR", "train/final_loss"):
        assert len(compared.get(metric, [])) == 2, (metric, sorted(compared))
        for run_id, shown in zip(columns, compared[metric], strict=True):
            # the view rounds (to about four significant digits)
            assert float(shown) == pytest.approx(by_id[run_id.strip()].data.metrics[metric], rel=1e-3, abs=1e-3), (metric, shown)

    # each pipeline run registered its trained model: two versions, tagged with the trained model's numbers
    [model] = [m for m in client.search_registered_models() if m.name.startswith("dualview-")]
    versions = {v.run_id: v for v in client.search_model_versions(f"name = '{model.name}'")}
    assert set(versions) == {r.info.run_id for r in parents}
    for run in parents:
        tags = versions[run.info.run_id].tags
        assert float(tags["sample/p-MRR"]) == pytest.approx(run.data.metrics["trained/sample/p-MRR"], abs=1e-9)
    first_run = story["first_parent"].info.run_id
    [second_run] = set(versions) - {first_run}
    assert client.get_model_version_by_alias(model.name, "candidate").run_id == second_run
    assert not client.get_model_version(model.name, versions[first_run].version).aliases
    page.goto(f"{uri}/#/models/{model.name}")
    page.get_by_text("Version 2", exact=True).first.wait_for(timeout=60_000)
    assert "Version 1" in page.inner_text("body")
    page.screenshot(path=str(tmp_path / "mlflow-registry.png"), full_page=True)
    page.close()


# each virtualized grid scrolled to `top`; its rendered cells as (row offset, column offset, text)
_SCROLLED_CELLS = """(grids, top) => grids.map(g => { g.scrollTop = top; return [g.scrollHeight,
    [...g.querySelectorAll('[role=rowgroup] > *')].map(c => [parseFloat(c.style.top), parseFloat(c.style.left), c.innerText.trim()])]; })"""


def _compare_view_metrics(page) -> dict[str, list[str]]:
    """The compare view's Metrics section: metric name -> its values, left to right. The section is
    two virtualized grids (names; values, a column per run) that render only the rows in view, so
    both are scrolled down together and their cells paired by row offset."""
    grids = page.get_by_text("Metrics", exact=True).locator("xpath=..").locator(".ReactVirtualized__Grid")
    grids.first.wait_for(timeout=60_000)
    names: dict[float, str] = {}
    values: dict[float, dict[float, str]] = {}
    top, height = 0, 1
    while top < height:
        grids.evaluate_all(_SCROLLED_CELLS, top)
        page.wait_for_timeout(100)  # the rows for the new offset render
        [(height, named), (_, valued)] = grids.evaluate_all(_SCROLLED_CELLS, top)
        names |= {row: text for row, _, text in named}
        for row, left, text in valued:
            values.setdefault(row, {})[left] = text
        top += 200
    return {names[row]: [v for _, v in sorted(values.get(row, {}).items())] for row in names}


def _rendered_rows(page) -> dict[str, dict[str, str]]:
    """The run table as rendered: row index -> column id -> cell text (pinned and scrolled parts joined)."""
    rows: dict[str, dict[str, str]] = {}
    for index, col, text in page.eval_on_selector_all(
            "[role=row][row-index] [role=gridcell]",
            "cells => cells.map(c => [c.closest('[role=row]').getAttribute('row-index'), c.getAttribute('col-id'), c.innerText.trim()])"):
        rows.setdefault(index, {})[col] = text
    return rows
