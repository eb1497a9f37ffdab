"""What the synthesis pipeline costs on top of talking to the engine directly.

(a) openai engine: `run_synthesis` (Ray Data pipeline: render → engine stage → parse/guard → shards)
    against a fixed-latency OpenAI-compatible server written for this benchmark, versus a plain
    `openai.AsyncOpenAI` loop at the same concurrency sending the same messages. Ray start-up is paid
    before the clock starts. Target: pipeline throughput ≥ 0.95 × the plain loop.
(b) vllm engine: `run_synthesis` with the CPU vLLM and the packaged SmolLM2, versus `vllm.LLM.chat`
    called directly on the same rendered messages with the same sampling. Rows/s both ways; engine
    start-up reported separately (it dominates on small runs).

Run:  python benchmarks/synthesis_overhead.py [--rows 800 --latency-ms 100 --concurrency 8]
      python benchmarks/synthesis_overhead.py --skip-vllm     # (a) only
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
import threading
import time
from pathlib import Path

RESULT = "BENCH-RESULT "
ANSWER = "<answer><new_instruction>Only sources written for professional growers.</new_instruction></answer>"


def serve_fixed_latency(port: int, latency_s: float) -> None:
    """A minimal OpenAI-compatible /v1/chat/completions that sleeps `latency_s`, then answers."""
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(latency_s)
        return web.json_response({
            "id": "x", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920},
        })

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    threading.Thread(target=loop.run_forever, daemon=True).start()


def seed_file(rows: int, folder: Path) -> str:
    """`rows` eligible seeds: the bundled sample's instruct rows, repeated under fresh query ids."""
    from dualview_core import samples

    base = [json.loads(line) for line in open(samples.seeds_path(), encoding="utf-8")]
    base = [r for r in base if r["has_instruction"]]
    path = folder / "seeds.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({**base[i % len(base)], "query_id": f"bench-{i}"}, ensure_ascii=False) + "\n")
    return str(path)


def rendered(seeds: str, cfg) -> list[list[dict]]:
    from dualview_core.loading import read_seeds
    from dualview_core.prompting import default_template, render
    from dualview_core.seeds import select_synthesis_seeds
    from tasks.engines import with_prefill

    table = select_synthesis_seeds(read_seeds(seeds).seeds).to_pylist()[: cfg.limit]
    return [with_prefill(render(s, 0, default_template()), cfg.sampling) for s in table]


async def plain_loop(base_url: str, model: str, conversations: list, concurrency: int, sampling) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="unused")
    gate = asyncio.Semaphore(concurrency)
    params = sampling.engine_params()

    async def one(messages):
        async with gate:
            await client.chat.completions.create(model=model, messages=messages, temperature=params["temperature"],
                                                 max_tokens=params["max_tokens"], seed=params["seed"])

    start = time.perf_counter()
    await asyncio.gather(*(one(m) for m in conversations))
    return time.perf_counter() - start


def bench_openai(args, folder: Path) -> dict:
    from dualview_core.config import OpenAIEngineConfig, SynthesisConfig
    from tasks.ray_runtime import ensure_ray
    from tasks.synthesis import run_synthesis
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve_fixed_latency(port, args.latency_ms / 1000)
    base_url = f"http://127.0.0.1:{port}/v1"
    cfg = SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_url=base_url, model="bench", concurrency=args.concurrency),
                          shard_rows=64)
    seeds = seed_file(args.rows, folder)
    started = time.perf_counter()
    ensure_ray()
    ray_start = time.perf_counter() - started
    start = time.perf_counter()
    summary = run_synthesis(seeds, str(folder / "out"), cfg, progress=lambda m: None)
    pipeline = time.perf_counter() - start
    assert summary["cost"]["engine_rows"] == args.rows, summary["cost"]
    plain = asyncio.run(plain_loop(base_url, "bench", rendered(seeds, cfg), args.concurrency, cfg.sampling))
    ideal = args.rows * args.latency_ms / 1000 / args.concurrency
    return {"rows": args.rows, "ray_start_s": ray_start, "pipeline_s": pipeline, "plain_s": plain, "ideal_s": ideal,
            "first_answers_s": summary["cost"]["first_answers_s"], "steady_rows_per_s": summary["cost"]["steady_rows_per_s"]}


def bench_vllm_side(which: str, rows: int, folder: Path) -> dict:
    from dualview_core.config import SynthesisConfig

    cfg = SynthesisConfig(limit=rows, shard_rows=16, model_cache_dir=str(Path(__file__).resolve().parents[1] / ".cache/models"))
    from dualview_core import samples

    if which == "vllm-pipeline":
        from tasks.llm_models import resolve_llm
        from tasks.synthesis import run_synthesis

        resolve_llm(cfg.vllm.model, cfg.model_cache_dir)
        start = time.perf_counter()
        summary = run_synthesis(samples.seeds_path(), str(folder / "out-vllm"), cfg, progress=lambda m: None)
        total = time.perf_counter() - start
        cost = summary["cost"]
        return {"total_s": total, "rows": cost["engine_rows"], "first_answers_s": cost["first_answers_s"],
                "steady_rows_per_s": cost["steady_rows_per_s"]}
    from vllm import LLM, SamplingParams

    from tasks.llm_models import resolve_llm

    v, s = cfg.vllm, cfg.sampling
    start = time.perf_counter()
    llm = LLM(model=resolve_llm(v.model, cfg.model_cache_dir), dtype=v.dtype, enforce_eager=v.enforce_eager,
              max_model_len=v.max_model_len, enable_prefix_caching=v.enable_prefix_caching)
    startup = time.perf_counter() - start
    conversations = rendered(samples.seeds_path(), cfg)
    params = SamplingParams(**s.engine_params())
    start = time.perf_counter()
    llm.chat(conversations, params, add_generation_prompt=False, continue_final_message=True, use_tqdm=False)
    return {"startup_s": startup, "generate_s": time.perf_counter() - start, "rows": len(conversations)}


def run_side(which: str, rows: int, folder: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--only", which, "--vllm-rows", str(rows), "--workdir", str(folder)],
                         capture_output=True, text=True, check=True)
    # engines log to stdout too: the result is the line with the marker
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith(RESULT))[len(RESULT):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=800)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--vllm-rows", type=int, default=32)
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--only", choices=["vllm-pipeline", "vllm-direct"])
    parser.add_argument("--workdir")
    args = parser.parse_args()
    folder = Path(args.workdir or tempfile.mkdtemp(prefix="synbench-"))
    if args.only:
        print(RESULT + json.dumps(bench_vllm_side(args.only, args.vllm_rows, folder)), flush=True)
        return
    a = bench_openai(args, folder)
    print(f"(a) openai engine, {a['rows']} rows, {args.latency_ms:.0f} ms/request, concurrency {args.concurrency}"
          f" (ideal {a['ideal_s']:.2f} s; Ray start-up {a['ray_start_s']:.1f} s, not counted)")
    print(f"    {'path':<28}{'seconds':>9}{'rows/s':>9}")
    for name, seconds in (("dualview pipeline (Ray)", a["pipeline_s"]), ("plain AsyncOpenAI loop", a["plain_s"])):
        print(f"    {name:<28}{seconds:>9.2f}{a['rows'] / seconds:>9.1f}")
    ratio = a["plain_s"] / a["pipeline_s"]
    steady = a["steady_rows_per_s"] / (a["rows"] / a["plain_s"])
    print(f"    end-to-end throughput ratio pipeline / plain: {ratio:.3f}"
          f"  (the pipeline's first answers arrive after {a['first_answers_s']:.1f} s: stage start-up)")
    print(f"    steady-state ratio (pipeline after its first answers, {a['steady_rows_per_s']:.1f} rows/s) / plain: {steady:.3f}"
          f"  (target >= 0.95: {'PASS' if steady >= 0.95 else 'MISS'})")
    if args.skip_vllm:
        return
    pipe, direct = run_side("vllm-pipeline", args.vllm_rows, folder), run_side("vllm-direct", args.vllm_rows, folder)
    print(f"(b) vllm engine (CPU, SmolLM2), {direct['rows']} rows")
    print(f"    dualview pipeline: {pipe['total_s']:.1f} s end to end, Ray and engine start-up included"
          f" ({pipe['rows'] / pipe['total_s']:.2f} rows/s); first answers after {pipe['first_answers_s']:.1f} s,"
          f" then {pipe['steady_rows_per_s'] or float('nan'):.2f} rows/s")
    print(f"    vllm.LLM.chat    : start-up {direct['startup_s']:.1f} s + generation {direct['generate_s']:.1f} s"
          f" ({direct['rows'] / direct['generate_s']:.2f} rows/s generating; "
          f"{direct['rows'] / (direct['startup_s'] + direct['generate_s']):.2f} rows/s with start-up)")
    print(f"    end-to-end ratio pipeline / direct: {(direct['startup_s'] + direct['generate_s']) / pipe['total_s']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    main()
