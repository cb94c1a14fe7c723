"""The vendored ext_proc protos (protos/) and their generated stubs (sidecar/_proto)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sidecar._proto.envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from sidecar._proto.envoy.service.ext_proc.v3 import (
    external_processor_pb2,
    external_processor_pb2_grpc,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
STUBS = REPO_ROOT / "sidecar" / "_proto"
XDS_PROTOS_VERSION = "1.85.0"
SCRATCH_VENV_PYTHON = (
    REPO_ROOT / "build" / f"xds-protos-{XDS_PROTOS_VERSION}-venv" / "bin" / "python"
)


def _require_grpc_tools() -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (pip install -e '.[dev]'); cannot run protoc")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_committed_stubs_match_generator(tmp_path: Path) -> None:
    _require_grpc_tools()
    out = tmp_path / "_proto"
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "gen_protos.sh"), str(out)],
        check=True,
        env=env,
        capture_output=True,
        timeout=60,
    )
    generated, committed = _tree(out), _tree(STUBS)
    assert sorted(generated) == sorted(committed), "re-run scripts/gen_protos.sh"
    stale = [name for name in sorted(generated) if generated[name] != committed[name]]
    assert not stale, f"re-run scripts/gen_protos.sh; stale files: {stale}"


def _xds_protos_python() -> str | None:
    candidates = [os.environ.get("XDS_PROTOS_PYTHON"), str(SCRATCH_VENV_PYTHON)]
    probe = (
        "import importlib.metadata as m, sys; "
        f"sys.exit(m.version('xds-protos') != {XDS_PROTOS_VERSION!r})"
    )
    for python in candidates:
        if python and Path(python).exists():
            result = subprocess.run([python, "-I", "-c", probe], capture_output=True, timeout=30)
            if result.returncode == 0:
                return python
    return None


def test_vendored_protos_match_xds_protos() -> None:
    _require_grpc_tools()
    python = _xds_protos_python()
    if python is None:
        pytest.skip(
            f"no interpreter with xds-protos=={XDS_PROTOS_VERSION}: set XDS_PROTOS_PYTHON, or run "
            "scripts/vendor_protos.py once to make its scratch venv; the stub API tests below "
            "guard the generated code without it"
        )
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "vendor_protos.py"),
            "--check",
            f"--xds-python={python}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_processing_request_oneof() -> None:
    request = external_processor_pb2.ProcessingRequest.DESCRIPTOR
    oneof = request.oneofs_by_name["request"]
    assert {field.name for field in oneof.fields} == {
        "request_headers",
        "response_headers",
        "request_body",
        "response_body",
        "request_trailers",
        "response_trailers",
    }
    message = external_processor_pb2.ProcessingRequest(
        request_headers=external_processor_pb2.HttpHeaders(end_of_stream=True)
    )
    parsed = external_processor_pb2.ProcessingRequest.FromString(message.SerializeToString())
    assert parsed.WhichOneof("request") == "request_headers"
    assert parsed.request_headers.end_of_stream


def test_processing_response_fields() -> None:
    fields = external_processor_pb2.ProcessingResponse.DESCRIPTOR.fields_by_name
    assert fields["mode_override"].message_type.full_name == (
        "envoy.extensions.filters.http.ext_proc.v3.ProcessingMode"
    )
    assert fields["immediate_response"].message_type.full_name == (
        "envoy.service.ext_proc.v3.ImmediateResponse"
    )
    assert fields["immediate_response"].containing_oneof.name == "response"


def test_body_send_modes() -> None:
    body_send_mode = processing_mode_pb2.ProcessingMode.BodySendMode
    assert body_send_mode.Value("BUFFERED") != body_send_mode.Value("STREAMED")
    assert {"BUFFERED", "STREAMED"} <= set(body_send_mode.keys())


class _RecordingChannel:
    """Records which multicallable kind the generated stub asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, kind: str) -> Any:
        def multicallable(method: str, *args: object, **kwargs: object) -> None:
            self.calls.append((kind, method))

        return multicallable


def test_external_processor_service_is_bidi_streaming() -> None:
    service = external_processor_pb2.DESCRIPTOR.services_by_name["ExternalProcessor"]
    assert service.full_name == "envoy.service.ext_proc.v3.ExternalProcessor"
    method = service.methods_by_name["Process"]
    assert method.client_streaming
    assert method.server_streaming
    assert method.input_type is external_processor_pb2.ProcessingRequest.DESCRIPTOR
    assert method.output_type is external_processor_pb2.ProcessingResponse.DESCRIPTOR

    channel = _RecordingChannel()
    external_processor_pb2_grpc.ExternalProcessorStub(channel)
    assert channel.calls == [
        ("stream_stream", "/envoy.service.ext_proc.v3.ExternalProcessor/Process")
    ]
    assert callable(external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server)


def test_stubs_live_under_sidecar_proto() -> None:
    # Descriptors keep their proto file names; the Python modules do not leak out.
    assert external_processor_pb2.DESCRIPTOR.name == (
        "envoy/service/ext_proc/v3/external_processor.proto"
    )
    assert external_processor_pb2.ProcessingRequest.__module__ == external_processor_pb2.__name__
    leaked = sorted(
        name
        for name in sys.modules
        if name.split(".")[0] in {"udpa", "validate", "xds"} or name.startswith("envoy.service")
    )
    assert not leaked
