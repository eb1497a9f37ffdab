"""The text a person reads at the end of a run: headline metrics side by side, with intervals."""

from __future__ import annotations

from collections.abc import Mapping

HEADLINE = (("p-MRR", "p-MRR"), ("score", "Score"))


def _cell(mean: float | None, low: float | None, high: float | None) -> str:
    return f"{'n/a':>26}" if mean is None else f"{f'{mean:7.2f} [{low:7.2f}, {high:7.2f}]':>26}"


def comparison_table(reports: Mapping, headline: Mapping[str, float] | None = None) -> str:
    """One row per model label: each headline metric as `mean [low, high]` (×100, 95% CI); with the
    pipeline's `headline` numbers also a row for trained − base (paired interval) and its p-values."""
    from dualview_core.evaluation.headline import DELTA, P_VALUE, headline_key
    from dualview_core.method.metrics import CI_HIGH, CI_LOW

    header = f"{'model':<13}" + "".join(f"{title:>26}" for _, title in HEADLINE)
    lines = [header, "-" * len(header)]
    for label, report in reports.items():
        cells = [_cell(*((i.mean, i.low, i.high) if (i := report.summary.get(metric)) else (None,) * 3))
                 for metric, _ in HEADLINE]
        lines.append(f"{label:<13}" + "".join(cells))
    if headline and any(headline_key(DELTA, m) in headline for m, _ in HEADLINE):
        def get(metric: str, suffix: str = "") -> float | None:
            return headline.get(headline_key(DELTA, metric, suffix))

        lines.append(f"{'trained-base':<13}" + "".join(_cell(get(m), get(m, CI_LOW), get(m, CI_HIGH)) for m, _ in HEADLINE))
        lines.append(f"{'  p-value':<13}" + "".join(f"{'n/a' if get(m, P_VALUE) is None else f'{get(m, P_VALUE):.3f}':>26}"
                                                    for m, _ in HEADLINE))
    return "\n".join(lines)


def sweep_figure(points: list[dict], base: Mapping):
    """p-MRR and Score per grid point (x: the non-instruct ratio, or the mixture's name), with their
    interval as whiskers; the base model as a dashed line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4), layout="constrained")
    labels = [p["name"] for p in points]
    for ax, (metric, title) in zip(fig.subplots(1, len(HEADLINE), squeeze=False)[0], HEADLINE):
        values = [p["metrics"].get(metric, {}) for p in points]
        means = [v.get("value") for v in values]
        whiskers = [[(m - v["ci_low"]) if m is not None and v.get("ci_low") is not None else 0 for m, v in zip(means, values)],
                    [(v["ci_high"] - m) if m is not None and v.get("ci_high") is not None else 0 for m, v in zip(means, values)]]
        ax.errorbar(range(len(points)), [m if m is not None else float("nan") for m in means], yerr=whiskers, fmt="o", capsize=4)
        if base.get(metric, {}).get("value") is not None:
            ax.axhline(base[metric]["value"], color="grey", linestyle="--", linewidth=1, label="base")
            ax.legend(loc="best")
        ax.set_xticks(range(len(points)), labels, rotation=30, ha="right")
        ax.set_title(title)
    return fig
