"""What is vendored, from which xds-protos release, and where it goes.

Shared by the launcher and the worker (the version is also in every vendored
file's header), with the environment both give the interpreters they start.
Standard library only, like the launcher.
"""

from __future__ import annotations

import os
from pathlib import Path

XDS_PROTOS_VERSION = "1.85.0"
ROOT_MODULE = "envoy.service.ext_proc.v3.external_processor_pb2"
ROOT_PROTO = "envoy/service/ext_proc/v3/external_processor.proto"
WELL_KNOWN_PREFIX = "google/protobuf/"

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "protos"
DEFAULT_STUBS = REPO_ROOT / "sidecar" / "_proto"
DEFAULT_VENV = REPO_ROOT / "build" / f"xds-protos-{XDS_PROTOS_VERSION}-venv"

# Where each top-level proto directory comes from (all Apache-2.0).
UPSTREAMS = {
    "envoy": "envoyproxy/data-plane-api",
    "udpa": "cncf/xds",
    "xds": "cncf/xds",
    "validate": "bufbuild/protoc-gen-validate",
}


def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env
