"""Training mixtures: the paper's four size-matched data configurations, a ratio sweep, corruption.

Owns which rows a run trains on. With N the instruct-row budget:

    ins-orig   N original instruct rows
    ins-dv     N/2 seeds, each with both views (original row + dual view): the dual views take the
               place of the N/2 originals left out — same volume, half the distinct queries
    all-orig   N instruct rows + their N non-instruct twins (same query_id)
    all-dv     N instruct rows + their N dual views
    ratio      a fixed total T: round(r * T) non-instruct twins, the rest instruct rows

Everything is a pure function of the data and `MixtureConfig.seed`. Rows are ranked by a keyed hash
of their content key, never by file position, so a reordered or converted seed file gives the same
mixture; the rankings are shared, so smaller budgets are prefixes of larger ones and, with every
seed dual-viewed, ins-dv's seeds are the first half of ins-orig's rows. A held-out fraction of
dual-view seeds is kept out of every mixture — all their rows — for the separation diagnostic.

Choosing rows needs only what `RowRef` holds (key, source, query_id, seed_key, a dual view's
instruction), never the passages: `select` works on refs, so the same choice is made over rows in
memory (`build_mixture`) or over rows streamed to disk (`mixture_store`).
It does not know about files, encoders or training.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from dualview_core.config import MixtureConfig
from dualview_core.keys import canonical_json, content_digest, digest
from dualview_core.method.training_rows import Source, TrainingRow, corrupt, from_dual_view, from_seed


DUAL_VIEW_MIXTURES = ("ins-dv", "all-dv")  # the mixtures that train on dual views


class MixtureError(ValueError):
    """The data cannot make the mixture asked for."""


@dataclass(frozen=True)
class Mixture:
    name: str
    rows: tuple[TrainingRow, ...]  # pairs adjacent (an instruct row, then its twin or dual view)
    heldout: tuple[TrainingRow, ...]  # dual views of held-out seeds, never trained on
    composition: dict
    digest: str  # order-independent digest of the row keys: the data's identity for lineage


@dataclass(frozen=True, slots=True)
class RowRef:
    """What choosing a row needs, without its passages; `at` is the row's place in its store."""

    key: str
    source: Source
    query_id: str
    seed_key: str
    at: int
    instruction: str = ""  # dual views only: corruption swaps it
    corrupted: bool = False

    @classmethod
    def of(cls, row: TrainingRow, at: int) -> RowRef:
        instruction = row.instruction if row.source is Source.DUAL_VIEW else ""
        return cls(row.key, row.source, row.query_id, row.seed_key, at, instruction, row.corrupted)


@dataclass(frozen=True)
class Selection:
    """A mixture's rows as refs, in mixture order, with its held-out refs, composition and digest."""

    rows: list[RowRef]
    heldout: list[RowRef]
    composition: dict
    digest: str


@dataclass(frozen=True)
class _Pool:
    """The candidate rows after the held-out split, instruct rows in priority order."""

    instruct: list[RowRef]
    twin: dict[str, RowRef]  # query_id -> non-instruct row
    dual_view: dict[str, RowRef]  # seed_key -> one dual view of that seed
    heldout: list[RowRef]
    unmatched_dual_views: int
    has_dual_views: bool

    def with_twin(self) -> list[RowRef]:
        return [r for r in self.instruct if r.query_id in self.twin]

    def with_dual_view(self) -> list[RowRef]:
        return [r for r in self.instruct if r.seed_key in self.dual_view]


def _priority(seed: int, purpose: str) -> Callable[[RowRef], str]:
    return lambda row: digest(canonical_json([seed, purpose, row.key]))


def _dicts(data: pa.Table | Iterable[Mapping] | None) -> list[Mapping]:
    if data is None:
        return []
    return data.to_pylist() if isinstance(data, pa.Table) else list(data)


def _stream(data: pa.Table | Iterable[Mapping]) -> Iterator[Mapping]:
    """Rows one record batch at a time: a table's Python dicts never all exist at once (at 100k
    realistic seed rows they would be several GB beside the training rows made from them)."""
    if isinstance(data, pa.Table):
        for batch in data.to_batches(max_chunksize=4096):
            yield from batch.to_pylist()
    else:
        yield from data


def _pool(rows: Sequence[RowRef], dual_views: Sequence[RowRef], cfg: MixtureConfig) -> _Pool:
    instruct = {r.seed_key: r for r in rows if r.source is Source.INSTRUCT}
    views: dict[str, RowRef] = {}  # one dual view per seed, the first by priority
    for view in sorted(dual_views, key=_priority(cfg.seed, "view")):
        if view.seed_key in instruct:
            views.setdefault(view.seed_key, view)
    held = sorted(views.values(), key=_priority(cfg.seed, "heldout"))[: round(cfg.heldout_fraction * len(views))]
    out = {r.query_id for r in held}
    return _Pool(
        instruct=sorted((r for r in instruct.values() if r.query_id not in out), key=_priority(cfg.seed, "order")),
        twin={r.query_id: r for r in rows if r.source is Source.NON_INSTRUCT and r.query_id not in out},
        dual_view={k: v for k, v in views.items() if v.query_id not in out},
        heldout=held,
        unmatched_dual_views=sum(d.seed_key not in instruct for d in dual_views),
        has_dual_views=bool(views),
    )


def default_size(pool: _Pool) -> int:
    """The largest even N that every configuration the data allows can reach."""
    limits = [len(pool.instruct)]
    if pool.twin:
        limits.append(len(pool.with_twin()))
    if pool.has_dual_views:
        limits.append(len(pool.with_dual_view()))
    return min(limits) // 2 * 2


def _take(candidates: list[RowRef], n: int, name: str, what: str) -> list[RowRef]:
    if n > len(candidates):
        raise MixtureError(f"mixture {name} needs {n} {what}; the data has {len(candidates)} "
                           "(after the held-out split)")
    return candidates[:n]


def _ins_orig(pool: _Pool, n: int, cfg: MixtureConfig) -> list[RowRef]:
    return _take(pool.instruct, n, cfg.name, "instruct rows")


def _ins_dv(pool: _Pool, n: int, cfg: MixtureConfig) -> list[RowRef]:
    if n % 2:
        raise MixtureError(f"mixture ins-dv needs an even size (N/2 seeds with both views); got {n}")
    seeds = _take(pool.with_dual_view(), n // 2, cfg.name, "instruct rows with a dual view")
    return [row for seed in seeds for row in (seed, pool.dual_view[seed.seed_key])]


def _all_orig(pool: _Pool, n: int, cfg: MixtureConfig) -> list[RowRef]:
    seeds = _take(pool.with_twin(), n, cfg.name, "instruct rows with a non-instruct twin")
    return [row for seed in seeds for row in (seed, pool.twin[seed.query_id])]


def _all_dv(pool: _Pool, n: int, cfg: MixtureConfig) -> list[RowRef]:
    seeds = _take(pool.with_dual_view(), n, cfg.name, "instruct rows with a dual view")
    return [row for seed in seeds for row in (seed, pool.dual_view[seed.seed_key])]


def _ratio(pool: _Pool, n: int, cfg: MixtureConfig) -> list[RowRef]:
    """round(r * T) twins and T - that instruct rows, both from the front of one ranking of twinned
    rows, so ratio 0.5 with total 2N is exactly all-orig and ratio 0 is instruct-only."""
    total = cfg.total or n
    m = round(cfg.ratio * total)
    seeds = _take(pool.with_twin(), max(m, total - m), cfg.name, "instruct rows with a non-instruct twin")
    instruct, twins = seeds[: total - m], [pool.twin[s.query_id] for s in seeds[:m]]
    return [row for i in range(len(seeds)) for row in (instruct[i:i + 1] + twins[i:i + 1])]


BUILDERS: dict[str, Callable[[_Pool, int, MixtureConfig], list[RowRef]]] = {
    "ins-orig": _ins_orig,
    "ins-dv": _ins_dv,
    "all-orig": _all_orig,
    "all-dv": _all_dv,
    "ratio": _ratio,
}


def _corrupt(rows: list[RowRef], fraction: float, seed: int) -> list[RowRef]:
    """Swap the instruction of round(fraction * n) dual views for the next dual view's, in one
    keyed order (a rotation, so each donor is another seed's view and all n swapped is a derangement)."""
    views = sorted((r for r in rows if r.source is Source.DUAL_VIEW), key=_priority(seed, "corrupt"))
    if fraction and len(views) < 2:
        raise MixtureError(f"corruption needs at least 2 dual-view rows in the mixture; it has {len(views)}")
    chosen = views[: round(fraction * len(views))]
    swapped = {v.key: corrupt(v, views[(i + 1) % len(views)].instruction) for i, v in enumerate(chosen)}
    return [swapped.get(r.key, r) for r in rows]


def composition(name: str, rows: list[RowRef], n: int, pool: _Pool) -> dict:
    by_source = Counter(r.source.value for r in rows)
    return {
        "mixture": name,
        "rows": len(rows),
        "size_n": n,
        "by_source": {s.value: by_source.get(s.value, 0) for s in Source},
        "distinct_queries": len({r.query_id for r in rows}),
        "distinct_seeds": len({r.seed_key for r in rows}),
        "corrupted": sum(r.corrupted for r in rows),
        "heldout_pairs": len(pool.heldout),
        "unmatched_dual_views": pool.unmatched_dual_views,
    }


def select(seeds: Sequence[RowRef], dual_views: Sequence[RowRef], cfg: MixtureConfig) -> Selection:
    """The mixture `cfg` asks for, chosen from refs to seed rows and to dual-view rows.

    Pass the dual views for every mixture, even ins-orig and all-orig: the held-out split and the
    default N depend on them, and runs compare only when both are the same.
    """
    pool = _pool(seeds, dual_views, cfg)
    if cfg.name in DUAL_VIEW_MIXTURES and not pool.has_dual_views:
        raise MixtureError(f"mixture {cfg.name} needs dual-view rows that match the seeds; "
                           "none were given or none matched")
    if cfg.corruption and cfg.name not in DUAL_VIEW_MIXTURES:
        raise MixtureError(f"corruption replaces dual-view instructions; mixture {cfg.name} has no dual views")
    n = cfg.size or default_size(pool)
    if n == 0:
        raise MixtureError("the data gives no instruct rows to train on")
    rows = _corrupt(BUILDERS[cfg.name](pool, n, cfg), cfg.corruption, cfg.seed)
    return Selection(rows, pool.heldout, composition(cfg.name, rows, n, pool), content_digest(r.key for r in rows))


def materialize(ref: RowRef, row: TrainingRow) -> TrainingRow:
    """The training row a ref stands for, given the stored row at `ref.at`."""
    return corrupt(row, ref.instruction) if ref.corrupted else row


def build_mixture(seeds: pa.Table | Iterable[Mapping], dual_views: pa.Table | Iterable[Mapping] | None,
                  cfg: MixtureConfig) -> Mixture:
    """A mixture in memory from SEED_ROWs (instruct rows and non-instruct twins) and DUAL_VIEW_ROWs
    (see `select`); `mixture_store.build_store` makes the same mixture on disk."""
    rows = [from_seed(s) for s in _stream(seeds)]
    rows += [from_dual_view(d) for d in _dicts(dual_views)]
    refs = [RowRef.of(r, at) for at, r in enumerate(rows)]
    n_seeds = sum(1 for r in refs if r.source is not Source.DUAL_VIEW)
    chosen = select(refs[:n_seeds], refs[n_seeds:], cfg)
    return Mixture(cfg.name, tuple(materialize(r, rows[r.at]) for r in chosen.rows),
                   tuple(rows[r.at] for r in chosen.heldout), chosen.composition, chosen.digest)
