"""Hand-made vectors for hand-built records and corpora."""

from __future__ import annotations

import numpy as np

from sidecar.memory.records.embeddings import Embedding


def unit(*values: float) -> Embedding:
    """``values`` scaled to length 1 in float32, as a
    :class:`~sidecar.memory.records.records.MemoryRecord` holds a vector."""
    array = np.asarray(values, dtype=np.float32)
    return Embedding(array / np.linalg.norm(array))
