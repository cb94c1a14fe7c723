"""The ONNX export cache: the model's transformer exported to ONNX from its local
weights (``torch.onnx.export``, TorchScript exporter) and, for ``onnx-int8``,
dynamically quantized (int8 weights, per output channel).

The files are cached under ``embedding.cache_dir`` in a directory keyed by the
model's path and files (name, size, mtime) and the export format; the file name
carries the backend. Files are written to a temporary name and renamed, under an
exclusive lock, with a manifest holding their SHA-256, so concurrent start-ups
neither corrupt nor duplicate the work and a damaged file is rebuilt. torch is
imported only here, and only to export.
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

from sidecar.errors import EmbeddingError
from sidecar.memory.embedding.onnx_pipeline import (
    INPUT_NAMES,
    OUTPUT_NAME,
    IntArray,
    Pipeline,
    pool,
)
from sidecar.memory.embedding.protocol import set_offline_env

log = logging.getLogger(__name__)

OnnxBackend = Literal["onnx", "onnx-int8"]

#: Bump when the export or quantization recipe changes: every cache entry is redone.
EXPORT_FORMAT: Final = 1
OPSET: Final = 17

#: Model files whose name, size and mtime key the cache.
_KEY_SUFFIXES: Final = frozenset({".json", ".safetensors", ".bin", ".txt", ".model", ".pt"})


@dataclass(frozen=True, slots=True)
class CachedModel:
    """One verified model file in the cache."""

    path: Path
    sha256: str
    #: True when this call exported or quantized it (False: reused from the cache).
    built: bool


Loaded = tuple[CachedModel, bytes]


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


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def read_cached(path: Path) -> Loaded | None:
    """The file at ``path`` and its bytes if its manifest vouches for them, else None
    (missing or damaged). The bytes are what was checked: load those, not the path."""
    try:
        manifest = json.loads(manifest_path(path).read_text(encoding="utf-8"))
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
    os.replace(manifest_tmp, manifest_path(path))
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


def open_session(model: bytes | Path, *, threads: int = 1) -> Any:  # onnxruntime is untyped
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
    session = open_session(path)
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
    reference, quantized = open_session(src), open_session(out)
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
