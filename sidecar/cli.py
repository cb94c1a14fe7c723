"""The ``sidecar`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from sidecar.config import load_config
from sidecar.errors import ConfigError, SidecarError


def _cmd_serve(args: argparse.Namespace) -> int:
    from sidecar.app import serve
    from sidecar.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.logging)
    asyncio.run(serve(config))
    return 0


def _cmd_config_check(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    print(json.dumps(config.model_dump(mode="json", by_alias=True), indent=2))
    return 0


def _cmd_envoy_config(args: argparse.Namespace) -> int:
    from sidecar.envoy_config import render_yaml

    text = render_yaml(load_config(args.config), args.upstream)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SidecarError(f"cannot write {args.out}: {exc.strerror}") from exc
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sidecar", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the ext_proc server")
    serve.add_argument("--config", help="YAML config file (default: all defaults)")
    serve.set_defaults(func=_cmd_serve)

    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser("check", help="validate a config, print the result")
    check.add_argument("file")
    check.set_defaults(func=_cmd_config_check)

    envoy = commands.add_parser("envoy-config", help="render the Envoy bootstrap YAML")
    envoy.add_argument("--config", required=True, help="YAML config file")
    envoy.add_argument(
        "--upstream", required=True, help="the LLM server, e.g. http://127.0.0.1:8000"
    )
    envoy.add_argument("--out", help="write to this file instead of stdout")
    envoy.set_defaults(func=_cmd_envoy_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    except SidecarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
