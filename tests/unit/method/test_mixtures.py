"""Mixtures: the paper's four configurations, size-matched by substitution, paired, deterministic."""

from __future__ import annotations

import typing

import pyarrow as pa
import pytest
from pydantic import ValidationError

from dualview_core.config import MixtureConfig
from dualview_core.contracts import SEED_ROW
from dualview_core.method.mixtures import BUILDERS, MixtureError, build_mixture
from dualview_core.method.training_rows import Source
from tests.helpers.factories import make_seeds, make_views


def mix(seeds, views, **kw):
    return build_mixture(seeds, views, MixtureConfig(heldout_fraction=kw.pop("heldout_fraction", 0.0), **kw))


@pytest.fixture(scope="module")
def data() -> tuple[list[dict], list[dict]]:
    seeds = make_seeds(10)
    return seeds, make_views(seeds)


def by_source(m) -> dict[str, int]:
    return m.composition["by_source"]


def test_four_configurations_counts_and_size_matching(data):
    seeds, views = data
    m = {name: mix(seeds, views, name=name, size=6) for name in ("ins-orig", "ins-dv", "all-orig", "all-dv")}
    assert by_source(m["ins-orig"]) == {"instruct": 6, "non_instruct": 0, "dual_view": 0}
    assert by_source(m["ins-dv"]) == {"instruct": 3, "non_instruct": 0, "dual_view": 3}
    assert by_source(m["all-orig"]) == {"instruct": 6, "non_instruct": 6, "dual_view": 0}
    assert by_source(m["all-dv"]) == {"instruct": 6, "non_instruct": 0, "dual_view": 6}
    assert len(m["ins-orig"].rows) == len(m["ins-dv"].rows) == 6  # substitution, not addition
    assert len(m["all-orig"].rows) == len(m["all-dv"].rows) == 12
    # ins-dv halves the distinct queries: what the paper blames for its lower general Score
    assert [m[n].composition["distinct_queries"] for n in ("ins-orig", "ins-dv", "all-orig", "all-dv")] == [6, 3, 6, 6]
    assert [m[n].composition["distinct_seeds"] for n in ("ins-orig", "ins-dv", "all-orig", "all-dv")] == [6, 3, 12, 6]


def test_pairs_sit_together_and_match(data):
    seeds, views = data
    for name in ("ins-dv", "all-dv", "all-orig"):
        rows = mix(seeds, views, name=name, size=6).rows
        for original, partner in zip(rows[::2], rows[1::2]):
            assert original.source is Source.INSTRUCT and original.query_id == partner.query_id
            if partner.source is Source.DUAL_VIEW:
                assert partner.seed_key == original.seed_key and partner.original_instruction == original.instruction
            else:
                assert partner.source is Source.NON_INSTRUCT and partner.instruction == ""


def test_rankings_are_shared_so_budgets_nest(data):
    seeds, views = data
    ins_orig = [r.query_id for r in mix(seeds, views, name="ins-orig", size=6).rows]
    ins_dv = [r.query_id for r in mix(seeds, views, name="ins-dv", size=6).rows]
    all_dv = [r.query_id for r in mix(seeds, views, name="all-dv", size=6).rows]
    assert ins_dv[::2] == ins_orig[:3]  # ins-dv keeps the first N/2 seeds, with both views
    assert all_dv[::2] == ins_orig
    assert [r.query_id for r in mix(seeds, views, name="ins-orig", size=4).rows] == ins_orig[:4]


def test_deterministic_under_a_seed_and_blind_to_file_order(data):
    seeds, views = data
    a = mix(seeds, views, name="all-dv", size=4, seed=3)
    assert a.rows == mix(seeds, views, name="all-dv", size=4, seed=3).rows
    shuffled = mix(list(reversed(seeds)), list(reversed(views)), name="all-dv", size=4, seed=3)
    assert shuffled.rows == a.rows and shuffled.digest == a.digest
    as_table = build_mixture(pa.Table.from_pylist(seeds, schema=SEED_ROW), views,
                             MixtureConfig(name="all-dv", size=4, seed=3, heldout_fraction=0.0))
    assert as_table.digest == a.digest
    assert mix(seeds, views, name="all-dv", size=4, seed=4).digest != a.digest


def test_default_size_is_the_largest_n_every_mixture_reaches():
    seeds = make_seeds(9)
    views = make_views(seeds, only={f"q{i}" for i in range(7)})  # 7 seeds with a dual view
    sizes = {name: mix(seeds, views, name=name).composition["size_n"] for name in BUILDERS}
    assert set(sizes.values()) == {6}  # min(9 instruct, 9 twinned, 7 dual-viewed), made even
    assert len(mix(seeds, views, name="ins-orig").rows) == len(mix(seeds, views, name="ins-dv").rows) == 6
    assert mix(seeds, None, name="ins-orig").composition["size_n"] == 8  # no dual views: 9 -> even


def test_ratio_mixture():
    seeds, views = make_seeds(8), None
    r = mix(seeds, views, name="ratio", ratio=0.25, total=8)
    assert by_source(r) == {"instruct": 6, "non_instruct": 2, "dual_view": 0}
    assert by_source(mix(seeds, views, name="ratio", ratio=0.0, total=8))["non_instruct"] == 0
    assert by_source(mix(seeds, views, name="ratio", ratio=1.0, total=4)) == {"instruct": 0, "non_instruct": 4,
                                                                            "dual_view": 0}
    half = mix(seeds, views, name="ratio", ratio=0.5, total=8)
    assert half.digest == mix(seeds, views, name="all-orig", size=4).digest  # r = 0.5, T = 2N is all-orig
    assert mix(seeds, views, name="ratio", ratio=0.3).composition["rows"] == 8  # total defaults to N
    with pytest.raises(MixtureError, match="needs 10 instruct rows with a non-instruct twin; the data has 8"):
        mix(seeds, views, name="ratio", ratio=0.5, total=20)


def test_corruption_swaps_instructions_between_seeds(data):
    seeds, views = data
    clean = mix(seeds, views, name="all-dv", size=4)
    bad = mix(seeds, views, name="all-dv", size=4, corruption=0.5)
    assert bad.composition["corrupted"] == 2 and len(bad.rows) == len(clean.rows) and bad.digest != clean.digest
    clean_by_query = {r.query_id: r.instruction for r in clean.rows if r.source is Source.DUAL_VIEW}
    for row in bad.rows:
        if row.corrupted:
            assert row.instruction != clean_by_query[row.query_id]  # someone else's ...
            assert row.instruction in clean_by_query.values()  # ... dual-view instruction from the mixture
    full = mix(seeds, views, name="ins-dv", size=6, corruption=1.0)
    assert full.composition["corrupted"] == 3
    assert sorted(r.instruction for r in full.rows if r.corrupted) == sorted(
        r.instruction for r in mix(seeds, views, name="ins-dv", size=6).rows if r.source is Source.DUAL_VIEW)
    with pytest.raises(MixtureError, match="mixture ins-orig has no dual views"):
        mix(seeds, views, name="ins-orig", size=4, corruption=0.1)


def test_heldout_seeds_leave_every_mixture(data):
    seeds, views = data
    m = {name: mix(seeds, views, name=name, heldout_fraction=0.3) for name in BUILDERS}
    held = {r.query_id for r in m["ins-dv"].heldout}
    assert len(held) == 3 and all(r.source is Source.DUAL_VIEW for r in m["ins-dv"].heldout)
    for mixture in m.values():
        assert {r.query_id for r in mixture.heldout} == held  # one split for all mixtures
        assert not held & {r.query_id for r in mixture.rows}
        assert mixture.composition["size_n"] == 6 and mixture.composition["heldout_pairs"] == 3


def test_bad_requests_fail_with_a_clear_message(data):
    seeds, views = data
    with pytest.raises(ValidationError, match="Input should be 'ins-orig', 'ins-dv', 'all-orig', 'all-dv' or 'ratio'"):
        MixtureConfig(name="ins-everything")
    with pytest.raises(MixtureError, match="mixture ins-dv needs dual-view rows"):
        mix(seeds, None, name="ins-dv")
    with pytest.raises(MixtureError, match="ins-dv needs an even size"):
        mix(seeds, views, name="ins-dv", size=5)
    with pytest.raises(MixtureError, match="all-dv needs 11 instruct rows with a dual view; the data has 10"):
        mix(seeds, views, name="all-dv", size=11)


def test_unmatched_dual_views_are_counted_not_used(data):
    seeds, views = data
    stale = {**views[0], "seed_key": "0" * 32, "dual_view_key": "stale"}
    m = mix(seeds, [*views, stale], name="all-dv", size=4)
    assert m.composition["unmatched_dual_views"] == 1 and "stale" not in {r.key for r in m.rows}


def test_every_configured_name_has_a_builder():
    names = typing.get_args(MixtureConfig.model_fields["name"].annotation)
    assert set(names) == set(BUILDERS)
