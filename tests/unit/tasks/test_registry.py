"""The registry's pure parts: `models:/` URIs, version tags, pinned requirements, the cache's layout."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from tasks.tracking.registry import (RegisteredVersion, RegistryError, cache_folder, is_models_uri, parse_models_uri,
                                     pip_requirements, version_tags)


@pytest.mark.parametrize("uri, parsed", [
    ("models:/dualview-all-dv-minilm/3", ("dualview-all-dv-minilm", "3", None)),
    ("models:/dualview-all-dv-minilm@candidate", ("dualview-all-dv-minilm", None, "candidate")),
    ("models:/a.b_c@champion-2", ("a.b_c", None, "champion-2")),
])
def test_a_version_or_an_alias_of_a_name(uri, parsed):
    assert is_models_uri(uri) and parse_models_uri(uri) == parsed


@pytest.mark.parametrize("uri", ["models:/only-a-name", "models:/m/latest", "models:/m/1/extra", "models:/m@",
                                 "models:/m-0123abcd/", "runs:/abc/model"])
def test_anything_else_is_refused_in_one_line_naming_the_forms(uri):
    with pytest.raises(RegistryError, match=r"models:/NAME/VERSION or models:/NAME@ALIAS") as err:
        parse_models_uri(uri)
    assert "\n" not in str(err.value)


def test_a_folder_or_a_hub_id_is_not_a_registry_uri():
    assert not any(is_models_uri(m) for m in ("minilm", "/runs/models/abc", "BAAI/bge-m3-retromae", "s3://b/models/x"))


def test_version_tags_hold_the_keys_and_their_intervals_as_mlflow_names_them():
    metrics = {"mair/ifeval/ndcg@10": 41.25, "mair/ifeval/ndcg@10_ci_low": 39.0, "mair/ifeval/ndcg@10_ci_high": 43.5,
               "followir/p-MRR": 2.0, "quarantined/core17": 0.0}
    assert version_tags(metrics, ["mair/ifeval/ndcg@10", "followir/p-MRR", "absent"]) == {
        "mair/ifeval/ndcg_at_10": "41.25", "mair/ifeval/ndcg_at_10_ci_low": "39.0",
        "mair/ifeval/ndcg_at_10_ci_high": "43.5", "followir/p-MRR": "2.0"}


def test_requirements_pin_the_installed_releases_without_a_local_build_label():
    pins = dict(r.split("==") for r in pip_requirements())
    assert set(pins) == {"sentence-transformers", "torch", "transformers"}
    assert pins["torch"] == version("torch").split("+")[0] and pins["transformers"] == version("transformers")


def test_the_cache_keeps_servers_apart_and_never_names_a_password(tmp_path):
    v = RegisteredVersion("dualview-all-dv-minilm", "4")
    a = cache_folder("http://alice:s3cret@mlflow:5000", v, tmp_path)
    assert a == cache_folder("http://mlflow:5000", v, tmp_path)  # the same server, with or without a login
    assert a != cache_folder("http://other:5000", v, tmp_path)
    assert a.relative_to(tmp_path).parts[1:] == ("dualview-all-dv-minilm", "4") and "s3cret" not in str(a)
    assert isinstance(a, Path)


def test_doctests():
    import doctest

    from dualview_core.config import pipeline_config
    from tasks.tracking import registry

    assert doctest.testmod(registry).failed == 0 and doctest.testmod(pipeline_config).failed == 0
