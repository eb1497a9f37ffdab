"""The text a person reads at the end of a run: headline metrics side by side, with intervals."""

from __future__ import annotations

from collections.abc import Mapping

HEADLINE = (("p-MRR", "p-MRR"), ("score", "Score"))


def comparison_table(reports: Mapping) -> str:
    """One row per model label: each headline metric as `mean [low, high]` (×100, 95% CI)."""
    header = f"{'model':<10}" + "".join(f"{title:>26}" for _, title in HEADLINE)
    lines = [header, "-" * len(header)]
    for label, report in reports.items():
        cells = []
        for metric, _ in HEADLINE:
            i = report.summary.get(metric)
            cells.append(f"{'n/a':>26}" if i is None else f"{f'{i.mean:7.2f} [{i.low:7.2f}, {i.high:7.2f}]':>26}")
        lines.append(f"{label:<10}" + "".join(cells))
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
