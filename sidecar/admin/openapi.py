"""The OpenAPI 3.1 document of the memory admin API (served at
``/v1/admin/openapi.json``; ``sidecar admin openapi`` prints it, and
``docs/admin-openapi.json`` is the committed copy a test keeps in sync).

Request and memory schemas are generated from the pydantic models the API
validates with (:mod:`sidecar.admin.models`), so the document cannot drift from
what the server accepts; the paths and the response envelopes are written here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from sidecar.admin.models import (
    ExportQuery,
    ImportQuery,
    ListQuery,
    Memory,
    MemoryInput,
    MemoryLine,
    MemoryPatch,
    SearchQuery,
    UserList,
    UsersQuery,
)
from sidecar.memory.read.retrieval.base import Stage

OPENAPI_PATH = "/v1/admin/openapi.json"
_REF = "#/components/schemas/{model}"

_MODELS: tuple[type[BaseModel], ...] = (
    Memory,
    MemoryInput,
    MemoryPatch,
    MemoryLine,
    ListQuery,
    SearchQuery,
    ExportQuery,
    ImportQuery,
    UsersQuery,
    UserList,
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _envelopes() -> dict[str, Any]:
    """Response schemas that are not models."""
    memory = _ref("Memory")
    integer = {"type": "integer"}
    return {
        "Error": {
            "type": "object",
            "required": ["error", "message"],
            "properties": {
                "error": {
                    "type": "string",
                    "description": "invalid_request, unauthorized, forbidden, "
                    "admin_api_disabled, not_found, unavailable, internal_error",
                },
                "message": {"type": "string"},
                "errors": {
                    "type": "array",
                    "description": "Every invalid input (400 only).",
                    "items": {
                        "type": "object",
                        "required": ["path", "message"],
                        "properties": {
                            "path": {
                                "type": "string",
                                "description": "query.limit, body.content, path.user, "
                                "line 3.importance, ...",
                            },
                            "message": {"type": "string"},
                        },
                    },
                },
            },
        },
        "Injection": {
            "type": "object",
            "required": ["request_id", "at", "profile", "query", "rewritten", "memories"],
            "properties": {
                "request_id": {"type": "string"},
                "at": {**integer, "description": "When, in ms since the epoch."},
                "profile": {"type": "string"},
                "query": {"type": "string", "description": "The message as searched."},
                "rewritten": {
                    "type": ["string", "null"],
                    "description": "The follow-up rewritten into a self-contained query.",
                },
                "deep_search": {"type": ["string", "null"]},
                "memories": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "owner", "visibility", "score", "via", "signals"],
                        "properties": {
                            "id": {"type": "string"},
                            "owner": {"type": "string"},
                            "visibility": {"type": "string"},
                            "score": {"type": "number"},
                            "via": {
                                "type": "string",
                                "description": "direct, link, associative, deep",
                            },
                            "signals": {
                                "type": "object",
                                "additionalProperties": {"type": "number"},
                                "description": "cosine, bm25, ngram, then the score "
                                "after each stage that changed it: " + ", ".join(Stage),
                            },
                            "memory": {
                                "anyOf": [memory, {"type": "null"}],
                                "description": "The row now (one injection only; null: "
                                "deleted or no longer readable by the user).",
                            },
                        },
                    },
                },
            },
        },
        "Injections": {
            "type": "object",
            "required": ["user", "items"],
            "properties": {
                "user": {"type": "string"},
                "items": {"type": "array", "items": _ref("Injection")},
            },
        },
        "MemoryPage": {
            "type": "object",
            "required": ["user", "total", "offset", "limit", "next_offset", "items"],
            "properties": {
                "user": {"type": "string"},
                "total": {**integer, "description": "Memories matching the filters."},
                "offset": integer,
                "limit": integer,
                "next_offset": {"type": ["integer", "null"]},
                "items": {"type": "array", "items": memory},
            },
        },
        "Created": {
            "type": "object",
            "required": ["created", "decision", "memory", "replaced"],
            "properties": {
                "created": {
                    "type": "boolean",
                    "description": "A new memory was stored (added, or superseding another).",
                },
                "decision": {
                    "type": "string",
                    "enum": ["add", "update", "supersede", "noop"],
                    "description": (
                        "The write path's decision, as for a fact said in chat: noop, the "
                        "user already has this fact (memory is that one); update, a "
                        "richer wording of a memory they have (memory is it, changed); "
                        "supersede, another value of the same attribute (the old memory "
                        "is kept, marked superseded); add, a new fact."
                    ),
                },
                "memory": memory,
                "replaced": {
                    "type": ["string", "null"],
                    "description": "The id of the memory it superseded.",
                },
            },
        },
        "Deleted": {
            "type": "object",
            "required": ["deleted"],
            "properties": {"deleted": {"type": "string", "description": "The memory id."}},
        },
        "History": {
            "type": "object",
            "required": ["memory", "supersedes", "superseded_by", "chain"],
            "properties": {
                "memory": memory,
                "supersedes": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Ids of the memories this one directly replaced.",
                },
                "superseded_by": {"type": ["string", "null"]},
                "chain": {
                    "type": "array",
                    "items": memory,
                    "description": "The supersession chain, oldest first, this memory included.",
                },
            },
        },
        "SearchResults": {
            "type": "object",
            "required": ["user", "items"],
            "properties": {
                "user": {"type": "string"},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["score", "via", "signals", "memory"],
                        "properties": {
                            "score": {"type": "number"},
                            "via": {"type": "string", "description": "direct, link, associative"},
                            "signals": {
                                "type": "object",
                                "additionalProperties": {"type": "number"},
                            },
                            "memory": memory,
                        },
                    },
                },
            },
        },
        "ConsolidationReport": {
            "type": "object",
            "required": ["user", "memories", "groups", "merged"],
            "properties": {
                "user": {"type": "string"},
                "memories": {**integer, "description": "Active memories before."},
                "groups": {
                    **integer,
                    "description": "Groups of two or more memories that stated one fact.",
                },
                "merged": {
                    **integer,
                    "description": "Memories folded into the richest of their group "
                    "(now status merged, in its history).",
                },
            },
        },
        "ForgetReport": {
            "type": "object",
            "required": ["user", "deleted", "journal"],
            "properties": {
                "user": {"type": "string"},
                "deleted": {
                    "type": "object",
                    "properties": {
                        "memories": {
                            "type": "object",
                            "additionalProperties": integer,
                            "description": "Deleted memory rows by status.",
                        },
                        "categories": integer,
                        "rows": integer,
                    },
                },
                "journal": {
                    "type": ["object", "null"],
                    "description": "What went from the write journal (null: not reachable "
                    "from here): turns not yet written, dropped; written turns, whose text "
                    "is cleared; turns being written then (left to finish).",
                    "properties": {
                        "unwritten_turns_dropped": integer,
                        "written_turns_cleared": integer,
                        "in_progress_turns": integer,
                    },
                },
            },
        },
        "ImportReport": {
            "type": "object",
            "required": ["user", "lines", "memories", "categories", "embedded", "rows_written"],
            "properties": {
                "user": {"type": "string"},
                "lines": integer,
                "memories": integer,
                "categories": integer,
                "embedded": {**integer, "description": "Rows embedded on import."},
                "rows_written": integer,
                "seconds": {"type": "number"},
                "decisions": {
                    "type": "object",
                    "additionalProperties": integer,
                    "description": "New facts (memory lines without an id or a time) "
                    "by the decision each took: add, update, supersede, noop.",
                },
            },
        },
    }


def _query_parameters(schema: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema["properties"].items()
    ]


def build_openapi() -> dict[str, Any]:
    """The whole document (deterministic)."""
    _, generated = models_json_schema(
        [(model, "validation") for model in _MODELS], ref_template=_REF
    )
    schemas: dict[str, Any] = {**generated["$defs"], **_envelopes()}
    user = {
        "name": "user",
        "in": "path",
        "required": True,
        "description": "The user (owner) id, URL-encoded.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 256},
    }
    memory_id = {
        "name": "memory_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 64},
    }
    request_id = {
        "name": "request_id",
        "in": "path",
        "required": True,
        "description": "The request's id (the x-memory-request-id response header).",
        "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    }
    common = {
        "400": _error("Invalid input; `errors` lists every problem with its path."),
        "401": _error("No or an unknown bearer token."),
        "403": _error(
            "The token's scope excludes this user, a share beyond the token's rights "
            "(error `sharing_forbidden`: only a token for all users makes a memory public; "
            "a scoped one shares only with its `share_groups`), or the API is disabled."
        ),
        "503": _error("The memory store or the embedding model failed."),
    }
    not_found = {"404": _error("No such memory for this user (another user's id included).")}

    def op(
        summary: str,
        ok: dict[str, Any],
        *,
        params: Sequence[dict[str, Any]] = (),
        body: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        operation: dict[str, Any] = {
            "summary": summary,
            "parameters": list(params),
            "responses": {**ok, **common, **(extra or {})},
        }
        if body is not None:
            operation["requestBody"] = {"required": True, "content": body}
        return operation

    memory = _ref("Memory")
    json_body = {"application/json": {"schema": _ref("MemoryInput")}}
    patch_body = {"application/json": {"schema": _ref("MemoryPatch")}}
    jsonl = {
        "application/x-ndjson": {
            "schema": {"type": "string", "description": "One MemoryLine JSON object per line."}
        }
    }
    base = "/v1/admin/users/{user}"
    paths = {
        "/v1/admin/users": {
            "get": op(
                "The user ids that own memories (those the token may manage), by id, with "
                "their memory counts and last change; `q` keeps ids containing it",
                {"200": _json(_ref("UserList"), "One page; next_after pages on.")},
                params=_query_parameters(schemas["UsersQuery"]),
            )
        },
        f"{base}/memories": {
            "get": op(
                "List the user's memories (paged, filtered)",
                {"200": _json(_ref("MemoryPage"), "One page.")},
                params=[user, *_query_parameters(schemas["ListQuery"])],
            ),
            "post": op(
                "Add a memory (embedded, linked and filed like a new memory of the write path)",
                {
                    "201": _json(_ref("Created"), "Created."),
                    "200": _json(_ref("Created"), "The user already has this exact memory."),
                },
                params=[user],
                body=json_body,
            ),
        },
        f"{base}/memories/{{memory_id}}": {
            "get": op(
                "Get one memory (any status)",
                {"200": _json(memory, "The memory.")},
                params=[user, memory_id],
                extra=not_found,
            ),
            "patch": op(
                "Change a memory in place; new content is embedded again",
                {"200": _json(memory, "The changed memory.")},
                params=[user, memory_id],
                body=patch_body,
                extra=not_found,
            ),
            "delete": op(
                "Delete a memory for good",
                {"200": _json(_ref("Deleted"), "Deleted.")},
                params=[user, memory_id],
                extra=not_found,
            ),
        },
        f"{base}/memories/{{memory_id}}/history": {
            "get": op(
                "The memory's supersession chain: what it replaced and what replaced it",
                {"200": _json(_ref("History"), "The chain, oldest first.")},
                params=[user, memory_id],
                extra=not_found,
            )
        },
        f"{base}/search": {
            "get": op(
                "Search the user's own memories with the request path's retrieval",
                {"200": _json(_ref("SearchResults"), "Best first.")},
                params=[user, *_query_parameters(schemas["SearchQuery"])],
            )
        },
        base: {
            "delete": op(
                "Forget the user: delete every row they own and their unwritten turns",
                {"200": _json(_ref("ForgetReport"), "What was deleted.")},
                params=[user],
            )
        },
        f"{base}/consolidate": {
            "post": op(
                "Merge the user's memories that state the same fact into the richest one "
                "(the others become its history)",
                {"200": _json(_ref("ConsolidationReport"), "What was merged.")},
                params=[user],
            )
        },
        f"{base}/export": {
            "get": op(
                "Export every row the user owns as JSON lines",
                {"200": {"description": "JSON lines (MemoryLine).", "content": jsonl}},
                params=[user, *_query_parameters(schemas["ExportQuery"])],
            )
        },
        f"{base}/injections": {
            "get": op(
                "The user's last injections this process kept explained (route profiles "
                "with injection.explain_last), newest first",
                {"200": _json(_ref("Injections"), "Newest first.")},
                params=[user],
                extra={"404": _error("No profile keeps injections (explain_off).")},
            )
        },
        f"{base}/injections/{{request_id}}": {
            "get": op(
                "Why a request's memories were injected: each memory with its score, "
                "how it was found and its signals",
                {"200": _json(_ref("Injection"), "The injection, memories in block order.")},
                params=[user, request_id],
                extra={"404": _error("Not kept for this user, or explain_off.")},
            )
        },
        f"{base}/import": {
            "post": op(
                "Import JSON lines (ids kept; validated first, nothing written on errors). "
                "Needs a token for all users.",
                {"200": _json(_ref("ImportReport"), "Imported.")},
                params=[user, *_query_parameters(schemas["ImportQuery"])],
                body=jsonl,
            )
        },
    }
    for name in ("ListQuery", "SearchQuery", "ExportQuery", "ImportQuery", "UsersQuery"):
        schemas.pop(name)  # inlined as parameters
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memory-sidecar admin API",
            "version": "1",
            "description": "Manage one user's long-term memories. Every route but the "
            "list of users is scoped to the user in its path; a memory of another user is "
            "not found (404). "
            "Authentication: `Authorization: Bearer <admin token>`.",
        },
        "servers": [{"url": "http://127.0.0.1:9464"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": dict(sorted(schemas.items())),
        },
    }


def render_openapi() -> str:
    return json.dumps(build_openapi(), indent=2, ensure_ascii=False) + "\n"
