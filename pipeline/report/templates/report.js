// Lineage explorer: show the picked SFT pair. Text goes in through textContent only, so data
// from traces and LLM answers can never become markup. No external script, no network.
(function () {
  var data = document.getElementById("lineage-data");
  var select = document.getElementById("pair-select");
  var view = document.getElementById("pair-view");
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function row(dl, label, value) {
    dl.appendChild(el("dt", label));
    var dd = el("dd");
    if (value instanceof Node) dd.appendChild(value); else dd.textContent = value === null ? "" : String(value);
    dl.appendChild(dd);
  }
  function list(items, fmt, targetIndex) {
    var ol = el("ol");
    ol.start = 0;
    items.forEach(function (it, i) {
      var li = el("li", fmt(it));
      if (i === targetIndex) li.className = "target";
      ol.appendChild(li);
    });
    return items.length ? ol : el("span", "(none)");
  }
  function show(e) {
    view.textContent = "";
    var dl = el("dl");
    row(dl, "pair", e.pair_id + (e.split ? "  (" + e.split + ")" : "") + (e.flags.length ? "  flags: " + e.flags.join(", ") : ""));
    row(dl, "source", (e.source || "?") + (e.source_line ? " line " + e.source_line : ""));
    row(dl, "trajectory", e.trajectory_id + "  " + e.outcome + "  task: " + e.task);
    row(dl, "target step", e.step_id + " (index " + e.step_index + ")");
    row(dl, "steps", list(e.steps, function (s) {
      return (s.action ? "> " + s.action + "  ->  " : "[reset]  ") + s.observation + (s.line ? "  (line " + s.line + ")" : "");
    }, e.step_index));
    row(dl, "memories", list(e.memories, function (m) { return m.memory_id + ": " + m.text; }));
    row(dl, "skills", list(e.skills, function (s) {
      return "[" + (s.kind || "?") + (s.category ? "/" + s.category : "") + "] " + s.title + (s.text ? " - " + s.text : "");
    }));
    row(dl, "bank / model", (e.bank_version || "") + "  " + (e.model || ""));
    row(dl, "prompt", el("pre", e.prompt));
    row(dl, "target", el("pre", e.target));
    view.appendChild(dl);
  }
  if (data && select && view) {
    var entries = JSON.parse(data.textContent);
    select.addEventListener("change", function () { show(entries[+select.value]); });
    if (entries.length) show(entries[0]);
  }
  // Record each image's decoded size and the load time on the page (read by the browser test).
  window.addEventListener("load", function () {
    document.querySelectorAll("img").forEach(function (img) {
      img.setAttribute("data-natural-width", img.naturalWidth);
      img.setAttribute("data-natural-height", img.naturalHeight);
    });
    document.body.setAttribute("data-loaded", "1");
    // milliseconds from navigation start to the end of loading (the page's "opens in" time)
    document.body.setAttribute("data-load-ms", String(Math.round(performance.now())));
  });
})();
