"""Synthesis at the users' scale: the whole pipeline against a bare aiohttp loop, in one run.

Seeds are the realistic synthetic rows of benchmarks/seed_scale.py (passages of 150-300 characters,
1 positive, 8 negatives, 0-3 instruction negatives, ~0.5% bad rows), in one Parquet file with enough
source rows for `--rows` synthesis seeds. The engine is the real openai engine through Ray Data
(`--concurrency` requests in flight over `--actors` actors) against the fixed-latency
OpenAI-compatible server of benchmarks/synthesis_overhead.py, in its own process. Per size:

1. anchor: a bare asyncio loop over one aiohttp session sends the same request bodies to the same
   server at the same concurrency (the first `--anchor-rows` seeds): what a user would write by hand;
2. a first run into an empty output folder, in its own process: wall time, the time of the first
   request the server saw, of the first published shard and of the last answer (planning and the
   engine run as one stream: the first answers come while later chunks are read), rows/s end to end,
   from the start to the last answer and in the engine's steady state (after the first shard), the
   driver's peak RSS (VmHWM) and the process tree's peak (the driver, Ray and its workers: the sum of
   their PSS, sampled twice a second), and the record shards written;
3. the same run again, unchanged: wall time and peak RSS; with `--s3`, also against a copy of the
   output on a local moto S3 server, counting the requests it serves;
4. the same rows rewritten to a new file (every call cached: one read-and-key pass and the derived
   tables), then a copy with `--changed` of the rows' instructions edited: the times of its first
   request and first shard, and its wall time, against the rewritten copy's.

Targets (issue "Synthesis at cluster scale"): engine >= 0.8 x the bare loop; driver peak <= 1 GB;
unchanged re-run <= 20 s at 100k rows and <= 3 min at 1M; a small, bounded number of S3 requests; (issue
"Synthesis streams") end to end >= 0.85 x the bare loop; a run with 1% of rows changed answers within
seconds and ends within the rewritten copy's time plus 20 s.

Run:  nice -n 5 python benchmarks/synthesis_scale.py --rows 100000 1000000 [--s3 --workdir DIR --keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULT = "BENCH-RESULT "
SOURCE_PER_ROW = 2.3  # about 45% of generated rows are eligible synthesis seeds


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


class TreeMemory(threading.Thread):
    """The peak of the summed PSS of a process and its descendants, sampled every `every_s` seconds."""

    def __init__(self, pid: int, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every_s, self.peak_mb, self.done = pid, every_s, 0.0, threading.Event()

    def run(self) -> None:
        import psutil

        root = psutil.Process(self.pid)
        while not self.done.wait(self.every_s):
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    total += p.memory_full_info().pss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_mb = max(self.peak_mb, total / 2**20)


def child(seeds: str, out: str, endpoint: str, concurrency: int, actors: int, shard_rows: int,
          storage_options: str | None) -> None:
    from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
    from tasks.synthesis.driver import run_synthesis

    cfg = SynthesisConfig(engine="openai", shard_rows=shard_rows,
                          openai=OpenAIEngineConfig(base_url=endpoint, model="bench", concurrency=concurrency, actors=actors))
    lines: list[tuple[float, str]] = []
    started_at, start = time.time(), time.perf_counter()

    def progress(line: str) -> None:
        lines.append((time.perf_counter() - start, line))
        print(f"{lines[-1][0]:8.1f} s  {line}", file=sys.stderr, flush=True)

    options = json.loads(storage_options) if storage_options else None
    summary = run_synthesis(seeds, out, cfg, progress=progress, out_storage_options=options)
    seconds = time.perf_counter() - start
    # planning and the engine overlap when streamed: time the first and the last answers from the start
    answered = [t for t, line in lines if re.match(r"synthesis: (engine ready|\d+(/\d+)? rows)", line)]
    from tasks.synthesis.record_store import RecordStore

    shards = len(RecordStore(out, options).shard_names())
    print(RESULT + json.dumps({
        "seconds": seconds, "started_at": started_at, "first_s": answered[0] if answered else None, "answered_s": answered[-1] if answered else None,
        "peak_rss_mb": peak_rss_mb(), "plan": summary["plan"], "cost": summary["cost"], "shards": shards,
        "dual_views": summary["dual_views"], "rejected": summary["rejected"]}), flush=True)


def run_child(seeds: str, out: str, endpoint: str, args, storage_options: dict | None = None, log: Path | None = None) -> dict:
    """One synthesis run in its own process; with `log`, its progress lines (seconds from its start)
    are written there, to see where a run's time went."""
    cmd = [sys.executable, __file__, "--child", seeds, out, "--endpoint", endpoint, "--concurrency", str(args.concurrency),
           "--actors", str(args.actors), "--shard-rows", str(args.shard_rows)]
    if storage_options:
        cmd += ["--storage-options", json.dumps(storage_options)]
    first_request(endpoint, reset=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd())
    tree = TreeMemory(proc.pid)
    tree.start()
    stdout, stderr = proc.communicate()
    tree.done.set()
    if log is not None:
        log.write_text(stderr)
    if proc.returncode:
        raise SystemExit(f"child failed:\n{stderr[-3000:]}")
    line = next(x for x in stdout.splitlines() if x.startswith(RESULT))
    result = json.loads(line[len(RESULT):])
    sent = first_request(endpoint)
    return {**result, "first_request_s": sent - result["started_at"] if sent else None, "tree_peak_mb": tree.peak_mb,
            "load": os.getloadavg()[0]}


def first_request(endpoint: str, reset: bool = False) -> float | None:
    """The server's wall-clock time of the first request since the last reset (None if none)."""
    import urllib.request

    url = endpoint.removesuffix("/v1") + "/first"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST" if reset else "GET"), timeout=10) as r:
        return json.loads(r.read())["first"]


def anchor(seeds: str, endpoint: str, rows: int, concurrency: int) -> float:
    """rows/s of a bare aiohttp loop sending the first `rows` seeds' request bodies at `concurrency`."""
    from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
    from dualview_core.data.loading import stream_seeds
    from dualview_core.method.prompting import default_template, render
    from dualview_core.data.seeds import select_synthesis_seeds
    from synthesis_overhead import bare_aiohttp
    from tasks.synthesis.openai_client import ChatClient

    cfg = SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_url=endpoint, model="bench"))
    client, template, bodies = ChatClient(cfg.openai, cfg.sampling), default_template(), []
    batches, _ = stream_seeds(seeds)
    for batch in batches:
        for seed in select_synthesis_seeds(batch).to_pylist():
            bodies.append(client._body(render(seed, 0, template)))
            if len(bodies) == rows:
                break
        if len(bodies) == rows:
            break
    return len(bodies) / asyncio.run(bare_aiohttp(endpoint, bodies, concurrency))


def s3_rerun(seeds: str, out: str, endpoint: str, args, workdir: str, logs: Path) -> dict:
    """The unchanged re-run against a copy of the output on a local moto server, with its request count."""
    import socket

    import s3fs

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = Path(workdir) / "moto.log"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    with open(log, "wb") as f:
        moto = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        time.sleep(3)
        options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("bench")
        fs.put(out, "bench/out", recursive=True)
        before = requests(log)
        os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")})
        again = run_child(seeds, "s3://bench/out", endpoint, args, options, logs / "s3.log")
        return {**again, "s3_requests": requests(log) - before}
    finally:
        moto.kill()
        moto.wait()


def requests(log: Path) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '" ' in line and "HTTP/1." in line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--actors", type=int, default=1)
    ap.add_argument("--shard-rows", type=int, default=1024)
    ap.add_argument("--anchor-rows", type=int, default=20_000)
    ap.add_argument("--changed", type=float, default=0.01, help="share of rows whose instruction the last run edits")
    ap.add_argument("--s3", action="store_true", help="also count an unchanged re-run's S3 requests (moto)")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    ap.add_argument("--storage-options", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.endpoint, args.concurrency, args.actors, args.shard_rows, args.storage_options)
        return
    from seed_scale import generate
    from synthesis_overhead import start_server

    workdir = args.workdir or tempfile.mkdtemp(prefix="synthesis_scale_")
    os.makedirs(workdir, exist_ok=True)
    server, endpoint = start_server(args.latency_ms)
    table = []
    try:
        for rows in args.rows:
            seeds, out = os.path.join(workdir, f"seeds-{rows}.parquet"), os.path.join(workdir, f"out-{rows}")
            if not os.path.exists(seeds):
                generate(seeds, int(rows * SOURCE_PER_ROW))
            shutil.rmtree(out, ignore_errors=True)
            bare = anchor(seeds, endpoint, min(rows, args.anchor_rows), args.concurrency)
            logs = Path(workdir) / f"logs-{rows}"  # each run's progress, kept with --keep
            logs.mkdir(exist_ok=True)
            first = run_child(seeds, out, endpoint, args, log=logs / "first.log")
            again = run_child(seeds, out, endpoint, args, log=logs / "unchanged.log")
            assert again["plan"]["pending"] == 0 and again["cost"]["engine_rows"] == 0, again
            remote = s3_rerun(seeds, out, endpoint, args, workdir, logs) if args.s3 else None
            if remote:
                assert remote["plan"]["pending"] == 0, remote
            copied, edited = seeds.replace(".parquet", "-rewritten.parquet"), seeds.replace(".parquet", "-edited.parquet")
            rewrite(seeds, copied, 0.0)
            touched = run_child(copied, out, endpoint, args, log=logs / "rewritten.log")
            assert touched["plan"]["pending"] == 0, touched
            rewrite(seeds, edited, args.changed)
            changed = run_child(edited, out, endpoint, args, log=logs / "edited.log")
            table.append((first["plan"]["pending"], bare, first, again, remote, touched, changed))
            print(json.dumps({"rows": rows, "bare": bare, "first": first, "again": again, "s3": remote,
                              "touched": touched, "changed": changed}), flush=True)
    finally:
        server.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    limit = args.concurrency / (args.latency_ms / 1000)
    print(f"\nopenai engine, {args.concurrency} in flight over {args.actors} actor(s), {args.latency_ms:.0f} ms a request "
          f"(limit {limit:.0f} rows/s); shards of at most {args.shard_rows} rows")
    print("| rows | bare aiohttp rows/s | start to last answer rows/s (ratio) | steady (ratio) | end to end rows/s (ratio) | "
          "first request s | first shard s | last answer s | total s | driver peak | tree peak (PSS) | shards | unchanged re-run | "
          "re-run peak | S3 requests | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, bare, first, again, remote, _, _ in table:
        engine = n / first["answered_s"] if first["answered_s"] else float("nan")
        steady = first["cost"]["steady_rows_per_s"] or float("nan")
        total = n / first["seconds"]
        print(f"| {n:,} | {bare:.0f} | {engine:.0f} ({engine / bare:.2f}) | {steady:.0f} ({steady / bare:.2f}) | {total:.0f} ({total / bare:.2f}) | "
              f"{fmt_s(first['first_request_s'])} | {first['first_s']:.1f} | {first['answered_s']:.1f} | {first['seconds']:.1f} | {first['peak_rss_mb']:.0f} MB | "
              f"{first['tree_peak_mb']:.0f} MB | {first['shards']} | {again['seconds']:.1f} s | {again['peak_rss_mb']:.0f} MB | "
              f"{remote['s3_requests'] if remote else '-'} | {first['load']:.1f} |")

    print(f"\n{args.changed:.0%} of the rows' instructions edited, against the same rows rewritten (every call cached)")
    print("| rows | rewritten: total s | edited: calls | first request s | first shard s | total s | over the rewritten s |")
    print("|---|---|---|---|---|---|---|")
    for n, _, _, _, _, touched, changed in table:
        print(f"| {n:,} | {touched['seconds']:.1f} | {changed['cost']['engine_rows']:,} | {fmt_s(changed['first_request_s'])} | "
              f"{fmt_s(changed['first_s'])} | {changed['seconds']:.1f} | {changed['seconds'] - touched['seconds']:+.1f} |")


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def rewrite(src: str, dst: str, share: float) -> None:
    """`src` copied to `dst` a row group at a time, with the instruction of every (1/share)-th row
    edited (in the query too, which carries it): new calls for those rows, the rest cached."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    every = round(1 / share) if share else 0
    source, done = pq.ParquetFile(src), 0
    with pq.ParquetWriter(dst, source.schema_arrow) as writer:
        for g in range(source.num_row_groups):
            table = source.read_row_group(g)
            if every:
                edit = pa.array((np.arange(done, done + table.num_rows) % every) == 0)
                for name in ("only_instruction", "query"):
                    col = table[name]
                    revised = pc.binary_join_element_wise(col, pa.scalar(" Prefer sources from this decade."), "")
                    table = table.set_column(table.schema.get_field_index(name), name, pc.if_else(edit, revised, col))
            writer.write_table(table)
            done += table.num_rows


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
