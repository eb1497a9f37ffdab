"""A set of string identities that stays small at millions of members: each is kept as a 24-character
hex digest (96 bits), recent ones in a Python set, older ones folded into one sorted NumPy array of
24 bytes each. A Python set of (query_id, flag) tuples costs ~170 bytes a member: 390 MB for the
2.3M source rows behind a million synthesis rows, against ~55 MB here. Two identities share a digest
with probability ~n^2 / 2^97 (~1e-17 at 2.3M). Hex never holds a NUL byte, which NumPy's fixed-width
bytes would strip.

    >>> seen = IdSet(fold_at=2)
    >>> for name in ("a", "b", "c"):
    ...     _ = seen.add(name)
    >>> ("a" in seen, "c" in seen, "d" in seen, len(seen))
    (True, True, False, 3)
"""

from __future__ import annotations

import hashlib

import numpy as np

DIGEST_BYTES = 12  # 24 hex characters


def identity_bytes(identity: str) -> bytes:
    """The 96-bit digest of an identity, raw (dualview_core/synthesis/plan.py sorts millions of them as integers)."""
    return hashlib.blake2b(identity.encode(), digest_size=DIGEST_BYTES).digest()


def identity_digest(identity: str) -> bytes:
    """The same digest as hex: never a NUL byte, which NumPy's fixed-width bytes would strip."""
    return identity_bytes(identity).hex().encode()


class IdSet:
    def __init__(self, fold_at: int = 65_536):
        self.fold_at = fold_at
        self._old = np.empty(0, dtype=f"S{2 * DIGEST_BYTES}")  # sorted
        self._new: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._old) + len(self._new)

    def __contains__(self, identity: str) -> bool:
        return self._has(identity_digest(identity))

    def _has(self, d: bytes) -> bool:
        if d in self._new:
            return True
        at = int(np.searchsorted(self._old, d))
        return at < len(self._old) and self._old[at] == d

    def add(self, identity: str) -> bool:
        """Add `identity`; False if it was already a member (one digest for the check and the add)."""
        d = identity_digest(identity)
        if self._has(d):
            return False
        self._new.add(d)
        if len(self._new) >= self.fold_at:
            self._fold()
        return True

    def _fold(self) -> None:
        new = np.array(sorted(self._new), dtype=self._old.dtype)
        self._old = np.insert(self._old, np.searchsorted(self._old, new), new)  # one copy, stays sorted
        self._new = set()
