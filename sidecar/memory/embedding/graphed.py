"""The ``torch`` backend on a GPU without per-kernel launch cost: CUDA graphs.

Eager PyTorch spends a query's time launching the ~100 small kernels of a 6-layer
BERT, not running them, so eager sentence-transformers on a GPU is no faster than
the int8 ONNX model on one CPU core (docs/design/query-encoder.md). This encoder
runs the same model as a fixed sequence of tensor operations (:class:`BertMeanPooler`:
embeddings, encoder layers, mean pooling, normalization, weights taken from the loaded
sentence-transformers model), captures it once per padded shape (batch and
sequence-length buckets) as a CUDA graph at start-up, and per call only copies the
token ids in, replays one graph and copies the vectors out.

Only BERT-family models with mean pooling qualify (``all-MiniLM-L6-v2`` is one);
:func:`graphable` says why another does not, and the caller then keeps the eager
sentence-transformers path. The math is checked against sentence-transformers on
CPU in the test suite; the graphs need a GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from sidecar.errors import EmbeddingError

Vectors = np.ndarray

#: Padded batch sizes captured (a larger call runs in slices of the largest).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)
#: Padded sequence lengths captured (capped at the model's ``max_seq_length``).
LENGTH_BUCKETS = (16, 32, 64, 128, 256, 512)


def graphable(model: Any) -> str | None:
    """``None`` when ``model`` (a SentenceTransformer) can run as a
    :class:`BertMeanPooler`, else the reason it cannot."""
    modules = list(model)
    names = [type(module).__name__ for module in modules]
    if names[:2] != ["Transformer", "Pooling"] or any(name != "Normalize" for name in names[2:]):
        return f"modules {names} (needs Transformer, Pooling[, Normalize])"
    mode = getattr(modules[1], "pooling_mode", None)
    if mode is None and hasattr(modules[1], "get_pooling_mode_str"):
        mode = modules[1].get_pooling_mode_str()
    if mode != "mean":
        return f"pooling {mode!r} (needs mean)"
    config = modules[0].auto_model.config
    if config.model_type != "bert":
        return f"model type {config.model_type!r} (needs bert)"
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return f"position embeddings {config.position_embedding_type!r} (needs absolute)"
    if config.hidden_act != "gelu":
        return f"activation {config.hidden_act!r} (needs gelu)"
    return None


class BertMeanPooler:
    """BERT encoder + attention-masked mean pooling + L2 normalization, as plain
    tensor operations over fixed-shape inputs (so a CUDA graph can capture it), in
    the model's own dtype and on its device (its weights are used, not copied)."""

    def __init__(self, auto_model: Any) -> None:
        import torch

        config = auto_model.config
        state = {k: v.detach() for k, v in auto_model.state_dict().items()}
        self._torch = torch
        self.heads = int(config.num_attention_heads)
        self.eps = float(config.layer_norm_eps)
        self.word = state["embeddings.word_embeddings.weight"]
        self.position = state["embeddings.position_embeddings.weight"]
        self.token_type = state["embeddings.token_type_embeddings.weight"][0]
        self.embed_norm = self._norm(state, "embeddings.LayerNorm")
        self.layers = []
        for i in range(int(config.num_hidden_layers)):
            p = f"encoder.layer.{i}."
            qkv = [state[f"{p}attention.self.{name}.weight"] for name in ("query", "key", "value")]
            qkv_bias = [
                state[f"{p}attention.self.{name}.bias"] for name in ("query", "key", "value")
            ]
            self.layers.append(
                {
                    "qkv": (torch.cat(qkv), torch.cat(qkv_bias)),
                    "out": self._linear(state, f"{p}attention.output.dense"),
                    "out_norm": self._norm(state, f"{p}attention.output.LayerNorm"),
                    "up": self._linear(state, f"{p}intermediate.dense"),
                    "down": self._linear(state, f"{p}output.dense"),
                    "down_norm": self._norm(state, f"{p}output.LayerNorm"),
                }
            )

    @staticmethod
    def _linear(state: dict[str, Any], prefix: str) -> tuple[Any, Any]:
        return state[f"{prefix}.weight"], state[f"{prefix}.bias"]

    _norm = _linear

    def __call__(self, ids: Any, mask: Any) -> Any:
        """``ids``/``mask``: (batch, length) int64 tensors -> (batch, dim) unit vectors."""
        torch = self._torch
        functional = torch.nn.functional
        batch, length = ids.shape
        hidden = self.word[ids] + self.position[:length] + self.token_type
        width = hidden.shape[-1]
        hidden = functional.layer_norm(hidden, (width,), *self.embed_norm, self.eps)
        keep = mask.to(hidden.dtype)
        # Additive attention bias: padding positions get the dtype's most negative value.
        bias = ((1.0 - keep) * torch.finfo(hidden.dtype).min)[:, None, None, :]
        head_dim = width // self.heads
        for layer in self.layers:
            qkv = functional.linear(hidden, *layer["qkv"])
            qkv = qkv.view(batch, length, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
            attended = functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], bias)
            attended = attended.transpose(1, 2).reshape(batch, length, width)
            hidden = functional.layer_norm(
                hidden + functional.linear(attended, *layer["out"]),
                (width,),
                *layer["out_norm"],
                self.eps,
            )
            up = functional.gelu(functional.linear(hidden, *layer["up"]))
            hidden = functional.layer_norm(
                hidden + functional.linear(up, *layer["down"]),
                (width,),
                *layer["down_norm"],
                self.eps,
            )
        summed = (hidden.float() * keep.float()[:, :, None]).sum(dim=1)
        pooled = summed / keep.float().sum(dim=1, keepdim=True).clamp(min=1e-9)
        return functional.normalize(pooled, p=2.0, dim=1)


class _Graph:
    """One captured shape: static inputs, the graph, its static output. All graphs of
    an encoder share one memory pool (their intermediates overlap; replays are
    serialized and each output is copied out before the next replay)."""

    def __init__(
        self,
        pooler: BertMeanPooler,
        batch: int,
        length: int,
        device: Any,
        pool: Any,
        stream: Any,
    ) -> None:
        import torch

        self.ids = torch.zeros((batch, length), dtype=torch.long, device=device)
        self.mask = torch.zeros((batch, length), dtype=torch.long, device=device)
        self.mask[:, 0] = 1  # a valid (non-empty) row while warming up and capturing
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):  # warm-up outside the graph (lazy kernel initialization)
                pooler(self.ids, self.mask)
        torch.cuda.current_stream(device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool, stream=stream), torch.inference_mode():
            self.out = pooler(self.ids, self.mask)


class GraphedEncoder:
    """:class:`~sidecar.memory.embedding.protocol.Encoder` replaying CUDA graphs of a BERT
    mean-pooling model. Replays are serialized (one lock): the graphs share their
    inputs and outputs per shape, and one GPU runs them one after another anyway."""

    def __init__(
        self,
        tokenizer: Any,
        pooler: BertMeanPooler,
        *,
        device: str,
        max_length: int,
        max_batch: int,
    ) -> None:
        import torch

        self._torch = torch
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._device = torch.device(device)
        self._lengths = sorted({min(n, max_length) for n in LENGTH_BUCKETS})
        largest = max(1, min(max_batch, BATCH_BUCKETS[-1]))
        self._batches = sorted({n for n in BATCH_BUCKETS if n < largest} | {largest})
        pool = torch.cuda.graph_pool_handle()
        # One side stream for every warm-up and capture: each new stream gets its own
        # cuBLAS workspace, so a stream per shape would hold many times the GPU memory.
        stream = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        # Largest shape first, so smaller graphs can reuse its blocks in the pool.
        self._graphs = {
            (batch, length): _Graph(pooler, batch, length, self._device, pool, stream)
            for batch in reversed(self._batches)
            for length in reversed(self._lengths)
        }
        torch.cuda.synchronize(self._device)
        self._dim = int(next(iter(self._graphs.values())).out.shape[1])
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def shapes(self) -> int:
        """Captured graphs (batch × length buckets)."""
        return len(self._graphs)

    def encode(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        step = self._batches[-1]
        for start in range(0, len(texts), step):
            chunk = list(texts[start : start + step])
            out[start : start + len(chunk)] = self._encode_chunk(chunk)
        return out

    def _encode_chunk(self, texts: list[str]) -> Vectors:
        ids, mask = pad_to_bucket(
            self._tokenizer(
                texts,
                padding=True,
                truncation=True,
                max_length=self._max_length,
                return_tensors="np",
            ),
            self._batches,
            self._lengths,
        )
        graph = self._graphs[ids.shape]
        torch = self._torch
        with self._lock:
            graph.ids.copy_(torch.from_numpy(ids))
            graph.mask.copy_(torch.from_numpy(mask))
            graph.graph.replay()
            vectors = graph.out[: len(texts)].cpu().numpy()
        return np.asarray(vectors, dtype=np.float32)


def pad_to_bucket(
    tokens: Any, batches: Sequence[int], lengths: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask (tokenizer output, numpy) padded with zeros to the
    smallest captured (batch, length) shape holding them. Padding rows get one valid
    position so their (discarded) mean is defined."""
    ids = np.asarray(tokens["input_ids"], dtype=np.int64)
    mask = np.asarray(tokens["attention_mask"], dtype=np.int64)
    rows, width = ids.shape
    batch = next(n for n in batches if n >= rows)
    length = next(n for n in lengths if n >= width)
    padded_ids = np.zeros((batch, length), dtype=np.int64)
    padded_mask = np.zeros((batch, length), dtype=np.int64)
    padded_ids[:rows, :width] = ids
    padded_mask[:rows, :width] = mask
    padded_mask[rows:, 0] = 1
    return padded_ids, padded_mask


def graphed_encoder(model: Any, *, device: str, max_batch: int) -> GraphedEncoder:
    """Capture ``model`` (a loaded SentenceTransformer on a CUDA ``device``) as graphs.

    Raises :class:`EmbeddingError` when the model does not qualify (see
    :func:`graphable`) or capturing fails.
    """
    reason = graphable(model)
    if reason is not None:
        raise EmbeddingError(f"cannot run as CUDA graphs: {reason}")
    auto_model = model[0].auto_model
    positions = int(auto_model.config.max_position_embeddings)
    max_length = min(int(model.max_seq_length or positions), positions)
    pooler = BertMeanPooler(auto_model)
    try:
        return GraphedEncoder(
            model.tokenizer,
            pooler,
            device=device,
            max_length=max_length,
            max_batch=max_batch,
        )
    except Exception as exc:  # CUDA errors of every kind, at start-up
        raise EmbeddingError(f"capturing CUDA graphs failed: {exc}") from exc


__all__ = [
    "BATCH_BUCKETS",
    "LENGTH_BUCKETS",
    "BertMeanPooler",
    "GraphedEncoder",
    "graphable",
    "graphed_encoder",
    "pad_to_bucket",
]
