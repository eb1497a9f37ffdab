"""The first pass's copies of the seeds it asked about: read back as the validated seeds, in row
order, and only when they hold every seed a derive task wants of the chunk."""

from __future__ import annotations

from tasks.synthesis.record_store import RecordStore
from tasks.synthesis.seed_copies import SeedCopies, copied
from tests.helpers.factories import make_seeds


def test_copies_hold_the_seeds_as_validated_and_answer_only_when_they_hold_every_one_wanted(tmp_path):
    store, seeds = RecordStore(str(tmp_path)), make_seeds(4)  # 8 seeds, rows 0..7
    copies = SeedCopies(limit=4)
    for row in (6, 1, 3):  # in the order a chunk task meets them: a row's number, not its place
        copies.add(row, seeds[row])
    assert copies.write(store, 2)
    batches = list(copied(store, 2, {3, 6, 1}, batch_rows=2))
    assert [[raw.index for raw, _ in batch] for batch in batches] == [[1, 3], [6]]
    assert [seed for batch in batches for _, seed in batch] == [seeds[1], seeds[3], seeds[6]]
    assert [raw.index for batch in copied(store, 2, {6}, 2) for raw, _ in batch] == [6]
    assert copied(store, 2, {1, 2}, 2) is None  # row 2 was not asked about: the source is read
    assert copied(store, 2, None, 2) is None and copied(store, 2, set(), 2) is None  # every row, or none
    assert copied(store, 5, {1}, 2) is None  # no copies of that chunk


def test_a_chunk_asking_about_more_seeds_than_the_limit_keeps_none(tmp_path):
    store, seeds = RecordStore(str(tmp_path)), make_seeds(3)
    copies = SeedCopies(limit=2)
    for row in range(3):
        copies.add(row, seeds[row])
    assert not copies.write(store, 0) and copied(store, 0, {0}, 8) is None
    assert not SeedCopies().write(store, 1)  # nothing asked: no file
