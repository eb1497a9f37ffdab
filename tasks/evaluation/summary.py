"""The text a person reads at the end of a run: a suite's columns side by side, with intervals.

One table shape for every place that prints results (the pipeline and sweep flows, `dualview
evaluate` and `dualview compare`): rows are models or runs, columns the suite's columns (for the
`paper` suite, the paper's Table 1: FollowIR p-MRR and Score, InfoSearch length and keyword, MAIR
IFEval and InstructIR), each cell `mean [low, high]` (×100, 95% CI).
"""

from __future__ import annotations

from collections.abc import Mapping

Cell = tuple[float | None, float | None, float | None]  # mean, low, high
WIDTH = 26


def _cell(mean: float | None, low: float | None, high: float | None) -> str:
    if mean is None:
        return f"{'n/a':>{WIDTH}}"
    if low is None or high is None:
        return f"{f'{mean:7.2f}':>{WIDTH}}"
    return f"{f'{mean:7.2f} [{low:7.2f}, {high:7.2f}]':>{WIDTH}}"


def cells_of(report) -> dict[str, Cell]:
    """A SuiteReport, or its as_dict() (report.json), -> metric key -> (mean, low, high)."""
    if isinstance(report, Mapping):
        return {k: (m.get("value"), m.get("ci_low"), m.get("ci_high")) for k, m in report.get("metrics", {}).items()}
    return {k: (i.mean, i.low, i.high) for k, i in report.summary.items()}


def columns_of(reports: Mapping) -> dict[str, str]:
    """The union of the reports' columns, in first-seen order."""
    out: dict[str, str] = {}
    for report in reports.values():
        out |= {k: v for k, v in (report.get("columns", {}) if isinstance(report, Mapping) else report.columns).items()
                if k not in out}
    return out


def table(rows: Mapping[str, Mapping[str, Cell]], columns: Mapping[str, str], label: str = "model") -> str:
    """rows: label -> metric key -> cell; columns: metric key -> title."""
    width = max([len(label), *map(len, rows)]) + 2
    header = f"{label:<{width}}" + "".join(f"{title[:WIDTH - 1]:>{WIDTH}}" for title in columns.values())
    lines = [header, "-" * len(header)]
    for name, cells in rows.items():
        lines.append(f"{name:<{width}}" + "".join(_cell(*cells.get(k, (None, None, None))) for k in columns))
    return "\n".join(lines)


def comparison_table(reports: Mapping, headline: Mapping[str, float] | None = None) -> str:
    """One row per model label; with the pipeline's `headline` numbers also a row for trained − base
    (paired interval) and one for its p-values."""
    from dualview_core.evaluation.headline import DELTA, P_VALUE, headline_key
    from dualview_core.method.metrics import CI_HIGH, CI_LOW

    columns = columns_of(reports)
    rows = {label: cells_of(r) for label, r in reports.items()}
    suites = sorted({r["suite"] if isinstance(r, Mapping) else r.suite for r in reports.values()})
    text = f"suite {', '.join(suites)} (×100, 95% intervals)\n" + table(rows, columns)
    if headline and any(headline_key(DELTA, k) in headline for k in columns):
        def get(key: str, suffix: str = "") -> float | None:
            return headline.get(headline_key(DELTA, key, suffix))

        width = max([len("model"), *map(len, rows)]) + 2
        text += "\n" + f"{'trained-base':<{width}}" + "".join(_cell(get(k), get(k, CI_LOW), get(k, CI_HIGH)) for k in columns)
        text += "\n" + f"{'  p-value':<{width}}" + "".join(
            f"{'n/a' if get(k, P_VALUE) is None else f'{get(k, P_VALUE):.3f}':>{WIDTH}}" for k in columns)
    return text


def sweep_figure(points: list[dict], base: Mapping, columns: Mapping[str, str]):
    """Each column per grid point (x: the mixture's name), with its interval as whiskers; the base
    model as a dashed line. `points[i]["metrics"]` and `base` are report.json metrics."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.5 * max(len(columns), 1), 3.4), layout="constrained")
    labels = [p["name"] for p in points]
    for ax, (key, title) in zip(fig.subplots(1, max(len(columns), 1), squeeze=False)[0], columns.items()):
        values = [p["metrics"].get(key, {}) for p in points]
        means = [v.get("value") for v in values]
        whiskers = [[(m - v["ci_low"]) if m is not None and v.get("ci_low") is not None else 0 for m, v in zip(means, values)],
                    [(v["ci_high"] - m) if m is not None and v.get("ci_high") is not None else 0 for m, v in zip(means, values)]]
        ax.errorbar(range(len(points)), [m if m is not None else float("nan") for m in means], yerr=whiskers, fmt="o", capsize=4)
        if base.get(key, {}).get("value") is not None:
            ax.axhline(base[key]["value"], color="grey", linestyle="--", linewidth=1, label="base")
            ax.legend(loc="best")
        ax.set_xticks(range(len(points)), labels, rotation=30, ha="right")
        ax.set_title(title)
    return fig
