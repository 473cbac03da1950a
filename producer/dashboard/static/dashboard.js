// ticketq's dashboard script: action errors shown in place, and the overview's chart. No build step.

// htmx does not swap an error response: show its text beside the form that asked (as text, never HTML).
document.addEventListener("htmx:responseError", function (e) {
  var at = e.detail.elt && e.detail.elt.closest ? e.detail.elt.closest("td") || e.detail.elt : null;
  if (!at) return;
  var box = at.querySelector(".error");
  if (!box) { box = document.createElement("div"); box.className = "error"; at.appendChild(box); }
  box.textContent = e.detail.xhr.status + ": " + e.detail.xhr.responseText;
});

// The overview's chart: polls /api/history and redraws with uPlot.
(function () {
  "use strict";
  var el = document.getElementById("chart");
  if (!el || typeof uPlot === "undefined") return;
  var src = el.dataset.src;
  var every = parseInt(el.dataset.pollMs || "2000", 10);
  var palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];
  var plot = null;
  var shape = "";

  function build(h) {
    var names = Object.keys(h.labels);
    var series = [{},
      {label: "tickets/s", stroke: "#111", width: 2, scale: "rate"},
      {label: "waiting", stroke: "#999", dash: [6, 4], scale: "waiting"}];
    names.forEach(function (n, i) {
      series.push({label: n + "/s", stroke: palette[i % palette.length], scale: "rate"});
    });
    var opts = {
      width: Math.max(320, el.clientWidth), height: 280, series: series,
      scales: {x: {time: true}, rate: {auto: true, range: function (u, lo, hi) { return [0, Math.max(1, hi)]; }},
        waiting: {auto: true, range: function (u, lo, hi) { return [0, Math.max(1, hi)]; }}},
      axes: [{}, {scale: "rate", label: "tickets/s"}, {scale: "waiting", side: 1, label: "waiting", grid: {show: false}}]
    };
    if (plot) plot.destroy();
    plot = new uPlot(opts, columns(h), el);
    shape = names.join("\u0000");
  }

  function columns(h) {
    var cols = [h.t, h.rate, h.waiting];
    Object.keys(h.labels).forEach(function (n) { cols.push(h.labels[n]); });
    return cols;
  }

  function refresh() {
    fetch(src, {headers: {accept: "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (h) {
        if (!h) return;
        if (!plot || Object.keys(h.labels).join("\u0000") !== shape) build(h); else plot.setData(columns(h));
        el.dataset.points = String(h.t.length);
      })
      .catch(function () {})
      .finally(function () { setTimeout(refresh, every); });
  }

  window.addEventListener("resize", function () { if (plot) plot.setSize({width: el.clientWidth, height: 280}); });
  refresh();
})();
