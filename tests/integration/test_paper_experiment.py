"""The paper's experiment as one run, at a tiny scale: the controlled world's seeds (synthesized by its
reference engine, which knows the answers), the four mixtures at the paper's sizes times 1e-4, each
trained and evaluated on the `paper` suite fetched with `dualview data get` from a local hub serving the
published layouts, all under one MLflow parent, ending in the Table 1-shaped comparison."""

from __future__ import annotations

import pytest

from tests.helpers.published_hub import pin_args, published_hub

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS = ("robust04", "news21", "core17", "infosearch-length", "infosearch-keyword", "ifeval", "instructir")


def test_the_paper_experiment_runs_the_four_mixtures_and_ends_in_table_1(tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    from dualview_core.config.profiles import SweepOverrides
    from flows.cli import main
    from flows.paper_experiment import paper_experiment
    from tests.helpers.reference_engine import reference_config
    from tests.helpers.world import build_world

    data = tmp_path / "paper"
    with published_hub(tmp_path, monkeypatch):
        for task in TASKS:  # what `data get paper` writes, a task at a time for the local server's pins
            assert main(["data", "get", task, "--to", str(data), *pin_args(task)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    files = build_world().write(tmp_path / "world")
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = SweepOverrides.model_validate({"pipeline": {
        "name": "it-paper", "seeds": {"path": files["seeds"]}, "eval_set": {"path": str(data)},
        "workdir": str(tmp_path / "runs"), "tracking_uri": tracking,
        "synthesis": reference_config(files["world"]).model_dump(mode="json"),
        "training": {"max_steps": 2, "batch_size": 4, "max_length": 64, "negatives": 3},
        "evaluation": {"suite": "paper", "max_length": 64, "bootstrap_resamples": 50}}})

    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):  # a Prefect API for this flow run, stopped here
        result = paper_experiment(profile="cpu", scale=1e-4, config=config)

    points = {p["name"]: p for p in result["points"]}
    assert list(points) == ["ins-orig-s0", "ins-dv-s0", "all-orig-s0", "all-dv-s0"]
    assert [p["size"] for p in points.values()] == [48, 48, 44, 44]  # 480k, 480k, 440k, 440k × 1e-4
    client = MlflowClient(tracking_uri=tracking)
    parent = client.get_run(result["mlflow_run_id"])
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    trained = {r.data.tags.get("dualview.sweep_point") for r in children} - {None}
    assert trained == set(points)
    for point in points.values():
        stages = {r.info.run_name: r for r in client.search_runs(
            [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{point['run_id']}'")}
        assert stages["train"].data.params["training.mixture.size"] == str(point["size"])
        logged = stages["evaluate-trained"].data.metrics  # MLflow spells MAIR's @ out
        assert logged["mair/ifeval/ndcg_at_10"] == pytest.approx(point["metrics"]["mair/ifeval/ndcg@10"]["value"])
        for column in ("followir/p-MRR", "followir/score", "infosearch/length/p-MRR", "infosearch/keyword/p-MRR",
                       "mair/ifeval/ndcg@10", "mair/instructir/ndcg@10"):
            assert column in point["metrics"], (column, sorted(point["metrics"]))
    table = result["table"].splitlines()
    assert table[0].startswith("suite paper")
    assert [line.split()[0] for line in table[2:]] == ["base", *points]
