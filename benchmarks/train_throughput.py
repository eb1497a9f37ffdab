"""Training throughput: this trainer (DeepSpeed, one CPU worker) against the sentence-transformers
trainer with MultipleNegativesRankingLoss, fed the same rows and the same hard negatives.

Both sides: the packaged MiniLM, the same batch size and max length, in-batch negatives on (MNRL
always uses them), scale 1/τ = 50, AdamW with linear warm-up/decay, fp32 on CPU. Rows: the bundled
sample's ins-orig mixture; each row's K negatives are drawn once by `negatives.sample_negatives`
(epoch 0) and given to sentence-transformers as columns negative_1..negative_K (it needs a fixed
count, so K is strict: every row has K). Our trainer draws from the same function (re-drawn each
epoch: other negatives, the same count).

Measured: wall and CPU seconds between the end of step `--skip` and the end of the last step (model
loading, engine start-up, the first steps' warm-up and checkpoint writing excluded on both sides),
turned into samples/s and CPU seconds per sample (the steadier number on a shared machine). The
phases of our step (make batch, tokenise, forward + loss, backward, optimizer step) are timed
separately to show where the time goes. Rounds alternate the two trainers, so a noisy shared
machine slows both alike; the table reports the median round.

Target: ours / sentence-transformers >= 1.0 (samples/s; CPU efficiency as the cross-check).

Run:  python benchmarks/train_throughput.py [--steps 30 --batch-size 8 --max-length 128 --negatives 7 --rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "torch_extensions"))

from dualview_core import samples
from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.encoder import query_text, resolve_model
from dualview_core.loading import read_seeds
from dualview_core.mixtures import Mixture, build_mixture
from dualview_core.negatives import sample_negatives
from dualview_core.retrieval import doc_text


def stamp_now() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads)."""
    return time.perf_counter(), time.process_time()


def steady_rate(stamps: list[tuple[float, float]], skip: int, batch_size: int) -> dict:
    """samples/s and CPU seconds per sample between the end of step `skip` and the end of the last."""
    samples = batch_size * (len(stamps) - skip)
    wall, cpu = (stamps[-1][i] - stamps[skip - 1][i] for i in (0, 1))
    return {"samples_per_s": samples / wall, "cpu_s_per_sample": cpu / samples}


def run_ours(cfg: TrainingConfig, mixture: Mixture, skip: int) -> dict:
    from tasks.training import train

    stamps: list[tuple[float, float]] = []

    def stamp(step: int, metrics: dict) -> None:
        if "train/loss" in metrics:  # called at the end of each optimizer step
            stamps.append(stamp_now())

    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, mixture, f"{tmp}/ck", callback=stamp)
    return steady_rate(stamps, skip, cfg.batch_size)


def st_dataset(mixture: Mixture, k: int, template: str):
    from datasets import Dataset

    rows = []
    for row in mixture.rows:
        negatives = sample_negatives(row, k, epoch=0, seed=0)
        rows.append({"anchor": query_text(row.query, row.instruction, template),
                     "positive": doc_text(row.positive.title, row.positive.text),
                     **{f"negative_{i + 1}": doc_text(p.title, p.text) for i, p in enumerate(negatives)}})
    return Dataset.from_list(rows)


def run_st(cfg: TrainingConfig, mixture: Mixture, skip: int) -> dict:
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import TrainerCallback

    stamps: list[tuple[float, float]] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, *_, **__):
            stamps.append(stamp_now())

    model = SentenceTransformer(resolve_model(cfg.model), device="cpu")
    model.max_seq_length = cfg.max_length
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=tmp, per_device_train_batch_size=cfg.batch_size, max_steps=cfg.max_steps,
            learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
            warmup_steps=cfg.warmup_ratio,  # transformers 5: a float < 1 is a ratio
            max_grad_norm=cfg.max_grad_norm, use_cpu=True, seed=cfg.seed, dataloader_drop_last=True,
            report_to="none", save_strategy="no", logging_steps=cfg.max_steps, disable_tqdm=True)
        loss = MultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature)
        data = st_dataset(mixture, cfg.negatives, cfg.query_template)
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss, callbacks=[Stamp()])
        trainer.train()
    return steady_rate(stamps, skip, cfg.batch_size)


def phases(cfg: TrainingConfig, mixture: Mixture, steps: int) -> dict[str, float]:
    """Mean seconds per step of each phase of our step, with the same engine and batches."""
    import torch

    from dualview_core.loss import candidate_mask, info_nce, scatter_valid
    from dualview_core.negatives import block_width
    from tasks.training import _embed, _load, _micro_batches, _tokenize_sorted, prepare_environment

    prepare_environment()
    engine, encoder = _load(cfg, steps, 1)
    batches = _micro_batches(mixture, cfg, block_width(mixture.rows, cfg.negatives, strict=True), 0, 1)
    spent = {"make_batch": 0.0, "tokenize": 0.0, "forward+loss": 0.0, "backward": 0.0, "optimizer_step": 0.0}
    for _ in range(steps):
        stamps = [time.perf_counter()]
        batch = next(batches)
        stamps.append(time.perf_counter())
        q_in = _tokenize_sorted(encoder, batch.queries, cfg.encode_chunk)
        d_in = _tokenize_sorted(encoder, batch.docs, cfg.encode_chunk)
        stamps.append(time.perf_counter())
        q, d = _embed(engine, *q_in), _embed(engine, *d_in)  # (batch, dim), (n_valid, dim)
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
                          strict_negatives=True, learning_rate=2e-5, eval_every=0)


def run_one(args: argparse.Namespace) -> dict:
    """One measurement in this (fresh) interpreter."""
    cfg = config(args)
    mixture = build_mixture(read_seeds(samples.seeds_path()).seeds, None, cfg.mixture)
    if args.only == "phases":
        return phases(cfg, mixture, min(args.steps, 10))
    return (run_ours if args.only == "ours" else run_st)(cfg, mixture, args.skip)


def measure(which: str, argv: list[str]) -> dict:
    """Each trainer in its own interpreter: nothing (process group, environment, caches) leaks across."""
    out = subprocess.run([sys.executable, __file__, *argv, "--only", which], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=3, help="steps left out of the timing (warm-up)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--negatives", type=int, default=7, help="K; every ins-orig row of the sample has 7")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=["ours", "st", "phases"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(run_one(args)))
        return
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("only", "rounds")]
    rows = len(build_mixture(read_seeds(samples.seeds_path()).seeds, None, config(args).mixture).rows)
    rounds = []
    for r in range(args.rounds):
        ours, st = measure("ours", argv), measure("st", argv)
        rounds.append({"round": r, "load_average_1m": round(os.getloadavg()[0], 2),
                       "samples_per_s": {"ours": ours["samples_per_s"], "sentence_transformers": st["samples_per_s"]},
                       "cpu_s_per_sample": {"ours": ours["cpu_s_per_sample"],
                                            "sentence_transformers": st["cpu_s_per_sample"]},
                       "ratio_samples_per_s": ours["samples_per_s"] / st["samples_per_s"],
                       "ratio_cpu_efficiency": st["cpu_s_per_sample"] / ours["cpu_s_per_sample"]})
        print(json.dumps(rounds[-1]), flush=True)
    print(json.dumps({
        "setup": {**{k: v for k, v in vars(args).items() if k != "only"}, "rows": rows, "cpus": os.cpu_count()},
        "median_ratio_samples_per_s": statistics.median(x["ratio_samples_per_s"] for x in rounds),
        "median_ratio_cpu_efficiency": statistics.median(x["ratio_cpu_efficiency"] for x in rounds),
        "our_step_phases_s": {k: round(v, 4) for k, v in measure("phases", argv).items()},
    }, indent=2))


if __name__ == "__main__":
    main()
