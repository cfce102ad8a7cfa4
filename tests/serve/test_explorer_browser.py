"""The explorer page in headless Chromium against a running ``attnkit serve`` (two models, a data set).

Typed text gets its label and a coloured explanation with the method and its faithfulness; clicking
a word removes it and the prediction moves; the data view opens an error; hostile text from the data
is shown as text and nothing runs; no request leaves the server's origin.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.browser import CHROMIUM, Browser  # the browser fixture: tests/conftest.py
from tests.support.serve import ServerProcess, train_tiny_run

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")

HOSTILE = ["<script>alert(1)</script> superb", '"><img src=x onerror=alert(1)> dreadful',
           "abc\u202edlrow\u202c olleh superb"]
READY = "JSON.stringify({ready: !!(window.attnkitExplorer && window.attnkitExplorer.ready)})"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("serve-browser")
    run, data = train_tiny_run(folder)
    with open(data, "a", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        for i, text in enumerate(HOSTILE):
            writer.writerow([text, "positive" if i % 2 == 0 else "negative"])
    proc = ServerProcess(str(run), str(run), "--data", str(data))
    try:
        yield proc
    finally:
        proc.stop()




def _predict(server: ServerProcess, text: str) -> dict[str, object]:
    return dict(httpx.post(server.url + "/v1/predict", json={"texts": [text]}).json()["predictions"][0])


def _settle(browser: Browser, count: str, before: int) -> None:
    browser.wait(f"window.attnkitExplorer.{count} > {before} && window.attnkitExplorer.busy === 0 && "
                 "!document.getElementById('status').textContent")


def test_type_explain_click_a_word_and_open_an_error(server: ServerProcess, browser: Browser,
                                                      tmp_path: Path) -> None:
    browser.open(server.url + "/", ready=READY, timeout=30)
    text = "superb brilliant film " + HOSTILE[0]
    browser.js(f"document.getElementById('text').value = {json.dumps(text)}")
    browser.js("document.getElementById('go').click()")
    _settle(browser, "explanations", 0)
    expected = _predict(server, text)
    assert browser.js("document.querySelector('#panel-0 .label').textContent") == expected["label"]
    assert browser.js("document.querySelector('#panel-1 .label').textContent") == expected["label"]  # run-2
    assert browser.js("document.querySelector('#panel-1 .model-name').textContent") == "model run-2"
    method = browser.js("document.querySelector('#panel-0 .method-name').textContent")
    models = httpx.get(server.url + "/v1/models").json()["models"]
    default = next(m for m in models[0]["methods"] if m["method"] == models[0]["default_method"])
    assert default["title"] in method and "most faithful" in method
    assert "comprehensiveness" in browser.js("document.querySelector('#panel-0 .figures').textContent")
    tokens = browser.js("Array.prototype.map.call(document.querySelectorAll('#panel-0 .tok'),"
                        " function(t){return [t.textContent, t.style.backgroundColor];})")
    assert tokens[0][0] == "superb" and all(colour.startswith("rgba(") for _, colour in tokens)
    assert any(word == "<" or "script" in word for word, _ in tokens)  # the markup is shown as tokens
    heads = browser.js("document.querySelectorAll('#attention-grid .head canvas').length")
    attention = httpx.post(server.url + "/v1/attention", json={"text": text}).json()
    assert heads == sum(m["shape"][0] for m in attention["maps"]) and heads >= 3
    # the method switch: raw attention, marked as such with its own figures
    browser.js("var s=document.querySelector('#panel-0 .method-switch'); s.value='attention';"
               "s.dispatchEvent(new Event('change'))")
    browser.wait("document.querySelector('#panel-0 .method.raw') !== null")
    assert "raw attention" in browser.js("document.querySelector('#panel-0 .method-name').textContent")
    # click "superb" away: the text loses it and the prediction moves to the API's answer for the new text
    seen = browser.js("window.attnkitExplorer.predictions")
    browser.js("document.querySelector('#panel-0 .tok').click()")
    _settle(browser, "predictions", seen + 1)
    shorter = browser.js("document.getElementById('text').value")
    assert shorter == "brilliant film " + HOSTILE[0]
    after = _predict(server, shorter)
    shown = browser.js("document.querySelector('#panel-0 .probability').textContent")
    assert shown == f"  p = {after['probability']:.3f}"
    changes = browser.js("Array.prototype.map.call(document.querySelectorAll('#panel-0 .change'),"
                         " function(c){return c.textContent;})")
    moved = {k: v - expected["probabilities"][k] for k, v in after["probabilities"].items()}  # type: ignore[index]
    assert changes == [("+" if d >= 0 else "") + f"{d:.3f}" for d in moved.values()]
    # the data view: errors first, the most confident on top; clicking one explains it
    data = httpx.get(server.url + "/v1/data").json()
    errors = sorted((r for r in data["rows"] if r["label"] != r["predicted"]), key=lambda r: -r["probability"])
    assert browser.js("document.querySelectorAll('#rows tbody tr').length") == len(errors) > 0
    assert sum(map(int, browser.js("Array.prototype.map.call(document.querySelectorAll('#confusion td'),"
                                   " function(c){return c.textContent;})"))) == data["n"]
    seen = browser.js("window.attnkitExplorer.explanations")
    browser.js("document.querySelector('#rows tbody tr').click()")
    _settle(browser, "explanations", seen)
    assert browser.js("document.getElementById('text').value") == errors[0]["text"]
    assert browser.js("document.querySelector('#panel-0 .label').textContent") == errors[0]["predicted"]
    # hostile rows of the data set appear as their text
    browser.js("var s=document.getElementById('slice'); s.value='all'; s.dispatchEvent(new Event('change'))")
    cells = browser.js("Array.prototype.map.call(document.querySelectorAll('#rows td.text'),"
                       " function(c){return c.textContent;})")
    assert HOSTILE[:2] == [c for c in cells if c in HOSTILE[:2]]
    assert "abc\\u202Edlrow\\u202C olleh superb" in cells  # bidi overrides shown, never acting
    assert browser.js("document.querySelectorAll('#rows td.text .esc').length") == 2
    assert browser.js("document.querySelectorAll('img, iframe').length") == 0
    assert browser.js("document.scripts.length") == 2  # the page's own scripts only
    browser.screenshot(tmp_path / "explorer.png")
    problems = browser.problems(server.url)
    assert problems == {"exceptions": [], "console": [], "dialogs": [], "requests": []}, problems
    assert browser.js("window.__alerts.length") == 0


def _type_and_run(browser: Browser, text: str) -> None:
    seen = browser.js("window.attnkitExplorer.explanations")
    browser.js(f"document.getElementById('text').value = {json.dumps(text)}")
    browser.js("document.getElementById('go').click()")
    _settle(browser, "explanations", seen)


def _click_token(browser: Browser, index: int) -> None:
    seen = browser.js("window.attnkitExplorer.explanations")
    browser.js(f"document.querySelectorAll('#panel-0 .tok')[{index}].click()")
    _settle(browser, "explanations", seen)


@pytest.mark.parametrize(("text", "index", "shorter"), [
    ("good - but , bad", 3, "good - but bad"),  # the comma, not the dash (both [UNK] to this model)
    ("good - but , bad", 1, "good but , bad"),
    ("superb film superb", 2, "superb film"),  # the repeat clicked, not the first
    ("superb a\u0301 film", 1, "superb film"),  # an [UNK] with its combining accent
])
def test_clicking_a_token_removes_exactly_its_span(server: ServerProcess, browser: Browser, text: str, index: int,
                                                  shorter: str) -> None:
    browser.open(server.url + "/", ready=READY, timeout=30)
    _type_and_run(browser, text)
    _click_token(browser, index)
    assert browser.js("document.getElementById('text').value") == shorter
    assert "changes no token" not in browser.js("document.querySelector('#panel-0 .delta').textContent")


def test_a_removal_the_model_does_not_see_is_said_and_an_empty_text_refused(server: ServerProcess,
                                                                           browser: Browser) -> None:
    browser.open(server.url + "/", ready=READY, timeout=30)
    _type_and_run(browser, " ".join(["superb"] * 300))  # past the 256 tokens the model reads
    _click_token(browser, 0)
    assert browser.js("document.getElementById('text').value") == " ".join(["superb"] * 299)
    delta = browser.js("document.querySelector('#panel-0 .delta').textContent")
    assert delta == "removing \u201csuperb\u201d changes no token the model sees, so the prediction cannot move"
    assert browser.js("document.querySelectorAll('#panel-0 .change').length") == 0
    seen = browser.js("window.attnkitExplorer.predictions")
    for text, said in (("", "empty"), ("  ", "only white space")):
        browser.js(f"document.getElementById('text').value = {json.dumps(text)}")
        browser.js("document.getElementById('go').click()")
        assert browser.js("document.getElementById('status').textContent") == f"text: {said}; give a text to classify"
    assert browser.js("window.attnkitExplorer.predictions") == seen  # refused before any request
