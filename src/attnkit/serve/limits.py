"""What the server refuses, and how: the limits of a request and the guard in front of every route.

:class:`Limits` holds the numbers (each one a flag of ``attnkit serve``). :class:`Guard` is a plain
ASGI middleware that checks, before a route runs, that the ``Host`` header names this server (a page
on another site cannot reach it through DNS rebinding) and that the body is no larger than
``--max-body`` (413, counted as it arrives, so a body without ``Content-Length`` is cut off too).
Every response gets the headers of :data:`SECURITY_HEADERS`: a strict Content-Security-Policy (the
page's own scripts and styles only, requests to its own origin only), no framing, no sniffing.
Errors are JSON: ``{"error": message, "status": code}`` and, when one field is to blame, ``"field"``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Limits", "Guard", "SECURITY_HEADERS", "CSP", "error_body", "allowed_hosts", "check_text"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """The limits of ``attnkit serve`` (the flag of each in brackets).

    Attributes:
        max_body: bytes of a request body (``--max-body``); larger is 413.
        max_chars: characters of one text (``--max-chars``); longer is 422 naming the text.
        max_texts: texts of one ``/v1/predict`` request (``--max-texts``); more is 422.
        timeout: seconds a request may take (``--timeout``); longer is 504.
        queue: requests admitted and not yet answered (``--queue``); past it, 503 with ``Retry-After``.
        max_batch: texts run together by the batcher (``--max-batch``; 1 turns batching off).
        batch_wait_ms: how long a batch waits for more requests once the first has come (``--batch-wait-ms``;
            0: it takes those that came while the model ran the batch before).
    """

    max_body: int = 1_048_576
    max_chars: int = 20_000
    max_texts: int = 64
    timeout: float = 30.0
    queue: int = 256
    max_batch: int = 64
    batch_wait_ms: float = 0.0


CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"), (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store")]


def error_body(status: int, message: str, field: str | None = None) -> bytes:
    """The JSON body of an error response."""
    body: dict[str, Any] = {"error": message, "status": status}
    if field is not None:
        body["field"] = field
    return json.dumps(body).encode()


def allowed_hosts(host: str, port: int) -> set[str]:
    """The ``Host`` header values this server answers: the loopback names, and ``host`` itself."""
    names = {"127.0.0.1", "localhost", "[::1]", host if ":" not in host else f"[{host}]"}
    if host in ("0.0.0.0", "::"):  # every interface: the machine's own names cannot be listed, so any
        return set()
    return {n for name in names for n in (name, f"{name}:{port}")}


def check_text(text: str, field: str, limit: int) -> str | None:
    """Why ``text`` (request field ``field``) is refused, or None: too long, or not encodable (a lone surrogate)."""
    if len(text) > limit:
        return f"{field}: {len(text):,} characters, more than the limit of {limit:,} (--max-chars)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{field}: holds a lone surrogate (U+{ord(text[err.start]):04X}) at character {err.start}, not text"
    return None


class Guard:
    """ASGI middleware: the ``Host`` check, the body limit and the security headers (see the module)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, hosts: set[str], max_body: int) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if self.hosts and host.lower() not in self.hosts:
            await _reply(send, 421, error_body(421, f"Host header {host!r} is not this server's "
                                                    "(only requests to its own address are answered)"))
            return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await _reply(send, 413, error_body(413, _too_large(self.max_body)))
            return
        state = {"received": 0, "refused": False}

        async def limited_receive() -> Message:
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > self.max_body:  # answered here; the app sees the client leave
                    state["refused"] = True
                    await _reply(send, 413, error_body(413, _too_large(self.max_body)))
                    return {"type": "http.disconnect"}
            return message

        async def secured_send(message: Message) -> None:
            if state["refused"]:
                return
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        try:
            await self.app(scope, limited_receive, secured_send)
        except Exception:
            if not state["refused"]:
                raise


def _too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit:,} bytes (--max-body)"


async def _reply(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *SECURITY_HEADERS, *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
