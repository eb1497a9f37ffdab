"""Seed loading at scale: the dualview streaming path against a plain Hugging Face `datasets` pipeline.

What it measures, on N synthetic Promptriever-format rows (default 1,000,000) in one Parquet file:

- "dualview": `loading.stream_seeds` (validation + quarantine file) -> `seeds.select_synthesis_seeds`
  per batch -> `io.TableWriter` (Parquet);
- "datasets": `datasets.load_dataset("parquet")` -> `.map` calling the same `seeds.normalize` (plus the
  same duplicate-id rule) -> `.filter` on validity and on `seeds.is_synthesis_seed` -> `.to_parquet`.

Each path runs in its own subprocess, so its peak RSS (VmHWM; file-backed mmap pages included) is its
own. Reported: wall seconds of the pipeline (imports excluded), input rows/s, peak RSS, and counts
(rows, valid, quarantined, selected), which must agree between the paths, as must the seed_keys
written. About 0.5% of the generated rows are bad on purpose so that quarantine is exercised.

Targets: dualview peak RSS < 3 GB at 1M rows; dualview faster than datasets.

Run:  python benchmarks/seed_scale.py --rows 1000000 [--workdir DIR --keep]
(one path only, as the subprocesses do: --only dualview|datasets --workdir DIR, on an existing file)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SOURCE, CHUNK, BAD_RATE, SEED = "seeds.parquet", 50_000, 0.005, 1234
RSS_TARGET_MB = 3 * 1024


# --- synthetic data -----------------------------------------------------------------------------


def _texts(rng: np.random.Generator, words: np.ndarray, n: int, lo: int, hi: int) -> list[str]:
    """n distinct strings of random words, each lo..hi characters long (deterministic order)."""
    out: dict[str, None] = {}
    while len(out) < n:
        text = " ".join(rng.choice(words, size=rng.integers(lo // 6, hi // 6 + 1)))
        if lo <= len(text) <= hi:
            out[text] = None
    return list(out)


def make_pools(rng: np.random.Generator) -> tuple[pa.StructArray, pa.Array, pa.Array]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = np.unique(["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(3000)])
    texts = _texts(rng, words, 3000, 150, 300)
    titles = [" ".join(rng.choice(words, size=3)).title() for _ in texts]
    passages = pa.StructArray.from_arrays(
        [pa.array([f"d{i}" for i in range(len(texts))]), pa.array(titles), pa.array(texts)],
        names=["docid", "title", "text"],
    )
    return passages, pa.array(_texts(rng, words, 5000, 20, 60)), pa.array(_texts(rng, words, 2000, 60, 160))


def _lists(counts: np.ndarray, values: pa.Array) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def make_chunk(rng: np.random.Generator, pools: tuple, start: int, n: int) -> pa.Table:
    """n rows; bad kinds: 0 empty query, 1 no positive, 2 new negative = positive, 3 duplicate id."""
    passages, queries, instructions = pools
    size = len(passages)
    kind = np.where(rng.random(n) < BAD_RATE, rng.integers(0, 4, n), -1)
    instruct = rng.random(n) < 0.5
    dup = (kind == 3) & (np.arange(n) > 0)  # same (query_id, has_instruction) as the row before
    ids = np.arange(start, start + n) - dup
    instruct = np.where(dup, np.roll(instruct, 1), instruct)
    query_id = pc.binary_join_element_wise("q", pc.cast(pa.array(ids), pa.string()), "")
    only_query = pc.if_else(pa.array(kind == 0), "", queries.take(rng.integers(0, len(queries), n)))
    only_instruction = pc.if_else(instruct, instructions.take(rng.integers(0, len(instructions), n)), "")
    query = pc.if_else(instruct, pc.binary_join_element_wise(only_query, only_instruction, " "), only_query)
    positive = rng.integers(0, size, n)
    has_positive = kind != 1
    new_counts = np.where(instruct, rng.choice(4, n, p=[0.1, 0.3, 0.3, 0.3]), 0)
    new_counts = np.where(kind == 2, np.maximum(new_counts, 1), new_counts)
    owner = np.repeat(np.arange(n), new_counts)
    new_idx = (positive[owner] + rng.integers(1, size, len(owner))) % size  # never the positive...
    first = np.concatenate([[0], np.cumsum(new_counts)[:-1]])
    new_idx[first[kind == 2]] = positive[kind == 2]  # ...except where we want it to be
    return pa.table({
        "query_id": query_id,
        "query": query,
        "only_query": only_query,
        "only_instruction": only_instruction,
        "has_instruction": pa.array(instruct),
        "positive_passages": _lists(has_positive.astype(int), passages.take(positive[has_positive])),
        "negative_passages": _lists(np.full(n, 8), passages.take(rng.integers(0, size, 8 * n))),
        "new_negatives": _lists(new_counts, passages.take(new_idx)),
    })


def generate(path: str, rows: int) -> None:
    rng = np.random.default_rng(SEED)
    pools = make_pools(rng)
    writer = None
    for start in range(0, rows, CHUNK):
        table = make_chunk(rng, pools, start, min(CHUNK, rows - start))
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


# --- the two paths (each in its own process) ----------------------------------------------------


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def run_dualview(workdir: str) -> dict:
    from dualview_core.contracts import SEED_ROW
    from dualview_core.storage.tables import TableWriter
    from dualview_core.data.loading import stream_seeds
    from dualview_core.data.seeds import select_synthesis_seeds

    start, selected = time.perf_counter(), 0
    batches, validator = stream_seeds(os.path.join(workdir, SOURCE),
                                      quarantine_path=os.path.join(workdir, "quarantine.parquet"))
    with TableWriter(os.path.join(workdir, "dualview.parquet"), SEED_ROW) as writer:
        for table in batches:
            seeds = select_synthesis_seeds(table)
            writer.write(seeds)
            selected += seeds.num_rows
    report = validator.report
    return {"seconds": time.perf_counter() - start, "rows": report.rows, "valid": report.valid,
            "quarantined": report.quarantined, "selected": selected, "by_reason": dict(report.by_reason)}


def _checker(cfg):
    """The per-row logic of SeedValidator.check, as a `datasets.map` function."""
    from dualview_core.contracts import Reason
    from dualview_core.data.seeds import Invalid, normalize

    seen: set[tuple[str, bool]] = set()
    empty = {"seed_key": "", "query_id": "", "query": "", "instruction": "", "has_instruction": False,
             "positives": [], "negatives": [], "instruction_negatives": []}

    def check(raw) -> dict:
        try:
            row = normalize(raw, cfg)  # datasets passes a lazy Mapping row, which normalize accepts
            identity = (row["query_id"], row["has_instruction"])
            if identity in seen:
                raise Invalid(Reason.DUPLICATE_ID, f"query_id {row['query_id']} repeats")
        except Invalid as bad:
            return {**empty, "ok": False, "reason": bad.reason.value}
        seen.add(identity)
        return {**row, "ok": True, "reason": ""}

    return check


def run_datasets(workdir: str) -> dict:
    import datasets

    from dualview_core.config import ValidationConfig
    from dualview_core.contracts import SEED_ROW
    from dualview_core.data.seeds import is_synthesis_seed

    features = datasets.Features.from_arrow_schema(SEED_ROW)
    features["ok"], features["reason"] = datasets.Value("bool"), datasets.Value("string")
    start = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files=os.path.join(workdir, SOURCE), split="train",
                               cache_dir=os.path.join(workdir, "hf_cache"))
    checked = ds.map(_checker(ValidationConfig()), remove_columns=ds.column_names, features=features,
                     load_from_cache_file=False)
    valid = checked.filter(lambda ok: ok, input_columns="ok", load_from_cache_file=False)
    seeds = valid.filter(is_synthesis_seed, load_from_cache_file=False).remove_columns(["ok", "reason"])
    seeds.to_parquet(os.path.join(workdir, "datasets.parquet"))
    return {"seconds": time.perf_counter() - start, "rows": len(ds), "valid": len(valid),
            "quarantined": len(ds) - len(valid), "selected": len(seeds)}


# --- driver -------------------------------------------------------------------------------------


def run_child(path: str, workdir: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
           "HF_HOME": os.path.join(workdir, "hf_home")}
    cmd = [sys.executable, os.path.abspath(__file__), "--only", path, "--workdir", workdir]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def check_agreement(workdir: str, dv: dict, hf: dict) -> None:
    for name in ("rows", "valid", "quarantined", "selected"):
        assert dv[name] == hf[name], f"{name}: dualview {dv[name]} != datasets {hf[name]}"
    keys = [pq.read_table(os.path.join(workdir, f), columns=["seed_key"]).column(0)
            for f in ("dualview.parquet", "datasets.parquet")]
    assert keys[0].equals(keys[1]), "the two paths wrote different seed_keys"


def report(rows: int, dv: dict, hf: dict) -> None:
    print(f"\ncounts (both paths): rows={dv['rows']:,} valid={dv['valid']:,} "
          f"quarantined={dv['quarantined']:,} selected={dv['selected']:,}; dualview by reason {dv['by_reason']}")
    print(f"\n{'path':<10}{'seconds':>10}{'rows/s':>12}{'peak RSS MB':>14}")
    for name, r in (("dualview", dv), ("datasets", hf)):
        print(f"{name:<10}{r['seconds']:>10.1f}{rows / r['seconds']:>12,.0f}{r['peak_rss_mb']:>14,.0f}")
    ratio = hf["seconds"] / dv["seconds"]
    print(f"\nrows/s ratio dualview / datasets: {ratio:.2f}x")
    rss_ok, fast_ok = dv["peak_rss_mb"] < RSS_TARGET_MB, ratio > 1
    print(f"target dualview peak RSS < 3 GB (at 1M rows; here {rows:,}): "
          f"{'PASS' if rss_ok else 'FAIL'} ({dv['peak_rss_mb']:,.0f} MB)")
    print(f"target dualview faster than datasets: {'PASS' if fast_ok else 'FAIL'} ({ratio:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workdir", help="default: a temporary folder")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--only", choices=["dualview", "datasets"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        result = (run_dualview if args.only == "dualview" else run_datasets)(args.workdir)
        print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}))
        return
    workdir = args.workdir or tempfile.mkdtemp(prefix="seed_scale_")
    os.makedirs(workdir, exist_ok=True)
    try:
        start, source = time.perf_counter(), os.path.join(workdir, SOURCE)
        generate(source, args.rows)
        print(f"generated {args.rows:,} rows in {time.perf_counter() - start:.1f}s: "
              f"{os.path.getsize(source) / 2**20:,.1f} MB at {source}", flush=True)
        dv = run_child("dualview", workdir)
        print(f"dualview done in {dv['seconds']:.1f}s", flush=True)
        hf = run_child("datasets", workdir)
        print(f"datasets done in {hf['seconds']:.1f}s", flush=True)
        report(args.rows, dv, hf)
        check_agreement(workdir, dv, hf)
        print("agreement: counts and written seed_keys identical")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
