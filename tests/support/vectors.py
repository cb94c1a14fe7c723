"""Hand-made vectors for hand-built records and corpora."""

from __future__ import annotations

import numpy as np


def unit(*values: float) -> tuple[float, ...]:
    """``values`` scaled to length 1 in float32 (as the store keeps a vector), as the
    tuple of floats a :class:`~sidecar.memory.records.records.MemoryRecord` holds."""
    array = np.asarray(values, dtype=np.float32)
    return tuple(float(x) for x in array / np.linalg.norm(array))
