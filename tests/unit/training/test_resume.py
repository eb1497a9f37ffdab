"""Resume rules: which saved state a run may load, and where its data picks up."""

from __future__ import annotations

import itertools

import pytest

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.training.resume import (
    Progress,
    StateMismatch,
    check_resumable,
    resume_position,
    run_fingerprint,
    state_location,
    tag_for,
)
from dualview_core.method.training_rows import rank_batches


def test_state_lives_next_to_the_output():
    assert state_location("/models/run-1/") == "/models/run-1.state"
    assert state_location("s3://bucket/models/run-1") == "s3://bucket/models/run-1.state"


def test_tags_sort_in_step_order():
    assert sorted([tag_for(100), tag_for(20), tag_for(3)]) == [tag_for(3), tag_for(20), tag_for(100)]


def test_fingerprint_changes_with_what_shapes_the_trajectory():
    cfg = TrainingConfig(max_steps=40)
    base = run_fingerprint(cfg, "digest-a", 1)
    assert run_fingerprint(TrainingConfig(max_steps=40), "digest-a", 1) == base
    changed = [
        run_fingerprint(cfg.model_copy(update={"learning_rate": 3e-5}), "digest-a", 1),
        run_fingerprint(cfg.model_copy(update={"max_steps": 41}), "digest-a", 1),  # the LR schedule's length
        run_fingerprint(cfg.model_copy(update={"mixture": MixtureConfig(name="ins-orig")}), "digest-a", 1),
        run_fingerprint(cfg, "digest-b", 1),
        run_fingerprint(cfg, "digest-a", 2),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_fingerprint_ignores_how_often_we_look_or_save():
    cfg = TrainingConfig(max_steps=40)
    assert run_fingerprint(cfg.model_copy(update={"save_every": 7, "eval_every": 3}), "d", 1) == run_fingerprint(cfg, "d", 1)


def test_a_state_of_another_run_is_refused_with_the_reason():
    progress = Progress(step=4, tag=tag_for(4), fingerprint="abc", world_size=2, data_digest="d")
    check_resumable(progress, "abc", 2, "/m.state")  # the same run: no error
    with pytest.raises(StateMismatch, match="saved by 2 rank"):
        check_resumable(progress, "abc", 1, "/m.state")
    with pytest.raises(StateMismatch, match="step 4 of a run with another training config or other data"):
        check_resumable(progress, "xyz", 2, "/m.state")


def test_progress_round_trips_through_json():
    progress = Progress(step=12, tag=tag_for(12), fingerprint="f", world_size=1, data_digest="d")
    assert Progress.from_json(progress.to_json()) == progress


@pytest.mark.parametrize("done", [0, 1, 2, 3, 5, 9])
def test_resume_position_matches_walking_the_epochs(done):
    # 10 rows, batch 3, 1 rank: 3 micro-batches per epoch (the last row of each epoch is dropped)
    def walk():
        for epoch in itertools.count():
            yield from ((epoch, i) for i in range(len(rank_batches(10, 3, epoch, 0, 0, 1))))

    assert resume_position(done, per_epoch=3) == next(itertools.islice(walk(), done, None))


def test_resume_position_needs_a_non_empty_epoch():
    with pytest.raises(ValueError):
        resume_position(3, per_epoch=0)
