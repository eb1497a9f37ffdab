"""The GPU path side by side: training throughput and MFU against sentence-transformers'
CachedMultipleNegativesRankingLoss, evaluation encoding against `SentenceTransformer.encode_document`.
One command, one JSON file (`<out>/gpu.json`), written after each part so a part that hangs loses
only itself.

The encoder is a BERT of a chosen compute shape with random weights (seed 0; throughput does not
depend on the weights): `base` is 12 layers × 768 (12 heads, 3072 FFN), gte-multilingual-base's shape,
about 85M non-embedding parameters; `tiny` (2 × 64) is the smoke shape. Its tokenizer is the packaged
MiniLM's (BERT's uncased WordPiece), or `--tokenizer DIR` where the package is not installed. Texts
are synthetic words long enough to fill `--max-length` tokens, so every token computed is counted.

- train: `--batch` queries × (1 positive + `--negatives` hard negatives) per step, through the
  project's trainer (`tasks.training.trainer.train`, as `dualview train` runs it: DeepSpeed at ZeRO
  `--zero`, the config's precision, gradient-cache chunk `--chunk`, by default auto, sized from the
  free memory) and through `CachedMultipleNegativesRankingLoss` with the chunk the trainer ran, in a
  plain AdamW loop on the same rows, the same negatives, the same precision (bf16 on CUDA: its
  forward, loss and backward under autocast). Per side: queries/s, the median over the steps after
  `--skip`, from the interval between consecutive step ends; tokens/s; peak device memory; MFU =
  6 · N (non-embedding) · tokens/s over the chip's dense bf16 peak (null where the chip is not in
  PEAK_BF16_FLOPS, the CPU included); the ratio ours / sentence-transformers.
- encode: `--docs` documents through the evaluation's encoder (`load_model` at the precision, in
  `MeteredEncoder`'s length-sorted blocks) and through `SentenceTransformer.encode_document` on the
  same weights in the same dtype: documents/s (best of `--repeats`), the ratio, the largest absolute
  difference between the two embeddings.

Run:  python benchmarks/gpu.py --out DIR                  # CUDA: base shape, bf16, K = 15, length 256
      python benchmarks/gpu.py --write-tokenizer DIR      # here, for a lent machine (benchmarks/README.md)
      python benchmarks/gpu.py --out DIR --negatives 30 --max-length 512   # the paper's K and length
      python benchmarks/gpu.py --smoke --out DIR          # any machine: tiny shape, CPU, fp32, a minute
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))

SHAPES = {"base": {"layers": 12, "hidden": 768, "heads": 12}, "tiny": {"layers": 2, "hidden": 64, "heads": 2}}
# dense bf16 tensor-core peaks (no sparsity), by a name torch.cuda.get_device_name contains
PEAK_BF16_FLOPS = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12}
WORDS = ("river", "policy", "energy", "market", "signal", "protein", "harbor", "ledger", "orbit", "canvas",
         "tariff", "glacier", "sensor", "verdict", "pigment", "turbine")


def text(i: int, words: int) -> str:
    """A synthetic text of `words` words, distinct per i."""
    return " ".join(WORDS[(i * 7 + j * 3 + j * j) % len(WORDS)] for j in range(words)) + f" {i}"


def make_encoder(folder: Path, shape: str, max_length: int, tokenizer: str | None) -> int:
    """A BERT of `shape` with random weights (seed 0) saved at `folder`; its non-embedding parameters."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from dualview_core.model import resolve_model

    tok = AutoTokenizer.from_pretrained(tokenizer or resolve_model("minilm"))
    s = SHAPES[shape]
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                        num_attention_heads=s["heads"], intermediate_size=4 * s["hidden"],
                        max_position_embeddings=max(512, max_length))
    torch.manual_seed(0)
    model = BertModel(config)  # with BERT's pooler, unused under mean pooling, so loading finds every weight
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return sum(p.numel() for n, p in model.named_parameters() if n.startswith("encoder."))


def seed_rows(n: int, negatives: int, words: int) -> list[dict]:
    """`n` instruct seed rows in Promptriever's layout, each with `negatives` instruction negatives;
    every text (query ⊕ instruction too) at least `words` words, so it fills that many tokens."""
    def passage(i: int) -> dict:
        return {"docid": f"d{i}", "title": "", "text": text(i, words)}

    rows = []
    for q in range(n):
        base = q * (negatives + 1)
        query, instruction = text(10**7 + q, words // 2 + 1), text(2 * 10**7 + q, words // 2 + 1)
        rows.append({"query_id": f"q{q}", "query": f"{query} {instruction}", "only_query": query,
                     "only_instruction": instruction, "has_instruction": True,
                     "positive_passages": [passage(base)], "negative_passages": [],
                     "new_negatives": [passage(base + 1 + k) for k in range(negatives)]})
    return rows


def training_config(args, model: str):
    from dualview_core.config import MixtureConfig, TrainingConfig

    return TrainingConfig(model=model, mixture=MixtureConfig(name="ins-orig", heldout_fraction=0.0),
                          max_length=args.max_length, batch_size=args.batch, negatives=args.negatives,
                          strict_negatives=True, in_batch_negatives=True, grad_cache_chunk=args.chunk,
                          max_steps=args.steps, zero_stage=args.zero, eval_every=0, save_every=0,
                          learning_rate=2e-5, precision=args.precision, device=args.device)


def build_mixture_for(args, workdir: Path):
    from dualview_core.data.loading import read_seeds
    from dualview_core.method.mixtures import build_mixture

    path = workdir / "seeds.jsonl"
    rows = seed_rows(args.batch * (args.steps + 1), args.negatives, args.max_length)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = training_config(args, "unused")
    return build_mixture(read_seeds(str(path)).seeds, None, cfg.mixture)


def steady(ends: list[float], queries: int, skip: int) -> float:
    """Median queries/s over the intervals between step ends, after the first `skip` steps."""
    intervals = [b - a for a, b in zip(ends, ends[1:])][max(0, skip - 1):]
    return queries / statistics.median(intervals) if intervals else float("nan")


def train_ours(args, model: str, mixture, workdir: Path) -> dict:
    from tasks.training.trainer import LOSS, TOKENS_PER_S, train

    ends, tokens = [], []

    def signal(step: int, metrics: dict) -> None:
        if LOSS in metrics:
            ends.append(time.perf_counter())
            tokens.append(metrics[TOKENS_PER_S])

    cfg = training_config(args, model)
    result = train(cfg, mixture, str(workdir / "ours-checkpoint"), callback=signal)
    ran = json.loads((workdir / "ours-checkpoint" / "dualview.json").read_text())["training_config"]
    qps = steady(ends, args.batch, args.skip)
    return {"queries_per_s": qps, "tokens_per_s": qps * texts_per_query(args) * args.max_length,
            "device": result.device, "precision": result.precision, "steps": len(ends),
            "grad_cache_chunk": ran["grad_cache_chunk"], "peak_accelerator_mb": peak(result, "train/peak_accelerator_mb"),
            "peak_rss_mb": peak(result, "train/peak_rss_mb")}


def peak(result, key: str) -> float | None:
    values = [r[key] for r in result.history if key in r]
    return max(values) if values else None


def texts_per_query(args) -> int:
    return 2 + args.negatives  # the query, its positive, its K negatives


def train_st(args, model: str, mixture, chunk: int) -> dict:
    """CachedMultipleNegativesRankingLoss on the same rows and negatives, in a plain loop (AdamW; the
    forward, the loss and the backward with its chunk re-encoding all under the precision's autocast),
    so the comparison is with the loss itself at its best, not with a trainer around it."""
    import contextlib

    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    from sentence_transformers.util import batch_to_device

    from dualview_core.method.negatives import sample_negatives
    from dualview_core.method.texts import doc_text, query_text

    cfg = training_config(args, model)
    device, chosen = placement_of(args)
    if device.startswith("cuda"):  # what our run left is freed, and the peak counted from here
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    st = SentenceTransformer(model, device=device)
    st.max_seq_length = args.max_length
    st.train()
    # the trainer's chunk; 0 (no caching) is one mini-batch per column
    loss_fn = CachedMultipleNegativesRankingLoss(st, scale=1.0 / cfg.temperature, mini_batch_size=chunk or args.batch)
    optimizer = torch.optim.AdamW(st.parameters(), lr=2e-5)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    rows, ends = list(mixture.rows), []
    for step in range(args.steps):
        batch = rows[step * args.batch:(step + 1) * args.batch]
        columns = [[query_text(r.query, r.instruction, cfg.query_template) for r in batch],
                   [doc_text(r.positive.title, r.positive.text) for r in batch]]
        negatives = [sample_negatives(r, cfg.negatives, epoch=0, seed=0) for r in batch]
        columns += [[doc_text(n[k].title, n[k].text) for n in negatives] for k in range(cfg.negatives)]
        features = [batch_to_device(st.tokenize(column), st.device) for column in columns]
        with torch.autocast(kind, dtype=torch.bfloat16) if chosen == "bf16" else contextlib.nullcontext():
            loss = loss_fn(features, None)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if kind == "cuda":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    qps = steady(ends, args.batch, args.skip)
    return {"queries_per_s": qps, "tokens_per_s": qps * texts_per_query(args) * args.max_length, "steps": len(ends),
            "device": device, "precision": chosen, "mini_batch_size": chunk or args.batch,
            "peak_accelerator_mb": torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None}


def placement_of(args) -> tuple[str, str]:
    from dualview_core.model import placement

    return placement(args.device, args.precision)


def peak_flops() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for chip, peak in PEAK_BF16_FLOPS.items() if chip in name), None)


def part_train(args, model: str, params: int, workdir: Path) -> dict:
    mixture = build_mixture_for(args, workdir)
    ours = train_ours(args, model, mixture, workdir)
    st = train_st(args, model, mixture, ours["grad_cache_chunk"])
    peak = peak_flops()
    for side in (ours, st):
        side["mfu"] = 6 * params * side["tokens_per_s"] / peak if peak else None
    return {"ours": ours, "sentence_transformers": st, "ratio": ours["queries_per_s"] / st["queries_per_s"]}


def part_encode(args, model: str) -> dict:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from dualview_core.model import DTYPES, load_model
    from tasks.evaluation.runner import MeteredEncoder

    device, precision = placement_of(args)
    dtype = getattr(torch, DTYPES[precision])
    texts = [text(i, args.max_length - (i % 7) * args.max_length // 10) for i in range(args.docs)]  # varied lengths
    ours = MeteredEncoder(load_model(model, max_length=args.max_length, device=device, precision=precision),
                          lambda line: None, min_texts=1)
    st = SentenceTransformer(model, device=device).to(dtype)
    st.max_seq_length = args.max_length

    def timed(encode) -> tuple[float, np.ndarray]:
        encode(texts[:args.encode_batch], batch_size=args.encode_batch)  # warm-up: kernels, allocator
        best, out = float("inf"), None
        for _ in range(args.repeats):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = encode(texts, batch_size=args.encode_batch)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        return best, np.asarray(out, dtype=np.float32)

    ours_s, ours_vec = timed(ours.encode_document)
    st_s, st_vec = timed(lambda t, batch_size: st.encode_document(t, batch_size=batch_size, convert_to_numpy=True))
    return {"device": device, "precision": precision, "docs": args.docs,
            "ours_docs_per_s": args.docs / ours_s, "sentence_transformers_docs_per_s": args.docs / st_s,
            "ratio": st_s / ours_s, "max_abs_diff": float(np.abs(ours_vec - st_vec).max())}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="folder for gpu.json")
    p.add_argument("--write-tokenizer", metavar="DIR", help="only save the packaged tokenizer at DIR (to carry to a "
                   "machine without the package, then --tokenizer DIR there) and exit")
    p.add_argument("--smoke", action="store_true", help="tiny shape, CPU, fp32, a few steps: the plumbing only")
    p.add_argument("--parts", default="train,encode", help="comma-separated: train, encode")
    p.add_argument("--shape", choices=sorted(SHAPES), default="base")
    p.add_argument("--tokenizer", help="a tokenizer folder (default: the packaged MiniLM's)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    p.add_argument("--zero", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--negatives", type=int, default=15)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--chunk", type=lambda v: v if v == "auto" else int(v), default="auto",
                   help="gradient-cache chunk (auto: the trainer sizes it; the loss then gets the chunk it chose)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--skip", type=int, default=3)
    p.add_argument("--docs", type=int, default=4096)
    p.add_argument("--encode-batch", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    return p


SMOKE = {"shape": "tiny", "device": "cpu", "precision": "fp32", "batch": 4, "negatives": 3, "max_length": 32,
         "chunk": "auto", "steps": 4, "skip": 1, "docs": 64, "encode_batch": 16, "repeats": 1}


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    if args.write_tokenizer:
        from transformers import AutoTokenizer

        from dualview_core.model import resolve_model

        AutoTokenizer.from_pretrained(resolve_model("minilm")).save_pretrained(args.write_tokenizer)
        return {"tokenizer": args.write_tokenizer}
    if not args.out:
        raise SystemExit("gpu.py: give --out DIR (or --write-tokenizer DIR)")
    if args.smoke:
        vars(args).update(SMOKE)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"args": vars(args), "torch": torch.__version__, "python": platform.python_version(),
                    "chip": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        model = workdir / "encoder"
        report["non_embedding_params"] = make_encoder(model, args.shape, args.max_length, args.tokenizer)
        for part in args.parts.split(","):
            started = time.perf_counter()
            if part == "train":
                report["train"] = part_train(args, str(model), report["non_embedding_params"], workdir)
            elif part == "encode":
                report["encode"] = part_encode(args, str(model))
            else:
                raise SystemExit(f"unknown part {part!r}; the parts are train, encode")
            report[part]["seconds"] = round(time.perf_counter() - started, 1)
            (out / "gpu.json").write_text(json.dumps(report, indent=2) + "\n")
            print(json.dumps({part: report[part]}, indent=2), flush=True)
    return report


if __name__ == "__main__":
    main()
