"""The HTTP connection of ``attnkit serve``: uvicorn's h11 protocol with a read time limit and JSON errors.

:func:`protocol` gives uvicorn (``uvicorn.Config(http=...)``) a connection class that allows a request
``read_timeout`` seconds from the moment its connection opens, or its first byte comes on a kept-alive
connection, to its last byte (headers and body). A client that sends nothing in that time is closed; one
that sends part of a request gets ``408`` first. So neither idle nor slow connections hold a socket for
ever. A request the HTTP parser refuses gets a JSON answer: ``421`` without a ``Host`` header (as the
guard answers an empty one), ``400`` naming the problem otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

from attnkit.serve.limits import SECURITY_HEADERS, error_body

__all__ = ["protocol", "STOPPING_READ"]

STOPPING_READ = 0.5


class _Parser(h11.Connection):
    """h11's connection, keeping the last error it found in what the client sent."""

    error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as err:
            self.error = err
            raise


class _Connection(H11Protocol):
    read_timeout = 30.0
    stopping: Callable[[], bool] = staticmethod(lambda: False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size
        self.conn = _Parser(h11.SERVER, size if size is not None else DEFAULT_MAX_INCOMPLETE_EVENT_SIZE)
        self.reading: asyncio.TimerHandle | None = None
        self.started = False  # a byte of the request being read has come

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.reading is None:
            self._arm()
        self.started = True
        super().data_received(data)
        if self.cycle is not None and not self.cycle.more_body and not self.cycle.response_complete:
            self._disarm()  # the whole request is in: the time limit of the answer is --timeout's

    def on_response_complete(self) -> None:
        self.started = False
        super().on_response_complete()
        if self.stopping() and not self.transport.is_closing():  # no next request on it: the server stops
            self._unset_keepalive_if_required()
            self.transport.close()

    def hurry(self, within: float) -> None:
        """The server stops: a request still being read has at most ``within`` more seconds."""
        if self.reading is not None and self.reading.when() - self.loop.time() > within:
            self._arm(within)

    def _arm(self, wait: float | None = None) -> None:
        self._disarm()
        if wait is None:
            wait = min(self.read_timeout, STOPPING_READ) if self.stopping() else self.read_timeout
        self.reading = self.loop.call_later(max(0.0, wait), self._timed_out)

    def _disarm(self) -> None:
        if self.reading is not None:
            self.reading.cancel()
            self.reading = None

    def _timed_out(self) -> None:
        self.reading = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:
                return
            self.cycle.disconnected = True  # the route stops waiting for the body
            self.cycle.message_event.set()
        if self.started:
            self._write(408, f"the request was not received within the read time limit of {self.read_timeout:g} s "
                             "(--read-timeout)")
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        why = str(getattr(self.conn, "error", None) or msg)
        if "Host" in why:
            self._write(421, "no Host header (only requests to its own address are answered)")
        else:
            self._write(400, f"not an HTTP request this server reads ({why})")
        self.transport.close()

    def _write(self, status: int, message: str) -> None:
        body = error_body(status, message)
        head = [f"HTTP/1.1 {status} {_REASONS[status]}".encode(),
                b"content-type: application/json", f"content-length: {len(body)}".encode(), b"connection: close",
                *(k + b": " + v for k, v in SECURITY_HEADERS)]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)


_REASONS = {400: "Bad Request", 408: "Request Timeout", 421: "Misdirected Request"}


def protocol(read_timeout: float, stopping: Callable[[], bool] = lambda: False) -> type[asyncio.Protocol]:
    """uvicorn's h11 connection with a read time limit of ``read_timeout`` seconds and JSON errors; once
    ``stopping()`` is true, a connection closes after its answer, and a new one has :data:`STOPPING_READ`
    seconds to send its request."""
    return type("Connection", (_Connection,), {"read_timeout": read_timeout, "stopping": staticmethod(stopping)})
