"""What the server refuses, and how: the limits of a request and the guard in front of every route.

:class:`Limits` holds the numbers (each one a flag of ``attnkit serve``). :class:`Guard` is a plain
ASGI middleware that checks, before a route runs, that the ``Host`` header names this server (a page
on another site cannot reach it through DNS rebinding; none or an empty one is 421 too), that the body
is no larger than ``--max-body`` (413, counted as it arrives, so a body without ``Content-Length`` is
cut off too; the rest of a refused body, up to :data:`DISCARD` bytes, is read and dropped first, so
that a client still sending gets the answer instead of a reset connection) and that a POST body is
JSON: ``Content-Type: application/json`` (415), UTF-8, parseable and not nested past the parser (422);
``/v1/caption`` also takes a multipart form of image files, unless a page of another origin sends it (403).
Every response gets the headers of :data:`SECURITY_HEADERS`: a strict Content-Security-Policy (the
page's own scripts and styles only, requests to its own origin only), no framing, no sniffing.
Errors are JSON: ``{"error": message, "status": code}`` and, when one field is to blame, ``"field"``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from attnkit._checks import check_settings, setting

__all__ = ["Limits", "Guard", "SECURITY_HEADERS", "CSP", "DISCARD", "error_body", "allowed_hosts", "check_text",
           "check_body"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    """The limits of ``attnkit serve``, each a :func:`~attnkit._checks.setting` and so a flag of the command
    (``max_body`` is ``--max-body``): past ``max_body`` a request is 413, past ``max_chars`` or ``max_texts``
    422 naming the text, past ``timeout`` 504, past ``queue`` 503 with ``Retry-After``."""

    max_batch: int = setting(64, "Most texts the batcher runs together (1: no batching, one request at a time).",
                             low=1)
    batch_wait_ms: float = setting(0.0, "How long a batch waits for more requests once the first has come (0: it "
                                   "takes those that came while the model ran the batch before).", low=0)
    max_texts: int = setting(64, "Most texts in one /v1/predict request.", low=1)
    max_chars: int = setting(20_000, "Most characters in one text.", low=1)
    max_body: int = setting(1_048_576, "Most bytes in one request body.", low=1)
    timeout: float = setting(30.0, "Seconds a request may take before it is answered 504.", low=0, low_open=True)
    queue: int = setting(256, "Requests admitted at once; past it, 503 with Retry-After.", low=1)
    max_beam: int = setting(16, "Largest beam a /v1/translate or /v1/caption request may ask for.", low=1)
    max_new_tokens: int = setting(64, "Most tokens a /v1/generate request may ask a language model for.", low=1)
    max_images: int = setting(16, "Most images in one /v1/caption request.", low=1)
    max_pixels: int = setting(4096 * 4096, "Most pixels of one image (width x height, read from its header before "
                              "it is decoded).", low=1)

    def __post_init__(self) -> None:
        check_settings(self)


DISCARD = 16 * 1024 * 1024
"""Bytes of a body over ``--max-body`` read and dropped before the 413; past them the connection closes."""

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
    """Why ``text`` (request field ``field``) is refused, or None: empty, too long, or not encodable (a lone
    surrogate)."""
    if not text.strip():
        return f"{field}: {'empty' if not text else 'only white space'}; give a text to classify"
    if len(text) > limit:
        return f"{field}: {len(text):,} characters, more than the limit of {limit:,} (--max-chars)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"{field}: holds a lone surrogate (U+{ord(text[err.start]):04X}) at character {err.start}, not text"
    return None


class Guard:
    """ASGI middleware: the ``Host`` check, the body limit, the body's checks and the security headers
    (see the module)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, hosts: set[str], max_body: int) -> None:
        self.app = app
        self.hosts = hosts
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "").strip()
        if not host or (self.hosts and host.lower() not in self.hosts):
            said = f"Host header {host!r} is not this server's" if host else "no Host header"
            await _reply(send, 421, error_body(421, f"{said} (only requests to its own address are answered)"),
                         close=True)
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            if "100-continue" not in headers.get("expect", "").lower() and int(declared) <= self.max_body + DISCARD:
                await _drain(receive, DISCARD)  # read, so that a client still sending sees the answer
            await _reply(send, 413, error_body(413, _too_large(self.max_body), "body"), close=True)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.max_body:  # counted as it arrives: no Content-Length needed
                if more:
                    await _drain(receive, DISCARD)
                await _reply(send, 413, error_body(413, _too_large(self.max_body), "body"), close=True)
                return
        if scope["method"] == "POST":
            why = check_body(headers.get("content-type"), bytes(body), scope.get("path", ""),
                             origin=headers.get("origin"), host=host)
            if why:
                await _reply(send, why[0], error_body(why[0], why[1], "body"))
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: the client leaving

        async def secured_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, replay, secured_send)


FORM_PATHS = frozenset({"/v1/caption"})
"""The routes that also take a multipart form (image files); the form's own checks are the route's."""


def check_body(content_type: str | None, body: bytes, path: str = "", *, origin: str | None = None,
               host: str = "") -> tuple[int, str] | None:
    """Why a POST body is refused, as (status, message), or None: not JSON by its ``Content-Type`` (415), not
    UTF-8, not JSON, or nested deeper than JSON's parser goes (422). A route of :data:`FORM_PATHS` also takes
    ``multipart/form-data``, but not from a page of another origin (403): a browser sends such a form
    without asking first, as it never sends JSON."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == "multipart/form-data" and path in FORM_PATHS:
        if origin is not None and origin.split("://", 1)[-1].lower() != host.lower():
            return 403, f"body: a form sent from {origin!r}, another origin than this server's"
        return None
    if media != "application/json":
        said = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        return 415, f"body: {said}; the API takes JSON sent as 'Content-Type: application/json'"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        return 422, f"body: not UTF-8 (byte 0x{body[err.start]:02x} at byte {err.start:,})"
    try:
        json.loads(text)
    except RecursionError:
        return 422, "body: JSON nested too deeply (arrays and objects inside each other more than about 1,000 deep)"
    except ValueError:
        return 422, "body: the body is not valid JSON"
    return None


async def _drain(receive: Receive, limit: int) -> None:
    """Read and discard the rest of a refused body, up to ``limit`` bytes."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        seen += len(message.get("body", b""))


def _too_large(limit: int) -> str:
    return f"the request body is larger than the limit of {limit:,} bytes (--max-body)"


async def _reply(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *SECURITY_HEADERS, *([(b"connection", b"close")] if close else [])]})
    await send({"type": "http.response.body", "body": body})
