"""The catalog: every name resolves, suites hold known tasks of one family, sources are pinned."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dualview_core.data.catalog import Catalog, Source, catalog, leaf_suites, suite_named, suite_tasks, task_named


def test_paper_is_followir_infosearch_and_mair():
    assert [s.name for s in leaf_suites("paper")] == ["followir", "infosearch", "mair"]
    assert suite_tasks("paper") == ["robust04", "news21", "core17", "infosearch-length", "infosearch-keyword",
                                    "ifeval", "instructir"]


def test_scores_come_from_the_catalog_not_a_folder_name():
    assert [task_named(t).score for t in suite_tasks("followir")] == ["map_cut_1000", "ndcg_cut_5", "map_cut_1000"]
    assert task_named("infosearch-length").key == "length"


def test_a_task_is_a_one_task_suite_and_unknown_names_list_the_catalog():
    assert suite_named("core17").tasks == ["core17"]
    with pytest.raises(ValueError, match="unknown suite 'robust05'.*followir"):
        suite_named("robust05")


def test_every_published_source_is_pinned():
    sources = [t.source for t in catalog().tasks.values() if t.source] + [s.source for s in catalog().seeds.values()]
    assert sources and all(s.revision not in ("main", "master") for s in sources)
    with pytest.raises(ValidationError, match="pin a revision"):
        Source(repo="a/b", revision="main")


def test_a_suite_may_not_mix_families_or_name_unknown_tasks():
    tasks = {"t": {"name": "t", "benchmark": "followir", "title": "t"}, "u": {"name": "u", "benchmark": "mair", "title": "u"}}
    with pytest.raises(ValidationError, match="mixes benchmark families"):
        Catalog(tasks=tasks, suites={"s": {"name": "s", "title": "s", "tasks": ["t", "u"]}}, seeds={})
    with pytest.raises(ValidationError, match="unknown entries"):
        Catalog(tasks=tasks, suites={"s": {"name": "s", "title": "s", "tasks": ["v"]}}, seeds={})
