"""Evaluation sets: FollowIR (original and mteb 2.x layouts), InfoSearch and MAIR into one `EvalSet`.

Owns the published layouts and their translation into the long EVAL_* tables (one row per query and
view). Bad rows (missing ids, empty text, duplicates, non-numeric scores, references to unknown
ids) are quarantined with reasons, as for seeds. It does not score anything.

Layouts, as a folder whose files are named by table (any of .jsonl/.json/.parquet, .tsv for qrels,
or a `save_to_disk` sub-folder):

- FollowIR original: `corpus` (_id, title, text), `queries` (_id, text, instruction_og,
  instruction_changed), `qrels_og` / `qrels_changed` (query-id, corpus-id, score), `top_ranked`
  (qid, pid — one row per pair, or pid as a list).
- FollowIR, mteb 2.x: `queries` with ids `NNN-og` / `NNN-changed` and an `instruction` column (or an
  `instructions` table: query-id, instruction), one `qrels` table over those ids, `qrel_diff`
  (query-id, corpus-ids) and `top_ranked` (query-id, corpus-ids as a list).
- InfoSearch: the original layout plus `instruction_reversed` and `qrels_reversed`.
- MAIR: `queries` (qid, query, instruction, labels=[{id, score}]) and `corpus` (id, doc).
"""

from __future__ import annotations

import csv
import io
import posixpath
from dataclasses import dataclass, field

import pyarrow as pa

from dualview_core.contracts import (
    EVAL_CORPUS,
    EVAL_QRELS,
    EVAL_QUERIES,
    EVAL_TOP_RANKED,
    EvalSet,
    Reason,
    Rejected,
    View,
)
from dualview_core.keys import canonical_json
from dualview_core.data.sources import JSONL, PARQUET, SourceError, iter_raw
from dualview_core.storage.filesystems import filesystem

DOC_ID = ("_id", "id", "doc_id", "docid", "corpus-id")
QUERY_ID = ("_id", "id", "qid", "query_id", "query-id")
DOC_TEXT = ("text", "doc", "contents")
QUERY_TEXT = ("text", "query")
MTEB_SUFFIX = {"-og": View.OG, "-changed": View.CHANGED}


@dataclass
class EvalLoad:
    eval_set: EvalSet
    rejected: dict[str, list[Rejected]] = field(default_factory=dict)  # table name -> rows

    @property
    def quarantined(self) -> int:
        return sum(len(v) for v in self.rejected.values())

    def dropped(self) -> dict[str, dict]:
        """table -> {rows, reasons: {reason: count}} of what was quarantined: what the metrics leave out.

            >>> EvalLoad(None, {"qrels_og": []}).dropped()
            {}
        """
        out = {}
        for table, rows in sorted(self.rejected.items()):
            if rows:
                reasons: dict[str, int] = {}
                for r in rows:
                    reasons[r.reason.value] = reasons.get(r.reason.value, 0) + 1
                out[table] = {"rows": len(rows), "reasons": dict(sorted(reasons.items()))}
        return out

    def refuse_drops(self, path: str) -> None:
        """Strict evaluation: any quarantined row refuses the eval set, in one line."""
        if self.quarantined:
            parts = "; ".join(f"{t}: {d['rows']} ({', '.join(f'{k} {n}' for k, n in d['reasons'].items())})"
                              for t, d in self.dropped().items())
            raise SourceError(f"{path}: {self.quarantined} rows would be left out of the metrics ({parts}); "
                              "fix them, or evaluate without strict")


class _Table:
    """Rows of one named table, with quarantine bookkeeping."""

    def __init__(self, name: str, rows: list, rejected: list[Rejected]):
        self.name, self.rows, self.rejected = name, rows, rejected

    def reject(self, index: int, row: object, reason: Reason, detail: str, query_id: str | None = None) -> None:
        raw = row if isinstance(row, str) else canonical_json(row).decode()
        self.rejected.append(Rejected(index, query_id, reason, f"{self.name}: {detail}", raw))


def _first(row: dict, names: tuple[str, ...]) -> object:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def _str_id(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def _find(fs, folder: str, names: tuple[str, ...]) -> str | None:
    entries = {posixpath.basename(p.rstrip("/")): p for p in fs.ls(folder, detail=False)}
    for name in names:
        for suffix in ("",) + PARQUET + JSONL + (".tsv",):
            if name + suffix in entries:
                return entries[name + suffix]
    return None


def _read(fs, folder: str, names: tuple[str, ...], storage_options, required: bool = True) -> _Table | None:
    path = _find(fs, folder, names)
    if path is None:
        if required:
            raise SourceError(f"{folder}: no {names[0]} table (looked for {', '.join(names)})")
        return None
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    url = path if protocol in ("file", "local") else f"{protocol}://{path}"
    rows, rejected = [], []
    table = _Table(names[0], rows, rejected)
    if path.endswith(".tsv"):
        rows.extend(_read_tsv(fs, path))
        return table
    for batch in iter_raw(url, storage_options):
        for raw in batch:
            if raw.problem:
                rejected.append(Rejected(raw.index, None, raw.problem[0], f"{names[0]}: {raw.problem[1]}", str(raw.value)))
            else:
                rows.append((raw.index, raw.value))
    return table


def _read_tsv(fs, path: str) -> list[tuple[int, dict]]:
    """BEIR-style qrels: a header `query-id corpus-id score`, tab separated."""
    with fs.open(path, "rb") as f:
        reader = csv.DictReader(io.TextIOWrapper(f, encoding="utf-8"), delimiter="\t")
        return list(enumerate(reader))


def load_eval_set(path: str, name: str | None = None, storage_options: dict | None = None) -> EvalLoad:
    """Load a FollowIR / InfoSearch / MAIR folder (local or s3://) into an EvalSet."""
    fs, folder = filesystem(path, storage_options)
    if not fs.exists(folder) or not fs.isdir(folder):
        raise SourceError(f"{path}: no such folder (an eval set is a folder of tables)")
    read = lambda *names, required=True: _read(fs, folder, names, storage_options, required)  # noqa: E731
    name = name or posixpath.basename(folder.rstrip("/"))
    corpus = read("corpus", "docs")
    queries = read("queries")
    b = _Builder(name)
    b.add_corpus(corpus)
    if queries.rows and "labels" in queries.rows[0][1]:
        b.add_mair_queries(queries)
    elif queries.rows and _mteb_view(str(_first(queries.rows[0][1], QUERY_ID)))[1] is not None:
        b.add_mteb(queries, read("instructions", "instruction", required=False), read("qrels", "default"))
        diff = read("qrel_diff", required=False)
        if diff is not None:
            b.check_qrel_diff(diff)
    else:
        qrels = {v: read(f"qrels_{v.value}", required=v == View.OG) for v in (View.OG, View.CHANGED, View.REVERSED)}
        if qrels[View.CHANGED] is None and any(f"instruction_{View.CHANGED.value}" in row for _, row in queries.rows[:1]):
            raise SourceError(f"{path}: a FollowIR folder (its queries carry instruction_changed) without "
                              "qrels_changed; expected corpus, queries, qrels_og and qrels_changed (.jsonl, .tsv or "
                              ".parquet): without the changed judgments p-MRR cannot be computed")
        b.add_original(queries, qrels)
    top = read("top_ranked", required=False)
    if top is not None:
        b.add_top_ranked(top)
    return b.build()


def _mteb_view(query_id: str) -> tuple[str, View | None]:
    for suffix, view in MTEB_SUFFIX.items():
        if query_id.endswith(suffix):
            return query_id[: -len(suffix)], view
    return query_id, None


class _Builder:
    def __init__(self, name: str):
        self.name = name
        self.docs: dict[str, dict] = {}
        self.queries: dict[tuple[str, str], dict] = {}  # (query_id, view) -> row
        self.qrels: dict[tuple[str, str, str], int] = {}
        self.top: dict[str, dict[str, None]] = {}
        self.tables: list[_Table] = []
        self.meta: dict[str, str] = {}

    def add_corpus(self, t: _Table) -> None:
        self.tables.append(t)
        for i, row in t.rows:
            doc_id, text = _str_id(_first(row, DOC_ID)), _first(row, DOC_TEXT)
            if doc_id is None:
                t.reject(i, row, Reason.MISSING_FIELD, "document id missing or empty")
            elif not isinstance(text, str) or not text.strip():
                t.reject(i, row, Reason.EMPTY_TEXT, f"document {doc_id} has no text")
            elif doc_id in self.docs:
                t.reject(i, row, Reason.DUPLICATE_ID, f"document {doc_id} repeats")
            else:
                self.docs[doc_id] = {"doc_id": doc_id, "title": row.get("title") or "", "text": text}

    def _add_query(self, t: _Table, i: int, row: dict, query_id: str | None, view: View, query: object,
                   instruction: object, group_id: str | None = None) -> bool:
        if query_id is None:
            t.reject(i, row, Reason.MISSING_FIELD, "query id missing or empty")
        elif not isinstance(query, str) or not query.strip():
            t.reject(i, row, Reason.EMPTY_TEXT, f"query {query_id} has no text", query_id)
        elif not isinstance(instruction, str):
            t.reject(i, row, Reason.MISSING_FIELD, f"query {query_id} has no {view.value} instruction", query_id)
        elif (query_id, view.value) in self.queries:
            t.reject(i, row, Reason.DUPLICATE_ID, f"query {query_id} ({view.value}) repeats", query_id)
        else:
            self.queries[(query_id, view.value)] = {
                "query_id": query_id, "group_id": group_id or query_id, "view": view.value,
                "query": query, "instruction": instruction}
            return True
        return False

    def add_original(self, queries: _Table, qrels: dict[View, _Table | None]) -> None:
        self.tables.append(queries)
        views = [v for v, t in qrels.items() if t is not None]
        for i, row in queries.rows:
            query_id = _str_id(_first(row, QUERY_ID))
            for view in views:
                if not self._add_query(queries, i, row, query_id, view, _first(row, QUERY_TEXT), row.get(f"instruction_{view.value}")):
                    break
        for view in views:
            self._add_qrels(qrels[view], lambda qid, v=view: (qid, v))

    def add_mteb(self, queries: _Table, instructions: _Table | None, qrels: _Table) -> None:
        self.tables.append(queries)
        self.meta["layout"] = "mteb2"
        separate: dict[str, str] = {}
        if instructions is not None:
            self.tables.append(instructions)
            separate = {str(_first(r, QUERY_ID)): r.get("instruction") for _, r in instructions.rows}
        for i, row in queries.rows:
            raw_id = _str_id(_first(row, QUERY_ID))
            base, view = _mteb_view(raw_id or "")
            if view is None:
                queries.reject(i, row, Reason.MALFORMED, f"query id {raw_id!r} lacks an -og/-changed suffix", raw_id)
                continue
            instruction = row.get("instruction", separate.get(raw_id))
            self._add_query(queries, i, row, base, view, _first(row, QUERY_TEXT), instruction)
        self._add_qrels(qrels, _mteb_view)

    def add_mair_queries(self, queries: _Table) -> None:
        self.tables.append(queries)
        self.meta["layout"] = "mair"
        for i, row in queries.rows:
            query_id = _str_id(_first(row, QUERY_ID))
            if not self._add_query(queries, i, row, query_id, View.OG, _first(row, ("query", "text")),
                                   row.get("instruction") or ""):
                continue
            for label in row.get("labels") or []:
                self._add_judgement(queries, i, row, query_id, View.OG, _str_id(_first(label, DOC_ID)), label.get("score"))

    def _add_qrels(self, t: _Table, split) -> None:
        self.tables.append(t)
        for i, row in t.rows:
            query_id, view = split(_str_id(_first(row, ("query-id", "query_id", "qid"))) or "")
            self._add_judgement(t, i, row, query_id, view, _str_id(_first(row, ("corpus-id", "doc_id", "docid", "pid"))), row.get("score"))

    def _add_judgement(self, t, i, row, query_id, view, doc_id, score) -> None:
        try:
            relevance = int(float(score))
        except (TypeError, ValueError):
            t.reject(i, row, Reason.WRONG_TYPE, f"score {score!r} is not a number", query_id)
            return
        if view is None or (query_id, view.value) not in self.queries:
            t.reject(i, row, Reason.UNKNOWN_REFERENCE, f"unknown query {query_id!r}", query_id)
        elif doc_id not in self.docs:
            t.reject(i, row, Reason.UNKNOWN_REFERENCE, f"unknown document {doc_id!r}", query_id)
        else:
            self.qrels[(query_id, view.value, doc_id)] = relevance

    def check_qrel_diff(self, t: _Table) -> None:
        """mteb 2.x ships the changed documents explicitly; they must agree with the two qrels, by the
        definition p-MRR scores with (`metrics.followir_changed`: any label change counts)."""
        from dualview_core.method.metrics import followir_changed

        self.tables.append(t)
        by_view: dict[str, dict[str, dict[str, int]]] = {View.OG.value: {}, View.CHANGED.value: {}}
        for (query_id, view, doc_id), rel in self.qrels.items():
            if view in by_view:
                by_view[view].setdefault(query_id, {})[doc_id] = rel
        derived = followir_changed(by_view[View.OG.value], by_view[View.CHANGED.value])
        mismatches = 0
        for _, row in t.rows:
            query_id = _str_id(_first(row, QUERY_ID))
            shipped = {_str_id(d) for d in row.get("corpus-ids") or []}
            mismatches += set(derived.get(query_id, [])) != shipped
        self.meta["qrel_diff_mismatches"] = str(mismatches)

    def add_top_ranked(self, t: _Table) -> None:
        self.tables.append(t)
        known_queries = {q for q, _ in self.queries}
        for i, row in t.rows:
            query_id = _str_id(_first(row, ("qid", "query-id", "query_id")))
            query_id = _mteb_view(query_id or "")[0]
            docs = _first(row, ("pid", "corpus-ids", "doc_ids"))
            docs = docs if isinstance(docs, list) else [docs]
            if query_id not in known_queries:
                t.reject(i, row, Reason.UNKNOWN_REFERENCE, f"unknown query {query_id!r}", query_id)
                continue
            unknown = [d for d in docs if _str_id(d) not in self.docs]
            if unknown:
                t.reject(i, row, Reason.UNKNOWN_REFERENCE, f"unknown document(s) {unknown[:3]}", query_id)
                continue
            # dict as an ordered set: first occurrence wins, repeats are harmless
            ranked = self.top.setdefault(query_id, {})
            ranked.update(dict.fromkeys(map(_str_id, docs)))

    def build(self) -> EvalLoad:
        qrels = [{"query_id": q, "view": v, "doc_id": d, "relevance": r} for (q, v, d), r in self.qrels.items()]
        top = pa.Table.from_pylist([{"query_id": q, "doc_ids": list(d)} for q, d in self.top.items()], schema=EVAL_TOP_RANKED)
        eval_set = EvalSet(
            name=self.name,
            corpus=pa.Table.from_pylist(list(self.docs.values()), schema=EVAL_CORPUS),
            queries=pa.Table.from_pylist(list(self.queries.values()), schema=EVAL_QUERIES),
            qrels=pa.Table.from_pylist(qrels, schema=EVAL_QRELS),
            top_ranked=top if self.top else None,
            meta=self.meta,
        )
        return EvalLoad(eval_set, {t.name: t.rejected for t in self.tables if t.rejected})
