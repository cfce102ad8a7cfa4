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
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnkit._checks import FieldError
from attnkit.serve.batching import Admission, Batcher, ModelThread, QueueFull
from attnkit.serve.limits import Guard, Limits, allowed_hosts, check_text
from attnkit.serve.models import ServedModel

__all__ = ["build_app", "API_VERSION"]

API_VERSION = "v1"
PAGE_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
              "/explorer.js": ("explorer.js", "text/javascript; charset=utf-8"),
              "/explorer.css": ("explorer.css", "text/css; charset=utf-8"),
              "/generation.js": ("generation.js", "text/javascript; charset=utf-8")}
log = logging.getLogger("attnkit.serve")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PredictRequest(_Strict):
    texts: Annotated[list[str], Field(min_length=1, description="The texts to classify.")]
    model: str | None = Field(None, description="A name from /v1/models (default: the first).")


class ExplainRequest(_Strict):
    text: str | None = Field(None, description="The text to explain (a classifier's, a translation run's).")
    image: str | None = Field(None, description="A captioning run's image: PNG or JPEG, base64-encoded.")
    method: str | None = Field(None, description="An attribution method (default: the most faithful).")
    model: str | None = None


class AttentionRequest(_Strict):
    text: str
    model: str | None = None


class TranslateRequest(_Strict):
    texts: Annotated[list[str], Field(min_length=1, description="The texts to translate.")]
    model: str | None = None
    beam_size: int | None = Field(None, ge=1, description="Beam size (default: the run's, as attnkit translate).")


class GenerateRequest(_Strict):
    texts: Annotated[list[str], Field(min_length=1, description="The prompts to continue.")]
    model: str | None = None
    max_new_tokens: int = Field(20, ge=1, description="Tokens to generate at most (up to --max-new-tokens).")


class CaptionRequest(_Strict):
    images: Annotated[list[str], Field(min_length=1, description="PNG or JPEG images, each base64-encoded.")]
    model: str | None = None
    beam_size: int | None = Field(None, ge=1, description="Beam width (default: the run's, as attnkit caption).")


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
        self.batchers: dict[tuple[str, str, Any], Batcher] = {}
        self.stopping = False
        self.stopped = asyncio.Event()

    def pick(self, name: str | None, route: str) -> Any:
        """The model named ``name`` (None: the first that answers ``route``); a model of another kind is a
        422 naming its kind and the routes it answers."""
        if name is None:
            name = next((m.name for m in self.models if route in m.routes), self.models[0].name)
        if name not in self.by_name:
            raise _Refused(422, f"model: no model named {name!r}; served: {', '.join(self.by_name)}", "model")
        served = self.by_name[name]
        if route not in served.routes:
            raise _Refused(422, f"model: {name} is a {served.kind} model, which answers "
                                f"{', '.join(f'/{API_VERSION}/{r}' for r in served.routes)}, not "
                                f"/{API_VERSION}/{route}", "model")
        return served

    def batcher(self, served: Any, route: str, *args: Any) -> Batcher:
        """The batcher of ``served``'s ``route`` called with ``args`` after the items (one per model, route and
        arguments, made when first asked)."""
        key = (served.name, route, args)
        if key not in self.batchers:
            call = getattr(served, route)
            self.batchers[key] = Batcher(lambda items: call(items, *args), self.thread,
                                         max_batch=self.limits.max_batch, wait_ms=self.limits.batch_wait_ms)
        return self.batchers[key]

    def items(self, items: list[str], field: str, limit: int, flag: str) -> None:
        """At most ``limit`` ``items``, each within ``--max-chars``."""
        if len(items) > limit:
            raise _Refused(422, f"{field}: {len(items)} {field}, more than the limit of {limit} ({flag})", field)
        for i, item in enumerate(items):
            self.check(item, f"{field}.{i}")

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
        except FieldError as err:
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
        served = server.pick(body.model, "predict")
        server.items(body.texts, "texts", limits.max_texts, "--max-texts")
        rows = await server.answer(server.batcher(served, "predict")(list(body.texts)))
        return {"model": served.name, "predictions": rows}

    @api.post(f"/{API_VERSION}/explain", summary="Explain one prediction, translation or caption")
    async def explain(body: ExplainRequest) -> dict[str, Any]:
        served = server.pick(body.model, "explain")
        wants = "image" if "caption" in served.routes else "text"
        if (body.image if wants == "image" else body.text) is None:
            raise _Refused(422, f"{wants}: {served.name} is a {served.kind} model; it explains "
                                f"{'an image' if wants == 'image' else 'a text'}", wants)
        if wants == "image":
            image = _base64(str(body.image), "image")
            return dict(await server.answer(server.thread.run(
                lambda: served.explain(image, body.method, max_pixels=limits.max_pixels))))
        server.check(str(body.text), "text")
        return dict(await server.answer(server.thread.run(served.explain, body.text, body.method)))

    @api.post(f"/{API_VERSION}/attention", summary="Attention maps per layer and head")
    async def attention(body: AttentionRequest) -> dict[str, Any]:
        served = server.pick(body.model, "attention")
        server.check(body.text, "text")
        return dict(await server.answer(server.thread.run(served.attention, body.text)))

    @api.get(f"/{API_VERSION}/models", summary="The models served")
    async def list_models() -> dict[str, Any]:
        return {"models": [m.info() for m in server.models]}

    @api.get(f"/{API_VERSION}/data", summary="The --data set's metrics and rows")
    async def data(model: str | None = None) -> dict[str, Any]:
        served = server.pick(model, "predict")
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


def _add_generation_routes(api: FastAPI, server: _Server) -> None:
    """The routes of the models that generate: translation, language models, captioning."""
    limits = server.limits

    @api.post(f"/{API_VERSION}/translate", summary="Translate texts")
    async def translate(body: TranslateRequest) -> dict[str, Any]:
        served = server.pick(body.model, "translate")
        server.items(body.texts, "texts", limits.max_texts, "--max-texts")
        beam = _beam(body.beam_size or served.info()["beam_size"], limits)
        rows = await server.answer(server.batcher(served, "translate", beam)(list(body.texts)))
        return {"model": served.name, "beam_size": beam, "translations": rows}

    @api.post(f"/{API_VERSION}/generate", summary="Continue prompts with a language model")
    async def generate(body: GenerateRequest) -> dict[str, Any]:
        served = server.pick(body.model, "generate")
        server.items(body.texts, "texts", limits.max_texts, "--max-texts")
        if body.max_new_tokens > limits.max_new_tokens:
            raise _Refused(422, f"max_new_tokens: {body.max_new_tokens}, more than the limit of "
                                f"{limits.max_new_tokens} (--max-new-tokens)", "max_new_tokens")
        rows = await server.answer(server.thread.run(served.generate, list(body.texts), body.max_new_tokens))
        return {"model": served.name, "generations": rows}

    @api.post(f"/{API_VERSION}/caption", summary="Caption images", openapi_extra=_CAPTION_BODY)
    async def caption(request: Request) -> dict[str, Any]:
        """JSON (``images``: base64 items) or a multipart form (``images``: files; ``model``, ``beam_size``)."""
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            body, images = await _caption_form(request, limits.max_images)
        else:
            try:
                body = CaptionRequest.model_validate_json(await request.body())
            except ValidationError as err:
                raise RequestValidationError(err.errors(include_url=False)) from None
            images = [_base64(item, f"images.{i}") for i, item in enumerate(body.images)]
        served = server.pick(body.model, "caption")
        if len(body.images) > limits.max_images:
            raise _Refused(422, f"images: {len(body.images)} images, more than the limit of {limits.max_images} "
                                "(--max-images)", "images")
        beam = _beam(body.beam_size or served.info()["beam_size"], limits)
        rows = await server.answer(server.thread.run(
            lambda: served.caption(images, beam, max_pixels=limits.max_pixels)))
        return {"model": served.name, "beam_size": beam, "captions": rows}


_CAPTION_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": CaptionRequest.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": ["images"], "properties": {
        "images": {"type": "array", "items": {"type": "string", "format": "binary"}},
        "model": {"type": "string"}, "beam_size": {"type": "integer", "minimum": 1}}}}}}}


async def _caption_form(request: Request, max_images: int) -> tuple[CaptionRequest, list[bytes]]:
    """A multipart ``/v1/caption`` form: its ``images`` files (one file per part, at most ``max_images``
    read), ``model`` and ``beam_size``, checked as the JSON body is; any other field is refused by name."""
    try:
        form = await request.form(max_files=max_images, max_fields=8)
    except StarletteHTTPException as err:  # starlette's word for a form it cannot read
        if "Too many files" in str(err.detail):
            raise _Refused(422, f"images: more images than the limit of {max_images} (--max-images)",
                           "images") from None
        raise _Refused(422, f"body: not a valid multipart form ({' '.join(str(err.detail).split())})",
                       "body") from None
    try:
        unknown = sorted(set(form) - {"images", "model", "beam_size"})
        if unknown:
            raise _Refused(422, f"{unknown[0]}: not a field of /v1/caption (images, model, beam_size)", unknown[0])
        files = form.getlist("images")
        texts = [i for i, f in enumerate(files) if isinstance(f, str)]
        if texts:
            raise _Refused(422, f"images.{texts[0]}: a form field, not a file (send images as files)",
                           f"images.{texts[0]}")
        images = [await f.read() for f in files if not isinstance(f, str)]
        fields = {k: form.get(k) for k in ("model", "beam_size") if form.get(k) is not None}
        try:
            body = CaptionRequest.model_validate({**fields, "images": ["file"] * len(images)})
        except ValidationError as err:
            raise RequestValidationError(err.errors(include_url=False)) from None
        return body, images
    finally:
        await form.close()


def _beam(beam: int, limits: Limits) -> int:
    if beam > limits.max_beam:
        raise _Refused(422, f"beam_size: {beam}, more than the limit of {limits.max_beam} (--max-beam)",
                       "beam_size")
    return beam


def _base64(item: str, field: str) -> bytes:
    """The bytes of a base64 item (a ``data:image/...;base64,`` prefix allowed); a 422 naming it otherwise."""
    import base64
    import binascii

    try:
        return base64.b64decode(item.split(",", 1)[1] if item.startswith("data:") else item, validate=True)
    except (binascii.Error, ValueError, IndexError):
        raise _Refused(422, f"{field}: not base64 (an image's bytes, base64-encoded)", field) from None


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
    _add_generation_routes(api, server)
    guarded = Guard(api, hosts=allowed_hosts(host, port), max_body=server.limits.max_body)
    guarded.fastapi = api  # type: ignore[attr-defined]
    return guarded
