"""What the evaluation tests share: the configuration ``sidecar eval`` runs with, the
dataset files they write, and a run of the runner on a module's dataset."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import EmbeddingConfig, SidecarConfig, config_from_mapping
from sidecar.evaluation.dataset import load_dataset
from sidecar.evaluation.runner import EvalOptions, EvalResult, run_eval
from sidecar.memory.embedding.protocol import Embedder


@pytest.fixture(scope="package")
def config(embedding_config: EmbeddingConfig) -> SidecarConfig:
    """The built-in configuration, with the session's model cache."""
    return config_from_mapping({"embedding": embedding_config.model_dump()}, env={})


@pytest.fixture(scope="module")
def write_dataset(tmp_path_factory: pytest.TempPathFactory) -> Callable[[dict[str, Any]], Path]:
    """Writes a dataset document to ``<its name>.json`` in a directory of its own."""

    def write(document: dict[str, Any]) -> Path:
        name = str(document["name"])
        path = tmp_path_factory.mktemp(name) / f"{name}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="module")
def evaluate(
    dataset_file: Path, config: SidecarConfig, embedder: Embedder
) -> Callable[[EvalOptions], Awaitable[EvalResult]]:
    """``sidecar eval``'s runner on the module's ``dataset_file`` with ``config``."""

    async def run(options: EvalOptions) -> EvalResult:
        return await run_eval(load_dataset(dataset_file), config, options, embedder=embedder)

    return run
