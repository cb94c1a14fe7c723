"""The operator commands: ``sidecar memories ...``, ``sidecar store migrate``,
``sidecar admin openapi``, ``sidecar admin ready``.

``sidecar memories`` runs the same :class:`~sidecar.admin.service.MemoryAdmin`
calls as the HTTP admin API: through a running sidecar's admin API when one
answers on the config's admin socket, or at ``--remote URL`` (it holds the store and
the journal; the token goes nowhere else: :mod:`sidecar.admin.remote`), else
directly against the configured store (no HTTP, no token: whoever can read the
config file can reach the store anyway). Results
are JSON on stdout; ``export`` writes JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sidecar.admin.models import STATUS_FILTERS
from sidecar.admin.remote import running_sidecar
from sidecar.config import SidecarConfig, load_config
from sidecar.errors import JournalError, SidecarError

Action = Callable[[Any, argparse.Namespace], Awaitable[Any]]


def _quiet(config: SidecarConfig) -> None:
    from sidecar.logs import configure_logging

    configure_logging(config.logging.model_copy(update={"level": "WARNING"}))
    # milvus-lite 2.5.1 imports pkg_resources (pinned setuptools<81): keep stderr clean.
    warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)


@asynccontextmanager
async def _journal(config: SidecarConfig, exists: bool) -> AsyncIterator[Any]:
    """The write journal when it exists and no running sidecar holds it (else None)."""
    from sidecar.memory.write.turns.journal import TurnJournal

    if not exists:
        yield None
        return
    journal = TurnJournal(
        config.write_queue.journal_path, max_pending=config.write_queue.max_pending
    )
    try:
        await journal.open()
    except JournalError:  # locked by the serving process
        yield None
        return
    try:
        yield journal
    finally:
        await journal.close()


async def _run_memories(config: SidecarConfig, args: argparse.Namespace) -> Any:
    from sidecar.runtime.components import Components

    components = await Components.build(config)
    try:
        if args.action != "forget":
            return await ACTIONS[args.action](components.memory_admin(), args)
        async with _journal(config, args.journal_exists) as journal:
            admin = components.memory_admin(journal=journal)
            result = await _forget(admin, args)
            if journal is None:
                result["journal_note"] = (
                    "the write journal is held by a running sidecar (or absent): its "
                    "unwritten turns of this user were not dropped; forget through the "
                    "HTTP admin API to drop them too"
                )
            return result
    finally:
        await components.close()


def _memory_options(args: argparse.Namespace) -> dict[str, Any]:
    fields = ("content", "memory_type", "importance", "confidence", "session_id")
    data = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    for name in ("visibility", "group_id"):
        if getattr(args, name) is not None:
            data[name] = getattr(args, name)
    return data


async def _users(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.users import users_json

    return users_json(await admin.users(args.request))


async def _list(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.models import memory_json

    page = await admin.list_memories(args.user, args.request)
    return {
        "user": args.user,
        "total": page.total,
        "offset": page.offset,
        "limit": page.limit,
        "next_offset": page.next_offset,
        "items": [memory_json(r) for r in page.items],
    }


async def _search(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.models import memory_json

    hits = await admin.search(args.user, args.request)
    return {
        "user": args.user,
        "items": [
            {"score": round(h.score, 6), "via": h.via, "memory": memory_json(h.record)}
            for h in hits
        ],
    }


async def _get(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.models import memory_json

    return memory_json(await admin.get(args.user, args.id))


async def _add(admin: Any, args: argparse.Namespace) -> Any:
    return (await admin.add(args.user, args.request)).as_json()


async def _update(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.models import memory_json

    return memory_json(await admin.update(args.user, args.id, args.request))


async def _delete(admin: Any, args: argparse.Namespace) -> Any:
    record = await admin.delete(args.user, args.id)
    return {"deleted": record.id}


async def _history(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.api import history_json

    return history_json(await admin.history(args.user, args.id))


async def _consolidate(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    from sidecar.admin.api import consolidation_json

    return consolidation_json(await admin.consolidate(args.user))


async def _forget(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    from sidecar.admin.api import forget_json

    return forget_json(await admin.forget(args.user))


async def _export(admin: Any, args: argparse.Namespace) -> Any:
    return [line async for line in admin.export(args.user, embeddings=args.embeddings)]


async def _import(admin: Any, args: argparse.Namespace) -> Any:
    from sidecar.admin.api import import_json

    report = await admin.import_lines(args.user, args.lines, reembed=args.reembed)
    return import_json(report)


ACTIONS: Mapping[str, Action] = MappingProxyType(
    {
        "users": _users,
        "list": _list,
        "search": _search,
        "get": _get,
        "add": _add,
        "update": _update,
        "delete": _delete,
        "history": _history,
        "consolidate": _consolidate,
        "export": _export,
        "import": _import,
    }
)


def _request(args: argparse.Namespace) -> Any:
    """The action's validated input, before anything is opened."""
    from sidecar.admin.models import (
        ListQuery,
        MemoryInput,
        MemoryPatch,
        SearchQuery,
        UsersQuery,
        parse,
    )

    if args.action == "users":
        data = {"q": args.query, "after": args.after, "limit": args.limit}
        return parse(UsersQuery, {k: v for k, v in data.items() if v is not None}, "option")
    if args.action == "list":
        options = ("limit", "offset", "status", "memory_type", "session_id", "category_id")
        data = {key: getattr(args, key) for key in (*options, "order")}
        return parse(ListQuery, {k: v for k, v in data.items() if v is not None}, "option")
    if args.action == "search":
        query: dict[str, Any] = {"q": args.query, "top_k": args.top_k}
        if args.strategy:
            query["strategy"] = args.strategy
        return parse(SearchQuery, query, "option")
    if args.action == "add":
        return parse(MemoryInput, _memory_options(args), "option")
    if args.action == "update":
        return parse(MemoryPatch, _memory_options(args), "option")
    return None


def _cmd_memories(args: argparse.Namespace) -> int:
    from sidecar.admin.service import owner_id

    config = load_config(args.config)
    _quiet(config)
    if args.action == "forget" and not args.yes:
        raise SidecarError("forget deletes every memory of the user: confirm with --yes")
    if args.user is not None:  # every action but users names one
        owner_id(args.user)
    args.request = _request(args)
    args.journal_exists = Path(config.write_queue.journal_path).expanduser().exists()
    if args.action == "import":
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SidecarError(f"cannot read {args.file}: {exc}") from exc
        args.lines = text.splitlines()
    remote = running_sidecar(config, args.remote)
    if remote is not None:
        print(f"sidecar memories: through the running sidecar at {remote.where}", file=sys.stderr)
        result = remote.call(args)
    else:
        print("sidecar memories: directly on the configured store", file=sys.stderr)
        result = asyncio.run(_run_memories(config, args))
    if args.action == "export":
        if args.out in (None, "-"):
            sys.stdout.write("".join(result))
            sys.stdout.flush()
            return 0
        try:
            Path(args.out).write_text("".join(result), encoding="utf-8")
        except OSError as exc:
            raise SidecarError(f"cannot write {args.out}: {exc.strerror}") from exc
        result = {"user": args.user, **_export_counts(result), "file": args.out}
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


def _export_counts(lines: list[str]) -> dict[str, int]:
    """What an export holds: memories (any status), the categories they are filed
    under, and rows in all (a category is a row of its own)."""
    categories = sum(1 for line in lines if json.loads(line).get("node_type") == "category")
    return {"memories": len(lines) - categories, "categories": categories, "rows": len(lines)}


async def _run_migrate(config: SidecarConfig, args: argparse.Namespace) -> int:
    from sidecar.memory.embedding.factory import build_embedder
    from sidecar.memory.store.migrate import migrate_collection
    from sidecar.metrics import Metrics

    loop = asyncio.get_running_loop()
    embedder = await loop.run_in_executor(None, build_embedder, config.embedding)
    try:
        report = await migrate_collection(
            config,
            embedder,
            Metrics(),
            target=args.to_collection,
            source=args.from_collection,
            reembed=args.reembed,
        )
    finally:
        await embedder.close()
    print(
        json.dumps(
            {
                "source": report.source,
                "source_schema": report.source_schema,
                "target": report.target,
                "rows": report.rows,
                "embedded": report.embedded,
                "target_rows": report.target_rows,
                "seconds": report.seconds,
                "next": f"set store.collection: {report.target} and restart the sidecar",
            },
            indent=2,
        )
    )
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _quiet(config)
    return asyncio.run(_run_migrate(config, args))


def _cmd_ready(args: argparse.Namespace) -> int:
    """GET the configured admin listener's ``/ready`` on this host: 0 when it answers
    200 (the container image's health check; the port comes from the config, so a
    config that moves it keeps its check)."""
    import urllib.error
    import urllib.request

    config = load_config(args.config)
    host = config.admin.host
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    url = f"http://{host if ':' not in host else f'[{host}]'}:{config.admin.port}/ready"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            body, status = response.read(), response.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    except OSError as exc:
        print(f"not ready: {url}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(body.decode("utf-8", "replace") + "\n")
    return 0 if status == 200 else 1


def _cmd_openapi(args: argparse.Namespace) -> int:
    from sidecar.admin.openapi import render_openapi

    sys.stdout.write(render_openapi())
    return 0


def _memory_fields(parser: argparse.ArgumentParser, *, content_required: bool) -> None:
    parser.add_argument("--content", required=content_required, help="the memory text")
    parser.add_argument(
        "--memory-type",
        choices=["semantic", "procedural", "episodic", "constraint"],
        help="what kind of memory (default semantic: a fact)",
    )
    parser.add_argument("--importance", type=float, help="0..1")
    parser.add_argument("--confidence", type=float, help="0..1")
    parser.add_argument("--session-id", help="the conversation it belongs to")
    parser.add_argument(
        "--visibility",
        choices=["user", "group", "public"],
        help="who sees it: its owner (default), a group's members, everyone; sharing "
        "needs a token allowed to share",
    )
    parser.add_argument("--group-id", help="the group of --visibility group")


def add_commands(commands: Any) -> None:
    """Register ``memories``, ``store`` and ``admin`` on the ``sidecar`` parser."""
    memories = commands.add_parser(
        "memories",
        help="find users and manage one user's memories in the configured store",
        description="The admin API's operations (JSON on stdout): through the running "
        "sidecar's admin socket when one answers there (or the --remote URL), else "
        "directly against the configured store. Says which on stderr.",
    )
    actions = memories.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, *, user: bool = True) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        parser.add_argument("--config", required=True, help="YAML config file")
        if user:
            parser.add_argument("--user", required=True, help="the user (owner) id")
        else:
            parser.set_defaults(user=None)
        parser.add_argument(
            "--remote",
            metavar="URL",
            help="the admin API of a sidecar elsewhere (http[s]://host:port): the admin "
            "token is sent there. Default: the running sidecar's admin socket, else the "
            "store itself",
        )
        parser.set_defaults(func=_cmd_memories)
        return parser

    users = action(
        "users",
        "find users: the ids that own memories, by id, with their counts",
        user=False,
    )
    users.add_argument(
        "--query", "-q", help="only ids that contain this (any case), e.g. part of an id"
    )
    users.add_argument("--after", metavar="ID", help="the page after this id (next_after)")
    users.add_argument("--limit", type=int, help="users per page (default 50, at most 1000)")
    listing = action("list", "list memories (paged, newest first)")
    listing.add_argument("--limit", type=int, help="memories per page (default 50, at most 1000)")
    listing.add_argument("--offset", type=int, help="how many to skip (paging)")
    listing.add_argument(
        "--status", choices=STATUS_FILTERS, help="which memories (default: active)"
    )
    listing.add_argument("--memory-type", help="only this kind (semantic, procedural ...)")
    listing.add_argument("--session-id", help="only this conversation's")
    listing.add_argument("--category-id", help="only this category's")
    listing.add_argument(
        "--order", choices=["asc", "desc"], help="by creation time (default desc: newest first)"
    )
    search = action("search", "search with the request path's retrieval")
    search.add_argument("--query", "-q", required=True, help="what to search for")
    search.add_argument("--top-k", type=int, default=10, help="how many (default 10)")
    search.add_argument(
        "--strategy", help="a retrieval strategy (default: the default profile's; see docs)"
    )
    for name, text in (
        ("get", "show one memory"),
        ("delete", "delete one memory"),
        ("history", "a memory's supersession chain"),
    ):
        action(name, text).add_argument("id", help="memory id")
    _memory_fields(action("add", "add a memory"), content_required=True)
    update = action("update", "change a memory (new text is embedded again)")
    update.add_argument("id", help="memory id")
    _memory_fields(update, content_required=False)
    action("consolidate", "merge the user's memories that state the same fact")
    forget = action("forget", "delete every row of the user")
    forget.add_argument("--yes", action="store_true", help="confirm")
    export = action("export", "write every row of the user as JSON lines")
    export.add_argument("--out", help="file (default: stdout)")
    export.add_argument("--embeddings", action="store_true", help="include the vectors")
    importing = action("import", "import JSON lines (ids kept)")
    importing.add_argument("file", help="JSON lines file, or - for stdin")
    importing.add_argument("--reembed", action="store_true", help="ignore vectors in the file")

    store = commands.add_parser("store", help="store maintenance")
    store_commands = store.add_subparsers(dest="store_command", required=True)
    migrate = store_commands.add_parser(
        "migrate",
        help="copy every row into a new collection with this version's schema",
        description="Read the source collection whatever its schema version, create "
        "--to-collection with this version's schema (and the configured index and "
        "partition key), copy every row (ids, links, categories, vectors). The source "
        "is left unchanged; then set store.collection to the new name.",
    )
    migrate.add_argument("--config", required=True, help="YAML config file")
    migrate.add_argument("--to-collection", required=True, help="the new collection")
    migrate.add_argument(
        "--from-collection", help="the old collection (default: the config's store.collection)"
    )
    migrate.add_argument("--reembed", action="store_true", help="embed every row again")
    migrate.set_defaults(func=_cmd_migrate)

    admin = commands.add_parser("admin", help="admin API tools")
    admin_commands = admin.add_subparsers(dest="admin_command", required=True)
    openapi = admin_commands.add_parser("openapi", help="print the admin API's OpenAPI document")
    openapi.set_defaults(func=_cmd_openapi)
    ready = admin_commands.add_parser(
        "ready", help="exit 0 when the sidecar on this host answers /ready (a health check)"
    )
    ready.add_argument("--config", help="YAML config file (default: all defaults)")
    ready.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")
    ready.set_defaults(func=_cmd_ready)
