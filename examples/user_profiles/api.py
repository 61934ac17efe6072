"""The user-profile service's HTTP JSON API (standard library ``http.server``).

=========  =====================  ==========================================  ===============
method     path                   body                                        success
=========  =====================  ==========================================  ===============
GET        /health                                                            200
GET        /metrics               (Prometheus text format)                    200, 404 without the extra
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
not acknowledged) or 500.  A 2xx answer to a mutating request is sent only after the change was
committed: acknowledged means durable.

``/metrics`` is the state manager's metrics in Prometheus' text format
(:class:`statestore.metrics.prometheus.StateStoreCollector`, extra
``statestore[prometheus]``); without the extra it answers 404.

The server binds 127.0.0.1 only.  Requests are served by threads
(:class:`~http.server.ThreadingHTTPServer`); the service serializes them.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from examples.user_profiles.service import (
    BadRequestError,
    NotFoundError,
    ProfileError,
    ProfileService,
)
from statestore import StateStoreError

__all__ = ["HOST", "MAX_BODY_BYTES", "ProfileServer", "make_server", "prometheus_metrics"]

HOST: Final = "127.0.0.1"
MAX_BODY_BYTES: Final = 64 * 1024
_MAX_LIMIT: Final = 1000

logger = logging.getLogger(__name__)


class _HTTPError(Exception):
    def __init__(self, status: HTTPStatus, message: str, allow: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.allow = allow


class ProfileServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the :class:`ProfileService` its handlers use."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        service: ProfileService,
        metrics: Callable[[], tuple[bytes, str]] | None = None,
    ) -> None:
        """Bind ``127.0.0.1:port`` (0: any free port; read it back from :attr:`port`).

        ``metrics()`` returns the ``/metrics`` body and its content type (``None``: 404).
        """
        self.service = service
        self.metrics = metrics
        super().__init__((HOST, port), _Handler)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server_address[1])


def make_server(
    service: ProfileService,
    port: int = 0,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
) -> ProfileServer:
    """A server for ``service`` on ``127.0.0.1:port``; call ``serve_forever()`` on it."""
    return ProfileServer(port, service, metrics)


def prometheus_metrics(manager: Any) -> Callable[[], tuple[bytes, str]] | None:
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


class _Handler(BaseHTTPRequestHandler):
    server: ProfileServer
    server_version = "user-profiles/1.0"

    # ------------------------------------------------------------------ plumbing

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        logger.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: HTTPStatus, body: object | None, allow: str | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode("utf-8")
        self.send_response(status)
        if allow is not None:
            self.send_header("Allow", allow)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise _HTTPError(HTTPStatus.BAD_REQUEST, "invalid Content-Length") from None
        if length > MAX_BODY_BYTES:
            raise _HTTPError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes"
            )
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            return json.loads(raw)
        except ValueError:
            raise _HTTPError(HTTPStatus.BAD_REQUEST, "the body is not valid JSON") from None

    def _dispatch(self, method: str) -> None:
        allow: str | None = None
        try:
            status, body = self._route(method)
        except ProfileError as exc:
            status, body = HTTPStatus(exc.status), {"error": str(exc)}
        except _HTTPError as exc:
            status, body, allow = exc.status, {"error": str(exc)}, exc.allow
        except StateStoreError as exc:  # a commit that failed (disk full): not acknowledged
            logger.exception("%s %s failed in the store", method, self.path)
            status, body = (
                HTTPStatus.SERVICE_UNAVAILABLE,
                {"error": f"store unavailable, nothing was changed (restart the service): {exc}"},
            )
        except Exception:
            logger.exception("%s %s failed", method, self.path)
            status, body = (
                HTTPStatus.INTERNAL_SERVER_ERROR,
                {"error": "internal error; see the server log"},
            )
        self._send(status, body, allow)

    def do_GET(self) -> None:
        """GET /health, /metrics, /users, /users/{id}."""
        if urlsplit(self.path).path == "/metrics":
            self._metrics()
            return
        self._dispatch("GET")

    def _metrics(self) -> None:
        if self.server.metrics is None:
            self._send(
                HTTPStatus.NOT_FOUND, {"error": "metrics need the statestore[prometheus] extra"}
            )
            return
        body, content_type = self.server.metrics()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        """POST /users."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """PUT /users/{id}."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """PATCH /users/{id}."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """DELETE /users/{id}."""
        self._dispatch("DELETE")

    # ------------------------------------------------------------------ routes

    def _route(self, method: str) -> tuple[HTTPStatus, object | None]:
        url = urlsplit(self.path)
        parts = [unquote(part) for part in url.path.split("/") if part]
        service = self.server.service
        if parts == ["health"]:
            self._allow(method, "GET")
            return HTTPStatus.OK, {"status": "ok"}
        if parts == ["users"]:
            self._allow(method, "GET", "POST")
            if method == "GET":
                return HTTPStatus.OK, self._list(service, parse_qs(url.query))
            body = self._body()
            if not isinstance(body, dict):
                raise BadRequestError("the body must be a JSON object with an 'id'")
            fields = dict(body)
            user_id = fields.pop("id", None)
            if user_id is None:
                raise BadRequestError("the body needs an 'id'")
            return HTTPStatus.CREATED, service.create(user_id, fields).to_json()
        if len(parts) == 2 and parts[0] == "users":
            user_id = parts[1]
            self._allow(method, "GET", "PUT", "PATCH", "DELETE")
            if method == "GET":
                return HTTPStatus.OK, service.get(user_id).to_json()
            if method == "PUT":
                profile, created = service.replace(user_id, self._body())
                return (HTTPStatus.CREATED if created else HTTPStatus.OK), profile.to_json()
            if method == "PATCH":
                return HTTPStatus.OK, service.update(user_id, self._body()).to_json()
            service.delete(user_id)
            return HTTPStatus.NO_CONTENT, None
        raise NotFoundError(f"no such resource: {url.path}")

    def _allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            raise _HTTPError(
                HTTPStatus.METHOD_NOT_ALLOWED,
                f"{method} is not allowed here (use {', '.join(allowed)})",
                allow=", ".join(allowed),
            )

    @staticmethod
    def _list(service: ProfileService, query: dict[str, list[str]]) -> dict[str, object]:
        prefix = query.get("prefix", [""])[-1]
        after = query.get("after", [None])[-1]
        try:
            limit = int(query.get("limit", ["100"])[-1])
        except ValueError:
            raise BadRequestError("limit must be an integer") from None
        limit = min(limit, _MAX_LIMIT)
        profiles = service.list(prefix=prefix, after=after, limit=limit)
        next_after = profiles[-1].user_id if len(profiles) == limit else None
        return {"users": [profile.to_json() for profile in profiles], "next": next_after}


def configure_logging(verbose: bool) -> None:
    """Access log at DEBUG (``--verbose``), errors always, on stderr."""
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
