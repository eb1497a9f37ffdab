"""Training, task side: a mixture in, a sentence-transformers checkpoint out, under DeepSpeed.

Owns the engine around the core's pieces: process environment (one worker in-process, or several
under the `deepspeed` launcher), `deepspeed.initialize` with the config `ds_config` generated, the
step loop (encode -> gather across ranks -> `loss.info_nce` -> backward/step) and the training
signals. What to train on (`mixtures`), which negatives (`negatives`), the loss and the folder
layout (a SentenceTransformer's own `save`) are the core's; what may be written at the output and how the checkpoint is
published there, `tasks.training.output`'s.

Signals go to a callback, `callback(step, {name: value})` on rank 0 — MLflow's `log_metrics` shape;
the orchestration flow passes one that logs. Per optimizer step: LOSS, LR, SAMPLES_PER_S,
TOKENS_PER_S, PEAK_RSS_MB (the largest resident set of any rank so far) and, on CUDA,
PEAK_ACCELERATOR_MB (the most memory torch allocated on any rank's device so far); at step 0,
every `eval_every` steps and at the end: SEPARATION on held-out pairs.

Every `save_every` steps the engine's state is saved to `<out>.state` (`tasks.training.state`); a run
started again with the same output after a crash loads it and goes on from the next micro-batch,
to the same model an uninterrupted run makes. The state is removed once the checkpoint is published.

Environment is read and set here, at the edge: RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT
for an in-process worker while it trains (unless a launcher set them), and TORCH_EXTENSIONS_DIR
inside the project (ops DeepSpeed compiles on first use — on CPU its shared-memory comm op — are
cached there, not in $HOME). An in-process run leaves its (one-rank) process group up, so later
runs in the same process reuse it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dualview_core.config import TrainingConfig
from dualview_core.storage.layout import PROJECT_CACHE
from dualview_core.training.ds_config import deepspeed_config, precision
from dualview_core.training.mixture_store import StoredMixture
from dualview_core.method.mixtures import Mixture
from dualview_core.method.negatives import TextBatch, block_width, make_batch
from dualview_core.training.resume import Progress, check_resumable, resume_position, run_fingerprint, state_location, tag_for
from dualview_core.training.separation import pairs_of, separation
from dualview_core.method.training_rows import rank_batches, total_steps
from tasks.progress import duration
from tasks.training.output import check_destination, naming_a_full_disk, save_checkpoint

LOSS, LR, SAMPLES_PER_S, TOKENS_PER_S = "train/loss", "train/lr", "train/samples_per_s", "train/tokens_per_s"
SEPARATION = "train/instruction_separation"
PEAK_RSS_MB, PEAK_ACCELERATOR_MB = "train/peak_rss_mb", "train/peak_accelerator_mb"
TOTAL_STEPS = "train/total_steps"  # signalled once, before the first step: how many will run

Callback = Callable[[int, dict[str, float]], None]
PROGRESS_EVERY = 10  # optimizer steps between progress lines


def progress_line(step: int, metrics: dict[str, float], every: int = PROGRESS_EVERY) -> str | None:
    """The metrics part of a progress line: every `every` steps and at each separation measurement.

        >>> progress_line(20, {LOSS: 0.51234, LR: 1.9e-05})
        'train: step 20 loss 0.5123, lr 1.9e-05'
    """
    if step % every and SEPARATION not in metrics:
        return None
    return f"train: step {step} " + ", ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in metrics.items())


class TrainProgress:
    """The trainer's signals as lines for a person: the plan when it is announced (`TOTAL_STEPS`),
    then `progress_line` with the share done and an ETA from the steps timed so far. The CLI and
    the flow both use it, so a terminal and the Prefect run log read the same.

        >>> p = TrainProgress(clock=iter([100.0, 160.0]).__next__)
        >>> p(0, {TOTAL_STEPS: 40})
        'train: 40 optimizer steps to run'
        >>> p(10, {LOSS: 0.5})
        'train: step 10/40 (25%) loss 0.5, ETA 3 min 00 s'
    """

    def __init__(self, every: int = PROGRESS_EVERY, clock: Callable[[], float] = time.monotonic):
        self.every, self.clock = every, clock
        self.total: int | None = None
        self.started: tuple[int, float] | None = None  # (step, time) when the steps began

    def __call__(self, step: int, metrics: dict[str, float]) -> str | None:
        if TOTAL_STEPS in metrics:
            self.total, self.started = int(metrics[TOTAL_STEPS]), (step, self.clock())
            resumed = f", resuming after step {step}" if step else ""
            return f"train: {self.total} optimizer steps to run{resumed}"
        line = progress_line(step, metrics, self.every)
        if line is None or self.total is None or self.started is None:
            return line
        head = f"train: step {step}"
        line = line.replace(head, f"{head}/{self.total} ({100 * step / self.total:.0f}%)", 1)
        first, t0 = self.started
        if step > first and step < self.total:
            line += f", ETA {duration((self.total - step) * (self.clock() - t0) / (step - first))}"
        return line


@dataclass
class TrainResult:
    checkpoint: str
    steps: int
    world_size: int
    seconds: float
    history: list[dict] = field(default_factory=list)  # {"step": n, metric: value, ...} per record
    composition: dict = field(default_factory=dict)
    digest: str = ""
    resumed_from: int = 0  # optimizer steps loaded from a saved state (0: a fresh start)
    device: str = ""  # what trained: cuda or cpu
    precision: str = ""  # bf16 or fp32


# --- environment ----------------------------------------------------------------------------------


def extensions_dir() -> Path:
    """Where DeepSpeed's compiled ops are cached: TORCH_EXTENSIONS_DIR, else inside the project."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR", PROJECT_CACHE / "torch_extensions"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def worker_environment() -> Iterator[None]:
    """Inside: the variables torch.distributed and DeepSpeed read. A launcher's are used as they are;
    a lone worker gets RANK=0, WORLD_SIZE=1 and a free port, removed again on exit — a later child
    process must not inherit a port this one holds. Compiled ops are cached in the project."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        yield
        return
    lone = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port())}
    saved = {name: os.environ.get(name) for name in lone}
    os.environ.update(lone)
    try:
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


def _bi_encoder(model):
    """The trainable module: the SentenceTransformer, one set of weights for queries and documents,
    its output normalised for the cosine loss (class built lazily so importing this module does not
    import torch). Under DeepSpeed its parameters are named `model.<sentence-transformers name>`."""
    import torch
    import torch.nn.functional as F

    class BiEncoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, chunks: list[dict], role: str) -> torch.Tensor:
            """Feature chunks of one role -> (sum of chunk sizes, dim) unit vectors, chunk after chunk."""
            # a copy: sentence-transformers writes its outputs (token states too) into the features it is
            # given, and gradient caching reuses a chunk's features, which must not keep them alive
            pooled = [self.model(dict(c), task=role)["sentence_embedding"] for c in chunks]  # (chunk, dim) each
            return F.normalize(torch.cat(pooled), p=2, dim=-1)  # (texts, dim)

    return BiEncoder()


def _tokenize_sorted(model, texts: list[str], size: int, role: str) -> tuple[list[dict], list[int]]:
    """Texts of one role as length-sorted chunks of features (the role's prompt added, each chunk
    padded to its own longest, as `SentenceTransformer.encode` batches), and the sorted order."""
    from sentence_transformers.util import batch_to_device

    from dualview_core.model import role_prompt

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    prompt = role_prompt(model, role)
    chunks = [model.preprocess([texts[i] for i in order[s:s + size]], prompt=prompt, task=role)
              for s in range(0, len(texts), size)]
    return [batch_to_device(c, model.device) for c in chunks], order


def _in_input_order(sorted_out, order: list[int]):
    """(texts, dim) rows in sorted order -> the same rows in input order."""
    import torch

    inverse = torch.empty(len(order), dtype=torch.long)  # (texts,)
    inverse[torch.tensor(order)] = torch.arange(len(order))  # (texts,)
    return sorted_out[inverse.to(sorted_out.device)]  # (texts, dim)


def _embed(engine, chunks: list[dict], order: list[int], role: str):
    """Embeddings of sorted chunks through the engine, put back in input order: (texts, dim)."""
    return _in_input_order(engine(chunks, role), order)  # (texts, dim)


def optimizer_for(module, cfg: TrainingConfig, device: str):
    """AdamW without decay on biases and norms. On CUDA its fused kernel (one launch for all
    parameters, at every ZeRO stage: DeepSpeed steps it on the partitions it owns); on the CPU
    torch's default implementation."""
    import torch

    decay = [p for n, p in module.named_parameters() if p.ndim > 1]
    rest = [p for n, p in module.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                             lr=cfg.learning_rate, fused=True if device == "cuda" else None)


def _engine(cfg: TrainingConfig, module, steps: int, world: int, device: str):
    import deepspeed

    optimizer = optimizer_for(module, cfg, device)
    ds_cfg = deepspeed_config(cfg, world_size=world, total_steps=steps, device=device)
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=ds_cfg)
    return engine


# --- the loop -------------------------------------------------------------------------------------


def _rows_at(rows, idx: list[int]) -> list:
    """A batch's rows; a stored mixture (`mixture_store.StoredRows`) reads only these from disk."""
    return rows.take(idx) if hasattr(rows, "take") else [rows[i] for i in idx]


def _micro_batches(mixture: Mixture | StoredMixture, cfg: TrainingConfig, width: int, rank: int, world: int,
                   skip: int = 0) -> Iterator[TextBatch]:
    """This rank's micro-batches, epoch after epoch, after the first `skip`; negatives re-drawn each epoch."""
    epoch, index = resume_position(skip, len(mixture.rows) // (cfg.batch_size * world))
    while True:
        for idx in rank_batches(len(mixture.rows), cfg.batch_size, epoch, cfg.seed, rank, world)[index:]:
            rows = _rows_at(mixture.rows, idx)
            yield make_batch(rows, width, epoch=epoch, seed=cfg.seed, template=cfg.query_template)
        epoch, index = epoch + 1, 0


def _gather(x, rank: int, world: int):
    """(n, ...) -> (world * n, ...) in rank order; the local slice keeps its gradient."""
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank] = x
    return torch.cat(parts)


def _loss(q, d, batch: TextBatch, cfg: TrainingConfig, rank: int, world: int):
    """InfoNCE of this rank's (batch, dim) queries against its (n_valid, dim) documents and, with
    in-batch negatives, every rank's documents (only the local ones carry a gradient)."""
    import torch

    from dualview_core.method.loss import candidate_mask, info_nce, scatter_valid

    candidates = torch.tensor(batch.candidates, device=q.device)  # (batch, 1 + width)
    d = scatter_valid(d, candidates)  # (batch * (1 + width), dim)
    first = 0
    if cfg.in_batch_negatives and world > 1:
        d, candidates = _gather(d, rank, world), _gather(candidates, rank, world)  # (world * batch * (1 + width), dim)
        first = rank * len(batch.queries)
    positives, allowed = candidate_mask(candidates, first, len(batch.queries), cfg.in_batch_negatives)
    return info_nce(q, d, positives, allowed, cfg.temperature)  # ()


def _collective_device():
    """Where a tensor made for a collective lives: NCCL moves only CUDA tensors, gloo CPU ones."""
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _most_over_ranks(n: int, world: int) -> int:
    if world == 1:
        return n
    import torch
    import torch.distributed as dist

    t = torch.tensor([n], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _least_over_ranks(n: int, world: int) -> int:
    return -_most_over_ranks(-n, world)


def _sized_chunk(cfg: TrainingConfig, model, kind: str, world: int) -> int:
    """What `grad_cache_chunk: auto` becomes for this run, the model loaded: the chunk the memory
    estimate fits in what the device has (`memory.sized_chunk`; on CUDA the free memory plus what torch
    already holds, the weights, which the estimate counts), the least over the ranks so that every
    rank chunks alike. A model whose config does not give the estimate's shape gets the default chunk."""
    from dualview_core.training.memory import DEFAULT_CHUNK, ModelShape, sized_chunk
    from tasks.training.preflight import available_memory

    c = getattr(model[0], "auto_model", None)
    c = getattr(c, "config", None)
    needed = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")
    if c is None or not all(hasattr(c, k) for k in needed):
        chunk = DEFAULT_CHUNK
    else:
        import torch

        shape = ModelShape(sum(p.numel() for p in model.parameters()), c.num_hidden_layers, c.hidden_size,
                           c.num_attention_heads, c.intermediate_size)
        available, _ = available_memory(kind, 1 if kind == "cuda" else world)
        if kind == "cuda":
            available += torch.cuda.memory_allocated()
        chunk = sized_chunk(shape, available, batch_size=cfg.batch_size, negatives=cfg.negatives,
                            max_length=cfg.max_length, precision=precision(cfg, kind), zero_stage=cfg.zero_stage,
                            world=world)
    whole = cfg.batch_size * (2 + cfg.negatives)  # 0 (no caching) ranks as the largest chunk
    least = _least_over_ranks(chunk or whole, world)
    return 0 if least >= whole else least


def _peak_memory(world: int) -> dict[str, float]:
    """Peak host memory (this process's high-water resident set) and, on CUDA, peak device memory
    torch allocated, in MiB, each the largest over the ranks."""
    import resource

    import torch

    peaks = {PEAK_RSS_MB: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}  # Linux reports KiB
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peaks[PEAK_ACCELERATOR_MB] = torch.cuda.max_memory_allocated()
    return {k: _most_over_ranks(v, world) / 2**20 for k, v in peaks.items()}


def _backward(engine, model, batch: TextBatch, cfg: TrainingConfig, rank: int, world: int) -> tuple[float, int]:
    """Forward, loss and backward of one micro-batch, gradient-cached unless `grad_cache_chunk` is 0.
    Returns (loss, tokens encoded)."""
    from tasks.training import grad_cache

    size = cfg.grad_cache_chunk or cfg.encode_chunk
    q_chunks, q_order = _tokenize_sorted(model, batch.queries, size, "query")
    d_chunks, d_order = _tokenize_sorted(model, batch.docs, size, "document")
    tokens = sum(int(c["attention_mask"].sum()) for c in q_chunks + d_chunks)
    if not cfg.grad_cache_chunk:
        q, d = _embed(engine, q_chunks, q_order, "query"), _embed(engine, d_chunks, d_order, "document")  # (batch, dim), (n_valid, dim)
        loss = _loss(q, d, batch, cfg, rank, world)  # ()
        engine.backward(loss)
        return float(loss.detach()), tokens
    chunks = [(c, "query") for c in q_chunks] + [(c, "document") for c in d_chunks]
    cache = grad_cache.embed_without_graphs(engine, chunks)  # embeddings: (batch + n_valid, dim), sorted per side
    q_sorted, d_sorted = cache.embeddings.split([len(batch.queries), len(batch.docs)])
    loss = _loss(_in_input_order(q_sorted, q_order), _in_input_order(d_sorted, d_order), batch, cfg, rank, world)
    loss.backward()  # to the cached embeddings only: no weights in this graph
    boundary = (engine.micro_steps + 1) % engine.gradient_accumulation_steps() == 0
    grad_cache.backward_chunks(engine, chunks, cache, boundary=boundary, pad_to=_most_over_ranks(len(chunks), world))
    return float(loss.detach()), tokens


def _micro_step(engine, model, batch: TextBatch, cfg: TrainingConfig, rank: int, world: int) -> tuple[float, int]:
    """Forward, loss, backward, step on one micro-batch. Returns (loss, tokens encoded)."""
    loss, tokens = _backward(engine, model, batch, cfg, rank, world)
    engine.step()
    return loss, tokens


def _all_ranks_sum(values: list[float], world: int) -> list[float]:
    if world == 1:
        return values
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=_collective_device())  # (len(values),)
    dist.all_reduce(t)
    return t.tolist()


def _separation(model, pairs, cfg: TrainingConfig) -> float:
    """Every rank encodes (under ZeRO-3 the weights are gathered collectively); rank 0 records.
    `encode_query` leaves the model in eval mode: training mode is put back."""
    training = model.training
    try:
        return separation(lambda texts: model.encode_query(texts, batch_size=64, show_progress_bar=False), pairs,
                          cfg.query_template)
    finally:
        model.train(training)


def _run_steps(engine, model, mixture: Mixture | StoredMixture, cfg: TrainingConfig, steps: int, width: int,
               emit: Callable[[int, dict], None], *, done: int = 0, saved: Callable[[int], None] = lambda step: None) -> None:
    """Optimizer steps done+1..steps; `saved(step)` every `save_every` steps before the last."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    batches = _micro_batches(mixture, cfg, width, rank, world, skip=done * cfg.grad_accumulation)
    pairs = pairs_of(mixture.heldout)
    emit(done, {TOTAL_STEPS: steps})
    if pairs and done == 0:
        emit(0, {SEPARATION: _separation(model, pairs, cfg)})
    engine.train()  # a loaded model is in eval mode; training runs with the model's dropout, as HF's trainers do
    for step in range(done + 1, steps + 1):
        start, losses, tokens, lr = time.perf_counter(), 0.0, 0, _coming_lr(engine)
        for _ in range(cfg.grad_accumulation):
            loss, n = _micro_step(engine, model, next(batches), cfg, rank, world)
            losses, tokens = losses + loss, tokens + n
        loss_sum, tokens = _all_ranks_sum([losses, float(tokens)], world)
        seconds = time.perf_counter() - start
        samples = cfg.batch_size * cfg.grad_accumulation * world
        emit(step, {LOSS: loss_sum / (cfg.grad_accumulation * world), LR: lr,
                    SAMPLES_PER_S: samples / seconds, TOKENS_PER_S: tokens / seconds, **_peak_memory(world)})
        if pairs and (step == steps or (cfg.eval_every and step % cfg.eval_every == 0)):
            emit(step, {SEPARATION: _separation(model, pairs, cfg)})
        if cfg.save_every and step % cfg.save_every == 0 and step < steps:
            saved(step)


# --- entry points ---------------------------------------------------------------------------------


def published_result(out: str, metadata: dict) -> TrainResult:
    """The result of a run whose checkpoint was already published: nothing left to train."""
    steps = metadata["steps"]
    return TrainResult(out, steps, metadata["world_size"], metadata["train_seconds"], [], metadata["composition"],
                       metadata["data_digest"], resumed_from=steps, device=metadata.get("device", ""),
                       precision=metadata.get("precision", ""))


def train(cfg: TrainingConfig, mixture: Mixture | StoredMixture, out: str, *, storage_options: dict | None = None,
          callback: Callback | None = None) -> TrainResult:
    """Train on `mixture` and publish a sentence-transformers checkpoint at `out` (folder or s3://).

    Runs in this process as one worker, or as one rank of a launcher's job. Bad configurations
    (unreachable negatives, an output that exists) fail before the model is loaded. Started again
    after a crash, it resumes from `<out>.state`; after its checkpoint was published, it returns it.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))  # a launcher's, or a lone worker's
    published = check_destination(out, storage_options, run_fingerprint(cfg, mixture.digest, world))
    if published is not None:
        return published_result(out, published)
    width = block_width(mixture.rows, cfg.negatives, strict=cfg.strict_negatives)
    with worker_environment():
        return _train(cfg, mixture, out, width, storage_options, callback)


def _train(cfg: TrainingConfig, mixture: Mixture | StoredMixture, out: str, width: int, storage_options: dict | None,
           callback: Callback | None) -> TrainResult:
    from tasks.training.state import clear_state, load_state, read_progress, save_state

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    steps = total_steps(len(mixture.rows), batch_size=cfg.batch_size, world_size=world,
                        grad_accumulation=cfg.grad_accumulation, epochs=cfg.epochs, max_steps=cfg.max_steps)
    location, fingerprint = state_location(out), run_fingerprint(cfg, mixture.digest, world)
    progress = read_progress(location, storage_options)
    if progress is not None:
        check_resumable(progress, fingerprint, world, location)  # before the model is loaded
    engine, model = _load(cfg, steps, world)
    if cfg.grad_cache_chunk == "auto":  # after the fingerprint: a resumed run sizes it again
        cfg = cfg.model_copy(update={"grad_cache_chunk": _sized_chunk(cfg, model, device_kind(cfg), world)})
        if rank == 0:
            print(f"train: gradient-cache chunk auto: {cfg.grad_cache_chunk or 'off (the whole step fits)'}"
                  + (" texts" if cfg.grad_cache_chunk else ""), flush=True)
    if progress is not None:
        load_state(engine, location, progress, storage_options)
    done = progress.step if progress is not None else 0
    history: list[dict] = []

    def emit(step: int, metrics: dict) -> None:
        if rank == 0:
            history.append({"step": step, **metrics})
            if callback is not None:
                callback(step, metrics)

    def saved(step: int) -> None:
        with naming_a_full_disk(location):
            save_state(engine, location, Progress(step, tag_for(step), fingerprint, world, mixture.digest), storage_options)

    start = time.perf_counter()
    _run_steps(engine, model, mixture, cfg, steps, width, emit, done=done, saved=saved)
    seconds = time.perf_counter() - start
    kind = device_kind(cfg)
    metadata = {"training_config": cfg.model_dump(mode="json"), "composition": mixture.composition,
                "data_digest": mixture.digest, "steps": steps, "world_size": world, "negatives_width": width,
                "train_seconds": round(seconds, 3), "resumed_from": done, "run_fingerprint": fingerprint,
                "device": kind, "precision": precision(cfg, kind)}
    save_checkpoint(engine, cfg, out, storage_options, metadata)
    if rank == 0:
        clear_state(location, storage_options)
    return TrainResult(out, steps, world, seconds, history, mixture.composition, mixture.digest, done,
                       metadata["device"], metadata["precision"])


def _coming_lr(engine) -> float:
    """The learning rate the next optimizer step applies: the schedule writes it into the optimizer's
    groups (at start and after each step). Asking the scheduler before its first step makes
    DeepSpeed warn, hence the groups."""
    return float(engine.optimizer.param_groups[0]["lr"])


def _announce(cfg: TrainingConfig, kind: str) -> None:
    """Say what the wait before the first step is spent on (on the CLI's stderr and in the flow-run log)."""
    if int(os.environ.get("RANK", "0")):
        return
    extensions = extensions_dir()
    first_build = kind == "cpu" and not any(extensions.glob("**/deepspeed_shm_comm*.so"))
    print(f"train: loading {cfg.model} and starting DeepSpeed on {kind}"
          + ("; its CPU communication op is compiled on first use (~1-2 min, once)" if first_build else ""), flush=True)


class DeviceUnavailable(ValueError):
    """The config asks for a device this machine does not have."""


def device_kind(cfg: TrainingConfig) -> str:
    """'cuda' or 'cpu', as `cfg.device` chooses (auto: CUDA where torch sees it)."""
    from dualview_core.model import placement

    try:
        device, _ = placement(cfg.device)
    except ValueError as exc:
        raise DeviceUnavailable(f"training.device: {exc}") from None
    return "cuda" if device.startswith("cuda") else "cpu"


def _load(cfg: TrainingConfig, steps: int, world: int):
    import torch

    from dualview_core.model import training_model

    kind = device_kind(cfg)
    if kind == "cpu" and torch.cuda.is_available():
        os.environ["DS_ACCELERATOR"] = "cpu"  # DeepSpeed would otherwise pick the CUDA it finds
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if kind == "cuda" else "cpu"
    if kind == "cuda":
        torch.cuda.set_device(device)
    _announce(cfg, kind)
    torch.manual_seed(cfg.seed)
    model = training_model(cfg, device)
    if kind == "cpu":  # compiled on first use; built here, alone, so that no rank waits on a rendezvous under the lock
        with op_build_lock(lambda line: print(line, flush=True)):
            from deepspeed.comm.torch import build_shm_op

            build_shm_op()
    return _engine(cfg, _bi_encoder(model), steps, world, kind), model


BUILD_LOCK = ".dualview-op-build.lock"


@contextlib.contextmanager
def op_build_lock(say: Callable[[str], None], root: Path | None = None) -> Iterator[None]:
    """Hold the project's lock on DeepSpeed's op builds (under TORCH_EXTENSIONS_DIR) while the ops are
    built, before any engine starts (an engine's start waits for every rank: never under this lock).
    torch marks a build in progress with a `lock` file that a killed build leaves behind,
    and every later build then waits on it forever. The project's own lock is an OS lock, released
    when its holder dies: whoever holds it knows no build of the project's is running, so a `lock`
    file found then is stale and is removed; a live holder is waited for, and said so."""
    root = root or extensions_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / BUILD_LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            say(f"train: waiting for {holder}, which is compiling DeepSpeed's ops in {root}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        for stale in sorted(root.glob("*/lock")):
            stale.unlink(missing_ok=True)
            say(f"train: removed {stale}, left by an op build that was killed")
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()}")
        handle.flush()
        yield

