"""The retrieval contract every strategy implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sidecar.memory.records import Hit, Scope


@dataclass(frozen=True, slots=True)
class Query:
    """A search query: its text and its (normalised) embedding, computed once."""

    text: str = field(repr=False)
    vector: npt.NDArray[np.float32] = field(repr=False)


class Retriever(Protocol):
    """Finds the memories ``scope`` may read that best match ``query``, best first."""

    name: str

    async def retrieve(self, query: Query, *, scope: Scope, top_k: int) -> list[Hit]: ...
