"""Vendor the .proto import closure of Envoy's ext_proc service into ``protos/``.

The command line of ``scripts/vendor_protos.py`` (this docstring's first line is
the ``--help`` description). It finds or makes an interpreter with xds-protos,
which must stay out of the project virtualenv, and re-runs this package there as
the worker; with ``--worker`` it is that worker. Standard library only: the
worker's modules are imported in the worker alone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import venv
from collections.abc import Sequence
from pathlib import Path

from .config import DEFAULT_OUT, DEFAULT_STUBS, DEFAULT_VENV, XDS_PROTOS_VERSION, clean_env

# --------------------------------------------------------------------------- #
# Launcher: finds or makes an interpreter with xds-protos and re-runs there
# --------------------------------------------------------------------------- #

SCRIPTS_DIR = Path(__file__).resolve().parent.parent
# The worker runs with -I, which leaves the script's directory off sys.path too:
# this line puts back scripts/ alone (not the checkout), so that this package
# imports there as the top-level `protovendor`.
WORKER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from protovendor.launcher import main; sys.exit(main())"
)


def has_xds_protos(python: str) -> bool:
    probe = (
        "import importlib.metadata as m, sys; "
        f"sys.exit(m.version('xds-protos') != {XDS_PROTOS_VERSION!r})"
    )
    result = subprocess.run([python, "-I", "-c", probe], capture_output=True, env=clean_env())
    return result.returncode == 0


def ensure_venv(path: Path) -> str:
    python = path / "bin" / "python"
    if not python.exists():
        print(f"creating scratch virtualenv {path}")
        venv.EnvBuilder(with_pip=True, clear=True).create(path)
    if not has_xds_protos(str(python)):
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"xds-protos=={XDS_PROTOS_VERSION}"],
            check=True,
            env=clean_env(),
        )
    return str(python)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="vendored tree (protos/)")
    parser.add_argument(
        "--check", action="store_true", help="verify the committed files, write nothing"
    )
    parser.add_argument(
        "--stubs",
        type=Path,
        default=DEFAULT_STUBS,
        help="generated stubs whose embedded descriptors are compared too (sidecar/_proto)",
    )
    parser.add_argument(
        "--xds-python",
        help=f"an interpreter with xds-protos=={XDS_PROTOS_VERSION} (default: scratch venv)",
    )
    parser.add_argument(
        "--venv", type=Path, default=DEFAULT_VENV, help="where to make the scratch venv"
    )
    parser.add_argument(
        "--protoc-python",
        default=sys.executable,
        help="an interpreter with grpcio-tools (default: the one running this script)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.stubs = args.stubs.resolve() if args.stubs else None
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        from .worker import worker

        return worker(args)
    python = args.xds_python or ensure_venv(args.venv.resolve())
    if not has_xds_protos(python):
        raise SystemExit(f"{python} does not have xds-protos=={XDS_PROTOS_VERSION}")
    cmd = [
        python,
        "-I",  # keep the checkout (and its envoy/ directory) off sys.path
        "-c",
        WORKER_BOOT,
        str(SCRIPTS_DIR),
        "--worker",
        f"--out={args.out}",
        f"--stubs={args.stubs}",
        f"--protoc-python={args.protoc_python}",
    ]
    if args.check:
        cmd.append("--check")
    return subprocess.run(cmd, env=clean_env()).returncode
