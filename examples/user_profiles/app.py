"""The user-profile service's HTTP JSON API: an ASGI app (Starlette), served by uvicorn.

=========  =====================  ==========================================  ===============
method     path                   body                                        success
=========  =====================  ==========================================  ===============
GET        /health                                                            200
GET        /metrics               (Prometheus text format)                    200, 404 without the extra
GET        /openapi.json          (this API as an OpenAPI 3.1 document)       200
GET        /users                 (query: ``prefix``, ``after``, ``limit``)   200 ``{"users": [...], "next": id|null}``
POST       /users                 ``{"id": "alice", "name": "Alice", ...}``   201 profile
GET        /users/{id}                                                        200 profile
PUT        /users/{id}            ``{"name": "Alice", ...}`` (all fields)     200, or 201 if created
PATCH      /users/{id}            ``{"email": "a@b", "nick": null}``          200 profile (null removes a field)
DELETE     /users/{id}                                                        204
=========  =====================  ==========================================  ===============

A profile is returned as ``{"id", "fields", "version", "created_ms",
"updated_ms"}``.  Errors are ``{"error": "..."}`` with 400 (bad JSON, id,
field), 404, 405, 409 (create of an existing id), 413 (body over 64 KiB),
503 when the store fails (a commit that could not be written: the change is
not acknowledged) or 500.  A 2xx answer to a mutating request is sent only
after the change was committed: acknowledged means durable.  Reads answer
from the committed state and never wait for another request's commit.

Why Starlette rather than FastAPI: measured in-process (ASGI calls, no
network), the framework's CPU per request was 16 us (GET) and 26 us (PUT)
for Starlette against 85 us and 118 us for FastAPI with a pydantic response
model (``docs/serving.md``); on two cores that is the difference between
the framework and the store being the cost of a request.  The OpenAPI
document FastAPI would generate is written out here (:data:`OPENAPI`), and a
test holds it equal to the routes.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from examples.user_profiles.service import (
    BadRequestError,
    ProfileError,
    ProfileService,
)
from statestore import StateStoreError

__all__ = [
    "HOST",
    "MAX_BODY_BYTES",
    "OPENAPI",
    "configure_logging",
    "make_app",
    "prometheus_metrics",
]

HOST: Final = "127.0.0.1"
MAX_BODY_BYTES: Final = 64 * 1024
_MAX_LIMIT: Final = 1000

logger = logging.getLogger(__name__)

Metrics = Callable[[], tuple[bytes, str]]
"""Returns the ``/metrics`` body and its content type."""


def prometheus_metrics(manager: Any) -> Metrics | None:
    """``/metrics`` for ``manager`` through ``prometheus_client`` (``None`` if it is not installed)."""
    try:
        from prometheus_client import (  # noqa: PLC0415 - optional extra
            CONTENT_TYPE_LATEST,
            CollectorRegistry,
            generate_latest,
        )

        from statestore.metrics.prometheus import StateStoreCollector  # noqa: PLC0415
    except ImportError:
        return None
    registry = CollectorRegistry()
    registry.register(StateStoreCollector(manager))
    return lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _body(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except ValueError:
        raise BadRequestError("the body is not valid JSON") from None


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    """``handler`` with the service's errors mapped to their statuses (the one place that does)."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except ProfileError as exc:
            return _error(exc.status, str(exc))
        except StateStoreError as exc:  # a commit that failed (disk full): not acknowledged
            logger.exception("%s %s failed in the store", request.method, request.url.path)
            return _error(
                503, f"store unavailable, nothing was changed (restart the service): {exc}"
            )

    return guarded


def make_app(service: ProfileService, *, metrics: Metrics | None = None) -> Starlette:
    """The ASGI app over ``service`` (opened by the caller, on the serving event loop)."""

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_endpoint(_request: Request) -> Response:
        if metrics is None:
            return _error(404, "metrics need the statestore[prometheus] extra")
        body, content_type = metrics()
        return Response(body, media_type=content_type)

    async def openapi(_request: Request) -> Response:
        return JSONResponse(OPENAPI)

    async def users(request: Request) -> Response:
        if request.method == "GET":
            query = request.query_params
            try:
                limit = int(query.get("limit", "100"))
            except ValueError:
                raise BadRequestError("limit must be an integer") from None
            limit = min(limit, _MAX_LIMIT)
            profiles = await service.list(
                prefix=query.get("prefix", ""), after=query.get("after"), limit=limit
            )
            next_after = profiles[-1].user_id if len(profiles) == limit else None
            return JSONResponse({"users": [p.to_json() for p in profiles], "next": next_after})
        body = await _body(request)
        if not isinstance(body, dict):
            raise BadRequestError("the body must be a JSON object with an 'id'")
        fields = dict(body)
        user_id = fields.pop("id", None)
        if user_id is None:
            raise BadRequestError("the body needs an 'id'")
        return JSONResponse((await service.create(user_id, fields)).to_json(), status_code=201)

    async def user(request: Request) -> Response:
        user_id = request.path_params["user_id"]
        if request.method == "GET":
            return JSONResponse((await service.get(user_id)).to_json())
        if request.method == "PUT":
            profile, created = await service.replace(user_id, await _body(request))
            return JSONResponse(profile.to_json(), status_code=201 if created else 200)
        if request.method == "PATCH":
            return JSONResponse((await service.update(user_id, await _body(request))).to_json())
        await service.delete(user_id)
        return Response(status_code=204)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return _error(404, f"no such resource: {request.url.path}")
        if exc.status_code == 405:
            offered = (exc.headers or {}).get("Allow", "").split(",")
            allow = ", ".join(sorted(m.strip() for m in offered if m.strip() not in ("", "HEAD")))
            return _error(
                405,
                f"{request.method} is not allowed here (use {allow})",
                headers={"Allow": allow},
            )
        return _error(exc.status_code, str(exc.detail))

    async def internal_error(request: Request, exc: Exception) -> Response:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal error; see the server log")

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/users", _guarded(users), methods=["GET", "POST"]),
            Route("/users/{user_id}", _guarded(user), methods=["GET", "PUT", "PATCH", "DELETE"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_REF_PROFILE: Final = {"$ref": "#/components/schemas/Profile"}
_REF_ERROR: Final = {"$ref": "#/components/schemas/Error"}
_USER_ID: Final = {
    "name": "user_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"},
}
_FIELDS: Final = {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
_ERRORS: Final = {
    "400": _json(_REF_ERROR, "bad JSON, user id or field"),
    "413": _json(_REF_ERROR, "body over 64 KiB"),
    "503": _json(_REF_ERROR, "the store failed: nothing was changed"),
}

OPENAPI: Final[dict[str, Any]] = {
    "openapi": "3.1.0",
    "info": {"title": "user profiles", "version": "1.0"},
    "paths": {
        "/health": {"get": {"responses": {"200": {"description": "serving"}}}},
        "/metrics": {
            "get": {
                "responses": {
                    "200": {"description": "Prometheus text format"},
                    "404": _json(_REF_ERROR, "without the prometheus extra"),
                }
            }
        },
        "/openapi.json": {"get": {"responses": {"200": {"description": "this document"}}}},
        "/users": {
            "get": {
                "parameters": [
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "maximum": 1000},
                    },
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "users": {"type": "array", "items": _REF_PROFILE},
                                "next": {"type": ["string", "null"]},
                            },
                        },
                        "a page of committed profiles in id order",
                    ),
                    "400": _ERRORS["400"],
                },
            },
            "post": {
                "requestBody": _FIELDS,
                "responses": {
                    "201": _json(_REF_PROFILE, "created and durable"),
                    "409": _json(_REF_ERROR, "the id has a profile"),
                    **_ERRORS,
                },
            },
        },
        "/users/{user_id}": {
            "parameters": [_USER_ID],
            "get": {
                "responses": {
                    "200": _json(_REF_PROFILE, "the committed profile"),
                    "404": _json(_REF_ERROR, "no such profile"),
                }
            },
            "put": {
                "requestBody": _FIELDS,
                "responses": {
                    "200": _json(_REF_PROFILE, "replaced and durable"),
                    "201": _json(_REF_PROFILE, "created and durable"),
                    **_ERRORS,
                },
            },
            "patch": {
                "requestBody": _FIELDS,
                "responses": {
                    "200": _json(_REF_PROFILE, "updated and durable (null removes a field)"),
                    "404": _json(_REF_ERROR, "no such profile"),
                    **_ERRORS,
                },
            },
            "delete": {
                "responses": {
                    "204": {"description": "deleted and durable (a tombstone)"},
                    "404": _json(_REF_ERROR, "no such profile"),
                    "503": _ERRORS["503"],
                }
            },
        },
    },
    "components": {
        "schemas": {
            "Profile": {
                "type": "object",
                "required": ["id", "fields", "version", "created_ms", "updated_ms"],
                "properties": {
                    "id": {"type": "string"},
                    "fields": {"type": "object"},
                    "version": {"type": "integer", "minimum": 1},
                    "created_ms": {"type": "integer"},
                    "updated_ms": {"type": "integer"},
                },
            },
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "string"}},
            },
        }
    },
}
"""This API as an OpenAPI 3.1 document (served at ``/openapi.json``; a test holds it to the routes)."""


def configure_logging(verbose: bool) -> None:
    """Access log at DEBUG (``--verbose``), errors always, on stderr."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
