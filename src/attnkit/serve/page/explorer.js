// The attnkit explorer: talks to its own server's /v1 API only. Every text from the model or the data
// is put into the page as text (textContent), never as markup.
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var state = { models: [], last: {}, method: {}, tokens: {}, removed: null, data: null, rows: [] };
  window.attnkitExplorer = { ready: false, busy: 0, predictions: 0, explanations: 0, errors: [] };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function clear(node) { while (node.firstChild) { node.removeChild(node.firstChild); } }
  window.attnkitPage = { el: el, clear: clear };
  function fmt(x, digits) { return (typeof x === "number") ? x.toFixed(digits === undefined ? 3 : digits) : "–"; }

  function api(path, body) {
    window.attnkitExplorer.busy += 1;
    var options = body === undefined ? {} : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
    return fetch(path, options).then(function (reply) {
      return reply.json().then(function (json) {
        if (!reply.ok) { throw new Error(json.error || ("HTTP " + reply.status)); }
        return json;
      });
    }).finally(function () { window.attnkitExplorer.busy -= 1; });
  }
  function status(message, isError) {
    var s = $("status");
    s.textContent = message || "";
    s.className = isError ? "error-text" : "";
    if (isError) { window.attnkitExplorer.errors.push(message); }
  }

  // --- prediction, explanation, counterfactual ---------------------------------------------------

  function bars(parent, probabilities, before) {
    Object.keys(probabilities).forEach(function (label) {
      var row = el("div", "bar-row");
      row.appendChild(el("span", "name", label));
      var bar = el("span", "bar");
      bar.style.width = Math.round(200 * probabilities[label]) + "px";
      row.appendChild(bar);
      row.appendChild(el("span", "p", fmt(probabilities[label])));
      if (before && label in before) {
        var d = probabilities[label] - before[label];
        row.appendChild(el("span", "change " + (d >= 0 ? "up" : "down"), (d >= 0 ? "+" : "") + fmt(d)));
      }
      parent.appendChild(row);
    });
  }

  function colour(score, scale) {
    var a = Math.min(1, Math.abs(score) / (scale || 1));
    return score >= 0 ? "rgba(26,127,55," + (0.12 + 0.75 * a).toFixed(3) + ")"
                      : "rgba(179,38,30," + (0.12 + 0.75 * a).toFixed(3) + ")";
  }

  function figuresText(f) {
    if (!f) { return "faithfulness: not scored for this run"; }
    return "faithfulness on the " + f.part + " part (" + f.documents + " documents): comprehensiveness " +
      fmt(f.comprehensiveness) + " vs random " + fmt(f.random && f.random.comprehensiveness) +
      ", sufficiency " + fmt(f.sufficiency) + " vs random " + fmt(f.random && f.random.sufficiency) +
      " (higher comprehensiveness, lower sufficiency: more faithful)";
  }

  // The text without the characters [start, end) of a token's span (code points, as the API counts
  // them); where the cut leaves two spaces side by side (or one at an end), one goes with it.
  function removeSpan(text, span) {
    var chars = Array.from(text);
    chars.splice(span[0], span[1] - span[0]);
    var at = span[0], blank = function (c) { return c !== undefined && /^\s$/u.test(c); };
    if (blank(chars[at]) && (at === 0 || blank(chars[at - 1]))) { chars.splice(at, 1); }
    else if (blank(chars[at - 1]) && at === chars.length) { chars.splice(at - 1, 1); }
    return chars.join("");
  }

  function sameTokens(a, b) {
    return !!a && !!b && a.length === b.length && a.every(function (t, i) { return t === b[i]; });
  }

  // Bidi controls and control characters as visible escapes (\u202E), never acting on the page.
  var INVISIBLE = /[\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/u;
  function visible(node, text) {
    Array.from(text).forEach(function (c) {
      if (INVISIBLE.test(c)) {
        node.appendChild(el("span", "esc", "\\u" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")));
      } else if (node.lastChild && node.lastChild.nodeType === 3) {
        node.lastChild.appendData(c);
      } else {
        node.appendChild(document.createTextNode(c));
      }
    });
    return node;
  }

  function emptyText(text) {
    return text.trim() ? null : "text: " + (text ? "only white space" : "empty") + "; give a text to classify";
  }

  function panel(index, model, text, before) {
    var node = $("panel-" + index), seen = state.tokens[model.name], removed = state.removed;
    node.hidden = false;
    clear(node);
    node.appendChild(el("div", "model-name", "model " + model.name));
    var info = el("div", "prediction");
    node.appendChild(info);
    var expl = el("div", "explanation");
    node.appendChild(expl);
    return api("/v1/predict", { texts: [text], model: model.name }).then(function (reply) {
      var p = reply.predictions[0];
      window.attnkitExplorer.predictions += 1;
      info.appendChild(el("span", "label", p.label));
      info.appendChild(el("span", "probability", "  p = " + fmt(p.probability)));
      var b = el("div", "bars");
      bars(b, p.probabilities, before);
      info.appendChild(b);
      var delta = null;
      if (before) {
        delta = el("div", "delta", "change in each label's probability since the last text (shown beside " +
          "each bar); the label " + (before.__label === p.label ? "stays " + p.label : "moves from " +
          before.__label + " to " + p.label));
        info.appendChild(delta);
      }
      state.last[model.name] = Object.assign({ __label: p.label }, p.probabilities);
      if (model.backend !== "torch") {
        expl.appendChild(el("p", "hint", "explanations need a torch run"));
        return null;
      }
      return explain(expl, model, text).then(function (e) {
        if (delta && removed && sameTokens(seen, e.tokens)) {  // the model reads the same tokens: nothing to compare
          Array.prototype.forEach.call(info.querySelectorAll(".change"), function (c) { c.remove(); });
          delta.className = "delta unchanged";
          delta.textContent = "removing \u201c" + removed + "\u201d changes no token the model sees, so the " +
            "prediction cannot move";
        }
      });
    });
  }

  function explain(node, model, text) {
    var method = state.method[model.name] || model.default_method;
    return api("/v1/explain", { text: text, model: model.name, method: method }).then(function (e) {
      window.attnkitExplorer.explanations += 1;
      state.tokens[model.name] = e.tokens;
      clear(node);
      var head = el("div", "method" + (e.method === "attention" ? " raw" : ""));
      head.appendChild(el("span", "method-name", "explanation: " + e.title +
        (e.method === e.default_method ? " (the run's most faithful method)" : "") +
        (e.method === "attention" ? " (raw attention: not necessarily faithful; see its score)" : "")));
      var pick = el("select", "method-switch");
      model.methods.forEach(function (m) {
        var o = el("option", null, m.title + (m.faithfulness ? "  (comp. " + fmt(m.faithfulness.comprehensiveness, 2) +
          ")" : ""));
        o.value = m.method;
        if (m.method === e.method) { o.selected = true; }
        pick.appendChild(o);
      });
      pick.addEventListener("change", function () {
        state.method[model.name] = pick.value;
        explain(node, model, text);
      });
      head.appendChild(document.createTextNode(" "));
      head.appendChild(pick);
      node.appendChild(head);
      node.appendChild(el("div", "figures", figuresText(e.faithfulness)));
      var scale = Math.max.apply(null, e.scores.map(Math.abs).concat([1e-9]));
      var tokens = el("div", "tokens");
      e.tokens.forEach(function (t, i) {
        var span = el("span", "tok", t);
        span.style.backgroundColor = colour(e.scores[i], scale);
        span.title = t + ": " + e.scores[i].toFixed(4) + " (click to remove it)";
        span.dataset.score = String(e.scores[i]);
        span.addEventListener("click", function () {
          var shorter = e.spans && e.spans[i] ? removeSpan(e.text, e.spans[i]) : e.text;
          if (shorter === e.text) {
            status("\u201c" + t + "\u201d stands for no character of the text: removing it changes nothing", true);
            return;
          }
          $("text").value = shorter;
          run(true, t);
        });
        tokens.appendChild(span);
        tokens.appendChild(document.createTextNode(" "));
      });
      node.appendChild(tokens);
      if (typeof e.bias === "number") {
        node.appendChild(el("div", "figures", "bias " + fmt(e.bias) + " + the scores = logit " + fmt(e.logit)));
      }
      return e;
    });
  }

  // --- attention --------------------------------------------------------------------------------

  function heatmap(weights, cell) {
    var rows = weights.length, cols = weights[0].length;
    var c = document.createElement("canvas");
    c.width = cols * cell; c.height = rows * cell;
    var g = c.getContext("2d");
    for (var i = 0; i < rows; i++) {
      for (var j = 0; j < cols; j++) {
        var v = Math.max(0, Math.min(1, weights[i][j]));
        g.fillStyle = "rgb(" + Math.round(255 - 220 * v) + "," + Math.round(255 - 180 * v) + "," + Math.round(255 - 90 * v) + ")";
        g.fillRect(j * cell, i * cell, cell, cell);
      }
    }
    return c;
  }

  function attention(model, text) {
    if (model.backend !== "torch") { $("attention-section").hidden = true; return null; }
    return api("/v1/attention", { text: text, model: model.name }).then(function (a) {
      $("attention-section").hidden = false;
      var grid = $("attention-grid"), big = $("attention-big");
      clear(grid); clear(big);
      var n = a.tokens.length, cell = Math.max(2, Math.min(12, Math.floor(120 / Math.max(1, n))));
      a.maps.forEach(function (m, layer) {
        m.weights.forEach(function (head, h) {
          var box = el("div", "head");
          box.dataset.layer = String(layer); box.dataset.head = String(h);
          box.appendChild(heatmap(head, cell));
          box.appendChild(el("div", null, m.name + " · head " + h + " (" + m.role + ")"));
          box.addEventListener("click", function () {
            clear(big);
            big.appendChild(el("div", null, m.name + ", head " + h + ": rows are queries, columns keys"));
            big.appendChild(heatmap(head, Math.max(8, Math.min(24, Math.floor(480 / n)))));
            big.appendChild(el("div", "keys", "tokens: " + a.tokens.join(" · ")));
          });
          grid.appendChild(box);
        });
      });
    });
  }

  // --- the data set -----------------------------------------------------------------------------

  function showData(data) {
    state.data = data;
    $("data-section").hidden = false;
    var m = data.metrics, metrics = $("metrics");
    clear(metrics);
    metrics.appendChild(el("p", null, data.n + " labelled texts: accuracy " + fmt(m.accuracy) + ", macro-F1 " +
      fmt(m.macro_f1) + ", weighted-F1 " + fmt(m.weighted_f1)));
    var table = $("confusion");
    clear(table);
    var top = el("tr");
    top.appendChild(el("th", null, "true \\ predicted"));
    data.labels.forEach(function (l) { top.appendChild(el("th", null, l)); });
    table.appendChild(top);
    m.confusion_matrix.forEach(function (row, i) {
      var tr = el("tr");
      tr.appendChild(el("th", null, data.labels[i]));
      row.forEach(function (count, j) {
        var td = el("td", "cell", count);
        td.addEventListener("click", function () { setSlice("cell:" + i + ":" + j); });
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    var words = data.rows.map(function (r) { return r.words; }).sort(function (x, y) { return x - y; });
    var cut1 = words[Math.floor(words.length / 3)], cut2 = words[Math.floor(2 * words.length / 3)];
    state.cuts = [cut1, cut2];
    var slice = $("slice");
    clear(slice);
    var add = function (value, text) { var o = el("option", null, text); o.value = value; slice.appendChild(o); };
    add("errors", "errors only, most confident first");
    add("all", "all texts");
    data.labels.forEach(function (l) { add("true:" + l, "true label: " + l); });
    data.labels.forEach(function (l) { add("pred:" + l, "predicted label: " + l); });
    add("len:0", "short (under " + cut1 + " words)");
    add("len:1", "medium (" + cut1 + " to " + (cut2 - 1) + " words)");
    add("len:2", "long (" + cut2 + " words or more)");
    slice.onchange = function () { rows(); };
    rows();
  }

  function setSlice(value) {
    var slice = $("slice");
    if (!Array.prototype.some.call(slice.options, function (o) { return o.value === value; })) {
      var o = el("option", null, "cell " + value.slice(5)); o.value = value; slice.appendChild(o);
    }
    slice.value = value;
    rows();
  }

  function rows() {
    var data = state.data, choice = $("slice").value, cuts = state.cuts, labels = data.labels;
    var keep = data.rows.filter(function (r) {
      if (choice === "errors") { return r.label !== r.predicted; }
      if (choice.indexOf("true:") === 0) { return r.label === choice.slice(5); }
      if (choice.indexOf("pred:") === 0) { return r.predicted === choice.slice(5); }
      if (choice.indexOf("len:") === 0) {
        var band = r.words < cuts[0] ? 0 : (r.words < cuts[1] ? 1 : 2);
        return String(band) === choice.slice(4);
      }
      if (choice.indexOf("cell:") === 0) {
        var ij = choice.slice(5).split(":");
        return r.label === labels[+ij[0]] && r.predicted === labels[+ij[1]];
      }
      return true;
    });
    if (choice === "errors") { keep.sort(function (a, b) { return b.probability - a.probability; }); }
    var body = $("rows").tBodies[0];
    clear(body);
    $("slice-count").textContent = keep.length + " texts";
    keep.slice(0, 500).forEach(function (r) {
      var tr = el("tr", r.label !== r.predicted ? "error" : "");
      tr.dataset.i = String(r.i);
      tr.appendChild(el("td", null, r.i));
      tr.appendChild(visible(el("td", "text"), r.text));
      tr.appendChild(el("td", null, r.label));
      tr.appendChild(el("td", "pred", r.predicted));
      tr.appendChild(el("td", null, fmt(r.probability)));
      tr.addEventListener("click", function () {
        $("text").value = r.text;
        run(false);
        window.scrollTo(0, 0);
      });
      body.appendChild(tr);
    });
  }

  // --- putting it together ----------------------------------------------------------------------

  function chosen(id) {
    var name = $(id).value;
    return state.models.filter(function (m) { return m.name === name; })[0];
  }

  function run(counterfactual, removed) {
    var text = $("text").value;
    var first = chosen("model"), second = chosen("compare");
    if (!first) { return Promise.resolve(); }
    var refused = emptyText(text);
    if (refused) { status(refused, true); return Promise.resolve(); }
    state.removed = counterfactual ? removed || null : null;
    status("working…");
    var jobs = [panel(0, first, text, counterfactual ? state.last[first.name] : null), attention(first, text)];
    if (second) { jobs.push(panel(1, second, text, counterfactual ? state.last[second.name] : null)); }
    else { $("panel-1").hidden = true; }
    return Promise.all(jobs).then(function () { status(""); }, function (err) { status(err.message, true); });
  }

  function start() {
    api("/v1/models").then(function (reply) {
      // the classification views: the models that classify (generation.js has the others)
      state.models = reply.models.filter(function (m) { return m.routes.indexOf("predict") >= 0; });
      $("input").hidden = $("results").hidden = !state.models.length;
      state.models.forEach(function (m, i) {
        var a = el("option", null, m.name + " (" + m.model + ")"); a.value = m.name;
        $("model").appendChild(a);
        var b = el("option", null, m.name); b.value = m.name;
        $("compare").appendChild(b);
        if (i === 1) { b.selected = true; }
      });
      $("go").addEventListener("click", function () { run(false); });
      $("model").addEventListener("change", function () { loadData(); run(false); });
      $("compare").addEventListener("change", function () { run(false); });
      $("text").addEventListener("keydown", function (ev) {
        if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { run(false); }
      });
      return loadData();
    }).then(function () { window.attnkitExplorer.ready = true; },
            function (err) { status(err.message, true); window.attnkitExplorer.ready = true; });
  }

  function loadData() {
    var model = chosen("model");
    if (!model || !model.data) { $("data-section").hidden = true; return Promise.resolve(); }
    return api("/v1/data?model=" + encodeURIComponent(model.name)).then(showData);
  }

  window.attnkitExplorer.run = run;
  document.addEventListener("DOMContentLoaded", start);
})();
