"""The ``sidecar`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from sidecar.admin_cli import add_commands as add_admin_commands
from sidecar.config import load_config
from sidecar.errors import ConfigError, InvalidInput, SidecarError


def _cmd_serve(args: argparse.Namespace) -> int:
    from sidecar.logs import configure_logging
    from sidecar.runtime.server import serve

    config = load_config(args.config)
    configure_logging(config.logging)
    if config.supervised:
        from sidecar.runtime.workers import Supervisor

        return Supervisor(config).run()
    asyncio.run(serve(config))
    return 0


def _cmd_config_check(args: argparse.Namespace) -> int:
    from sidecar.config.reference import redacted

    config = load_config(args.file)
    print(json.dumps(redacted(config), indent=2))
    return 0


def _cmd_config_reference(args: argparse.Namespace) -> int:
    from sidecar.config.reference import render_reference

    sys.stdout.write(render_reference())
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


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _cutoffs(value: str) -> list[int]:
    try:
        return [int(item) for item in _comma_list(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {value!r}"
        ) from None


def _variant(value: str) -> tuple[str, dict[str, object]]:
    """``NAME=path=value,path=value`` (values read as YAML scalars: true, 0.3, off)."""
    import yaml

    name, _, settings = value.partition("=")
    changes: dict[str, object] = {}
    for item in _comma_list(settings):
        path, sep, raw = item.partition("=")
        if not sep or not path.strip():
            raise argparse.ArgumentTypeError(f"not NAME=path=value[,path=value]: {value!r}")
        changes[path.strip()] = yaml.safe_load(raw.strip())
    if not name.strip() or not changes:
        raise argparse.ArgumentTypeError(f"not NAME=path=value[,path=value]: {value!r}")
    return name.strip(), changes


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    from sidecar.memory.embedding.onnx import OnnxEncoder

    config = load_config(args.config)
    if args.cache_dir:
        config = config.model_copy(
            update={"embedding": config.embedding.model_copy(update={"cache_dir": args.cache_dir})}
        )
    for artifact in OnnxEncoder.prepare(config.embedding):
        state = "exported" if artifact.built else "present"
        print(f"{state}: {artifact.path} (sha256 {artifact.sha256[:12]})")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    import warnings

    from sidecar.evaluation.dataset import load_dataset
    from sidecar.evaluation.report import format_text, write_json
    from sidecar.evaluation.runner import EvalOptions, run_eval
    from sidecar.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.logging.model_copy(update={"level": "WARNING"}))
    # milvus-lite 2.5.1 imports pkg_resources (pinned setuptools<81): keep stderr clean.
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    dataset = load_dataset(args.dataset)
    options = EvalOptions(
        strategies=tuple(_comma_list(args.strategies)) if args.strategies else None,
        ks=tuple(args.k),
        no_threshold=args.no_threshold,
        oracle_topics=args.oracle_topics,
        limit_queries=args.limit_queries,
        store_uri=args.store_uri,
        progress=not args.quiet,
        rewrite=args.rewrite,
        deep_search=args.deep_search,
        llm_url=args.llm_url,
        variants=tuple(args.variant),
        off_topic=args.off_topic,
    )
    result = asyncio.run(run_eval(dataset, config, options, config_source=args.config))
    print(format_text(result), flush=True)
    if args.json is not None:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if result.violations:
        print(
            f"error: {result.violations} returned memories were outside their query's scope",
            file=sys.stderr,
        )
        return 3
    return 0


def _cmd_eval_writes(args: argparse.Namespace) -> int:
    import warnings

    from sidecar.evaluation.writes.dataset import load_write_dataset
    from sidecar.evaluation.writes.report import format_text, write_json
    from sidecar.evaluation.writes.runner import WriteEvalOptions, run_write_eval
    from sidecar.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.logging.model_copy(update={"level": "WARNING"}))
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    dataset = load_write_dataset(args.dataset)
    options = WriteEvalOptions(llm_url=args.llm_url, consolidate=not args.no_consolidation)
    result = asyncio.run(run_write_eval(dataset, config, options))
    print(format_text(result), flush=True)
    if args.json is not None:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    if result.final.leaks:
        print(f"error: {len(result.final.leaks)} cross-user leaks", file=sys.stderr)
        return 3
    return 0


def _cmd_eval_conversations(args: argparse.Namespace) -> int:
    import warnings

    from sidecar.evaluation.conversations.report import format_text, write_json
    from sidecar.evaluation.conversations.runner import (
        ConversationEvalOptions,
        run_conversation_eval,
    )
    from sidecar.evaluation.dataset import load_dataset
    from sidecar.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.logging.model_copy(update={"level": "WARNING"}))
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
    dataset = load_dataset(args.dataset)
    options = ConversationEvalOptions(
        llm_url=args.llm_url,
        limit_questions=args.limit_questions,
        baseline=not args.no_baseline,
    )
    result = asyncio.run(run_conversation_eval(dataset, config, options))
    print(format_text(result), flush=True)
    if args.json is not None:
        write_json(result, args.json)
        print(f"wrote {args.json}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sidecar",
        description="The memory sidecar: an Envoy ext_proc service that gives every user "
        "of an OpenAI-compatible LLM server long-term memory, and its operator commands.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the ext_proc server")
    serve.add_argument("--config", help="YAML config file (default: all defaults)")
    serve.set_defaults(func=_cmd_serve)

    config = commands.add_parser("config", help="configuration tools")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser("check", help="validate a config, print the result")
    check.add_argument("file")
    check.set_defaults(func=_cmd_config_check)
    reference = config_commands.add_parser(
        "reference", help="print the configuration reference (docs/configuration.md)"
    )
    reference.set_defaults(func=_cmd_config_reference)

    envoy = commands.add_parser("envoy-config", help="render the Envoy bootstrap YAML")
    envoy.add_argument("--config", required=True, help="YAML config file")
    envoy.add_argument(
        "--upstream", required=True, help="the LLM server, e.g. http://127.0.0.1:8000"
    )
    envoy.add_argument("--out", help="write to this file instead of stdout")
    envoy.set_defaults(func=_cmd_envoy_config)

    prepare = commands.add_parser(
        "prepare-model",
        help="export the embedding model's ONNX files into embedding.cache_dir",
        description="Export (and quantize) the embedding model for the configured ONNX "
        "backend, every variant a CPU may need, so that `serve` writes nothing at start: "
        "the container image runs this at build time.",
    )
    prepare.add_argument("--config", help="YAML config file (default: all defaults)")
    prepare.add_argument("--cache-dir", help="instead of the config's embedding.cache_dir")
    prepare.set_defaults(func=_cmd_prepare_model)

    evaluate = commands.add_parser(
        "eval",
        help="measure retrieval quality of the strategies on a labelled dataset",
        description="Load a dataset into a fresh store (write-path enrichment), answer "
        "every query with each strategy through the request path's retrieval code, and "
        "report recall/hit/precision/nDCG@k, MRR and latency.",
    )
    evaluate.add_argument("--dataset", required=True, help="dataset JSON file")
    evaluate.add_argument("--config", help="YAML config file (default: all defaults)")
    evaluate.add_argument(
        "--strategies",
        help="comma-separated strategy names (default: all; dense and bm25 always run)",
    )
    evaluate.add_argument(
        "--k",
        type=_cutoffs,
        default=[1, 5, 10, 20],
        help="comma-separated cut-offs (default: 1,5,10,20)",
    )
    evaluate.add_argument("--json", help="also write every number to this JSON file")
    evaluate.add_argument(
        "--store-uri",
        help="evaluate in a new, afterwards dropped collection at this store URI ('config': "
        "the config's store.uri) instead of a temporary milvus-lite file",
    )
    evaluate.add_argument(
        "--no-threshold",
        action="store_true",
        help="turn the evidence gate off (threshold -1, lexical_threshold 0): pure ranking",
    )
    evaluate.add_argument(
        "--oracle-topics",
        action="store_true",
        help="file memories under their dataset 'cluster' labels as named topics, as a "
        "perfect topic-labelling LLM would: an upper bound, not the product's figure "
        "(by default the labels are ignored)",
    )
    evaluate.add_argument("--limit-queries", type=int, help="evaluate only the first N queries")
    evaluate.add_argument(
        "--rewrite",
        action="store_true",
        help="add a '<strategy>+rewrite' row: follow-up rewriting from each query's context",
    )
    evaluate.add_argument(
        "--deep-search",
        action="store_true",
        help="add '+deep' rows: deep search as with deep_search.mode on, and how many "
        "primary misses it recovers",
    )
    evaluate.add_argument(
        "--llm-url",
        help="OpenAI-compatible base URL for rewriting and ranking (e.g. the mock LLM); "
        "default: the config's llm.base_url, else the heuristics",
    )
    evaluate.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME=SETTINGS",
        help="add a row NAME: the configured retrieval with these settings changed, e.g. "
        "'before=conversation.enabled=false,cues.enabled=false' (repeatable; "
        "'strategy=…' picks another strategy)",
    )
    evaluate.add_argument(
        "--off-topic",
        action="store_true",
        help="also ask every query of another user whose memories hold none of its "
        "answers, and report the lines the block would inject there",
    )
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    evaluate.set_defaults(func=_cmd_eval)

    writes = commands.add_parser(
        "eval-writes",
        help="measure the write path: duplicates, near misses, contradictions, junk",
        description="Send every turn of a write dataset (docs/write-eval.md) through "
        "the write queue, extraction, dedup and the store, then score what is stored "
        "and what the request path injects, before and after consolidation.",
    )
    writes.add_argument("--dataset", required=True, help="write-eval dataset JSON file")
    writes.add_argument("--config", help="YAML config file (default: all defaults)")
    writes.add_argument(
        "--llm-url",
        help="OpenAI-compatible base URL for extraction and the dedup judge (e.g. the "
        "mock LLM); default: the config's llm.base_url, else the heuristics",
    )
    writes.add_argument("--json", help="also write every number to this JSON file")
    writes.add_argument(
        "--no-consolidation", action="store_true", help="score without the consolidation pass"
    )
    writes.set_defaults(func=_cmd_eval_writes)

    talks = commands.add_parser(
        "eval-conversations",
        help="measure what the write path keeps: real conversations in, their questions asked",
        description="Replay a dataset of conversation turns (docs/eval-conversations.md) "
        "through the write path at the conversations' own times, ask its questions "
        "through the request path at their dates, and score whether the memories made "
        "from the evidence turns are found and injected — beside the same questions "
        "over the raw turns.",
    )
    talks.add_argument("--dataset", required=True, help="retrieval dataset of turns (JSON)")
    talks.add_argument("--config", help="YAML config file (default: all defaults)")
    talks.add_argument(
        "--llm-url",
        help="OpenAI-compatible base URL for extraction and the dedup judge; default: "
        "the config's llm.base_url, else the heuristics",
    )
    talks.add_argument(
        "--limit-questions",
        type=int,
        metavar="N",
        help="ask only the first N questions (and replay only their users)",
    )
    talks.add_argument(
        "--no-baseline", action="store_true", help="skip the raw-turn baseline (faster)"
    )
    talks.add_argument("--json", help="also write every number to this JSON file")
    talks.set_defaults(func=_cmd_eval_conversations)
    add_admin_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    except InvalidInput as exc:
        problems = getattr(exc, "errors", None)  # ValidationFailed: every problem, with its path
        if not problems:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        lines = "\n".join(f"{path}: {message}" for path, message in problems)
        print(f"invalid input:\n{lines}", file=sys.stderr)
        return 2
    except SidecarError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
