"""The numbers that stand for a whole pipeline run: what two runs are compared on, side by side.

Owns the names and the values of a run's headline metrics — each evaluated model's suite columns
(`trained/followir/p-MRR`, ...) with their intervals, the trained − base difference with its
paired interval and p-value, the synthesis acceptance and cost, the final training loss. The orchestration logs them on the parent
MLflow run, so the experiment's run table holds one comparable row per pipeline run. It knows
nothing about MLflow or files: it reads reports and summaries and returns `{name: value}`.

    >>> headline_key("trained", "followir/p-MRR", CI_LOW)
    'trained/followir/p-MRR_ci_low'
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dualview_core.evaluation.suites import SuiteReport
from dualview_core.method.metrics import CI_HIGH, CI_LOW
from dualview_core.evaluation.stats import paired_macro_test, paired_test

BASE, TRAINED, DELTA = "base", "trained", "delta"  # DELTA: trained − base, paired over queries
P_VALUE = "_p_value"
SYNTHESIS_ACCEPTANCE = "synthesis/acceptance"
SYNTHESIS_COST = ("engine_rows", "prompt_tokens", "completion_tokens", "wall_seconds")  # synthesis/<name>
FINAL_LOSS, TRAIN_STEPS = "train/final_loss", "train/steps"


def headline_key(scope: str, metric: str, suffix: str = "") -> str:
    """The one place headline names are assembled: 'trained/followir/p-MRR', 'delta/followir/score_p_value'."""
    return f"{scope}/{metric}{suffix}"


def _put(out: dict[str, float], key: str, value: float | None) -> None:
    if value is not None and not math.isnan(value):  # an undefined value is not a metric
        out[key] = float(value)


def evaluation_headline(reports: Mapping[str, SuiteReport], resamples: int = 10_000, seed: int = 0,
                        confidence: float = 0.95) -> dict[str, float]:
    """Every report's columns as `<label>/<key>` with `_ci_low`/`_ci_high`; with a `base` and a
    `trained` report also `delta/<key>` (trained − base over the queries both scored: per query for
    a task's number, stratified by task for a suite's macro), its interval and its two-sided paired
    p-value (`_p_value`)."""
    out: dict[str, float] = {}
    for label, report in reports.items():
        for key in report.headline:
            i = report.summary[key]
            for suffix, value in (("", i.mean), (CI_LOW, i.low), (CI_HIGH, i.high)):
                _put(out, headline_key(label, key, suffix), value)
    if BASE in reports and TRAINED in reports:
        base, trained = reports[BASE], reports[TRAINED]
        for key in trained.headline:
            paired = _paired(trained, base, key, resamples, seed, confidence)
            if paired is None:
                continue
            d = paired.difference
            for suffix, value in (("", d.mean), (CI_LOW, d.low), (CI_HIGH, d.high), (P_VALUE, paired.p_value)):
                _put(out, headline_key(DELTA, key, suffix), value)
    return out


def _paired(a: SuiteReport, b: SuiteReport, key: str, resamples: int, seed: int, confidence: float):
    """The paired comparison of one metric key, or None when the two share no query on it."""
    if key in a.groups and key in b.groups:
        if not any(set(x) & set(y) for x, y in zip(a.groups[key], b.groups[key])):
            return None
        return paired_macro_test(a.groups[key], b.groups[key], resamples=resamples, seed=seed, confidence=confidence)
    x, y = a.per_query.get(key, {}), b.per_query.get(key, {})
    if not set(x) & set(y):
        return None
    return paired_test(x, y, resamples=resamples, seed=seed, confidence=confidence)


def synthesis_headline(summary: Mapping) -> dict[str, float]:
    """Acceptance over the current seeds' answers (cached ones included) and this run's cost."""
    out: dict[str, float] = {}
    answered = summary["dual_views"] + summary["rejected"]
    _put(out, SYNTHESIS_ACCEPTANCE, summary["dual_views"] / answered if answered else None)
    _put(out, "synthesis/dual_views", summary["dual_views"])
    for name in SYNTHESIS_COST:
        _put(out, f"synthesis/{name}", summary["cost"].get(name))
    return out


def training_headline(history: list[Mapping], steps: int, loss_key: str) -> dict[str, float]:
    """The last logged loss and the number of optimizer steps."""
    out: dict[str, float] = {TRAIN_STEPS: float(steps)}
    losses = [r[loss_key] for r in history if loss_key in r]
    _put(out, FINAL_LOSS, losses[-1] if losses else None)
    return out
