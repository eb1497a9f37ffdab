"""Max abs difference between `dualview evaluate`'s og-run scores and SentenceTransformer cosines.

Folders are saved by sentence-transformers itself from the packaged MiniLM (tests/helpers/st_folders.py);
the eval set is the bundled FollowIR sample. Usage: python benchmarks/st_parity.py [VARIANT ...]
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dualview_core.encoder import query_text
from dualview_core.evalsets import load_eval_set
from dualview_core.retrieval import doc_text
from dualview_core.samples import followir_path
from dualview_core.trec import read_run
from flows.cli import main
from flows.commands import apply_project_env
from tests.helpers.st_folders import VARIANTS, Folders


def worst_difference(folder: Path, out: Path) -> tuple[float, int]:
    from sentence_transformers import SentenceTransformer

    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["evaluate", "--model", str(folder), "--eval-set", followir_path(), "--out", str(out), "--resamples", "10"]) == 0
    es = load_eval_set(followir_path()).eval_set
    run, queries = read_run(str(out / "run_og.trec"), es.qrels_for("og")), es.queries_for("og")
    corpus = {r["doc_id"]: doc_text(r["title"], r["text"]) for r in es.corpus.to_pylist()}
    st = SentenceTransformer(str(folder), device="cpu")
    worst, pairs = 0.0, 0
    for query_id, scores in run.items():
        q = st.encode_query([query_text(*queries[query_id])], normalize_embeddings=True)[0]
        d = st.encode_document([corpus[doc] for doc in scores], normalize_embeddings=True)
        worst, pairs = max(worst, float(np.abs(d @ q - np.array(list(scores.values()))).max())), pairs + len(scores)
    return worst, pairs


if __name__ == "__main__":
    apply_project_env()
    variants = sys.argv[1:] or list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        folders = Folders(Path(tmp))
        print("| folder | (query, doc) pairs | max abs difference of scores |\n|---|---|---|")
        for variant in variants:
            worst, pairs = worst_difference(folders[variant], Path(tmp) / f"eval-{variant}")
            print(f"| {variant} | {pairs} | {worst:.1e} |", flush=True)
