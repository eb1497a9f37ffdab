"""Synthesis bookkeeping at scale: what the driver holds and how long an unchanged re-run takes.

The engine is replaced by an instant in-process one (a fixed answer per row, no model, no Ray), so
what is measured is everything around the engine: reading and validating seeds, the cache index,
rendering, parsing and guards, record shards, the derived tables and the manifest. Seeds are the
realistic synthetic rows of benchmarks/seed_scale.py (passages ~600 characters, 1 positive,
8 negatives, 1-3 instruction negatives); enough source rows are generated for `--rows` synthesis rows.

Each run is its own subprocess, so its peak RSS (VmHWM) is the driver's alone:
  1. a first run into an empty output folder (every row sent to the engine);
  2. the same run again, unchanged (nothing to send).
Reported per size: synthesis rows, driver peak RSS, rows/s of the first run, record shards, re-run
seconds and its peak RSS, and the load average when it ran (the machine is shared).

With `--verify` the runs verify too (the instant engine confirms every row), so the verification
pass's bookkeeping is measured with the rest. With `--endpoint-latency-ms MS` the engine is the real
openai engine through Ray Data (concurrency 64, one actor) against the fixed-latency server of
benchmarks/synthesis_overhead.py, in its own process: the driver's peak then includes Ray's driver
and the staged input's path into the pipeline. That server answers every prompt with a new
instruction, so with `--verify` every verdict is a "no" there (a different workload).

Run:  python benchmarks/synthesis_scale.py --rows 20000 100000 [--verify --shard-rows 1024 --workdir DIR --keep]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULT = "BENCH-RESULT "
ANSWER = "<answer><new_instruction>Only documents that discuss the topic in a formal register.</new_instruction></answer>"
VERDICT = "<satisfies>yes</satisfies><violates>yes</violates><on_topic>yes</on_topic>"
BATCH_ROWS = 1024  # answers handed back at a time, like one engine batch
SOURCE_PER_ROW = 2.3  # about 45% of generated rows are eligible synthesis seeds


class InstantEngine:
    """Answers every row at once with a fixed answer, in this process."""

    model_id = "instant"

    def __init__(self, answer: str = ANSWER):
        self.answer = answer

    def answers(self, rows):
        out = []
        for row in rows:
            out.append({"cache_key": row["cache_key"], "raw_response": self.answer, "prompt_tokens": 900,
                        "completion_tokens": 20, "latency_s": 0.0, "attempts": 1, "error": None})
            if len(out) == BATCH_ROWS:
                yield out
                out = []
        if out:
            yield out

    def judged(self, staged, columns, stage, *args):
        from tasks.engines import judged_here

        return judged_here(self, staged, columns, stage, *args)


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def child(seeds: str, out: str, rows: int, shard_rows: int, verify: bool, endpoint: str | None) -> None:
    import tasks.engines as engines
    from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
    from tasks.synthesis import run_synthesis

    if endpoint:
        cfg = SynthesisConfig(engine="openai", verify=verify, limit=rows, shard_rows=shard_rows,
                              openai=OpenAIEngineConfig(base_url=endpoint, model="bench", concurrency=64))
    else:  # the reference engine refuses to verify; with --verify the instant engine stands in for openai
        engine = "openai" if verify else "reference"
        cfg = SynthesisConfig(engine=engine, verify=verify, limit=rows, shard_rows=shard_rows)
        engines.ENGINES[engine] = lambda c, model_path: InstantEngine(VERDICT if c.sampling == cfg.verify_sampling else ANSWER)
    start = time.perf_counter()
    summary = run_synthesis(seeds, out, cfg, progress=lambda m: print(m, file=sys.stderr, flush=True))
    seconds = time.perf_counter() - start
    print(RESULT + json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "plan": summary["plan"],
                               "dual_views": summary["dual_views"], "rejected": summary["rejected"],
                               "verify_rows": summary["cost"]["verify_rows"],
                               "shards": len(list(Path(out, "records").glob("part-*.parquet")))}), flush=True)


def run_child(seeds: str, out: str, rows: int, shard_rows: int, verify: bool, endpoint: str | None) -> dict:
    cmd = [sys.executable, __file__, "--child", seeds, out, "--rows", str(rows), "--shard-rows", str(shard_rows),
           *(["--verify"] if verify else []), *(["--endpoint", endpoint] if endpoint else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=os.getcwd())
    if proc.returncode:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith(RESULT))
    return {**json.loads(line[len(RESULT):]), "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    ap.add_argument("--shard-rows", type=int, default=1024)
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--verify", action="store_true", help="verify accepted rows too")
    ap.add_argument("--endpoint-latency-ms", type=float, help="the openai engine against a fixed-latency server")
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.rows[0], args.shard_rows, args.verify, args.endpoint)
        return
    from seed_scale import generate

    workdir = args.workdir or tempfile.mkdtemp(prefix="synthesis_scale_")
    os.makedirs(workdir, exist_ok=True)
    table, server, endpoint = [], None, None
    if args.endpoint_latency_ms is not None:
        from synthesis_overhead import start_server

        server, endpoint = start_server(args.endpoint_latency_ms)
    try:
        for rows in args.rows:
            seeds, out = os.path.join(workdir, f"seeds-{rows}.parquet"), os.path.join(workdir, f"out-{rows}")
            if not os.path.exists(seeds):
                generate(seeds, int(rows * SOURCE_PER_ROW))
            shutil.rmtree(out, ignore_errors=True)
            first = run_child(seeds, out, rows, args.shard_rows, args.verify, endpoint)
            again = run_child(seeds, out, rows, args.shard_rows, args.verify, endpoint)
            assert again["plan"]["pending"] == 0 and again["verify_rows"] == 0, again
            if args.verify and not endpoint:
                assert first["verify_rows"] == first["dual_views"] > 0, first  # every accepted row asked once, all confirmed
            n = first["plan"]["pending"]
            table.append((n, first, again))
            print(f"{n:,} rows: first {first['seconds']:.1f}s, peak {first['peak_rss_mb']:.0f} MB, "
                  f"{first['shards']} shards; re-run {again['seconds']:.1f}s, peak {again['peak_rss_mb']:.0f} MB", flush=True)
        print("\n| rows | driver peak RSS | rows/s | shards | unchanged re-run | re-run peak RSS | load avg |")
        print("|---|---|---|---|---|---|---|")
        for n, first, again in table:
            print(f"| {n:,} | {first['peak_rss_mb']:.0f} MB | {n / first['seconds']:.0f} | {first['shards']} | "
                  f"{again['seconds']:.1f} s | {again['peak_rss_mb']:.0f} MB | {first['load']:.1f} / {again['load']:.1f} |")
    finally:
        if server:
            server.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
