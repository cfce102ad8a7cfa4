// The explorer's generation view: translation runs, captioning runs and Hugging Face language models,
// each generated token explained by the source (tokens or image regions) with the faithfulness of the
// method shown. Talks to its own server's /v1 API only; every model text is put into the page as text.
"use strict";
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var page = window.attnkitPage, el = page.el, clear = page.clear;
  var g = window.attnkitGeneration = { ready: false, busy: 0, explanations: 0, errors: [], last: null };
  var models = [], image = null;  // image: the canvas holding the picture last explained

  function api(path, body) {
    g.busy += 1;
    return fetch(path, { method: body ? "POST" : "GET", headers: { "Content-Type": "application/json" },
                         body: body ? JSON.stringify(body) : undefined })
      .then(function (reply) {
        return reply.json().then(function (json) {
          if (!reply.ok) { throw new Error(json.error || ("HTTP " + reply.status)); }
          return json;
        });
      }).finally(function () { g.busy -= 1; });
  }
  function fail(err) { $("gen-hint").textContent = err.message; g.errors.push(err.message); }
  function chosen() { return models.filter(function (m) { return m.name === $("gen-model").value; })[0]; }
  function isImage(model) { return model.routes.indexOf("caption") >= 0; }
  function colour(score, scale) {
    var a = Math.min(1, Math.abs(score) / (scale || 1));
    return (score >= 0 ? "rgba(26,127,55," : "rgba(179,38,30,") + (0.1 + 0.8 * a).toFixed(3) + ")";
  }
  function outputOf(reply) { return reply.translation || reply.generated || reply.caption || ""; }

  function figures(reply) {
    var f = reply.faithfulness, m = f.methods[reply.method], r = f.random;
    var raw = reply.method === "cross_attention" ? "raw attention, not an attribution; " : "";
    return "explained by " + reply.title + " (" + raw +
      (reply.chosen || "as asked") +
      "): comprehensiveness " + m.comprehensiveness.toFixed(3) + " vs random " + r.comprehensiveness.toFixed(3) +
      ", sufficiency " + m.sufficiency.toFixed(3) + " vs random " + r.sufficiency.toFixed(3) +
      " (log-probability of each generated token; higher comprehensiveness, lower sufficiency: more faithful)";
  }

  // The image with the regions of target token `row` tinted by their scores (none: the picture alone).
  function drawRegions(reply, row) {
    var canvas = $("gen-canvas"), ctx = canvas.getContext("2d");
    ctx.drawImage(image, 0, 0, canvas.width, canvas.height);
    if (row === null) { return; }
    var rows = reply.grid[0], cols = reply.grid[1], scores = reply.scores[row];
    var scale = Math.max.apply(null, scores.map(Math.abs)) || 1;
    scores.forEach(function (s, i) {
      ctx.fillStyle = colour(s, scale);
      ctx.fillRect((i % cols) * canvas.width / cols, Math.floor(i / cols) * canvas.height / rows,
                   canvas.width / cols, canvas.height / rows);
    });
  }

  function matrix(reply, onSource) {
    var table = $("gen-matrix"), head = el("tr");
    clear(table);
    head.appendChild(el("th", null, ""));
    reply.source_tokens.forEach(function (t, j) {
      var th = el("th", "src", t);
      if (onSource) { th.addEventListener("click", function () { onSource(j); }); }
      head.appendChild(th);
    });
    table.appendChild(head);
    var scale = Math.max.apply(null, reply.scores.map(function (r) {
      return Math.max.apply(null, r.map(Math.abs)); })) || 1;
    reply.target_tokens.forEach(function (t, i) {
      var tr = el("tr");
      tr.appendChild(el("th", null, t));
      reply.scores[i].forEach(function (s) {
        var td = el("td", "score");
        td.style.backgroundColor = colour(s, scale);
        td.title = s.toFixed(4);
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () {
        Array.prototype.forEach.call(table.querySelectorAll("tr.chosen"), function (r) { r.className = ""; });
        tr.className = "chosen";
        if (reply.grid) { drawRegions(reply, i); }
      });
      table.appendChild(tr);
    });
  }

  function show(reply, before) {
    g.explanations += 1;
    g.last = reply;
    clear($("gen-output"));
    $("gen-output").appendChild(el("div", "gen-out", outputOf(reply)));
    $("gen-figures").textContent = figures(reply);
    clear($("gen-alternatives"));
    (reply.alternatives || []).forEach(function (a, i) {
      $("gen-alternatives").appendChild(el("li", i === 0 ? "best" : null, a.text + "  (" + a.score.toFixed(3) + ")"));
    });
    $("gen-alternatives-head").hidden = !(reply.alternatives || []).length;
    if (before !== undefined) {
      $("gen-counterfactual").textContent = "before: " + before + "  \u2192  now: " + outputOf(reply);
    }
    if (reply.grid) {
      $("gen-canvas").hidden = false;
      drawRegions(reply, null);
      matrix(reply, null);
    } else {
      matrix(reply, function (j) { removeSource(reply, j); });
    }
  }

  function explainText(text, before) {
    var model = chosen();
    $("gen-hint").textContent = "";
    if (!text.trim()) { fail(new Error("text: empty; give a text to " + (model.kind === "translate" ?
      "translate" : "continue"))); return Promise.resolve(); }
    return api("/v1/explain", { model: model.name, text: text }).then(function (reply) {
      $("gen-text").value = text;
      show(reply, before);
    }, fail);
  }

  // The counterfactual of a text model: the input without the word that holds source token j.
  function removeSource(reply, j) {
    var words = $("gen-text").value.split(/\s+/).filter(Boolean);
    var token = reply.source_tokens[j].replace(/^[\u2581\u0120#]+/, "");
    var at = words.findIndex(function (w) { return token && w.indexOf(token) >= 0; });
    if (at < 0) { fail(new Error("cannot find the word of " + reply.source_tokens[j])); return; }
    words.splice(at, 1);
    explainText(words.join(" "), outputOf(reply));
  }

  function explainImage(before) {
    var model = chosen(), data = $("gen-canvas").toDataURL("image/png");
    return api("/v1/explain", { model: model.name, image: data }).then(function (reply) {
      show(reply, before);
    }, fail);
  }

  // Show `source` (an image or canvas) at the run's size, then explain it.
  function useImage(source) {
    var model = chosen(), canvas = $("gen-canvas");
    canvas.width = canvas.height = Math.max(model.image_size, 192);
    image = document.createElement("canvas");
    image.width = image.height = canvas.width;
    image.getContext("2d").drawImage(source, 0, 0, image.width, image.height);
    canvas.getContext("2d").drawImage(image, 0, 0);
    return explainImage();
  }
  g.useImageUrl = function (url) {  // a data: URL (the tests give one; a chosen file becomes one)
    return new Promise(function (resolve, reject) {
      var picture = new Image();
      picture.onload = function () { resolve(useImage(picture)); };
      picture.onerror = function () { reject(new Error("image: not a PNG or JPEG")); };
      picture.src = url;
    }).catch(fail);
  };

  // Clicking a region blanks it (grey) in the picture and captions the picture again.
  function blankRegion(ev) {
    var reply = g.last, canvas = $("gen-canvas");
    if (!reply || !reply.grid) { return; }
    var rect = canvas.getBoundingClientRect(), rows = reply.grid[0], cols = reply.grid[1];
    var c = Math.floor((ev.clientX - rect.left) / rect.width * cols);
    var r = Math.floor((ev.clientY - rect.top) / rect.height * rows);
    var ctx = image.getContext("2d");
    ctx.fillStyle = "rgb(128,128,128)";
    ctx.fillRect(c * image.width / cols, r * image.height / rows, image.width / cols, image.height / rows);
    canvas.getContext("2d").drawImage(image, 0, 0);
    explainImage(outputOf(reply));
  }

  function pick() {
    var model = chosen(), picture = isImage(model);
    $("gen-text").hidden = picture;
    $("gen-image").hidden = !picture;
    $("gen-canvas").hidden = true;
    $("gen-go").hidden = picture;
    $("gen-hint").textContent = picture ? "Choose an image; click a word's row to see its regions, click a " +
      "region to blank it and caption the picture again." : "Click a source token's column to remove its " +
      "word and see the output change.";
    clear($("gen-matrix"));
    clear($("gen-output"));
    $("gen-figures").textContent = $("gen-counterfactual").textContent = "";
  }

  api("/v1/models").then(function (reply) {
    models = reply.models.filter(function (m) {
      return ["translate", "generate", "caption"].some(function (r) { return m.routes.indexOf(r) >= 0; });
    });
    if (!models.length) { return; }
    $("generation-section").hidden = false;
    models.forEach(function (m) {
      var o = el("option", null, m.name + " (" + m.kind + ")");
      o.value = m.name;
      $("gen-model").appendChild(o);
    });
    $("gen-model").addEventListener("change", pick);
    $("gen-go").addEventListener("click", function () { explainText($("gen-text").value); });
    $("gen-canvas").addEventListener("click", blankRegion);
    $("gen-image").addEventListener("change", function () {
      var file = $("gen-image").files[0];
      if (!file) { return; }
      var reader = new FileReader();
      reader.onload = function () { g.useImageUrl(reader.result); };
      reader.readAsDataURL(file);
    });
    pick();
  }).catch(fail).finally(function () { g.ready = true; });
})();
