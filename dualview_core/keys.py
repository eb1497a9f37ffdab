"""Stable content keys and digests.

A seed's key is a hash of its *canonical content*: the normalised record (`query_id`, query,
instruction, flag, and every passage's id, title and text, in order), serialised as canonical JSON.
It ignores where the row sits in a file, the file format, column order and any extra columns, so
reordering a file or converting it between Parquet and JSONL keeps every key; changing any text
changes the key. Later stages cache LLM calls on it.

Keys are 32 hex characters (BLAKE2b, 128 bits): collisions are not a practical concern at the
scale of millions of rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping

import orjson
import pyarrow as pa
import pyarrow.compute as pc

KEY_FIELDS = (
    "query_id",
    "query",
    "instruction",
    "has_instruction",
    "positives",
    "negatives",
    "instruction_negatives",
)
PASSAGE_FIELDS = ("doc_id", "title", "text")
DIGEST_SLICE = 65_536  # keys hashed at a time by `content_digest` on an Arrow array


def canonical_json(value: object) -> bytes:
    """JSON with sorted keys, no whitespace and raw UTF-8: one byte string per value."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def digest(data: bytes, size: int = 16) -> str:
    return hashlib.blake2b(data, digest_size=size).hexdigest()


def _canonical_seed(row: Mapping) -> list:
    # A list, not a dict: positional, so the key does not depend on JSON key order either.
    out: list = []
    for name in KEY_FIELDS:
        value = row[name]
        if name in ("positives", "negatives", "instruction_negatives"):
            value = [[p[f] for f in PASSAGE_FIELDS] for p in value]
        out.append(value)
    return out


def seed_key(row: Mapping) -> str:
    """The content key of a normalised seed row (contracts.SEED_ROW fields; `seed_key` ignored)."""
    return digest(seed_bytes(row))


def seed_bytes(row: Mapping) -> bytes:
    """What a seed key hashes: `canonical_json(_canonical_seed(row))`, written by orjson, which gives the
    same bytes for strings and booleans (every code point is checked in a test) several times faster.
    A lone surrogate raises TypeError (UnicodeEncodeError in `canonical_json`)."""
    return orjson.dumps(_canonical_seed(row))


def content_digest(keys: Iterable[str] | pa.Array | pa.ChunkedArray) -> str:
    """An order-independent digest of a set of row keys: the dataset's identity for lineage. An Arrow
    array of a million keys is sorted by Arrow and hashed a slice at a time (the same digest), never
    held as Python strings."""
    h = hashlib.blake2b(digest_size=16)
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        ordered = pc.array_sort_indices(keys) if isinstance(keys, pa.Array) else pc.sort_indices(keys)
        for start in range(0, len(keys), DIGEST_SLICE):
            h.update("".join(f"{k}\n" for k in keys.take(ordered[start:start + DIGEST_SLICE]).to_pylist()).encode())
        return h.hexdigest()
    for key in sorted(keys):
        h.update(key.encode())
        h.update(b"\n")
    return h.hexdigest()
