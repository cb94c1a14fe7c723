"""Deleted rows' bytes out of a milvus-lite file.

milvus-lite keeps its rows in a SQLite file. SQLite leaves a deleted or rewritten
row's bytes in the pages it frees until they are reused, so a forgotten user's words
could stay readable in the file. ``VACUUM`` rewrites the file from its live rows
only. It runs from this process on the file milvus-lite's server has open: SQLite's
file locks make it wait for the server's transactions, and the server re-reads the
schema the rewrite changed. Rowids (milvus-lite's primary keys) are kept. Its cost
grows with the file (seconds for hundreds of megabytes), so it runs after a forget,
not after every delete.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


def vacuum(path: Path, timeout_s: float) -> bool:
    """Rewrite the SQLite file at ``path`` from its live rows; False when there is no
    such file (nothing was ever written)."""
    if not path.is_file():
        return False
    with contextlib.closing(sqlite3.connect(path, timeout=timeout_s)) as db:
        db.execute("VACUUM")
    return True
