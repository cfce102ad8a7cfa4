"""``attnkit serve`` answers every kind of run: translation (``/v1/translate``) and captioning
(``/v1/caption``) beside classification, over real HTTP to a server process; a route asked of a model of
another kind is a 422 naming its kind and its routes."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.serve import ServerProcess, env, post_json, serving, train_tiny_run


def make_runs(root: Path) -> dict[str, Path]:
    """A tiny classification run (``run``), translation run (``de-en``) and captioning run (``shapes``)."""
    from click.testing import CliRunner

    from attnkit.cli import cli
    from attnkit.data.shapes import shapes_vocab
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
    from attnkit.train.tasks.caption.captioning import save_caption_run
    from tests.cli.test_cli_translate import toy_corpus, write_pair

    classifier, _ = train_tiny_run(root)
    src, tgt = write_pair(root, toy_corpus(80), "train")
    result = CliRunner().invoke(cli, [
        "train", "--task", "translate", "--src", str(src), "--tgt", str(tgt), "--out", str(root / "de-en"),
        "--vocab-size", "50", "--d-model", "16", "--num-heads", "2", "--d-ff", "16", "--encoder-layers", "1",
        "--decoder-layers", "1", "--epochs", "2", "--warmup-steps", "5", "--quiet"])
    assert result.exit_code == 0, result.output
    import torch

    torch.manual_seed(0)
    model = ImageCaptioner(CaptionerConfig(vocab_size=len(shapes_vocab()), image_size=32, channels=(2, 2, 2)))
    save_caption_run(root / "shapes", model, shapes_vocab(), run_id="caption-run")
    return {"run": classifier, "de-en": root / "de-en", "shapes": root / "shapes"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("serve-kinds"))


@pytest.fixture(scope="module")
def server(runs: dict[str, Path]) -> Iterator[ServerProcess]:
    yield from serving(*(str(p) for p in runs.values()), "--max-batch", "1", "--max-texts", "4", "--max-beam", "5",
                       "--max-images", "2", "--max-pixels", "4096")




def png(width: int, height: int, seed: int = 0) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def test_models_say_each_kind_and_its_routes(server: ServerProcess) -> None:
    models = {m["name"]: m for m in httpx.get(server.url + "/v1/models").json()["models"]}
    assert {name: (m["kind"], m["routes"]) for name, m in models.items()} == {
        "run": ("classify", ["predict", "explain", "attention"]), "de-en": ("translate", ["translate", "explain"]),
        "shapes": ("caption", ["caption", "explain"])}
    assert models["de-en"]["beam_size"] == 4 and models["shapes"]["image_size"] == 32


def test_translate_answers_as_attnkit_translate_with_the_same_beam(server: ServerProcess,
                                                                  runs: dict[str, Path]) -> None:
    texts = ["ein hund läuft.", "ein kind spielt.", "<script>x</script>"]
    for beam in (None, 2):
        body: dict[str, Any] = {"model": "de-en", "texts": texts, **({"beam_size": beam} if beam else {})}
        reply = post_json(server, "/v1/translate", body)
        assert reply.status_code == 200, reply.text
        flags = ["--beam-size", str(beam)] if beam else []
        cli = subprocess.run([sys.executable, "-m", "attnkit", "translate", str(runs["de-en"]), *texts, *flags],
                             capture_output=True, text=True, env=env(), check=True)
        assert reply.json() == {"model": "de-en", "beam_size": beam or 4,
                                "translations": cli.stdout.splitlines()}
    default = post_json(server, "/v1/translate", {"texts": ["ein hund läuft."]})  # the first model that translates
    assert default.status_code == 200 and default.json()["model"] == "de-en"


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"model": "de-en", "texts": ["a"] * 5}, "texts", "texts: 5 texts, more than the limit of 4 (--max-texts)"),
    ({"model": "de-en", "texts": ["a"] * 4, "beam_size": 6}, "beam_size",
     "beam_size: 6, more than the limit of 5 (--max-beam)"),
    ({"model": "de-en", "texts": ["a"], "beam_size": 0}, "beam_size", None),
    ({"model": "run", "texts": ["a"]}, "model",
     "model: run is a classify model, which answers /v1/predict, /v1/explain, /v1/attention, not /v1/translate"),
])
def test_translate_refuses_by_name(server: ServerProcess, body: dict[str, Any], field: str,
                                   message: str | None) -> None:
    reply = post_json(server, "/v1/translate", body)
    assert reply.status_code == 422 and reply.json()["field"] == field, reply.text
    if message is not None:
        assert reply.json()["error"] == message
    edge = post_json(server, "/v1/translate", {"model": "de-en", "texts": ["a"] * 4, "beam_size": 5})
    assert edge.status_code == 200, edge.text  # the limits' exact values pass


def test_explain_a_translation_with_each_method_s_faithfulness(server: ServerProcess, runs: dict[str, Path]) -> None:
    import attnkit

    reply = post_json(server, "/v1/explain", {"model": "de-en", "text": "ein hund läuft."})
    assert reply.status_code == 200, reply.text
    got = reply.json()
    expected = attnkit.load_run(runs["de-en"]).explain("ein hund läuft.")
    assert got == {"model": "de-en", **json.loads(json.dumps(expected))}
    assert set(got["faithfulness"]["methods"]) == {"cross_attention", "attention_norm", "grad_input",
                                                   "integrated_gradients"}
    asked = post_json(server, "/v1/explain", {"model": "de-en", "text": "ein hund.", "method": "grad_input"})
    assert asked.status_code == 200 and asked.json()["method"] == "grad_input"
    wrong = post_json(server, "/v1/explain", {"model": "de-en", "text": "ein hund.", "method": "rollout"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "method"
    assert "cross_attention, attention_norm, grad_input, integrated_gradients" in wrong.json()["error"]


def test_explain_a_caption_by_its_regions(server: ServerProcess, runs: dict[str, Path]) -> None:
    import attnkit
    from attnkit.data.captions import images_to_tensor, load_image

    image = png(32, 32, 3)
    reply = post_json(server, "/v1/explain", {"model": "shapes", "image": base64.b64encode(image).decode()})
    assert reply.status_code == 200, reply.text
    expected = attnkit.load_run(runs["shapes"]).explain(images_to_tensor(load_image(image, 32)[None]))
    assert reply.json() == {"model": "shapes", **json.loads(json.dumps(expected))}
    for body, field in (({"model": "shapes", "text": "a"}, "image"), ({"model": "de-en", "image": "AAAA"}, "text"),
                        ({"model": "shapes", "image": base64.b64encode(png(65, 64)).decode()}, "image")):
        refused = post_json(server, "/v1/explain", body)
        assert refused.status_code == 422 and refused.json()["field"] == field, refused.text
    assert "shapes is a caption model; it explains an image" in post_json(
        server, "/v1/explain", {"model": "shapes", "text": "a"}).json()["error"]


def test_a_route_of_another_kind_is_refused_naming_the_kind(server: ServerProcess) -> None:
    reply = post_json(server, "/v1/predict", {"model": "de-en", "texts": ["ein haus"]})
    assert reply.status_code == 422 and reply.json() == {
        "error": "model: de-en is a translate model, which answers /v1/translate, /v1/explain, not /v1/predict",
        "status": 422, "field": "model"}
    for route, body in (("explain", {"text": "x"}), ("attention", {"text": "x"})):
        refused = post_json(server, f"/v1/{route}", {"model": "shapes", **body})
        assert refused.status_code == 422 and "shapes is a caption model" in refused.json()["error"], route
    assert post_json(server, "/v1/predict", {"texts": ["a fine film"]}).json()["model"] == "run"


def test_caption_answers_as_attnkit_caption(server: ServerProcess, runs: dict[str, Path], tmp_path: Path) -> None:
    images = [png(40, 30, 1), png(64, 64, 2)]  # 64 x 64 = 4096 pixels: the limit's exact value
    encoded = [base64.b64encode(i).decode() for i in images]
    reply = post_json(server, "/v1/caption", {"model": "shapes", "images": encoded})
    assert reply.status_code == 200, reply.text
    expected = []
    for i, data in enumerate(images):
        (tmp_path / f"{i}.png").write_bytes(data)
        cli = subprocess.run([sys.executable, "-m", "attnkit", "caption", str(runs["shapes"]),
                              str(tmp_path / f"{i}.png")], capture_output=True, text=True, env=env(), check=True)
        expected.append(cli.stdout.strip())
    assert reply.json() == {"model": "shapes", "beam_size": 1, "captions": expected}
    data_url = "data:image/png;base64," + base64.b64encode(images[0]).decode()
    assert post_json(server, "/v1/caption", {"images": [data_url]}).json()["captions"] == expected[:1]


@pytest.mark.parametrize(("images", "field", "message"), [
    (["not base64!"], "images.0", "images.0: not base64 (an image's bytes, base64-encoded)"),
    ([base64.b64encode(b"GIF89a? no").decode()], "images.0", "images.0 is not a readable image"),
    (["OK", "OK", "OK"], "images", "images: 3 images, more than the limit of 2 (--max-images)"),
    (["OK", "BIG"], "images.1", "images.1 has 65x64 = 4160 pixels, more than the limit of 4096"),
])
def test_caption_refuses_by_name(server: ServerProcess, images: list[str], field: str, message: str) -> None:
    fill = {"OK": base64.b64encode(png(8, 8)).decode(), "BIG": base64.b64encode(png(65, 64)).decode()}
    reply = post_json(server, "/v1/caption", {"model": "shapes", "images": [fill.get(i, i) for i in images]})
    assert reply.status_code == 422 and reply.json()["field"] == field, reply.text
    assert reply.json()["error"].startswith(message), reply.text


def test_caption_takes_a_multipart_form_of_image_files(server: ServerProcess) -> None:
    import httpx

    images = [png(40, 30, 1), png(64, 64, 2)]
    files = [("images", (f"{i}.png", data, "image/png")) for i, data in enumerate(images)]
    reply = httpx.post(server.url + "/v1/caption", data={"model": "shapes"}, files=files, timeout=60)
    assert reply.status_code == 200, reply.text
    as_json = post_json(server, "/v1/caption", {"model": "shapes",
                                                "images": [base64.b64encode(i).decode() for i in images]})
    assert reply.json() == as_json.json()  # the same answer as the JSON body's

    def refused(data: dict[str, str], files: list[tuple[str, tuple[str, bytes, str]]]) -> httpx.Response:
        return httpx.post(server.url + "/v1/caption", data=data, files=files, timeout=60)

    one = [("images", ("a.png", png(8, 8), "image/png"))]
    for data, parts, field, message in [
        ({"model": "shapes"}, one * 3, "images", "images: more images than the limit of 2 (--max-images)"),
        ({"model": "shapes"}, one * 2, None, None),  # the limit's exact value
        ({"model": "shapes", "colour": "red"}, one, "colour", "colour: not a field of /v1/caption"),
        ({"model": "shapes", "beam_size": "0"}, one, "beam_size", "beam_size: Input should be greater than"),
        ({"model": "de-en"}, one, "model", "model: de-en is a translate model"),
        ({"model": "shapes"}, [("images", ("b.png", png(65, 64), "image/png"))], "images.0",
         "images.0 has 65x64 = 4160 pixels"),
    ]:
        got = refused(data, parts)
        if field is None:
            assert got.status_code == 200, got.text
            continue
        assert got.status_code == 422 and got.json()["field"] == field, (data, got.text)
        assert got.json()["error"].startswith(message), got.text
    text_part = httpx.post(server.url + "/v1/caption", content=b"--x\r\nContent-Disposition: form-data; "
                           b"name=\"images\"\r\n\r\nnot a file\r\n--x--\r\n",
                           headers={"content-type": "multipart/form-data; boundary=x"}, timeout=60)
    assert text_part.status_code == 422 and text_part.json()["field"] == "images.0", text_part.text
    # a page of another origin cannot post a form to the server (a browser sends one without asking first)
    foreign = httpx.post(server.url + "/v1/caption", data={"model": "shapes"}, files=one,
                         headers={"origin": "http://evil.example"}, timeout=60)
    assert foreign.status_code == 403 and "another origin" in foreign.json()["error"], foreign.text
    own = httpx.post(server.url + "/v1/caption", data={"model": "shapes"}, files=one,
                     headers={"origin": server.url}, timeout=60)
    assert own.status_code == 200, own.text
    other_route = httpx.post(server.url + "/v1/translate", data={"model": "de-en"}, files=one, timeout=60)
    assert other_route.status_code == 415, other_route.text  # the other routes take JSON alone


def test_the_curl_examples_of_the_docs_run(server: ServerProcess, tmp_path: Path) -> None:
    from tests.serve.test_api import doc_examples

    (tmp_path / "scene.png").write_bytes(png(32, 32))
    examples = doc_examples(generation=True)
    assert len(examples) == 3
    for command, shown in examples:
        proc = subprocess.run(["bash", "-c", command.replace("http://127.0.0.1:8000", server.url)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=True)
        got = json.loads(proc.stdout)
        assert set(got) == set(shown) and got["model"] == shown["model"], (command, got)
        assert got["beam_size"] == shown["beam_size"]
