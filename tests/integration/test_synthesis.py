"""Synthesis with real engines: vLLM's CPU build through Ray Data, and vLLM's OpenAI-compatible server.

Also: a run killed with SIGKILL resumes to exactly the rows of an uninterrupted run; changing k seed
rows costs exactly k engine calls (counted by the server itself); no change costs none; a seed whose
prompt does not fit the context is one rejected row, not a failed run; an old-format cache is reused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.services import kill_session

from dualview_core import sample
from dualview_core.config import OpenAIEngineConfig, SamplingConfig, SynthesisConfig
from tasks.synthesis.driver import run_synthesis

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
MODEL_CACHE = REPO / ".cache" / "models"


def outputs(out: Path) -> tuple[list[dict], list[dict]]:
    return pq.read_table(out / "dual_views.parquet").to_pylist(), pq.read_table(out / "rejections.parquet").to_pylist()


def shard_keys(out: Path) -> list[str]:
    return [k for shard in sorted((out / "records").glob("part-*.parquet")) for k in pq.read_table(shard).column("cache_key").to_pylist()]


def seeds_with_a_long_one(tmp_path: Path, normal: int) -> Path:
    """`normal` eligible sample seeds, then one whose passages (~6.9k characters each, under the
    validation limit) push its prompt past the CPU profile's 2048-token context."""
    rows = [json.loads(line) for line in open(sample.seeds_path(), encoding="utf-8")]
    rows = [r for r in rows if r["has_instruction"] and r["new_negatives"]][:normal]
    long = json.loads(json.dumps(rows[0]))
    long["query_id"] = "long-passages"
    for name in ("positive_passages", "new_negatives", "negative_passages"):
        for i, p in enumerate(long[name]):
            p["docid"], p["text"] = f"long-{name}-{i}", (p["text"] + " ") * (6900 // (len(p["text"]) + 1))
    path = tmp_path / "seeds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + [long]), encoding="utf-8")
    return path


def test_vllm_engine_through_ray_data_with_an_over_long_seed(tmp_path):
    out, seeds = tmp_path / "syn", seeds_with_a_long_one(tmp_path, 4)
    cmd = [str(Path(sys.executable).parent / "dualview"), "synthesize", "--seeds", str(seeds), "--out", str(out),
           "--shard-rows", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    (out / "summary.json").write_text(done.stdout)  # kept for a look at the numbers
    dual_views, rejections = outputs(out)
    assert summary["plan"]["pending"] == 5 and summary["cost"]["engine_rows"] == 5
    assert len(dual_views) + len(rejections) == 5 == summary["dual_views"] + summary["rejected"]
    assert summary["outcomes"]["accepted"] + summary["outcomes"]["rejected"] == 5
    [long] = [r for r in rejections if r["query_id"] == "long-passages"]
    assert long["rejection"] == "prompt_too_long" and long["attempts"] == 0 and long["prompt_tokens"] > 2048 - 64
    assert summary["cost"]["prompt_tokens"] > 4 * 500  # the real prompts went through the real engine
    assert summary["cost"]["attempts"] == 4  # the long one never reached it
    assert all(r["raw_response"].startswith("<answer><new_instruction>") for r in rejections if r["attempts"])
    assert all(r["rejection"] for r in rejections) and all(r["instruction"] for r in dual_views)
    assert all(r["query"] and r["original_instruction"] for r in rejections)
    assert len(shard_keys(out)) == 5 and (out / "report.md").is_file() and summary["report"] == f"{out}/report.md"
    cfg = SynthesisConfig(shard_rows=4, model_cache_dir=str(MODEL_CACHE))
    again = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert again["plan"] == {"pending": 0, "cached": 5, "new": 0, "changed": 0, "removed": 0, "unchanged": 5}
    assert again["cost"]["engine_rows"] == 0 and outputs(out) == (dual_views, rejections)


def test_a_row_the_engine_fails_on_is_a_complete_final_record(tmp_path):
    """With the length check off, the long prompt reaches vLLM, which fails that row alone."""
    out, seeds = tmp_path / "syn", seeds_with_a_long_one(tmp_path, 2)
    cfg = SynthesisConfig(shard_rows=4, model_cache_dir=str(MODEL_CACHE), count_prompt_tokens=False, sampling=SamplingConfig(
        max_tokens=16, repetition_penalty=1.15, prefill="<answer><new_instruction>", stop=("</new_instruction>",)))
    summary = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert summary["outcomes"]["accepted"] + summary["outcomes"]["rejected"] == 3
    [long] = [r for r in outputs(out)[1] if r["query_id"] == "long-passages"]
    assert long["rejection"] == "prompt_too_long" and long["attempts"] == 1 and "maximum" in long["raw_response"]
    again = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert again["plan"]["pending"] == 0  # final: not retried on every run


@pytest.fixture(scope="module")
def server(vllm_server):
    return vllm_server


def served_requests(server: str) -> float:
    """Finished requests as the server counts them (Prometheus metrics)."""
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("vllm:request_success_total"))


def openai_cfg(server: str, **kw) -> SynthesisConfig:
    return SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_url=f"{server}/v1", model="smollm2", concurrency=4), **kw)


def test_openai_engine_and_incremental_cost(server, tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    shutil.copy(sample.seeds_path(), seeds)
    out = tmp_path / "syn"
    cfg = openai_cfg(server, limit=6, shard_rows=4)
    before = served_requests(server)
    first = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert served_requests(server) - before == 6
    assert first["cost"]["engine_rows"] == 6 and first["cost"]["prompt_tokens"] > 6 * 500
    assert first["dual_views"] + first["rejected"] == 6
    # vLLM's server continues the prefill and echoes it back: every reply is prefill + continuation,
    # and no accepted instruction holds a tag or chatter
    dual_views, rejections = outputs(out)
    assert all(r["raw_response"].startswith("<answer><new_instruction>") for r in rejections if r["attempts"])
    assert all("<" not in v["instruction"] and not v["instruction"].lower().startswith("sure") for v in dual_views)

    rows = [json.loads(line) for line in seeds.read_text(encoding="utf-8").splitlines()]
    eligible = [r for r in rows if r["has_instruction"]][:6]
    for r in eligible[2:4]:  # change two seeds within the first six
        r["positive_passages"][0]["text"] += " Updated in the latest revision."
    seeds.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    before = served_requests(server)
    second = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert served_requests(server) - before == 2
    assert second["plan"] == {"pending": 2, "cached": 4, "new": 0, "changed": 2, "removed": 0, "unchanged": 4}

    before = served_requests(server)
    third = run_synthesis(str(seeds), str(out), cfg, progress=lambda m: None)
    assert served_requests(server) - before == 0 and third["plan"]["pending"] == 0


def synthesize_cli(server: str, out: Path, limit: int) -> list[str]:
    return [str(Path(sys.executable).parent / "dualview"), "synthesize", "--seeds", sample.seeds_path(), "--out", str(out),
            "--engine", "openai", "--base-url", f"{server}/v1", "--model", "smollm2", "--concurrency", "1",
            "--limit", str(limit), "--shard-rows", "2"]


def test_sigkill_then_resume_equals_an_uninterrupted_run(server, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # batches of one row, a few in flight, published in shards of 2: killed after the first shard, with
    # rows still to answer (the server answers one wave of in-flight rows at a time)
    total = 8
    subprocess.run(synthesize_cli(server, whole, total), check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(synthesize_cli(server, killed, total), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while not list((killed / "records").glob("part-*.parquet")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the run finished before it could be killed"
        time.sleep(0.05)
    kill_session(proc.pid)  # driver, Ray and every worker, mid-stream
    proc.wait()
    published = len(shard_keys(killed))
    assert 0 < published < total and not (killed / "manifest.json").exists()
    resumed = subprocess.run(synthesize_cli(server, killed, total), check=True, capture_output=True, timeout=600, text=True)
    summary = json.loads(resumed.stdout)
    assert summary["plan"]["cached"] == published and summary["plan"]["pending"] == total - published
    keys = shard_keys(killed)
    assert len(keys) == len(set(keys)) == total  # no duplicates, nothing lost
    assert sorted(keys) == sorted(shard_keys(whole))
    (dv_a, rej_a), (dv_b, rej_b) = outputs(whole), outputs(killed)
    assert len(dv_a) + len(rej_a) == len(dv_b) + len(rej_b) == total


def test_a_row_group_that_cannot_be_read_fails_the_run_with_one_line_and_nothing_published(tmp_path):
    """The first pass reads the seeds in Ray Data tasks: a chunk that cannot be read is the same
    one-line SourceError the sequential reader gives (the CLI's exit 2), not Ray's traceback."""
    from dualview_core.data.sources import SourceError
    from tests.helpers.factories import promptriever_row, write_parquet

    path = write_parquet(tmp_path / "seeds.parquet", [promptriever_row(f"q{i}") for i in range(40)], row_group_size=10)
    data = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    data[start:start + 200] = b"\xff" * 200  # the second row group's first page; the footer stays readable
    path.write_bytes(bytes(data))
    cfg = SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    with pytest.raises(SourceError) as caught:
        run_synthesis(str(path), str(tmp_path / "out"), cfg)
    message = str(caught.value)
    assert message.startswith(f"{path}: unreadable (") and "\n" not in message
    assert not list((tmp_path / "out").glob("records/*.parquet"))


def test_a_parquet_source_without_row_groups_is_an_empty_run(tmp_path):
    """A writer closed before its first row leaves a file of no row groups, so no chunk: the run plans
    nothing, sends nothing and publishes the empty tables (a stream of no chunks is none at all)."""
    import pyarrow as pa

    from tests.helpers.factories import promptriever_row

    path = tmp_path / "seeds.parquet"
    pq.ParquetWriter(path, pa.Table.from_pylist([promptriever_row("q0")]).schema).close()
    cfg = SynthesisConfig(engine="openai", openai=OpenAIEngineConfig(base_url="http://127.0.0.1:9/v1", model="m"))
    summary = run_synthesis(str(path), str(tmp_path / "out"), cfg)
    assert summary["synthesis_seeds"] == 0 and summary["plan"]["pending"] == 0 and summary["cost"]["engine_rows"] == 0
    assert pq.read_table(tmp_path / "out" / "dual_views.parquet").num_rows == 0
    assert pq.read_table(tmp_path / "out" / "quarantine.parquet").num_rows == 0


@pytest.mark.parametrize("prompt", ["compact", "paper"])  # a prefill the engine continues; a fresh reply
def test_the_staged_prompt_is_the_text_rays_chat_template_stage_would_make(prompt):
    """vLLM reads the prompt the planning pass templated, and Ray's chat-template stage is left out of
    its processor: the text must be the one that stage would have made from the messages."""
    import asyncio

    from ray.llm._internal.batch.stages.chat_template_stage import ChatTemplateUDF

    from dualview_core.config import VLLMEngineConfig
    from dualview_core.config.synthesis import prompt_sampling
    from dualview_core.method.prompting import template_named, with_prefill
    from tasks.synthesis.engines import prompt_sizer, templated
    from tasks.synthesis.llm_models import resolve_llm

    cfg = SynthesisConfig(prompt=prompt, sampling=prompt_sampling(prompt), vllm=VLLMEngineConfig(max_model_len=4096),
                          model_cache_dir=str(MODEL_CACHE))
    assert templated(cfg) and not templated(cfg.model_copy(update={"count_prompt_tokens": False}))
    model = resolve_llm(cfg.vllm.model, cfg.model_cache_dir)
    messages = [{"role": "system", "content": template_named(prompt)},
                {"role": "user", "content": "QUERY: soil pH for blueberries\nINSTRUCTION: Only peer-reviewed studies."}]
    stage = ChatTemplateUDF("__data", ["messages"], model=model)

    async def through_the_stage() -> str:
        [out] = [batch async for batch in stage({"__data": [{"messages": with_prefill(messages, cfg.sampling)}]})]
        return out["__data"][0]["prompt"]

    sizer = prompt_sizer(cfg, model)
    text = sizer.text(messages)
    assert text == asyncio.run(through_the_stage())
    assert text.endswith(cfg.sampling.prefill) if cfg.sampling.prefill else text.rstrip().endswith("assistant")
    assert sizer.tokens(text) > 300 and sizer.context == cfg.vllm.max_model_len
