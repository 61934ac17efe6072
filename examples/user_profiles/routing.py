"""The distributed user-profile service's HTTP side: any instance answers any key, by proxy.

=========  =====================  =====================================================
method     path                   what happens
=========  =====================  =====================================================
GET        /health                200 once the processor runs (``active``/``standby`` partitions)
GET        /users/{id}            the owner's committed profile; ``?max_lag_records=N`` and/or
                                  ``?max_staleness_ms=N`` let a standby here answer within them
PUT        /users/{id}            replace (create) the profile: 200/201 once committed
PATCH      /users/{id}            merge fields (null removes one): 200 once committed
DELETE     /users/{id}            204 once committed
POST       /users                 ``{"id": ...}`` create: 201 once committed, 409 if it exists
GET        /users                 501: a listing spans every partition (not served)
=========  =====================  =====================================================

Routing: the instance that receives a request looks up the key's partition
owner in its view of the group (``processor.metadata_for_key``).  If that is
itself, it serves the request (a read from its store, a write through the
owner's command path, :mod:`examples.user_profiles.owner`); otherwise it
**proxies** the request to the owner and relays the answer.  A request that
was already proxied once (header ``X-Statestore-Forwarded-By``) is never
proxied again: an instance that is not the owner answers it ``421
Misdirected Request`` naming the owner it believes in.

Why a proxy and not a redirect (``307``/``421`` to the client): the clients of
a service behind a load balancer cannot reach the instances directly, and a
redirect of a ``PUT`` would make every client library resend the body to an
address it learnt from a possibly stale view; with a proxy the client sees
one answer, and one hop bounds the cost of a stale view.  The cost is a
second HTTP exchange for the requests that land on a non-owner (2 of 3 with
three instances and a random balancer).

Answers carry where they were served: ``X-Statestore-Served-By`` (endpoint),
``X-Statestore-Partition``, ``X-Statestore-Role`` (``active``/``standby``),
and for a standby ``X-Statestore-Lag-Records`` and ``X-Statestore-Staleness-Ms``.
Failures: ``503`` with ``Retry-After: 1`` when the partition has no owner
right now (a rebalance is moving it), the owner cannot be reached, or a write
was not acknowledged (its commit failed, the partition moved, no commit in
time: the write may still take effect; retry a ``PUT``).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from examples.user_profiles.app import MAX_BODY_BYTES
from examples.user_profiles.owner import Answer, NotAcknowledgedError, ProfileOwner
from examples.user_profiles.service import (
    STORE_NAME,
    BadRequestError,
    check_fields,
    check_user_id,
)
from statestore.kafka import NotOwnerError, StandbyTooStaleError

__all__ = ["FORWARDED_BY", "make_cluster_app"]

logger = logging.getLogger(__name__)

FORWARDED_BY: Final = "x-statestore-forwarded-by"
"""Set on a proxied request: the instance that forwarded it (one hop at most)."""
_RELAYED: Final = (
    "content-type",
    "retry-after",
    "x-statestore-served-by",
    "x-statestore-partition",
    "x-statestore-role",
    "x-statestore-lag-records",
    "x-statestore-staleness-ms",
)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def _bound(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not raw.isdigit():
        raise BadRequestError(f"{name} must be a non-negative integer, got {raw!r:.40}")
    return int(raw)


def make_cluster_app(owner: ProfileOwner, http: httpx.AsyncClient) -> Starlette:
    """The ASGI app of one instance over ``owner`` (started by the caller); ``http`` proxies
    to the other instances (its timeout bounds a forwarded request; the caller closes it)."""
    me = str(owner.endpoint)

    def served(partition: int, role: str, **extra: str) -> dict[str, str]:
        return {
            "X-Statestore-Served-By": me,
            "X-Statestore-Partition": str(partition),
            "X-Statestore-Role": role,
            **extra,
        }

    async def forward(request: Request, target: Any, body: bytes) -> Response:
        url = f"http://{target}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        try:
            answer = await http.request(
                request.method,
                url,
                content=body,
                headers={
                    FORWARDED_BY: me,
                    "content-type": request.headers.get("content-type", "application/json"),
                },
            )
        except httpx.HTTPError as exc:
            return _error(503, f"the owner {target} cannot be reached: {type(exc).__name__}")
        headers = {k: v for k, v in answer.headers.items() if k.lower() in _RELAYED}
        return Response(answer.content, status_code=answer.status_code, headers=headers)

    def refuse(request: Request, error: NotOwnerError) -> Response | None:
        """The answer when this instance cannot serve and must not (or cannot) forward."""
        if error.active is None:
            return _error(
                503, f"partition {error.partition} has no owner right now (rebalancing): retry"
            )
        if str(error.active) == me:
            return _error(503, f"partition {error.partition} is being restored here: retry")
        if FORWARDED_BY in request.headers:
            return _error(
                421,
                f"not the owner of partition {error.partition}",
                owner=str(error.active),
                partition=error.partition,
            )
        return None

    async def health(_request: Request) -> Response:
        failure = owner.failed
        active, standby = owner.processor.local_partitions(STORE_NAME)
        status = "failed" if failure is not None else "ok"
        return JSONResponse(
            {
                "status": status,
                "instance": owner.instance_id,
                "endpoint": me,
                "active": list(active),
                "standby": list(standby),
            },
            status_code=503 if failure is not None else 200,
        )

    async def read(request: Request, user_id: str) -> Response:
        max_lag = _bound(request, "max_lag_records")
        max_staleness = _bound(request, "max_staleness_ms")
        try:
            result = owner.query(user_id, max_lag_records=max_lag, max_staleness_ms=max_staleness)
        except NotOwnerError as error:
            refused = refuse(request, error)
            if refused is not None:
                return refused
            if isinstance(error, StandbyTooStaleError):
                logger.debug("standby outside the bound, forwarding: %s", error)
            return await forward(request, error.active, b"")
        role = "active" if result.active else "standby"
        extra = {}
        if not result.active:
            extra = {
                "X-Statestore-Lag-Records": str(result.lag.offset_lag),
                "X-Statestore-Staleness-Ms": str(result.staleness_ms),
            }
        headers = served(result.partition, role, **extra)
        if result.value is None:
            return JSONResponse(
                {"error": f"no profile for user {user_id!r}"}, status_code=404, headers=headers
            )
        return JSONResponse(result.value, headers=headers)

    async def write(request: Request, user_id: str, op: str, body: bytes) -> Response:
        fields = None
        if op != "delete":
            fields = check_fields(_json(body), allow_null=op == "update")
        meta = owner.metadata_for_key(user_id)
        if meta.active is None or str(meta.active) != me:
            error = NotOwnerError(STORE_NAME, meta.partition, meta.active, meta.standbys, "")
            refused = refuse(request, error)
            return refused if refused is not None else await forward(request, meta.active, body)
        if owner.failed is not None:  # its processor stopped: nothing here can commit
            return _error(503, f"not acknowledged: this instance stopped on {owner.failed!r}")
        try:
            answer: Answer = await owner.submit(user_id, op, fields)
        except NotAcknowledgedError as exc:
            return _error(503, f"not acknowledged: {exc.reason}")
        headers = served(meta.partition, "active")
        if answer.body is None:
            return Response(status_code=answer.status, headers=headers)
        return JSONResponse(answer.body, status_code=answer.status, headers=headers)

    async def user(request: Request) -> Response:
        try:
            user_id = check_user_id(request.path_params["user_id"])
            if request.method == "GET":
                return await read(request, user_id)
            body = await _read_body(request)
            op = {"PUT": "replace", "PATCH": "update", "DELETE": "delete"}[request.method]
            return await write(request, user_id, op, body)
        except BadRequestError as exc:
            return _error(400, str(exc))
        except NotOwnerError as exc:  # no view of the group yet
            return _error(503, f"starting: {exc}")

    async def users(request: Request) -> Response:
        if request.method == "GET":
            return _error(501, "listing spans every partition: not served in distributed mode")
        try:
            body = await _read_body(request)
            fields = _object_with_id(_json(body))
            user_id = check_user_id(fields.pop("id"))
            meta = owner.metadata_for_key(user_id)
            if meta.active is not None and str(meta.active) == me:
                return await write(request, user_id, "create", json.dumps(fields).encode())
            error = NotOwnerError(STORE_NAME, meta.partition, meta.active, meta.standbys, "")
            refused = refuse(request, error)
            return refused if refused is not None else await forward(request, meta.active, body)
        except BadRequestError as exc:
            return _error(400, str(exc))
        except NotOwnerError as exc:
            return _error(503, f"starting: {exc}")

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/users", users, methods=["GET", "POST"]),
            Route("/users/{user_id}", user, methods=["GET", "PUT", "PATCH", "DELETE"]),
        ]
    )


async def _read_body(request: Request) -> bytes:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise BadRequestError(f"body over {MAX_BODY_BYTES} bytes")
    return raw


def _object_with_id(parsed: Any) -> dict[str, Any]:
    if not isinstance(parsed, dict) or "id" not in parsed:
        raise BadRequestError("the body must be a JSON object with an 'id'")
    return dict(parsed)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        raise BadRequestError("the body is not valid JSON") from None
