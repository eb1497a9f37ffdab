"""Training throughput: this trainer (DeepSpeed, one CPU worker) against the sentence-transformers
trainer with MultipleNegativesRankingLoss, fed the same rows and the same hard negatives.

Two pairings (`--loss`): `cached` (default) — our gradient-cached step with chunks of `--mini-batch`
texts against CachedMultipleNegativesRankingLoss with mini_batch_size `--mini-batch` (both embed
without graphs, take the loss gradient on the embeddings, re-run each chunk with its graph);
`plain` — our uncached step (grad_cache_chunk 0) against MultipleNegativesRankingLoss.

Both sides: the packaged MiniLM, the same batch size and max length, in-batch negatives on (MNRL
always uses them), scale 1/τ = 50, AdamW with linear warm-up/decay, fp32 on CPU. Rows: the bundled
sample's ins-orig mixture; each row's K negatives are drawn once by `negatives.sample_negatives`
(epoch 0) and given to sentence-transformers as columns negative_1..negative_K (it needs a fixed
count, so K is strict: every row has K). Our trainer draws from the same function (re-drawn each
epoch: other negatives, the same count).

Measured in lock-step: the two trainers run in two fresh processes that take turns, one optimizer
step each (a pair of semaphores passes the turn), so the machine's other load — this benchmark was
written on 2 cores shared with other jobs — falls on both alike, step by step. Each step's wall and
CPU seconds are timed around the step alone (waiting for the turn excluded); the first `--skip`
steps (model loading, warm-up) are left out. Reported: median samples/s of each side, the median
of the per-pair ratios, and CPU seconds per sample. The phases of our step (make batch, tokenise,
forward + loss, backward, optimizer step) are timed afterwards, alone, to show where time goes.

Target: ours / sentence-transformers >= 1.0 (samples/s; CPU efficiency as the cross-check).

Run:  python benchmarks/train_throughput.py [--loss cached --mini-batch 8 --steps 24 --skip 3 --batch-size 8
      --max-length 128 --negatives 7]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "torch_extensions"))

from dualview_core import sample
from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.model import resolve_model
from dualview_core.method.texts import query_text
from dualview_core.data.loading import read_seeds
from dualview_core.method.mixtures import Mixture, build_mixture
from dualview_core.method.negatives import sample_negatives
from dualview_core.method.texts import doc_text

TURN_TIMEOUT_S = 1800.0


class Lockstep:
    """Take turns with another process: time my step, pass the turn, wait for it back."""

    def __init__(self, mine, theirs):
        self.mine, self.theirs = mine, theirs
        self.steps: list[tuple[float, float]] = []  # (wall s, CPU s) per step
        self._start = (0.0, 0.0)

    def wait(self) -> None:
        if not self.mine.acquire(timeout=TURN_TIMEOUT_S):
            raise TimeoutError("the other trainer never passed the turn back")
        self._start = (time.perf_counter(), time.process_time())

    def done(self) -> None:
        self.steps.append((time.perf_counter() - self._start[0], time.process_time() - self._start[1]))
        self.theirs.release()


def run_ours(cfg: TrainingConfig, mixture: Mixture, turn: Lockstep) -> list[tuple[float, float]]:
    from tasks.training.trainer import train

    def on_record(step: int, metrics: dict) -> None:
        if "train/loss" in metrics:  # the end of an optimizer step
            turn.done()
            turn.wait()

    turn.wait()
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, mixture, f"{tmp}/ck", callback=on_record)
    return turn.steps


def st_dataset(mixture: Mixture, k: int, template: str):
    from datasets import Dataset

    rows = []
    for row in mixture.rows:
        negatives = sample_negatives(row, k, epoch=0, seed=0)
        rows.append({"anchor": query_text(row.query, row.instruction, template),
                     "positive": doc_text(row.positive.title, row.positive.text),
                     **{f"negative_{i + 1}": doc_text(p.title, p.text) for i, p in enumerate(negatives)}})
    return Dataset.from_list(rows)


def run_st(cfg: TrainingConfig, mixture: Mixture, turn: Lockstep) -> list[tuple[float, float]]:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss,
        MultipleNegativesRankingLoss,
    )
    from transformers import TrainerCallback

    class TakeTurns(TrainerCallback):
        def on_step_begin(self, *_, **__):
            turn.wait()

        def on_step_end(self, *_, **__):
            turn.done()

    model = SentenceTransformer(resolve_model(cfg.model), device="cpu")
    model.max_seq_length = cfg.max_length
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=cfg.batch_size, max_steps=cfg.max_steps,
            learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
            warmup_steps=cfg.warmup_ratio,  # transformers 5: a float < 1 is a ratio
            max_grad_norm=cfg.max_grad_norm, use_cpu=True, seed=cfg.seed, dataloader_drop_last=True,
            report_to="none", save_strategy="no", logging_steps=cfg.max_steps, disable_tqdm=True)
        if cfg.grad_cache_chunk:  # the same mini-batch as our chunk
            loss = CachedMultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature,
                                                      mini_batch_size=cfg.grad_cache_chunk)
        else:
            loss = MultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature)
        data = st_dataset(mixture, cfg.negatives, cfg.query_template)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss,
                                             callbacks=[TakeTurns()])
        trainer.train()
    return turn.steps


def phases(cfg: TrainingConfig, mixture: Mixture, steps: int) -> dict[str, float]:
    """Mean seconds per step of each phase of our uncached step, with the same engine and batches."""
    from tasks.training.trainer import worker_environment

    with worker_environment():
        return _time_phases(cfg, mixture, steps)


def _time_phases(cfg: TrainingConfig, mixture: Mixture, steps: int) -> dict[str, float]:
    import torch

    from dualview_core.method.loss import candidate_mask, info_nce, scatter_valid
    from dualview_core.method.negatives import block_width
    from tasks.training.trainer import _embed, _load, _micro_batches, _tokenize_sorted

    engine, model = _load(cfg, steps, 1)
    engine.train()  # as the trainer does: dropout on
    batches = _micro_batches(mixture, cfg, block_width(mixture.rows, cfg.negatives, strict=True), 0, 1)
    spent = {"make_batch": 0.0, "tokenize": 0.0, "forward+loss": 0.0, "backward": 0.0, "optimizer_step": 0.0}
    for _ in range(steps):
        stamps = [time.perf_counter()]
        batch = next(batches)
        stamps.append(time.perf_counter())
        q_in = _tokenize_sorted(model, batch.queries, cfg.encode_chunk, "query")
        d_in = _tokenize_sorted(model, batch.docs, cfg.encode_chunk, "document")
        stamps.append(time.perf_counter())
        q, d = _embed(engine, *q_in, "query"), _embed(engine, *d_in, "document")  # (batch, dim), (n_valid, dim)
        candidates = torch.tensor(batch.candidates)  # (batch, 1 + width)
        positives, allowed = candidate_mask(candidates, 0, len(batch.queries), True)
        loss = info_nce(q, scatter_valid(d, candidates), positives, allowed, cfg.temperature)
        stamps.append(time.perf_counter())
        engine.backward(loss)
        stamps.append(time.perf_counter())
        engine.step()
        stamps.append(time.perf_counter())
        for name, before, after in zip(spent, stamps, stamps[1:]):
            spent[name] += (after - before) / steps
    return spent


def config(args: argparse.Namespace) -> TrainingConfig:
    return TrainingConfig(mixture=MixtureConfig(name="ins-orig", heldout_fraction=0.0), max_length=args.max_length,
                          batch_size=args.batch_size, max_steps=args.steps, negatives=args.negatives,
                          strict_negatives=True, learning_rate=2e-5, eval_every=0,
                          grad_cache_chunk=args.mini_batch if args.loss == "cached" else 0)


def worker(which: str, argv: list[str], mine, theirs, results) -> None:
    """A spawned process: one trainer (or the phase timing), its numbers into `results`."""
    args = parser().parse_args(argv)
    cfg = config(args)
    mixture = build_mixture(read_seeds(sample.seeds_path()).seeds, None, cfg.mixture)
    if which == "phases":
        results.put((which, phases(cfg, mixture, min(args.steps, 10))))
        return
    results.put((which, (run_ours if which == "ours" else run_st)(cfg, mixture, Lockstep(mine, theirs))))


def spawn(which: list[str], argv: list[str]) -> dict:
    """Run workers in fresh interpreters (nothing leaks between trainers); ours takes the first turn."""
    ctx = multiprocessing.get_context("spawn")
    first, second, results = ctx.Semaphore(1), ctx.Semaphore(0), ctx.Queue()
    turns = [(first, second), (second, first)]
    procs = [ctx.Process(target=worker, args=(w, argv, *turns[i], results)) for i, w in enumerate(which)]
    for proc in procs:
        proc.start()
    out = dict(results.get(timeout=TURN_TIMEOUT_S * 2) for _ in procs)
    for proc in procs:
        proc.join()
    return out


def summary(steps: dict[str, list[tuple[float, float]]], skip: int, batch_size: int) -> dict:
    ours, st = steps["ours"][skip:], steps["st"][skip:]
    pairs = [s[0] / o[0] for o, s in zip(ours, st)]  # adjacent in time: the same machine load
    return {
        "timed_steps": len(pairs),
        "samples_per_s_median": {"ours": batch_size / statistics.median(o[0] for o in ours),
                                 "sentence_transformers": batch_size / statistics.median(s[0] for s in st)},
        "ratio_ours_over_st": {"median_of_pairs": statistics.median(pairs), "min": min(pairs), "max": max(pairs)},
        "cpu_s_per_sample": {"ours": sum(o[1] for o in ours) / (batch_size * len(ours)),
                             "sentence_transformers": sum(s[1] for s in st) / (batch_size * len(st))},
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--skip", type=int, default=3, help="first steps left out of the timing (loading, warm-up)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--negatives", type=int, default=7, help="K; every ins-orig row of the sample has 7")
    p.add_argument("--loss", choices=("cached", "plain"), default="cached",
                   help="cached: gradient caching on both sides; plain: neither")
    p.add_argument("--mini-batch", type=int, default=8, help="texts per chunk (ours) = mini_batch_size (ST)")
    p.add_argument("--no-phases", action="store_true", help="skip timing our step's phases")
    return p


def main() -> None:
    argv = sys.argv[1:]
    args = parser().parse_args(argv)
    rows = len(build_mixture(read_seeds(sample.seeds_path()).seeds, None, config(args).mixture).rows)
    table = {"setup": {**vars(args), "rows": rows, "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}}
    table.update(summary(spawn(["ours", "st"], argv), args.skip, args.batch_size))
    if not args.no_phases:
        table["our_uncached_step_phases_s"] = {k: round(v, 4) for k, v in spawn(["phases"], argv)["phases"].items()}
    print(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
