// Time-series charts with uPlot (vendored). Each element with data-chart="<id>" draws the
// JSON in <script id="<id>">: {"x": [unix seconds], "series": [{"label", "values",
// "scale"}]}. Every chart also has its numbers in a table next to it for screen readers.
(function () {
  "use strict";
  const COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568"];

  // Times in 24-hour UTC, as everywhere else in the console (uPlot's default is the
  // browser's zone with am/pm).
  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function clock(t) {
    const d = new Date(t * 1000);
    return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
  }
  function day(t) {
    const d = new Date(t * 1000);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
  }
  function timeTicks(u, splits) {
    const span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
    return splits.map(function (t) { return span > 86400 ? day(t) + " " + clock(t) : clock(t); });
  }

  function draw(el) {
    const data = JSON.parse(document.getElementById(el.dataset.chart).textContent);
    const scales = [];
    data.series.forEach(function (s) { if (scales.indexOf(s.scale) < 0) scales.push(s.scale); });
    const opts = {
      width: Math.max(280, el.clientWidth),
      height: 220,
      series: [{
        label: "UTC",
        value: function (u, t) { return t == null ? "–" : day(t) + " " + clock(t); },
      }].concat(data.series.map(function (s, i) {
        return { label: s.label, scale: s.scale, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true };
      })),
      axes: [{ values: timeTicks }].concat(scales.map(function (scale, i) {
        return { scale: scale, side: i === 0 ? 3 : 1, label: scale, grid: { show: i === 0 } };
      })),
    };
    const plot = new uPlot(opts, [data.x].concat(data.series.map(function (s) { return s.values; })), el);
    new ResizeObserver(function () {
      plot.setSize({ width: Math.max(280, el.clientWidth), height: 220 });
    }).observe(el);
  }

  function start() { document.querySelectorAll("[data-chart]").forEach(draw); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
