"""Published layouts on the hub -> the folders `evalsets.load_eval_set` and `loading.stream_seeds` read.

Owns two decisions per catalog layout: which files of a hub repository a task needs (`patterns`, glob
patterns as huggingface_hub's `allow_patterns` reads them) and what each downloaded file becomes in the
task's folder (`plan`: a list of renames), plus the row rewriting MAIR needs to join its two
repositories into one folder (`mair_splits`, `mair_query`, `mair_doc`). It knows nothing about HTTP,
the hub's API, caches or filesystems: the caller lists, downloads, reads and writes.

    >>> [(c.src, c.dest) for c in plan("followir", ["corpus.jsonl", "qrels_og/test.jsonl", "README.md"])]
    [('corpus.jsonl', 'corpus.jsonl'), ('qrels_og/test.jsonl', 'qrels_og.jsonl')]
    >>> [(c.src, c.dest) for c in plan("mteb2", ["data/test-0.parquet", "corpus/test-0.parquet"])]
    [('corpus/test-0.parquet', 'corpus/test-0.parquet'), ('data/test-0.parquet', 'qrels/test-0.parquet')]
    >>> mair_splits(["IFEval/a_queries.jsonl", "IFEval/b_queries.jsonl"], ["IFEval/a_docs.jsonl", "IFEval/b_docs.jsonl"])
    [('a', 'IFEval/a_queries.jsonl', 'IFEval/a_docs.jsonl'), ('b', 'IFEval/b_queries.jsonl', 'IFEval/b_docs.jsonl')]
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from dualview_core.storage.filesystems import SourceError

# FollowIR (jhu-clsp/*-instructions) and InfoSearch (jianqunZ/*-v1): BEIR-style JSONL at the root,
# one folder per qrels view holding test.jsonl (and a test.tsv copy, which is left behind)
_BEIR_ROOT = ("corpus.jsonl", "queries.jsonl", "top_ranked.jsonl")
_BEIR_QRELS = {"followir": ("og", "changed"), "infosearch": ("og", "changed", "reversed")}

# mteb 2.x: one parquet folder per config; the relevance judgments sit in `data/` (jhu-clsp/*-mteb,
# config `default`) or `qrels/` (mteb/*InstructionRetrieval)
_MTEB_TABLES = {"corpus": "corpus", "queries": "queries", "instruction": "instruction", "qrels": "qrels",
                "data": "qrels", "default": "qrels", "qrel_diff": "qrel_diff", "top_ranked": "top_ranked"}

_DATA = (".parquet", ".jsonl", ".json")


@dataclass(frozen=True)
class Copy:
    """One downloaded file (path in the repository) and its name inside the task's folder."""

    src: str
    dest: str


def patterns(layout: str, config: str | None = None) -> list[str]:
    """The files of a repository a layout needs (fnmatch patterns: `*` crosses `/`)."""
    if layout in _BEIR_QRELS:
        return list(_BEIR_ROOT) + [f"qrels_{v}/*.jsonl" for v in _BEIR_QRELS[layout]]
    if layout == "mteb2":
        return [f"{folder}/*.parquet" for folder in _MTEB_TABLES]
    if layout == "mair":
        if not config:
            raise SourceError("a MAIR source names its task as config (IFEval, InstructIR, ...)")
        return [f"{config}/*.jsonl"]
    if layout == "promptriever":
        return [f"*{suffix}" for suffix in _DATA]
    raise SourceError(f"unknown layout {layout!r}")


def plan(layout: str, files: list[str]) -> list[Copy]:
    """What each downloaded file becomes in the task's folder, in a stable order; files the layout
    does not read are left out. MAIR is not a renaming (see `mair_splits`)."""
    out = []
    for src in sorted(files):
        dest = _dest(layout, src)
        if dest is not None:
            out.append(Copy(src, dest))
    dests = [c.dest for c in out]
    if len(set(dests)) != len(dests):
        raise SourceError(f"{layout}: two files would land on one name ({sorted(dests)})")
    return out


def _dest(layout: str, src: str) -> str | None:
    head, _, rest = src.partition("/")
    if layout in _BEIR_QRELS:
        if src in _BEIR_ROOT:
            return src
        view = head.removeprefix("qrels_")
        # one judgment file per view: test.jsonl, as the repositories' README configs name it
        return f"{head}.jsonl" if view in _BEIR_QRELS[layout] and rest == "test.jsonl" else None
    if layout == "mteb2":
        table = _MTEB_TABLES.get(head)
        return f"{table}/{rest}" if table and rest.endswith(".parquet") else None
    if layout == "promptriever":
        # one flat folder of shards; their names keep the source's order (train-00000-of-00004, ...)
        return src.replace("/", "__") if src.endswith(_DATA) and not src.startswith(".") else None
    raise SourceError(f"layout {layout!r} has no file plan")


def mair_splits(query_files: list[str], doc_files: list[str]) -> list[tuple[str, str, str]]:
    """(split, queries file, docs file) triples. MAIR names a task's single split `queries.jsonl` /
    `docs.jsonl` and the splits of a many-split task (IFEval) `<split>_queries.jsonl` /
    `<split>_docs.jsonl` (its evaluator pairs them the same way: `_queries` -> `_docs`)."""
    docs = {posixpath.basename(f).removesuffix(".jsonl"): f for f in doc_files}
    out = []
    for qfile in sorted(query_files):
        stem = posixpath.basename(qfile).removesuffix(".jsonl")
        if stem != "queries" and not stem.endswith("_queries"):
            continue
        split = "" if stem == "queries" else stem.removesuffix("_queries")
        dfile = docs.get("docs" if stem == "queries" else f"{split}_docs")
        if dfile is None:
            raise SourceError(f"MAIR: {qfile} has no documents file (looked for {split or ''}{'_' if split else ''}docs.jsonl)")
        out.append((split, qfile, dfile))
    if not out:
        raise SourceError(f"MAIR: no queries files among {sorted(query_files)[:5]}")
    return out


def _scoped(split: str, value: object) -> object:
    """An id made unique across splits: each IFEval split has its own documents, whose ids repeat."""
    return f"{split}/{value}" if split and value is not None else value


def mair_query(row: dict, split: str) -> dict:
    """A MAIR query row (qid, query, instruction, labels=[{id, score}]) with split-scoped ids.

        >>> mair_query({"qid": 1, "query": "q", "instruction": "i", "labels": [{"id": 7, "score": 1}]}, "s")
        {'qid': 's/1', 'query': 'q', 'instruction': 'i', 'labels': [{'id': 's/7', 'score': 1}]}
    """
    out = dict(row)
    out["qid"] = _scoped(split, row.get("qid"))
    out["labels"] = [{**label, "id": _scoped(split, label.get("id"))} for label in row.get("labels") or []]
    return out


def mair_doc(row: dict, split: str) -> dict:
    """A MAIR document row (id, doc) with a split-scoped id."""
    return {**row, "id": _scoped(split, row.get("id"))}
