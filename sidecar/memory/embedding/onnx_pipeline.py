"""What sentence-transformers does with a model, without torch: read from the model's
directory (transformer, max sequence length, pooling modes), the fast tokenizer
(truncated to ``max_seq_length``, padded to the longest text of a batch), pooling
over the attention mask, and L2 normalisation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from sidecar.errors import EmbeddingError

#: The transformer inputs, in the order the exported graph takes them.
INPUT_NAMES: Final = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME: Final = "last_hidden_state"

#: The pooling modes these backends implement (sentence-transformers' names).
_POOLING_MODES: Final = ("cls", "max", "mean", "mean_sqrt_len_tokens")
#: Older pooling configs: one flag per mode, concatenated in this order.
_LEGACY_POOLING_FLAGS: Final = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
    ("pooling_mode_weightedmean_tokens", "weightedmean"),
    ("pooling_mode_lasttoken", "lasttoken"),
)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """What sentence-transformers does with this model, read from its directory."""

    #: The directory of the Hugging Face transformer (and its tokenizer).
    transformer_dir: Path
    max_seq_length: int
    #: Pooling modes, in the order their vectors are concatenated.
    pooling: tuple[str, ...]
    hidden_size: int

    @property
    def dim(self) -> int:
        return self.hidden_size * len(self.pooling)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read {path}: {exc}") from exc


def read_pipeline(model_dir: Path) -> Pipeline:
    """Check the model is Transformer -> Pooling (-> Normalize) and read their settings."""
    modules = (
        _read_json(model_dir / "modules.json") if (model_dir / "modules.json").exists() else []
    )
    if not isinstance(modules, list) or not modules:
        raise EmbeddingError(f"{model_dir}: not a sentence-transformers model (no modules.json)")
    kinds: dict[str, Path] = {}
    for module in modules:
        if not isinstance(module, dict):
            raise EmbeddingError(f"{model_dir}: malformed modules.json")
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in {"Transformer", "Pooling", "Normalize"} or kind in kinds:
            raise EmbeddingError(
                f"{model_dir}: module {kind or '?'} is not supported by the ONNX backends;"
                " use backend: torch"
            )
        kinds[kind] = model_dir / str(module.get("path", ""))
    if "Transformer" not in kinds or "Pooling" not in kinds:
        raise EmbeddingError(f"{model_dir}: the ONNX backends need a Transformer and a Pooling")
    transformer_dir = kinds["Transformer"]
    config = _read_json(transformer_dir / "config.json")
    hidden_size = int(config.get("hidden_size", 0))
    max_positions = int(config.get("max_position_embeddings", 512))

    st_config_path = transformer_dir / "sentence_bert_config.json"
    st_config = _read_json(st_config_path) if st_config_path.exists() else {}
    if st_config.get("do_lower_case"):
        raise EmbeddingError(f"{model_dir}: do_lower_case is not supported; use backend: torch")
    max_seq_length = st_config.get("max_seq_length")
    if not isinstance(max_seq_length, int):
        tok_config_path = transformer_dir / "tokenizer_config.json"
        tok_config = _read_json(tok_config_path) if tok_config_path.exists() else {}
        model_max = tok_config.get("model_max_length")
        max_seq_length = min(model_max, max_positions) if isinstance(model_max, int) else 512
    max_seq_length = min(max_seq_length, max_positions)

    pooling_config = _read_json(kinds["Pooling"] / "config.json")
    modes = _pooling_modes(pooling_config)
    unsupported = [mode for mode in modes if mode not in _POOLING_MODES]
    if unsupported or not modes or len(set(modes)) != len(modes):
        raise EmbeddingError(
            f"{model_dir}: pooling {list(modes)} is not supported by the ONNX backends;"
            " use backend: torch"
        )
    if pooling_config.get("include_prompt") is False:
        raise EmbeddingError(f"{model_dir}: include_prompt=false is not supported")
    word_dim = pooling_config.get(
        "embedding_dimension", pooling_config.get("word_embedding_dimension", hidden_size)
    )
    if hidden_size <= 0 or word_dim != hidden_size or max_seq_length < 2:
        raise EmbeddingError(f"{model_dir}: inconsistent hidden size or sequence length")
    return Pipeline(
        transformer_dir=transformer_dir,
        max_seq_length=max_seq_length,
        pooling=modes,
        hidden_size=hidden_size,
    )


def _pooling_modes(config: dict[str, Any]) -> tuple[str, ...]:
    """The modes, in sentence-transformers' order: ``pooling_mode`` (a name or a list)
    or, in older configs, the ``pooling_mode_*`` flags (none set: mean)."""
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return (mode,)
    if isinstance(mode, list):
        return tuple(str(m) for m in mode)
    flags = [m for key, m in _LEGACY_POOLING_FLAGS if config.get(key) is True]
    return tuple(flags) or ("mean",)


class TextTokenizer:
    """The model's fast tokenizer (``tokenizer.json``), as sentence-transformers calls it."""

    def __init__(self, transformer_dir: Path, max_seq_length: int) -> None:
        from tokenizers import Tokenizer

        path = transformer_dir / "tokenizer.json"
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception
            raise EmbeddingError(f"cannot load the fast tokenizer {path}: {exc}") from exc
        # tokenizer.json may carry its own (shorter) truncation and fixed padding.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_seq_length)
        self._tokenizer = tokenizer
        self.pad_id = self._pad_id(transformer_dir, tokenizer)

    @staticmethod
    def _pad_id(transformer_dir: Path, tokenizer: Any) -> int:
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            path = transformer_dir / name
            pad = _read_json(path).get("pad_token") if path.exists() else None
            if isinstance(pad, dict):
                pad = pad.get("content")
            if isinstance(pad, str) and (pad_id := tokenizer.token_to_id(pad)) is not None:
                return int(pad_id)
        return 0

    def encode(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        """Token ids and token type ids per text, truncated, not padded."""
        # One by one: encode_batch's thread pool costs more than it saves here.
        out = []
        for text in texts:
            encoding = self._tokenizer.encode(text)
            out.append((encoding.ids, encoding.type_ids))
        return out

    def pad(self, rows: list[tuple[list[int], list[int]]]) -> dict[str, IntArray]:
        """A padded batch: the longest row's length, attention mask 0 on padding."""
        width = max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        type_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, (ids, types) in enumerate(rows):
            input_ids[i, : len(ids)] = ids
            type_ids[i, : len(types)] = types
            mask[i, : len(ids)] = 1
        return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": type_ids}


def pool(
    hidden: npt.NDArray[np.float32], mask: IntArray, modes: tuple[str, ...]
) -> npt.NDArray[np.float32]:
    """sentence-transformers' Pooling over ``(batch, seq, hidden)``, then L2 normalisation."""
    weights = mask[:, :, None].astype(np.float32)
    counts = np.maximum(weights.sum(axis=1), 1e-9)
    parts: list[npt.NDArray[np.float32]] = []
    for mode in modes:
        if mode == "cls":  # the first unmasked token: right padding makes it row 0
            parts.append(hidden[:, 0])
        elif mode == "max":
            parts.append(np.where(weights > 0, hidden, np.float32(-np.inf)).max(axis=1))
        elif mode == "mean":
            parts.append((hidden * weights).sum(axis=1) / counts)
        else:  # mean_sqrt_len_tokens
            parts.append((hidden * weights).sum(axis=1) / np.sqrt(counts))
    pooled = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return np.asarray(pooled / norms, dtype=np.float32)
