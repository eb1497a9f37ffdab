"""Where outputs go: the one owner of the project's folder and file names, and of which storage
options an output gets. Flows, tasks and benchmarks ask here; none spells a path of its own.

    <workdir>/synthesis/                content-addressed: every run on the same seeds shares it
        dual_views.parquet              DualViewRows for the current seeds
        rejections.parquet, report.md   rejected rows with reasons; a readable summary
    <workdir>/models/<run id>/          a trained checkpoint (<run id>.state while it trains)
    <workdir>/eval/<run id>/<label>/    an evaluation's report.json, runs and qrels
    <workdir>/sweep/<run id>/<point>/   a sweep point's checkpoint; <point>-eval/ its evaluation

An output's storage options are the workdir's own when given (even `{}`: a local workdir next to s3://
seeds), else the seeds' (an s3:// workdir next to s3:// seeds reaches the same store).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the checkout (an editable install runs from it)
PROJECT_CACHE = PROJECT_ROOT / ".cache"  # every tool's state and every cache the project keeps

DUAL_VIEWS = "dual_views.parquet"
REJECTIONS = "rejections.parquet"
REPORT = "report.md"
DERIVED_FILES = (DUAL_VIEWS, REJECTIONS, REPORT)  # what a synthesis run rewrites from its records
MANIFEST = "manifest.json"  # a synthesis output's last completed run, with the facts of each derived file


def output_options(out_options: Mapping | None, seed_options: Mapping | None) -> dict:
    """The storage options of an output: its own when given, else the seeds'.

        >>> output_options(None, {"anon": True}), output_options({}, {"anon": True})
        ({'anon': True}, {})
    """
    return dict(seed_options or {}) if out_options is None else dict(out_options)


def dual_views_of(synthesis_out: str) -> str:
    """The dual views a synthesis output folder holds."""
    return f"{synthesis_out.rstrip('/')}/{DUAL_VIEWS}"


@dataclass(frozen=True)
class Layout:
    """The folders of one workdir (local or s3://)."""

    workdir: str

    @property
    def root(self) -> str:
        return self.workdir.rstrip("/")

    @property
    def synthesis(self) -> str:
        return f"{self.root}/synthesis"

    @property
    def dual_views(self) -> str:
        return dual_views_of(self.synthesis)

    @property
    def models(self) -> str:
        return f"{self.root}/models"

    def model(self, run_id: str) -> str:
        return f"{self.models}/{run_id}"

    @property
    def evaluations(self) -> str:
        return f"{self.root}/eval"

    def evaluation(self, run_id: str, label: str | None = None) -> str:
        return f"{self.evaluations}/{run_id}" + (f"/{label}" if label else "")

    def sweep(self, run_id: str) -> str:
        return f"{self.root}/sweep/{run_id}"

    def sweep_point(self, run_id: str, point: str) -> str:
        return f"{self.sweep(run_id)}/{point}"

    def sweep_point_evaluation(self, run_id: str, point: str) -> str:
        return f"{self.sweep(run_id)}/{point}-eval"
