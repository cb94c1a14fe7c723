"""Which embedder a process runs, from the config: the host's shared encoder over its
socket when the supervisor hands one over, else the configured backend in this
process. Kept apart from the protocol so that the backends import the protocol and
nothing imports back.
"""

from __future__ import annotations

from sidecar.config import EmbeddingConfig
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.protocol import Embedder, Encoder
from sidecar.memory.embedding.remote import RemoteEmbedder
from sidecar.memory.embedding.torch_backend import load_torch_encoder


def build_embedder(config: EmbeddingConfig) -> Embedder:
    """The shared encoder at ``config.service_socket`` when one is set; else the
    configured backend behind a :class:`BatchingEmbedder` (blocking, seconds)."""
    if config.service_socket:
        return RemoteEmbedder.connect(config.service_socket)
    return build_local_embedder(config)


def build_local_embedder(config: EmbeddingConfig) -> BatchingEmbedder:
    """The configured backend behind a :class:`BatchingEmbedder`, in this process
    (blocking, seconds).

    Offline: nothing is downloaded. The ONNX backends export (and quantize) the local
    model into ``config.cache_dir`` first when no valid cached export exists.
    """
    encoder: Encoder = (
        load_torch_encoder(config) if config.backend == "torch" else OnnxEncoder.load(config)
    )
    return BatchingEmbedder.for_encoder(encoder, config)
