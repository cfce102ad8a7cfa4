"""``attnkit serve``: trained runs behind a JSON API with dynamic batching, and the explorer page.

The server itself is :mod:`attnkit.serve`; this command binds the port (a taken one is named before
anything loads), loads the runs and reads ``--data``, then listens (so no connection waits on a
loading server: it is refused at once) and runs uvicorn until Ctrl-C or SIGTERM. Those let the requests
in flight finish for up to ``--grace`` seconds less one (half of it when shorter), answer the rest 503,
and end with status 0 within ``--grace`` seconds; a SIGTERM while the models load ends at once with 0.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click

from attnkit.cli.options import allow_unfinished_option, reader_options, settings_options
from attnkit.serve.limits import Limits

__all__ = ["serve"]



class _Stopped(BaseException):
    """SIGTERM came while the models loaded (a BaseException, as KeyboardInterrupt: no `except Exception` keeps it)."""


@click.command()
@click.argument("runs", nargs=-1, type=click.Path(exists=True, file_okay=False))
@click.option("--hf", "hf", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="A Hugging Face sequence classifier or causal language model folder to serve beside the runs "
                   "(repeatable; local files only, no custom code, safetensors only).")
@click.option("--data", type=click.Path(exists=True), help="A labelled data set for the explorer's data view "
                                                           "(metrics, confusion matrix, slices, errors).")
@reader_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; any but the loopback makes the API (which has no authentication) "
                   "reachable from other machines.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Port to listen on (0: a free one, printed).")
@settings_options(Limits)
@click.option("--read-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Seconds a client has to send a whole request (headers and body) from when it connects or "
                   "starts it; one that sends nothing is closed, one that sent part of it gets 408.")
@click.option("--grace", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds from Ctrl-C or SIGTERM to the exit: requests in flight finish until a second before "
                   "(half of it when shorter), the rest are answered 503.")
@allow_unfinished_option
def serve(runs: tuple[str, ...], hf: tuple[str, ...], data: str | None, host: str, port: int, read_timeout: float,
          grace: float, allow_unfinished: bool, **values: Any) -> None:
    """Serve trained runs: a JSON API (/v1/predict, /v1/explain, /v1/attention) and an explorer page.

    \b
    Example:
      attnkit serve runs/reviews --data test.csv
      then open http://127.0.0.1:8000
    """
    from attnkit._lazy import require_extra

    if not runs and not hf:
        raise click.UsageError("give at least one RUN directory or --hf FOLDER to serve")
    require_extra("attnkit serve", "fastapi", "uvicorn")
    import uvicorn

    from attnkit.serve import build_app
    from attnkit.serve.protocol import protocol

    sock = _bind(host, port)  # first: a taken port or a bad address is said before the models load
    if not _loopback(host):
        click.echo(f"Warning: --host {host} makes the API reachable from other machines, and it has no "
                   "authentication: anyone who reaches the port can use the models", err=True)
    limits = Limits(**{f.name: values.pop(f.name) for f in dataclasses.fields(Limits)})
    bound = sock.getsockname()[1]
    signal.signal(signal.SIGTERM, _stop_loading)
    try:
        click.echo(f"loading {', '.join([*runs, *hf])} (SIGTERM stops)", err=True)
        models = _load(runs, hf, data, values, allow_unfinished)
        app = build_app(models, limits, host=host, port=bound)
        state = app.fastapi.state.server
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                http=protocol(read_timeout, lambda: state.stopping),
                                timeout_graceful_shutdown=max(1, int(grace)))  # a backstop
        server = _server_class()(config, state, grace)
        signal.signal(signal.SIGTERM, server.handle_exit)  # from here a SIGTERM stops the server gracefully
    except _Stopped:
        sock.close()
        click.echo("stopped while loading the models (SIGTERM)", err=True)
        return
    except ValueError as err:  # a run of another kind, or a damaged one: named in one line
        sock.close()
        raise click.ClickException(str(err)) from None
    sock.listen(2048)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"serving {', '.join(m.name for m in models)} on http://{shown}:{bound} "
               "(Ctrl-C or SIGTERM stops)")
    server.run(sockets=[sock])
    click.echo("stopped")
    # Nothing is left to save; the interpreter's teardown of torch (about a second) and a model call still
    # running would only make the exit later than --grace.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _load(runs: tuple[str, ...], hf: tuple[str, ...], data: str | None, reader: dict[str, Any],
          allow_unfinished: bool) -> list[Any]:
    """The runs and folders loaded, with the ``--data`` view computed."""
    from attnkit.serve import load_models

    models = load_models([Path(r) for r in runs], hf=[Path(f) for f in hf], allow_unfinished=allow_unfinished)
    for m in models:
        if m.info().get("notice"):
            click.echo(m.info()["notice"], err=True)
    if data:
        from attnkit.data.readers import ReaderSettings

        examples = ReaderSettings.of(reader).read(data, lambda line: click.echo(line, err=True))
        for m in models:
            if "predict" in m.routes:  # the data view is a labelled set's: classifiers'
                m.load_data([e.text for e in examples], [e.label for e in examples])
    return models


def _server_class() -> type:
    import uvicorn

    class Uvicorn(uvicorn.Server):
        """uvicorn's server, telling the app when the stop began, so that it answers in time."""

        def __init__(self, config: Any, app_server: Any, grace: float) -> None:
            super().__init__(config)
            self.app_server, self.grace, self.signalled = app_server, grace, 0.0

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.signalled = self.signalled or time.monotonic()
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: Any = None) -> None:
            spent = time.monotonic() - (self.signalled or time.monotonic())
            left = self.grace - min(1.0, self.grace / 2) - spent
            self.app_server.stop(left)
            for connection in list(self.server_state.connections):  # requests still being sent: 408 in time
                getattr(connection, "hurry", lambda _: None)(left)
            await super().shutdown(sockets)

    return Uvicorn


def _stop_loading(_signum: int, _frame: Any) -> None:
    raise _Stopped


def _loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a taken port or an unknown address is a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family in (socket.AF_INET, socket.AF_INET6):  # answers leave at once (no 40 ms wait for an ACK)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise click.ClickException(f"--port {port}: port {port} on {host} is taken (another program listens "
                                       "there); choose another --port") from None
        raise click.ClickException(f"--host {host}: cannot listen there ({err.strerror or err})") from None
    except socket.gaierror as err:
        sock.close()
        raise click.ClickException(f"--host {host}: not an address of this machine ({err})") from None
    return sock
