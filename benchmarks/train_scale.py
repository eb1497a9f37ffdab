"""Training at realistic scale: `dualview train` with default settings on N realistic seed rows.

Rows as Promptriever's: 1 positive, 8 negatives, 0-3 instruction negatives on instruct rows (half
the rows, each with its non-instruct twin), passages of 500-700 characters (`seed_scale`'s generator
with longer passages, no bad rows). Runs `dualview train --mixture ins-orig --seeds SEEDS --out OUT --max-steps 3 --save-every 0`
as a child under `/usr/bin/time -v`, twice with one fresh mixture cache: the first run builds the
mixture on disk, the second finds it (same digest). Reports per run: exit code, wall seconds,
seconds to the first step (until the trainer announces its steps: data, model and DeepSpeed ready),
peak RSS, CPU seconds (user + system: on a shared machine the cost that does not depend on the
others' load) and the seconds per optimizer step the trainer reported.

Targets: exit 0 and peak RSS <= 6 GB at 100k rows on a 2-core, 24 GB machine with defaults; time to
first step <= 3 min (built) and <= 30 s (reused) at 1M rows; at most 3 GB beyond the model and one
step at 1M rows (the reused run's peak is the model, one step and an open mixture: the built run's
peak minus it is what building the mixture costs).

Run:  python benchmarks/train_scale.py --rows 100000 1000000 [--workdir DIR --keep] [-- extra train flags]
The seed file is written streaming (3.8 GB of Parquet at 1M rows, and the mixture store 6.7 GB); watch `df -h`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import seed_scale

RSS_TARGET_GB = 6.0
FIRST_STEP_TARGET_S = {"built": 180.0, "reused": 30.0}  # the 1M-row targets, held at every size


def make_pools(rng: np.random.Generator) -> tuple[pa.StructArray, pa.Array, pa.Array]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = np.unique(["".join(rng.choice(letters, size=rng.integers(2, 10))) for _ in range(3000)])
    texts = seed_scale._texts(rng, words, 3000, 500, 700)
    titles = [" ".join(rng.choice(words, size=3)).title() for _ in texts]
    passages = pa.StructArray.from_arrays(
        [pa.array([f"d{i}" for i in range(len(texts))]), pa.array(titles), pa.array(texts)],
        names=["docid", "title", "text"])
    return passages, pa.array(seed_scale._texts(rng, words, 5000, 20, 60)), \
        pa.array(seed_scale._texts(rng, words, 2000, 60, 160))


def _with_twins(table: pa.Table) -> pa.Table:
    """The instruct rows and, for each, its non-instruct twin (same query_id, the query alone, no
    instruction negatives) — so every mixture's default N is the number of instruct rows."""
    import pyarrow.compute as pc

    instruct = table.filter(table["has_instruction"])
    twins = instruct.set_column(instruct.schema.get_field_index("query"), "query", instruct["only_query"])
    for name, value in (("only_instruction", pa.array([""] * len(twins))),
                        ("has_instruction", pa.array([False] * len(twins))),
                        ("new_negatives", pa.array([[]] * len(twins), instruct.schema.field("new_negatives").type))):
        twins = twins.set_column(twins.schema.get_field_index(name), name, value)
    both = pa.concat_tables([instruct, twins])
    return both.take(pc.sort_indices(both, [("query_id", "ascending"), ("has_instruction", "descending")]))


def generate(path: str, rows: int) -> None:
    """About `rows` rows: half instruct rows, half their twins."""
    seed_scale.BAD_RATE = 0.0
    rng = np.random.default_rng(seed_scale.SEED)
    pools, writer = make_pools(rng), None
    for start in range(0, rows, seed_scale.CHUNK):
        table = _with_twins(seed_scale.make_chunk(rng, pools, start, min(seed_scale.CHUNK, rows - start)))
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()


def run_train(seeds: str, out: str, cache: str, extra: list[str]) -> dict:
    root = str(Path(__file__).resolve().parents[1])  # `python -m flows.cli` is `dualview`, run from this checkout
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "flows.cli", "train", "--mixture", "ins-orig", "--seeds", seeds, "--out", out,
           "--max-steps", "3", "--save-every", "0", "--mixture-cache", cache, *extra]
    start, first_step, err = time.perf_counter(), None, []
    with open(os.devnull, "w") as sink, tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, stdin=sink, cwd=root)
        for line in proc.stderr:  # "train: N optimizer steps to run" comes just before step 1 starts
            if first_step is None and re.match(r"train: \d+ optimizer steps to run", line):
                first_step = time.perf_counter() - start
            err.append(line.rstrip("\n"))
        proc.wait()
        stdout.seek(0)
        summary = json.loads(stdout.read()) if proc.returncode == 0 else None
    seconds = time.perf_counter() - start
    text = "\n".join(err)
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    cpu_s = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", text).group(1)) for kind in ("User", "System"))
    lines = [ln for ln in err if ln.startswith(("dualview:", "train:"))]
    steps = summary["steps"] if summary else 0
    return {"exit": proc.returncode, "seconds": round(seconds, 1),
            "first_step_s": round(first_step, 1) if first_step is not None else None,
            "peak_rss_gb": round(rss_kb / 1024 ** 2, 2), "cpu_s": round(cpu_s, 1),  # load-independent cost
            "s_per_step": round(summary["train_seconds"] / steps, 1) if steps else None,
            "summary": summary, "lines": lines[-6:]}


def measure(rows: int, workdir: str, extra: list[str]) -> dict:
    """Both runs at one size: the seed file (written once per workdir), then built and reused."""
    seeds = os.path.join(workdir, f"seeds-{rows}.parquet")
    generated = None
    if not os.path.exists(seeds):
        start = time.perf_counter()
        generate(seeds, rows)
        generated = round(time.perf_counter() - start, 1)
    cache, runs = os.path.join(workdir, f"mixtures-{rows}"), {}
    try:
        for name in ("built", "reused"):
            runs[name] = run_train(seeds, os.path.join(workdir, f"model-{name}"), cache, extra)
            shutil.rmtree(os.path.join(workdir, f"model-{name}"), ignore_errors=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"rows": rows, "seed_file_gb": round(os.path.getsize(seeds) / 1e9, 2), "generate_s": generated, **runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000], help="one or more sizes, measured in turn")
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("extra", nargs="*", help="more `dualview train` flags (after --)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="train-scale-")
    os.makedirs(workdir, exist_ok=True)
    try:
        sizes = [measure(rows, workdir, args.extra) for rows in args.rows]
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"flags": args.extra, "sizes": sizes}, indent=1))
    print(f"{'rows':>9} {'run':>7} {'exit':>4} {'peak RSS GB':>11} {'first step s':>12} {'s/step':>7}")
    for size in sizes:
        for name in ("built", "reused"):
            r = size[name]
            print(f"{size['rows']:>9} {name:>7} {r['exit']:>4} {r['peak_rss_gb']:>11} {r['first_step_s']!s:>12} {r['s_per_step']!s:>7}")
    for size in sizes:
        for name, result in ((n, size[n]) for n in ("built", "reused")):
            first_target = FIRST_STEP_TARGET_S[name]
            ok = (result["exit"] == 0 and result["peak_rss_gb"] <= RSS_TARGET_GB
                  and (result["first_step_s"] or float("inf")) <= first_target)
            print(f"{'PASS' if ok else 'FAIL'} ({size['rows']} rows, {name}): exit {result['exit']}, peak RSS "
                  f"{result['peak_rss_gb']} GB (<= {RSS_TARGET_GB}), first step after {result['first_step_s']} s "
                  f"(<= {first_target}), {result['s_per_step']} s/step, {result['seconds']} s in all")


if __name__ == "__main__":
    main()
