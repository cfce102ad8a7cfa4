"""The ASGI application of ``attnkit serve``: the JSON API under ``/v1`` and the explorer page at ``/``.

Built on FastAPI (request schemas, validation and the OpenAPI schema at ``/openapi.json``) over
Starlette, served by uvicorn. :func:`build_app` takes loaded :class:`~attnkit.serve.models.ServedModel`
objects and :class:`~attnkit.serve.limits.Limits`; it reads no file a request names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnkit.serve.batching import Admission, Batcher, ModelThread, QueueFull
from attnkit.serve.limits import Guard, Limits, allowed_hosts, check_text
from attnkit.serve.models import RequestError, ServedModel

__all__ = ["build_app", "API_VERSION"]

API_VERSION = "v1"
PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/explorer.js": ("explorer.js", "text/javascript; charset=utf-8"),
              "/explorer.css": ("explorer.css", "text/css; charset=utf-8")}
log = logging.getLogger("attnkit.serve")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PredictRequest(_Strict):
    texts: Annotated[list[str], Field(min_length=1, description="The texts to classify.")]
    model: str | None = Field(None, description="A name from /v1/models (default: the first).")


class ExplainRequest(_Strict):
    text: str
    method: str | None = Field(None, description="An attribution method (default: the run's most faithful).")
    model: str | None = None


class AttentionRequest(_Strict):
    text: str
    model: str | None = None


def _error(status: int, message: str, field: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message, "status": status}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status, headers=headers)


class _Refused(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def _file_route(content: bytes, media: str) -> Any:
    async def serve_file() -> Response:
        return Response(content, media_type=media)

    return serve_file


class _Server:
    """What the routes share: the models, the limits, the model thread, the batchers, the queue bound."""

    def __init__(self, models: list[ServedModel], limits: Limits) -> None:
        self.models = models
        self.by_name = {m.name: m for m in models}
        self.limits = limits
        self.thread = ModelThread()
        self.admission = Admission(limits.queue)
        self.batchers = {m.name: Batcher(m.predict, self.thread, max_batch=limits.max_batch,
                                         wait_ms=limits.batch_wait_ms) for m in models}
        self.stopping = False
        self.stopped = asyncio.Event()

    def pick(self, name: str | None) -> ServedModel:
        if name is None:
            return self.models[0]
        if name not in self.by_name:
            raise _Refused(422, f"model: no model named {name!r}; served: {', '.join(self.by_name)}", "model")
        return self.by_name[name]

    def check(self, text: str, field: str) -> None:
        why = check_text(text, field, self.limits.max_chars)
        if why:
            raise _Refused(422, why, field)

    def stop(self, after: float) -> None:
        """The server is stopping: every request still waiting ``after`` seconds from now is answered 503."""
        self.stopping = True
        asyncio.get_running_loop().call_later(max(0.0, after), self.stopped.set)

    async def answer(self, work: Any) -> Any:
        """Run ``work`` (a coroutine) under the queue bound, the time limit and the stop."""
        limits = self.limits
        try:
            self.admission.enter()
        except QueueFull:
            work.close()
            raise _Refused(503, f"the server is busy: {limits.queue} requests are waiting (--queue); "
                                "try again shortly") from None
        job = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.stopped.wait())
        try:
            done, _ = await asyncio.wait({job, stop}, timeout=limits.timeout, return_when=asyncio.FIRST_COMPLETED)
            if job in done:
                return job.result()
            job.cancel()  # a model call not yet started is not run
            if stop in done:
                raise _Refused(503, "the server is shutting down (SIGTERM or Ctrl-C) and did not answer this "
                                    "request in time; try again when it is back")
            raise _Refused(504, f"the request took longer than the time limit of {limits.timeout:g} s "
                                "(--timeout)")
        except RequestError as err:
            raise _Refused(422, str(err), err.field) from None
        finally:
            stop.cancel()
            self.admission.leave()


def _add_error_handlers(api: FastAPI) -> None:
    """Every error is JSON with a message (and the field to blame); no traceback reaches a client."""

    @api.exception_handler(_Refused)
    async def refused(_request: Request, err: _Refused) -> JSONResponse:
        headers = {"Retry-After": "1"} if err.status == 503 else None
        return _error(err.status, err.message, err.field, headers)

    @api.exception_handler(RequestValidationError)
    async def invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        message = str(first.get("msg", "invalid request"))
        if first.get("type") == "json_invalid":
            where, message = "body", "the body is not valid JSON"
        return _error(422, f"{where}: {message}", where)

    @api.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail), headers=dict(err.headers or {}))

    @api.exception_handler(Exception)
    async def unexpected(_request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, f"the server failed to answer ({type(err).__name__}); its log has the details")


def _add_routes(api: FastAPI, server: _Server) -> None:
    limits = server.limits

    @api.post(f"/{API_VERSION}/predict", summary="Classify texts")
    async def predict(body: PredictRequest) -> dict[str, Any]:
        served = server.pick(body.model)
        if len(body.texts) > limits.max_texts:
            raise _Refused(422, f"texts: {len(body.texts)} texts, more than the limit of {limits.max_texts} "
                                "(--max-texts)", "texts")
        for i, text in enumerate(body.texts):
            server.check(text, f"texts.{i}")
        rows = await server.answer(server.batchers[served.name](list(body.texts)))
        return {"model": served.name, "predictions": rows}

    @api.post(f"/{API_VERSION}/explain", summary="Explain one prediction")
    async def explain(body: ExplainRequest) -> dict[str, Any]:
        served = server.pick(body.model)
        server.check(body.text, "text")
        return dict(await server.answer(server.thread.run(served.explain, body.text, body.method)))

    @api.post(f"/{API_VERSION}/attention", summary="Attention maps per layer and head")
    async def attention(body: AttentionRequest) -> dict[str, Any]:
        served = server.pick(body.model)
        server.check(body.text, "text")
        return dict(await server.answer(server.thread.run(served.attention, body.text)))

    @api.get(f"/{API_VERSION}/models", summary="The models served")
    async def list_models() -> dict[str, Any]:
        return {"models": [m.info() for m in server.models]}

    @api.get(f"/{API_VERSION}/data", summary="The --data set's metrics and rows")
    async def data(model: str | None = None) -> dict[str, Any]:
        served = server.pick(model)
        if served.data is None:
            raise _Refused(404, "no data set: start the server with --data FILE", "model")
        return served.data

    @api.get("/healthz", summary="Liveness")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "models": list(server.by_name), "waiting": server.admission.inside}

    page = resources.files("attnkit.serve") / "page"
    for route, (name, media) in PAGE_FILES.items():
        api.add_api_route(route, _file_route((page / name).read_bytes(), media), methods=["GET"],
                          include_in_schema=False)


def build_app(models: list[ServedModel], limits: Limits | None = None, *, host: str = "127.0.0.1",
              port: int = 8000) -> Any:
    """The server's ASGI app (FastAPI inside :class:`~attnkit.serve.limits.Guard`)."""
    server = _Server(models, limits or Limits())

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        server.thread.close()

    api = FastAPI(title="attnkit serve", version=API_VERSION, docs_url=None, redoc_url=None, lifespan=lifespan,
                  description="Predictions, explanations with their faithfulness, and attention maps of "
                              "trained attnkit runs.")
    api.state.server = server
    _add_error_handlers(api)
    _add_routes(api, server)
    guarded = Guard(api, hosts=allowed_hosts(host, port), max_body=server.limits.max_body)
    guarded.fastapi = api  # type: ignore[attr-defined]
    return guarded
