"""The neuron view's section, style and script, appended to the report page.

Written for this project, no third-party code. Like the rest of the report, the
script writes text with ``textContent`` and attribute setters only; the data
comes from the page's JSON block (``data.neuron``, from
:func:`attnkit.viz.neuron.neuron_data`). It does nothing when the page has no
neuron data.
"""

from __future__ import annotations

__all__ = ["NEURON_SECTION", "NEURON_CSS", "NEURON_JS"]

NEURON_SECTION = """<section id="neuron-view">
<h2>Neuron view</h2>
<p class="hint">One head, one query: the query vector q, each key vector k, their elementwise
product q&times;k (its sum is the logit), the score q&middot;k/&radic;Dh and the attention weight.
Blue is positive, orange negative; hover a cell for its value.</p>
<p class="nctl"><label>Layer <select id="n-layer"></select></label>
<label>Head <select id="n-head"></select></label>
<label>Query <select id="n-query"></select></label></p>
<p id="neuron-info" aria-live="polite"></p>
<div id="neuron-table"></div>
</section>
"""

NEURON_CSS = """
#neuron-view{flex:1 1 100%;overflow-x:auto}
#neuron-view .nctl label{margin-right:14px}
#neuron-info{min-height:1.4em;font-size:12.5px;color:#333;overflow-wrap:anywhere}
#neuron-table{display:grid;gap:2px 10px;align-items:center;font-size:12px}
#neuron-table .tokl{white-space:pre;text-align:right;max-width:180px;overflow:hidden;text-overflow:ellipsis}
#neuron-table .vec{display:flex;gap:1px}
#neuron-table .nc{display:inline-block;width:7px;height:14px}
#neuron-table .bar{height:12px;background:#0b5394}
#neuron-table .num{font-variant-numeric:tabular-nums;text-align:right}
#neuron-table .hd{font-weight:600;color:#555}
"""

NEURON_JS = r"""
(function () {
  var data = JSON.parse(document.getElementById("attnkit-data").textContent), N = data.neuron;
  var check = window.attnkitSelfCheck || {};
  if (!N) { return; }
  function $(id) { return document.getElementById(id); }
  function f32(b64) {
    var s = atob(b64), buf = new ArrayBuffer(s.length), u = new Uint8Array(buf);
    for (var i = 0; i < s.length; i++) { u[i] = s.charCodeAt(i); }
    return new Float32Array(buf);
  }
  var Q = f32(N.q), K = f32(N.k), W = f32(N.w), st = {layer: 0, head: 0, query: 0};
  function option(sel, value, text) {
    var o = document.createElement("option"); o.value = String(value); o.textContent = text; sel.appendChild(o);
  }
  var i;
  for (i = 0; i < N.L; i++) { option($("n-layer"), i, N.layers[i]); }
  for (i = 0; i < N.H; i++) { option($("n-head"), i, String(i)); }
  for (i = 0; i < N.Tq; i++) { option($("n-query"), i, i + ": " + N.queries[i]); }
  function vec(arr, T, t) { var o = ((st.layer * N.H + st.head) * T + t) * N.Dh; return arr.subarray(o, o + N.Dh); }
  function shade(v, top) {
    var a = top > 0 ? Math.min(1, Math.abs(v) / top) : 0;
    return v >= 0 ? "rgba(11,83,148," + a.toFixed(3) + ")" : "rgba(211,84,0," + a.toFixed(3) + ")";
  }
  function span(cls, text) {
    var s = document.createElement("span"); s.className = cls; s.textContent = text; return s;
  }
  function cells(values, top, kind, key) {
    var row = span("vec", ""), n = 0;
    for (var d = 0; d < values.length; d++) {
      var c = span("nc", "");
      c.style.background = shade(values[d], top);
      c.title = kind + " dim " + d + ": " + values[d].toFixed(4);
      c.setAttribute("data-kind", kind); c.setAttribute("data-dim", String(d)); c.setAttribute("data-key", String(key));
      row.appendChild(c); n++;
    }
    check.neuronCells = (check.neuronCells || 0) + n;
    return row;
  }
  function maxAbs(arrs) {
    var m = 0;
    for (var a = 0; a < arrs.length; a++) {
      for (var d = 0; d < arrs[a].length; d++) { m = Math.max(m, Math.abs(arrs[a][d])); }
    }
    return m;
  }
  function draw() {
    var t = $("neuron-table"), q = vec(Q, N.Tq, st.query), j, d, ks = [], prods = [];
    t.textContent = ""; check.neuronCells = 0;
    t.style.gridTemplateColumns = "max-content max-content max-content max-content 60px";
    for (j = 0; j < N.Tk; j++) {
      var k = vec(K, N.Tk, j), p = new Float32Array(N.Dh);
      for (d = 0; d < N.Dh; d++) { p[d] = q[d] * k[d]; }
      ks.push(k); prods.push(p);
    }
    var topV = maxAbs([q].concat(ks)), topP = maxAbs(prods);
    ["", "q / key k", "q \u00d7 k", "q\u00b7k/\u221aDh", "weight"].forEach(function (h) {
      t.appendChild(span("hd", h));
    });
    t.appendChild(span("tokl hd", "query \u201c" + N.queries[st.query] + "\u201d"));
    t.appendChild(cells(q, topV, "q", -1));
    t.appendChild(span("", "")); t.appendChild(span("", "")); t.appendChild(span("", ""));
    var wbase = ((st.layer * N.H + st.head) * N.Tq + st.query) * N.Tk;
    for (j = 0; j < N.Tk; j++) {
      var dot = 0;
      for (d = 0; d < N.Dh; d++) { dot += prods[j][d]; }
      var lab = span("tokl", N.keys[j]); lab.title = "key " + j + ": " + N.keys[j]; t.appendChild(lab);
      t.appendChild(cells(ks[j], topV, "k", j));
      t.appendChild(cells(prods[j], topP, "q\u00d7k", j));
      t.appendChild(span("num", (dot / Math.sqrt(N.Dh)).toFixed(3)));
      var wv = W[wbase + j], cell = span("", ""), bar = span("bar", "");
      bar.style.width = (100 * wv).toFixed(1) + "%"; bar.style.display = "block";
      cell.title = "weight " + wv.toFixed(4);
      cell.setAttribute("data-kind", "weight"); cell.setAttribute("data-key", String(j));
      cell.appendChild(bar); t.appendChild(cell);
    }
    check.neuronRows = N.Tk; check.neuronDrawn = true;
    $("neuron-info").textContent = "Layer " + N.layers[st.layer] + ", head " + st.head + ", query \u201c" +
      N.queries[st.query] + "\u201d. Hover a cell.";
  }
  $("neuron-table").addEventListener("mouseover", function (ev) {
    var c = ev.target, kind = c.getAttribute && c.getAttribute("data-kind");
    if (!kind) { return; }
    var key = +c.getAttribute("data-key"), d = c.getAttribute("data-dim");
    var who = key < 0 ? "query \u201c" + N.queries[st.query] + "\u201d" : "key \u201c" + N.keys[key] + "\u201d";
    $("neuron-info").textContent = who + ", " + c.title;
    check.neuronHover = kind + (d === null ? "" : ":" + d);
  });
  function pick() {
    st.layer = +$("n-layer").value; st.head = +$("n-head").value; st.query = +$("n-query").value; draw();
  }
  ["n-layer", "n-head", "n-query"].forEach(function (id) { $(id).addEventListener("change", pick); });
  draw();
  var el = $("attnkit-selfcheck"); if (el) { el.textContent = JSON.stringify(check); }
})();
"""
