"""The explorer's generation view in headless Chromium against ``attnkit serve`` with a translation run and
a captioning run: type or give an input, see each generated token explained with the method's
faithfulness, make a counterfactual (a word removed, a region blanked); hostile text stays text and no
request leaves the server's origin."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.serve.test_generation import make_runs, png
from tests.support.browser import CHROMIUM, Browser
from tests.support.serve import ServerProcess, serving

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")

READY = ("JSON.stringify({ready: !!(window.attnkitGeneration && window.attnkitGeneration.ready && "
         "window.attnkitExplorer && window.attnkitExplorer.ready)})")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    runs = make_runs(tmp_path_factory.mktemp("serve-generation-browser"))
    yield from serving(str(runs["de-en"]), str(runs["shapes"]))


def _settle(browser: Browser, before: int) -> None:
    browser.wait(f"window.attnkitGeneration.explanations > {before} && window.attnkitGeneration.busy === 0")


def _explain(server: ServerProcess, body: dict[str, object]) -> dict[str, object]:
    return dict(httpx.post(server.url + "/v1/explain", json=body, timeout=60).json())


def test_translate_explain_and_remove_a_word(server: ServerProcess, browser: Browser) -> None:
    browser.open(server.url + "/", ready=READY, timeout=30)
    assert browser.js("document.getElementById('generation-section').hidden") is False
    assert browser.js("document.getElementById('input').hidden") is True  # no classifier is served
    text = "ein hund <script>alert(1)</script> läuft"
    browser.js(f"document.getElementById('gen-text').value = {json.dumps(text)}")
    browser.js("document.getElementById('gen-go').click()")
    _settle(browser, 0)
    expected = _explain(server, {"model": "de-en", "text": text})
    assert browser.js("document.querySelector('#gen-output .gen-out').textContent") == expected["translation"]
    rows = browser.js("document.querySelectorAll('#gen-matrix tr').length")
    cells = browser.js("document.querySelectorAll('#gen-matrix td.score').length")
    assert rows == 1 + len(expected["target_tokens"])  # type: ignore[arg-type]
    assert cells == len(expected["target_tokens"]) * len(expected["source_tokens"])  # type: ignore[arg-type]
    figures = browser.js("document.getElementById('gen-figures').textContent")
    assert "comprehensiveness" in figures and "vs random" in figures and expected["chosen"] in figures
    alternatives = browser.js("Array.from(document.querySelectorAll('#gen-alternatives li'))"
                              ".map(function (li) { return li.textContent; })")
    assert alternatives and len(alternatives) == len(expected["alternatives"])  # type: ignore[arg-type]
    assert alternatives[0].startswith(expected["translation"] + "  (")  # the beam's best is the translation
    # a source token's column removes its word; the new output is shown beside the old
    browser.js("document.querySelectorAll('#gen-matrix th.src')[0].click()")
    _settle(browser, 1)
    assert browser.js("document.getElementById('gen-text').value") == "hund <script>alert(1)</script> läuft"
    assert browser.js("document.getElementById('gen-counterfactual').textContent").startswith("before: ")
    assert browser.js("document.querySelectorAll('script').length") == 2  # the page's own scripts only
    assert browser.js("window.__alerts.length") == 0
    problems = browser.problems(server.url)
    assert problems == {"exceptions": [], "console": [], "dialogs": [], "requests": []}, problems


def test_caption_explain_show_regions_and_blank_one(server: ServerProcess, browser: Browser) -> None:
    browser.open(server.url + "/", ready=READY, timeout=30)
    browser.js("var s=document.getElementById('gen-model'); s.value='shapes'; s.dispatchEvent(new Event('change'))")
    assert browser.js("document.getElementById('gen-image').hidden") is False
    url = "data:image/png;base64," + base64.b64encode(png(40, 40, 5)).decode()
    browser.js(f"window.attnkitGeneration.useImageUrl({json.dumps(url)})")
    _settle(browser, 0)
    shown = browser.js("document.getElementById('gen-canvas').toDataURL('image/png')")
    expected = _explain(server, {"model": "shapes", "image": shown})
    assert browser.js("document.querySelector('#gen-output .gen-out').textContent") == expected["caption"]
    grid = expected["grid"]
    assert browser.js("document.querySelectorAll('#gen-matrix th.src').length") == grid[0] * grid[1]  # type: ignore[index]
    before = browser.js("document.getElementById('gen-canvas').toDataURL('image/png')")
    browser.js("document.querySelectorAll('#gen-matrix tr')[1].click()")  # the first word's regions, tinted
    assert browser.js("document.getElementById('gen-canvas').toDataURL('image/png')") != before
    browser.js("var c=document.getElementById('gen-canvas'), r=c.getBoundingClientRect();"
               "c.dispatchEvent(new MouseEvent('click', {clientX: r.left + 5, clientY: r.top + 5, bubbles: true}))")
    _settle(browser, 1)
    assert browser.js("document.getElementById('gen-counterfactual').textContent").startswith("before: ")
    problems = browser.problems(server.url)
    assert problems == {"exceptions": [], "console": [], "dialogs": [], "requests": []}, problems
