"""The ONNX Runtime backends (``onnx`` and ``onnx-int8``) for sentence-transformers models.

The model's transformer is exported to ONNX from its local weights at start-up
(``torch.onnx.export``, TorchScript exporter) and, for ``onnx-int8``, dynamically
quantized (int8 weights, per output channel). The files are cached under
``embedding.cache_dir`` in a directory keyed by the model's path and files (name,
size, mtime) and the export format; the file name carries the backend. Files are
written to a temporary name and renamed, under an exclusive lock, with a manifest
holding their SHA-256, so concurrent start-ups neither corrupt nor duplicate the
work and a damaged file is rebuilt.

At run time only ``tokenizers``, ``numpy`` and ``onnxruntime`` are used (torch is
imported only to export). The pipeline is sentence-transformers' for these models:
the fast tokenizer (truncated to ``max_seq_length``, padded to the longest text of a
batch), the transformer, pooling over the attention mask as configured in the
model's Pooling module, and L2 normalisation.

Dynamic quantization scales activations per tensor, over the whole batch: an int8
vector would depend on what else shares its batch. ``onnx-int8`` therefore runs each
text on its own (still coalesced into one job per micro-batch); ``onnx`` runs
batches, grouped by length to bound padding.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import logging
import os
import re
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from sidecar.config import EmbeddingConfig
from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.embedder import Vectors, resolve_model_path, set_offline_env

log = logging.getLogger(__name__)

OnnxBackend = Literal["onnx", "onnx-int8"]

#: Bump when the export or quantization recipe changes: every cache entry is redone.
EXPORT_FORMAT: Final = 1
OPSET: Final = 17
#: The transformer inputs, in the order the exported graph takes them.
INPUT_NAMES: Final = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME: Final = "last_hidden_state"
#: Model files whose name, size and mtime key the cache.
_KEY_SUFFIXES: Final = frozenset({".json", ".safetensors", ".bin", ".txt", ".model", ".pt"})
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

#: Largest share of padding tokens in one batched model call (``onnx`` backend).
_MAX_PADDING: Final = 0.25

IntArray = npt.NDArray[np.int64]


# --- the model directory ------------------------------------------------------------


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


# --- tokenization and pooling ---------------------------------------------------------


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


# --- the cache ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CachedModel:
    """One verified model file in the cache."""

    path: Path
    sha256: str
    #: True when this call exported or quantized it (False: reused from the cache).
    built: bool


def cache_key(model_dir: Path) -> str:
    """Hex key for ``model_dir``'s exports: its path, model files and the export format."""
    digest = hashlib.sha256(f"format={EXPORT_FORMAT};opset={OPSET}\n".encode())
    root = model_dir.resolve()
    digest.update(f"{root}\n".encode())
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _KEY_SUFFIXES)
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_entry_dir(cache_dir: Path, model_dir: Path) -> Path:
    root = model_dir.resolve()
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{root.parent.name}-{root.name}").strip("._-")
    return cache_dir / f"{slug[:80] or 'model'}-{cache_key(model_dir)[:20]}"


def cpu_has_vnni() -> bool:
    """x86 VNNI present (int8 dot products without int16 saturation)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return bool(flags & {"avx512_vnni", "avx_vnni"})
    return False


def model_file_name(backend: OnnxBackend, *, reduce_range: bool) -> str:
    if backend == "onnx":
        return "model.onnx"
    return "model.int8-r7.onnx" if reduce_range else "model.int8.onnx"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


Loaded = tuple[CachedModel, bytes]


def read_cached(path: Path) -> Loaded | None:
    """The file at ``path`` and its bytes if its manifest vouches for them, else None
    (missing or damaged). The bytes are what was checked: load those, not the path."""
    try:
        manifest = json.loads(_manifest_path(path).read_text(encoding="utf-8"))
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        return None
    if manifest.get("size") != len(data) or manifest.get("sha256") != _sha256(data):
        log.warning("cached ONNX model %s is damaged; rebuilding it", path.name)
        return None
    return CachedModel(path=path, sha256=manifest["sha256"], built=False), data


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _publish(tmp: Path, path: Path, source: str) -> Loaded:
    """Rename a finished temporary file into place, then write its manifest."""
    data = tmp.read_bytes()
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    digest = _sha256(data)
    manifest = {"format": EXPORT_FORMAT, "size": len(data), "sha256": digest, "source": source}
    fd, manifest_tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(manifest_tmp, _manifest_path(path))
    _fsync_dir(path.parent)
    return CachedModel(path=path, sha256=digest, built=True), data


@contextlib.contextmanager
def _temp_path(directory: Path, name: str) -> Iterator[Path]:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory`` across processes (released on exit or crash)."""
    with open(directory / ".lock", "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            for stale in directory.glob(".*.tmp"):  # left by a crashed writer
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def ensure_model(
    model_dir: Path,
    cache_dir: Path,
    backend: OnnxBackend,
    pipeline: Pipeline,
    *,
    reduce_range: bool,
) -> Loaded:
    """The backend's model file from the cache, exporting/quantizing it if needed."""
    try:
        entry = cache_entry_dir(cache_dir, model_dir)
        entry.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EmbeddingError(f"cannot create the model cache {cache_dir}: {exc}") from exc
    target = entry / model_file_name(backend, reduce_range=reduce_range)
    found = read_cached(target)
    if found is not None:
        return found
    source = str(model_dir.resolve())
    try:
        with _exclusive(entry):
            found = read_cached(target)  # another process may have built it meanwhile
            if found is not None:
                return found
            fp32_path = entry / model_file_name("onnx", reduce_range=False)
            fp32 = read_cached(fp32_path)
            if fp32 is None:
                with _temp_path(entry, fp32_path.name) as tmp:
                    started = time.perf_counter()
                    export_onnx(pipeline, tmp)
                    fp32 = _publish(tmp, fp32_path, source)
                log.info(
                    "exported the embedding model to ONNX in %.1fs", time.perf_counter() - started
                )
            if backend == "onnx":
                return fp32
            with _temp_path(entry, target.name) as tmp:
                started = time.perf_counter()
                quantize_int8(fp32_path, tmp, pipeline, reduce_range=reduce_range)
                built = _publish(tmp, target, source)
            log.info("quantized the ONNX embedding model in %.1fs", time.perf_counter() - started)
            return built
    except EmbeddingError:
        raise
    except OSError as exc:
        raise EmbeddingError(f"cannot write the model cache {entry}: {exc}") from exc
    except Exception as exc:  # foreign library errors of every kind, at start-up
        raise EmbeddingError(f"building the ONNX model failed: {type(exc).__name__}") from exc


# --- export and quantization (start-up only) ------------------------------------------


def _probe_batch(pipeline: Pipeline, lengths: tuple[int, ...], seed: int) -> dict[str, IntArray]:
    """Random token ids, one row per length, right-padded (no text involved)."""
    rng = np.random.default_rng(seed)
    lengths = tuple(min(length, pipeline.max_seq_length) for length in lengths)
    width = max(lengths)
    ids = np.zeros((len(lengths), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1000, 2000, size=length)
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _session(model: bytes | Path, *, threads: int = 1) -> Any:  # onnxruntime is untyped
    """An ONNX Runtime CPU session: ``threads`` intra-op, sequential, fully optimised."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmbeddingError(f"the ONNX backends need onnxruntime: {exc}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only; no per-session chatter
    # A sidecar shares its cores with Envoy and the event loop: no busy-waiting.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source = str(model) if isinstance(model, Path) else model
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types (InvalidProtobuf, Fail, ...)
        raise EmbeddingError(f"cannot load the ONNX model: {type(exc).__name__}") from exc


def _feed(session: Any, batch: dict[str, IntArray]) -> dict[str, IntArray]:
    return {i.name: batch[i.name] for i in session.get_inputs()}


def export_onnx(pipeline: Pipeline, out: Path) -> None:
    """Export the transformer (last hidden state) to ``out`` and check it against torch.

    Blocking, seconds. The TorchScript exporter with eager attention: the dynamo
    exporter needs onnxscript, and SDPA's masking paths trace with warnings.
    """
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise EmbeddingError(f"exporting to ONNX needs torch and transformers: {exc}") from exc
    set_offline_env()
    example_batch = _probe_batch(pipeline, (7, 19, 33), seed=1)
    check_batch = _probe_batch(pipeline, (4, 12, 50, 27), seed=2)  # another shape
    # Loading and tracing warn (legacy exporter, tensor-to-bool in masking code,
    # aten::index); none of it applies to this fixed, verified graph.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with _no_progress_bar():
                model = AutoModel.from_pretrained(
                    str(pipeline.transformer_dir),
                    local_files_only=True,
                    attn_implementation="eager",
                )
        except Exception as exc:  # foreign library errors of every kind, at start-up
            raise EmbeddingError(f"cannot load {pipeline.transformer_dir}: {exc}") from exc
        model.eval()
        accepted = inspect.signature(model.forward).parameters
        names = [name for name in INPUT_NAMES if name in accepted]
        wrapper = _last_hidden_state_module(torch, model, names)
        example = tuple(torch.from_numpy(example_batch[name]) for name in names)
        axes = {name: {0: "batch", 1: "sequence"} for name in [*names, OUTPUT_NAME]}
        try:
            with torch.no_grad():
                expected = wrapper(*(torch.from_numpy(check_batch[n]) for n in names)).numpy()
                torch.onnx.export(
                    wrapper,
                    example,
                    str(out),
                    input_names=names,
                    output_names=[OUTPUT_NAME],
                    dynamic_axes=axes,
                    opset_version=OPSET,
                    do_constant_folding=True,
                    dynamo=False,
                )
        except Exception as exc:  # torch.onnx raises many kinds
            raise EmbeddingError(f"ONNX export failed: {type(exc).__name__}: {exc}") from exc
    _check_export(out, check_batch, expected)


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """No "Loading weights" bar on stderr while the exporter loads the model."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _last_hidden_state_module(torch: Any, model: Any, names: list[str]) -> Any:
    class LastHiddenState(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    return LastHiddenState().eval()


def _check_export(path: Path, probe: dict[str, IntArray], expected: npt.NDArray[Any]) -> None:
    """The exported graph matches torch on real (unpadded) tokens, for a batch of
    another shape than the traced one (no constant got baked into the trace)."""
    session = _session(path)
    got = session.run([OUTPUT_NAME], _feed(session, probe))[0]
    valid = probe["attention_mask"].astype(bool)
    error = (
        float(np.abs(got[valid] - expected[valid]).max()) if got.shape == expected.shape else 1e9
    )
    if error > 1e-3:
        raise EmbeddingError(f"the ONNX export disagrees with torch (max abs error {error:.2g})")


def quantize_int8(src: Path, out: Path, pipeline: Pipeline, *, reduce_range: bool) -> None:
    """Dynamic int8 quantization of ``src`` (weights QInt8, per channel) into ``out``.

    ``reduce_range`` (7-bit weights) avoids int16 saturation on x86 CPUs without VNNI.
    """
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise EmbeddingError(f"quantizing needs onnxruntime and onnx: {exc}") from exc
    with _quiet_quantizer():
        try:
            quantize_dynamic(
                str(src),
                str(out),
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=reduce_range,
            )
        except Exception as exc:  # onnxruntime.quantization raises many kinds
            raise EmbeddingError(f"quantization failed: {type(exc).__name__}: {exc}") from exc
    probe = _probe_batch(pipeline, (5, 17, 60), seed=3)
    reference, quantized = _session(src), _session(out)
    rows = []
    for row in range(len(probe["input_ids"])):
        single = {name: value[row : row + 1] for name, value in probe.items()}
        vectors = [
            pool(
                s.run([OUTPUT_NAME], _feed(s, single))[0],
                single["attention_mask"],
                pipeline.pooling,
            )
            for s in (reference, quantized)
        ]
        rows.append(float((vectors[0] * vectors[1]).sum()))
    if min(rows) < 0.95:
        raise EmbeddingError(f"the int8 model strays too far from fp32 (cosine {min(rows):.3f})")


class _QuietQuantizer(logging.Filter):
    """Drops the quantizer's root-logger chatter: per-tensor notes, pre-pass advice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and "pre-processing" not in record.getMessage()


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """quantize_dynamic logs through the root logger itself (``logging.info``)."""
    root = logging.getLogger()
    quiet = _QuietQuantizer()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


# --- the encoder ----------------------------------------------------------------------


class OnnxEncoder:
    """The ``onnx`` / ``onnx-int8`` backends: blocking ``encode`` for :class:`BatchingEmbedder`."""

    def __init__(
        self,
        session: Any,
        tokenizer: TextTokenizer,
        pipeline: Pipeline,
        *,
        per_text: bool,
        batch_size: int,
        artifact: CachedModel | None = None,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pipeline = pipeline
        self._per_text = per_text
        self._batch_size = batch_size
        self._inputs = {i.name for i in session.get_inputs()}
        missing = self._inputs - set(INPUT_NAMES)
        if missing:
            raise EmbeddingError(f"the ONNX model wants unknown inputs {sorted(missing)}")
        #: The cache file this encoder runs (None when built from a session directly).
        self.artifact = artifact

    @classmethod
    def load(cls, config: EmbeddingConfig) -> OnnxEncoder:
        """Export/quantize into the cache if needed, then open it (blocking, seconds)."""
        if config.backend == "torch":
            raise EmbeddingError("OnnxEncoder serves the onnx and onnx-int8 backends")
        set_offline_env()
        model_dir = Path(resolve_model_path(config.model))
        if not model_dir.is_dir():
            raise EmbeddingError(f"embedding model {model_dir} is not a local directory")
        pipeline = read_pipeline(model_dir)
        tokenizer = TextTokenizer(pipeline.transformer_dir, pipeline.max_seq_length)
        backend: OnnxBackend = config.backend
        reduce_range = backend == "onnx-int8" and not cpu_has_vnni()
        args = (model_dir, Path(config.cache_dir), backend, pipeline)
        artifact, data = ensure_model(*args, reduce_range=reduce_range)
        try:
            session = _session(data, threads=config.threads)
        except EmbeddingError:
            if artifact.built:
                raise
            # It hashes right but will not load (written by another version?): rebuild once.
            _manifest_path(artifact.path).unlink(missing_ok=True)
            artifact, data = ensure_model(*args, reduce_range=reduce_range)
            session = _session(data, threads=config.threads)
        del data
        encoder = cls(
            session,
            tokenizer,
            pipeline,
            per_text=backend == "onnx-int8",
            batch_size=config.batch_size,
            artifact=artifact,
        )
        if encoder.encode(["ready"]).shape != (1, pipeline.dim):
            raise EmbeddingError("the ONNX model's output does not match its pooling config")
        return encoder

    @property
    def dim(self) -> int:
        return self._pipeline.dim

    def encode(self, texts: list[str]) -> Vectors:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        rows = self._tokenizer.encode(texts)
        if self._per_text:
            for i, row in enumerate(rows):
                out[i] = self._run([row])[0]
            return out
        for chunk in self._chunks([len(ids) for ids, _ in rows]):
            out[chunk] = self._run([rows[i] for i in chunk])
        return out

    def _chunks(self, lengths: list[int]) -> Iterator[list[int]]:
        """Row indices in model calls: by length, at most ``batch_size`` rows, and
        padding at most ``_MAX_PADDING`` of a call's tokens (one long text padding 31
        short ones to its length would cost far more than running it apart)."""
        chunk: list[int] = []
        tokens = 0
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            padded = (len(chunk) + 1) * lengths[i]  # sorted: this row sets the width
            if chunk and (
                len(chunk) == self._batch_size
                or padded - tokens - lengths[i] > _MAX_PADDING * padded
            ):
                yield chunk
                chunk, tokens = [], 0
            chunk.append(i)
            tokens += lengths[i]
        if chunk:
            yield chunk

    def _run(self, rows: list[tuple[list[int], list[int]]]) -> npt.NDArray[np.float32]:
        batch = self._tokenizer.pad(rows)
        feed = {name: value for name, value in batch.items() if name in self._inputs}
        hidden = self._session.run([OUTPUT_NAME], feed)[0]
        return pool(hidden, batch["attention_mask"], self._pipeline.pooling)
