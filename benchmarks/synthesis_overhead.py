"""What the synthesis pipeline costs on top of talking to the engine directly.

(a) openai engine, against a fixed-latency OpenAI-compatible server written for this benchmark (in
    its own process), at each concurrency (default 64 and 256), the same request bodies five ways:
    a bare asyncio loop over `httpx` (the common choice of a Python client), a bare asyncio loop over `aiohttp`
    (the anchor), the engine's own client on one loop without Ray, the engine's Ray Data stage alone
    on rendered rows, and `run_synthesis` end to end
    (seeds → render → engine stage → parse/guard → shards). Ray start-up is paid before the clock
    starts. Target: pipeline rows/s ≥ 0.8 × the bare aiohttp loop; the stage alone shows whether the
    client or the driver path limits the ratio.
(b) vllm engine: `run_synthesis` with the CPU vLLM and the packaged SmolLM2, versus `vllm.LLM.chat`
    called directly on the same rendered messages with the same sampling. Rows/s both ways; the direct
    side's `import vllm`, engine start-up and generation reported separately (start-up dominates on
    small runs). End to end counts the import on both sides: the pipeline's engine actor imports vLLM
    inside its clock, as a user's script would.

Run:  nice -n 19 python benchmarks/synthesis_overhead.py [--rows 5000 --latency-ms 50 --concurrency 64 256 --actors 1]
      python benchmarks/synthesis_overhead.py --skip-vllm     # (a) only
      python benchmarks/synthesis_overhead.py --skip-openai --vllm-rows 64 --vllm-batching 8 2   # (b), two batchings
(b) runs in subprocesses so each side starts its own engine: `--only vllm-pipeline|vllm-direct`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULT = "BENCH-RESULT "
ANSWER = "<answer><new_instruction>Only sources written for professional growers.</new_instruction></answer>"


def serve_fixed_latency(port: int, latency_s: float) -> None:
    """A minimal OpenAI-compatible /v1/chat/completions that sleeps `latency_s`, then answers. Run in
    its own process (`--serve`), so the clients measured never share an interpreter lock with it.
    GET /first gives the wall-clock time of the first request since the last POST /first (null if none)."""
    import time

    from aiohttp import web

    first: list[float] = []

    async def chat(request: web.Request) -> web.Response:
        if not first:
            first.append(time.time())
        body = await request.json()
        await asyncio.sleep(latency_s)
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920},
        })

    async def first_request(request: web.Request) -> web.Response:
        if request.method == "POST":
            first.clear()
        return web.json_response({"first": first[0] if first else None})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_route("*", "/first", first_request)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=4096)


def start_server(latency_ms: float) -> tuple[subprocess.Popen, str]:
    """The fixed-latency server in a child process; returns it and its /v1 root once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--latency-ms", str(latency_ms)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}/v1"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fixed-latency server did not start")


def seed_file(rows: int, folder: Path) -> str:
    """`rows` eligible seeds: the bundled sample's instruct rows, repeated under fresh query ids."""
    from dualview_core import sample

    base = [json.loads(line) for line in open(sample.seeds_path(), encoding="utf-8")]
    base = [r for r in base if r["has_instruction"]]
    path = folder / "seeds.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({**base[i % len(base)], "query_id": f"bench-{i}"}, ensure_ascii=False) + "\n")
    return str(path)


def rendered(seeds: str, cfg) -> list[list[dict]]:
    from dualview_core.data.loading import read_seeds
    from dualview_core.method.prompting import default_template, render
    from dualview_core.data.seeds import select_synthesis_seeds
    from tasks.synthesis.engines import with_prefill

    table = select_synthesis_seeds(read_seeds(seeds).seeds).to_pylist()[: cfg.limit]
    return [with_prefill(render(s, 0, default_template()), cfg.sampling) for s in table]


def request_body(model: str, messages: list[dict], sampling) -> dict:
    """The body the engine's client sends (prefill continued and echoed), so every path sends the same bytes."""
    from dualview_core.config import OpenAIEngineConfig
    from tasks.synthesis.openai_client import ChatClient

    return ChatClient(OpenAIEngineConfig(model=model), sampling)._body(messages[:-1] if sampling.prefill else messages)


async def bare_httpx(base_url: str, bodies: list[dict], concurrency: int) -> float:
    """A bare asyncio loop over one pooled `httpx.AsyncClient`: the client a user would pick first."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=120) as client:
        async def one(body):
            async with gate:
                (await client.post("/chat/completions", json=body)).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.perf_counter() - start


async def bare_aiohttp(base_url: str, bodies: list[dict], concurrency: int) -> float:
    """A bare asyncio loop over one `aiohttp.ClientSession` with a connector limit of `concurrency`:
    the anchor the engine is measured against."""
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    url = base_url + "/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(body):
            async with gate, session.post(url, json=body) as response:
                response.raise_for_status()
                await response.json()

        start = time.perf_counter()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.perf_counter() - start


async def client_loop(cfg, conversations: list[list[dict]]) -> float:
    """The engine's own client (`ChatClient`: body, retries, result rows) on one asyncio loop, no Ray."""
    from tasks.synthesis.openai_client import ChatClient

    client = ChatClient(cfg.openai.model_copy(update={"concurrency": cfg.openai.concurrency * cfg.openai.actors}),
                        cfg.sampling)
    rows = [{"cache_key": f"k{i}", "messages": m[:-1] if cfg.sampling.prefill else m} for i, m in enumerate(conversations)]
    start = time.perf_counter()
    results = await client.complete_all(rows)
    elapsed = time.perf_counter() - start
    await client.aclose()
    assert all(r["error"] is None for r in results), next(r["error"] for r in results if r["error"])
    return elapsed


def engine_stage(cfg, conversations: list[list[dict]]) -> tuple[float, float]:
    """The openai engine's Ray Data stage alone, on already-rendered rows (no seed reading, rendering,
    parsing or shard writing): what the client costs inside Ray Data. (seconds end to end, steady
    rows/s after the first answers, i.e. without the actors' start-up)."""
    import ray

    from tasks.synthesis.engines import make_engine

    rows = [{"cache_key": f"k{i}", "messages": m[:-1] if cfg.sampling.prefill else m} for i, m in enumerate(conversations)]
    start = time.perf_counter()
    answered, first_t, first_n = 0, None, 0
    for batch in make_engine(cfg).transform(ray.data.from_items(rows)).iter_batches(batch_size=256, batch_format="pyarrow"):
        answered += batch.num_rows
        if first_t is None:
            first_t, first_n = time.perf_counter(), answered
    elapsed = time.perf_counter() - start
    assert answered == len(rows), (answered, len(rows))
    return elapsed, (answered - first_n) / (start + elapsed - first_t)


def bench_openai(args, folder: Path) -> list[dict]:
    """Per concurrency: bare httpx, bare aiohttp, the engine stage alone, the whole pipeline; rows/s."""
    from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
    from tasks.synthesis.ray_runtime import ensure_ray
    from tasks.synthesis.driver import run_synthesis

    server, base_url = start_server(args.latency_ms)
    try:
        seeds = seed_file(args.rows, folder)
        started = time.perf_counter()
        ensure_ray()
        ray_start = time.perf_counter() - started
        out = []
        for concurrency in args.concurrency:
            # the same requests in flight as the bare loops: `concurrency` over all the actors together
            cfg = SynthesisConfig(engine="openai", shard_rows=args.shard_rows, openai=OpenAIEngineConfig(
                base_url=base_url, model="bench", concurrency=max(1, concurrency // args.actors), actors=args.actors))
            conversations = rendered(seeds, cfg)
            bodies = [request_body("bench", m, cfg.sampling) for m in conversations]
            row = {"concurrency": concurrency, "rows": len(bodies), "ray_start_s": ray_start}
            if not args.skip_httpx:
                row["httpx_s"] = asyncio.run(bare_httpx(base_url, bodies, concurrency))
            row["aiohttp_s"] = asyncio.run(bare_aiohttp(base_url, bodies, concurrency))
            row["client_s"] = asyncio.run(client_loop(cfg, conversations))
            row["stage_s"], row["stage_steady"] = engine_stage(cfg, conversations)
            start = time.perf_counter()
            summary = run_synthesis(seeds, str(folder / f"out-{concurrency}"), cfg, progress=lambda m: None)
            row["pipeline_s"] = time.perf_counter() - start
            assert summary["cost"]["engine_rows"] == len(bodies), summary["cost"]
            row["pipeline_steady"] = summary["cost"].get("steady_rows_per_s") or float("nan")
            out.append(row)
        return out
    finally:
        server.kill()
        server.wait()


def variant_seeds(rows: int, folder: Path) -> str:
    """`rows` eligible seeds: the bundled sample's eligible rows (MS MARCO-sized passages), repeated
    with the case number in the query, so every prompt is distinct and realistic."""
    from dualview_core import sample

    base = [json.loads(line) for line in open(sample.seeds_path(), encoding="utf-8")]
    base = [r for r in base if r["has_instruction"] and r["new_negatives"]]
    path = folder / f"variants-{rows}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            r, case = base[i % len(base)], i // len(base)
            only = f"{r['only_query']} (case {case})" if case else r["only_query"]
            f.write(json.dumps({**r, "query_id": f"{r['query_id']}-{case}", "only_query": only,
                                "query": f"{only} {r['only_instruction']}"}, ensure_ascii=False) + "\n")
    return str(path)


def bench_vllm_side(which: str, rows: int, folder: Path, batching: tuple[int, int] | None = None) -> dict:
    from dualview_core.config import SynthesisConfig

    cfg = SynthesisConfig(model_cache_dir=str(Path(__file__).resolve().parents[1] / ".cache/models"))
    if batching:  # (batch_size, max_concurrent_batches) instead of the CPU profile's
        cfg = cfg.model_copy(update={"vllm": cfg.vllm.model_copy(update=dict(zip(("batch_size", "max_concurrent_batches"), batching)))})
    seeds = variant_seeds(rows, folder)
    if which == "vllm-pipeline":
        from tasks.synthesis.llm_models import resolve_llm
        from tasks.synthesis.driver import run_synthesis

        resolve_llm(cfg.vllm.model, cfg.model_cache_dir)
        start = time.perf_counter()
        summary = run_synthesis(seeds, str(folder / f"out-vllm-{batching}"), cfg, progress=lambda m: None)
        total = time.perf_counter() - start
        cost = summary["cost"]
        return {"total_s": total, "rows": cost["engine_rows"], "first_answers_s": cost["first_answers_s"],
                "steady_rows_per_s": cost["steady_rows_per_s"]}
    start = time.perf_counter()  # a user's script pays the import too; the pipeline's engine actor does
    from vllm import LLM, SamplingParams

    imported = time.perf_counter() - start

    from tasks.synthesis.llm_models import resolve_llm

    v, s = cfg.vllm, cfg.sampling
    os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"  # as the pipeline's engine does: every core for vLLM
    start = time.perf_counter()
    llm = LLM(model=resolve_llm(v.model, cfg.model_cache_dir), dtype=v.dtype, enforce_eager=v.enforce_eager,
              max_model_len=v.max_model_len, enable_prefix_caching=v.enable_prefix_caching,
              **({"max_num_seqs": v.max_num_seqs} if v.max_num_seqs else {}))
    startup = time.perf_counter() - start
    conversations = rendered(seeds, cfg)
    params = SamplingParams(**s.engine_params())
    start = time.perf_counter()
    llm.chat(conversations, params, add_generation_prompt=False, continue_final_message=True, use_tqdm=False)
    return {"import_s": imported, "startup_s": startup, "generate_s": time.perf_counter() - start, "rows": len(conversations)}


def run_side(which: str, rows: int, folder: Path, batching: tuple[int, int] | None = None) -> dict:
    extra = ["--vllm-batching", *map(str, batching)] if batching else []
    out = subprocess.run([sys.executable, __file__, "--only", which, "--vllm-rows", str(rows), "--workdir", str(folder), *extra],
                         capture_output=True, text=True, check=True)
    # engines log to stdout too: the result is the line with the marker
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith(RESULT))[len(RESULT):])


def print_openai(rows: list[dict], args) -> None:
    first = rows[0]
    print(f"(a) openai engine, {first['rows']} rows, {args.latency_ms:.0f} ms/request, {args.actors} engine actor(s)"
          f" sharing each concurrency;"
          f" rows/s (Ray start-up {first['ray_start_s']:.1f} s, not counted); load average {os.getloadavg()[0]:.2f}")
    print("    end to end = all rows / wall time (actor start-up included); steady = after the first answers")
    print("    client = the engine's ChatClient on one asyncio loop, no Ray; stage = its Ray Data stage alone")
    columns = ("concurrency", "limit", "bare httpx", "bare aiohttp", "client", "stage", "stage steady", "pipeline",
               "pipe steady", "pipe/aiohttp", "steady/aiohttp")
    print("    " + "".join(f"{c:>15}" for c in columns))
    for r in rows:
        rate = {k: r["rows"] / r[f"{k}_s"] if f"{k}_s" in r else float("nan")
                for k in ("httpx", "aiohttp", "client", "stage", "pipeline")}
        values = (r["concurrency"], r["concurrency"] / (args.latency_ms / 1000), rate["httpx"], rate["aiohttp"],
                  rate["client"], rate["stage"], r["stage_steady"], rate["pipeline"], r["pipeline_steady"],
                  rate["pipeline"] / rate["aiohttp"], r["pipeline_steady"] / rate["aiohttp"])
        print("    " + "".join(f"{v:>15.0f}" if i < 9 else f"{v:>15.3f}" for i, v in enumerate(values)))
    print("    target: pipeline / bare aiohttp >= 0.8 at each concurrency; stage steady / aiohttp shows the client alone:")
    print("    " + ", ".join(f"c={r['concurrency']}: {r['stage_steady'] / (r['rows'] / r['aiohttp_s']):.3f}" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--actors", type=int, default=1,
                        help="openai engine actors (synthesis.openai.actors); each gets concurrency / actors")
    parser.add_argument("--shard-rows", type=int, default=256)
    parser.add_argument("--skip-httpx", action="store_true", help="leave out the bare httpx loop (slow)")
    parser.add_argument("--vllm-rows", type=int, default=128)
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--skip-openai", action="store_true", help="(b) only")
    parser.add_argument("--vllm-batching", type=int, nargs=2, action="append", metavar=("BATCH", "IN_FLIGHT"),
                        help="(b): also run the pipeline with this batch_size and max_concurrent_batches (repeatable)")
    parser.add_argument("--only", choices=["vllm-pipeline", "vllm-direct"])
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the fixed-latency server
    parser.add_argument("--workdir")
    args = parser.parse_args()
    if args.serve:
        serve_fixed_latency(args.serve, args.latency_ms / 1000)
        return
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="synbench-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.only:
        batching = tuple(args.vllm_batching[0]) if args.vllm_batching else None
        print(RESULT + json.dumps(bench_vllm_side(args.only, args.vllm_rows, folder, batching)), flush=True)
        return
    if not args.skip_openai:
        print_openai(bench_openai(args, folder), args)
    if args.skip_vllm:
        return
    direct = run_side("vllm-direct", args.vllm_rows, folder)
    print(f"(b) vllm engine (CPU, SmolLM2), {direct['rows']} rows; load average {os.getloadavg()[0]:.2f}")
    whole = direct["import_s"] + direct["startup_s"] + direct["generate_s"]
    print(f"    vllm.LLM.chat: import {direct['import_s']:.1f} s + start-up {direct['startup_s']:.1f} s + generation"
          f" {direct['generate_s']:.1f} s ({direct['rows'] / direct['generate_s']:.2f} rows/s generating;"
          f" {direct['rows'] / whole:.2f} rows/s end to end)")
    for batching in [None, *map(tuple, args.vllm_batching or [])]:
        pipe = run_side("vllm-pipeline", args.vllm_rows, folder, batching)
        steady = pipe["steady_rows_per_s"] or float("nan")
        print(f"    pipeline, batch x in flight {batching or 'of the CPU profile'}: {pipe['total_s']:.1f} s end to end,"
              f" Ray and engine start-up included ({pipe['rows'] / pipe['total_s']:.2f} rows/s); first answers after"
              f" {pipe['first_answers_s']:.1f} s, then {steady:.2f} rows/s;"
              f" steady / direct generating {steady / (direct['rows'] / direct['generate_s']):.3f},"
              f" end to end / direct end to end {whole / pipe['total_s']:.3f}"
              f" (without the direct side's import {(whole - direct['import_s']) / pipe['total_s']:.3f})")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    main()
