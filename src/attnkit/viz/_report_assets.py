"""The page, style sheet and script of the HTML attention report.

Written for this project, no third-party code: the script is plain ES5-style
JavaScript that draws the head view in SVG and the thumbnails on canvases.
Text from the data reaches the page through ``textContent`` and attribute
setters only, never as markup. ``@NAME@`` markers are filled in by
:func:`attnkit.viz.report.render_html` in a single pass.
"""

from __future__ import annotations

__all__ = ["PAGE", "CSS", "JS"]

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="attnkit">
<meta http-equiv="Content-Security-Policy" content="@CSP@">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
</head>
<body>
<header><h1 id="title"></h1><p id="subtitle"></p></header>
<nav id="controls">
<label>Example <select id="example"></select></label>
<label>Layer <select id="layer"></select></label>
<label>Head <select id="head"></select></label>
<span id="prediction"></span>
</nav>
<main>
<section id="head-view">
<h2>Head view</h2>
<p class="hint">Queries on the left attend to keys on the right; line opacity grows with the
weight (&radic;weight). Hover a token to highlight its edges, click it to pin.</p>
<p id="info" aria-live="polite"></p>
<div id="svg-wrap"></div>
</section>
<section id="model-view">
<h2>Model view</h2>
<p class="hint">Layers &times; heads, each heatmap scaled to its own maximum
(queries down, keys across). Click one to open it in the head view.</p>
<div id="grid"></div>
</section>
</main>
<pre id="attnkit-selfcheck" hidden></pre>
<script type="application/json" id="attnkit-data">@DATA@</script>
<script>@JS@</script>
</body>
</html>
"""

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:12px 20px 4px;background:#fff;border-bottom:1px solid #e3e3e3}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:0 0 4px}
#subtitle,.hint{color:#555;margin:0 0 6px;font-size:12.5px}
#controls{position:sticky;top:0;z-index:2;display:flex;gap:16px;align-items:center;flex-wrap:wrap;
 padding:8px 20px;background:#fff;border-bottom:1px solid #e3e3e3}
#controls select{font:inherit;padding:2px 4px;max-width:360px}
#prediction{font-weight:600;color:#0b5394;white-space:pre}
main{display:flex;gap:24px;padding:12px 20px;align-items:flex-start;flex-wrap:wrap}
section{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:10px 14px}
#head-view{flex:0 0 auto;max-width:660px} #model-view{flex:1 1 380px;max-width:900px;position:sticky;top:52px}
#info{min-height:2.8em;max-width:600px;font-size:12.5px;margin:0 0 6px;color:#333;overflow-wrap:anywhere}
#svg-wrap svg{display:block}
text.tok{font-size:12px;cursor:pointer;fill:#222;white-space:pre}
text.tok.on{font-weight:700;fill:#c0392b}
text.tok.hot{fill:#0b5394;font-weight:600}
g.edges path{fill:none;stroke:#d35400;stroke-width:1.5}
g.edges.dim{opacity:.12}
g.focus line{stroke:#c0392b}
#grid{display:grid;gap:3px;align-items:center;justify-content:start}
#grid .lab{font-size:11px;color:#555;text-align:center;white-space:nowrap}
#grid canvas{width:100%;max-width:56px;aspect-ratio:1;image-rendering:pixelated;cursor:pointer;
 border:2px solid transparent;box-sizing:border-box;background:#eee}
#grid canvas.sel{border-color:#c0392b}
#grid canvas:hover{border-color:#e67e22}
"""

JS = r"""
"use strict";
(function () {
  var t0 = performance.now();
  var check = {ready: false, errors: [], lines: 0, tokens: 0, thumbnails: 0, renderMs: null,
               sinceNavigationMs: null, switchMs: null};
  window.attnkitSelfCheck = check;
  function publish() {
    var el = document.getElementById("attnkit-selfcheck");
    if (el) { el.textContent = JSON.stringify(check); }
  }
  window.addEventListener("error", function (e) { check.errors.push(String(e.message)); publish(); });

  var NS = "http://www.w3.org/2000/svg";
  function $(id) { return document.getElementById(id); }
  function svgEl(name, attrs) {
    var el = document.createElementNS(NS, name);
    for (var a in attrs) {
      if (Object.prototype.hasOwnProperty.call(attrs, a)) { el.setAttribute(a, String(attrs[a])); }
    }
    return el;
  }
  function bytes(b64) {
    var s = atob(b64), out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) { out[i] = s.charCodeAt(i); }
    return out;
  }
  function uint16(b64) {  // little-endian uint16, as written by the report
    var b = bytes(b64), out = new Uint16Array(b.length / 2);
    for (var i = 0; i < out.length; i++) { out[i] = b[2 * i] | (b[2 * i + 1] << 8); }
    return out;
  }
  function option(sel, value, text) {
    var o = document.createElement("option");
    o.value = String(value); o.textContent = text; sel.appendChild(o);
  }

  var data = JSON.parse($("attnkit-data").textContent);
  var state = {ex: 0, layer: 0, head: 0, pinned: null};
  var decoded = {};
  var view = null;  // geometry and elements of the drawn head view

  function example() {
    var E = data.examples[state.ex];
    if (!decoded[state.ex]) {
      decoded[state.ex] = {idx: uint16(E.idx), val: bytes(E.val), thumb: bytes(E.thumb)};
    }
    return E;
  }

  // viridis, sampled at 6 stops and interpolated
  var STOPS = [[68, 1, 84], [65, 68, 135], [42, 120, 142], [34, 168, 132], [122, 209, 81], [253, 231, 37]];
  function colour(v) {
    var x = v / 255 * (STOPS.length - 1), i = Math.min(Math.floor(x), STOPS.length - 2), f = x - i;
    var a = STOPS[i], b = STOPS[i + 1];
    return [a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1]), a[2] + f * (b[2] - a[2])];
  }

  function edgesOf(E, D, q) {  // [[key, weight 0..255], ...] of query q in the current head
    var base = ((state.layer * E.H + state.head) * E.Tq + q) * E.k, out = [];
    for (var j = 0; j < E.k; j++) {
      var v = D.val[base + j];
      if (v > 0) { out.push([D.idx[base + j], v]); }
    }
    return out;
  }

  function drawHead() {
    var E = example(), D = decoded[state.ex];
    var n = Math.max(E.Tq, E.Tk), row = n > 120 ? 14 : 20, pad = 12;
    var xl = 210, xr = 430, width = 640, height = 2 * pad + n * row;
    var yq = function (i) { return pad + (i + 0.5) * row + (n - E.Tq) * row / 2; };
    var yk = function (i) { return pad + (i + 0.5) * row + (n - E.Tk) * row / 2; };
    var svg = svgEl("svg", {width: width, height: height, viewBox: "0 0 " + width + " " + height,
                            role: "img", "aria-label": "attention edges from queries to keys"});
    var buckets = [], nb = 24, lines = 0, i, j;
    for (i = 0; i < nb; i++) { buckets.push([]); }
    for (i = 0; i < E.Tq; i++) {
      var es = edgesOf(E, D, i);
      for (j = 0; j < es.length; j++) {
        var op = Math.sqrt(es[j][1] / 255), b = Math.min(nb - 1, Math.floor(op * nb));
        buckets[b].push("M" + (xl + 4) + " " + yq(i).toFixed(1) + "L" + (xr - 4) + " " + yk(es[j][0]).toFixed(1));
        lines++;
      }
    }
    var edges = svgEl("g", {"class": "edges"});
    for (b = 0; b < nb; b++) {
      if (buckets[b].length) {
        edges.appendChild(svgEl("path", {d: buckets[b].join(""), "stroke-opacity": ((b + 1) / nb).toFixed(3)}));
      }
    }
    svg.appendChild(edges);
    var focus = svgEl("g", {"class": "focus"});
    svg.appendChild(focus);
    var qs = [], ks = [];
    function label(side, k, tok, x, y, anchor) {
      var t = svgEl("text", {x: x, y: y, "text-anchor": anchor, "dominant-baseline": "middle", "class": "tok"});
      t.textContent = tok; t.setAttribute("data-side", side); t.setAttribute("data-i", String(k));
      var tip = svgEl("title", {}); tip.textContent = (side === "q" ? "query " : "key ") + k + ": " + tok;
      t.appendChild(tip); svg.appendChild(t); return t;
    }
    for (i = 0; i < E.Tq; i++) { qs.push(label("q", i, E.queries[i], xl - 6, yq(i), "end")); }
    for (i = 0; i < E.Tk; i++) { ks.push(label("k", i, E.keys[i], xr + 6, yk(i), "start")); }
    svg.addEventListener("mouseover", function (ev) {
      var t = ev.target.closest ? ev.target.closest("text.tok") : null;
      if (t && !state.pinned) { highlight(t.getAttribute("data-side"), +t.getAttribute("data-i")); }
    });
    svg.addEventListener("mouseleave", function () { if (!state.pinned) { highlight(null, 0); } });
    svg.addEventListener("click", function (ev) {
      var t = ev.target.closest ? ev.target.closest("text.tok") : null;
      if (!t) { state.pinned = null; highlight(null, 0); return; }
      var side = t.getAttribute("data-side"), k = +t.getAttribute("data-i");
      if (state.pinned && state.pinned[0] === side && state.pinned[1] === k) {
        state.pinned = null; highlight(null, 0);
      } else { state.pinned = [side, k]; highlight(side, k); }
    });
    var wrap = $("svg-wrap");
    wrap.textContent = "";
    wrap.appendChild(svg);
    view = {svg: svg, edges: edges, focus: focus, qs: qs, ks: ks, xl: xl, xr: xr, yq: yq, yk: yk};
    check.lines = lines; check.tokens = qs.length + ks.length;
    var cov = E.coverage[state.layer][state.head];
    $("subtitle").textContent = E.Tq + " query × " + E.Tk + " key tokens, " + E.L + " layers × " + E.H +
      " heads. Shown: layer " + state.layer + ", head " + state.head + " — top " + E.k +
      " edges per query (" + (100 * cov).toFixed(1) + "% of the attention mass), entropy " +
      E.entropy[state.layer][state.head].toFixed(2) + " nats.";
    if (state.pinned) { highlight(state.pinned[0], state.pinned[1]); } else { highlight(null, 0); }
  }

  function highlight(side, k) {
    var E = example(), D = decoded[state.ex], V = view, i, j;
    V.focus.textContent = "";
    for (i = 0; i < V.qs.length; i++) { V.qs[i].setAttribute("class", "tok"); }
    for (i = 0; i < V.ks.length; i++) { V.ks[i].setAttribute("class", "tok"); }
    if (side === null) {
      V.edges.setAttribute("class", "edges");
      $("info").textContent = "Hover a token to see where it attends (query, left) or who attends to it (key, right).";
      return;
    }
    V.edges.setAttribute("class", "edges dim");
    var pairs = [];  // [query, key, weight]
    if (side === "q") {
      var es = edgesOf(E, D, k);
      for (j = 0; j < es.length; j++) { pairs.push([k, es[j][0], es[j][1]]); }
    } else {
      for (i = 0; i < E.Tq; i++) {
        var ei = edgesOf(E, D, i);
        for (j = 0; j < ei.length; j++) { if (ei[j][0] === k) { pairs.push([i, k, ei[j][1]]); } }
      }
      pairs.sort(function (a, b) { return b[2] - a[2]; });
    }
    for (j = 0; j < pairs.length; j++) {
      var w = pairs[j][2] / 255;
      V.focus.appendChild(svgEl("line", {x1: V.xl + 4, y1: V.yq(pairs[j][0]), x2: V.xr - 4, y2: V.yk(pairs[j][1]),
        "stroke-opacity": (0.25 + 0.75 * Math.sqrt(w)).toFixed(3), "stroke-width": (1 + 5 * w).toFixed(2)}));
      (side === "q" ? V.ks[pairs[j][1]] : V.qs[pairs[j][0]]).setAttribute("class", "tok hot");
    }
    (side === "q" ? V.qs : V.ks)[k].setAttribute("class", "tok on");
    var names = side === "q" ? E.queries : E.keys, parts = [];
    for (j = 0; j < Math.min(pairs.length, 8); j++) {
      var other = side === "q" ? E.keys[pairs[j][1]] : E.queries[pairs[j][0]];
      parts.push("“" + other + "” " + (pairs[j][2] / 255).toFixed(2));
    }
    $("info").textContent = (side === "q" ? "Query “" + names[k] + "” attends to: " :
      "Key “" + names[k] + "” is attended by: ") + (parts.length ? parts.join(" · ") : "(nothing in the kept edges)") +
      (pairs.length > 8 ? " …" : "") + (state.pinned ? "   [pinned — click again to release]" : "");
  }

  function drawGrid() {
    var E = example(), D = decoded[state.ex], grid = $("grid"), drawn = 0;
    grid.textContent = "";
    grid.style.gridTemplateColumns = "max-content repeat(" + E.H + ", minmax(18px, 56px))";
    grid.appendChild(document.createElement("span"));
    for (var h = 0; h < E.H; h++) {
      var lab = document.createElement("span"); lab.className = "lab"; lab.textContent = "h" + h; grid.appendChild(lab);
    }
    var cells = E.sq * E.sk;
    for (var l = 0; l < E.L; l++) {
      var rl = document.createElement("span"); rl.className = "lab"; rl.textContent = "layer " + l;
      grid.appendChild(rl);
      for (h = 0; h < E.H; h++) {
        var c = document.createElement("canvas");
        c.width = E.sk; c.height = E.sq;
        var ctx = c.getContext("2d"), img = ctx.createImageData(E.sk, E.sq), off = (l * E.H + h) * cells;
        for (var p = 0; p < cells; p++) {
          var rgb = colour(D.thumb[off + p]);
          img.data[4 * p] = rgb[0]; img.data[4 * p + 1] = rgb[1];
          img.data[4 * p + 2] = rgb[2]; img.data[4 * p + 3] = 255;
        }
        ctx.putImageData(img, 0, 0);
        c.title = "layer " + l + ", head " + h + ": entropy " + E.entropy[l][h].toFixed(2) + " nats; top-" + E.k +
          " edges keep " + (100 * E.coverage[l][h]).toFixed(1) + "% of the mass";
        c.setAttribute("data-layer", String(l)); c.setAttribute("data-head", String(h));
        if (l === state.layer && h === state.head) { c.className = "sel"; }
        grid.appendChild(c); drawn++;
      }
    }
    check.thumbnails = drawn;
  }

  function selectHead(l, h) {
    var t = performance.now();
    state.layer = l; state.head = h; state.pinned = null;
    $("layer").value = String(l); $("head").value = String(h);
    var cs = $("grid").getElementsByTagName("canvas");
    for (var i = 0; i < cs.length; i++) {
      var on = +cs[i].getAttribute("data-layer") === l && +cs[i].getAttribute("data-head") === h;
      cs[i].className = on ? "sel" : "";
    }
    drawHead();
    check.switchMs = Math.round(performance.now() - t); publish();
  }

  function fillSelectors() {
    var E = example(), ls = $("layer"), hs = $("head"), i;
    ls.textContent = ""; hs.textContent = "";
    for (i = 0; i < E.L; i++) { option(ls, i, String(i)); }
    for (i = 0; i < E.H; i++) { option(hs, i, String(i)); }
    ls.value = String(state.layer); hs.value = String(state.head);
    $("prediction").textContent = E.prediction === null ? "" : "prediction: " + E.prediction;
  }

  function selectExample(b) {
    var t = performance.now();
    state.ex = b; state.pinned = null;
    var E = example();
    state.layer = Math.min(state.layer, E.L - 1); state.head = Math.min(state.head, E.H - 1);
    fillSelectors(); drawGrid(); drawHead();
    check.switchMs = Math.round(performance.now() - t); publish();
  }

  document.title = data.title;
  $("title").textContent = data.title;
  var exs = $("example");
  for (var b = 0; b < data.examples.length; b++) {
    var E0 = data.examples[b], head = E0.queries.slice(0, 8).join(" ");
    option(exs, b, E0.name + ": " + head + (E0.queries.length > 8 ? " …" : "") +
      (E0.prediction === null ? "" : "  [" + E0.prediction + "]"));
  }
  exs.disabled = data.examples.length < 2;
  exs.addEventListener("change", function () { selectExample(+exs.value); });
  $("layer").addEventListener("change", function () { selectHead(+$("layer").value, state.head); });
  $("head").addEventListener("change", function () { selectHead(state.layer, +$("head").value); });
  $("grid").addEventListener("click", function (ev) {
    var c = ev.target;
    if (c && c.tagName === "CANVAS") {
      selectHead(+c.getAttribute("data-layer"), +c.getAttribute("data-head"));
      $("head-view").scrollIntoView({block: "start"});
    }
  });
  selectExample(0);
  check.renderMs = Math.round(performance.now() - t0);
  check.sinceNavigationMs = Math.round(performance.now());
  check.ready = true;
  publish();
})();
"""
