// The live Speculation page: polls live.json and draws small SVG line charts (no library, no network
// beyond this Locust). Each chart shares the time axis; level changes are dashed lines over shaded bands.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var W = 560, H = 210, M = {l: 48, r: 14, t: 22, b: 26};
  var COLORS = ["#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#bc4c00", "#0598bc"];
  // Per-position acceptance: hues apart from each other and from the overall line's blue (four near-identical
  // pale blues could not be told apart).
  var POSITION_COLORS = ["#bc4c00", "#8250df", "#1a7f37", "#bf3989", "#9a6700", "#0598bc"];

  // Each chart: which series, which columns, how drawn. `per_position` expands to one line per position.
  var CHARTS = [
    {id: "acceptance", title: "Acceptance rate", source: "server /metrics", unit: "", max: 1,
     rules: [{y: 2 / 3, label: "pays above 0.67", color: "#1a7f37"}, {y: 0.5, label: "off below 0.5", color: "#d1242f"}],
     lines: [{series: "server", key: "acceptance", label: "acceptance rate", color: COLORS[0], width: 2.5},
             {series: "server", key: "per_position", label: "position", positions: true}]},
    {id: "tpot", title: "TPOT", source: "client, exact", unit: "ms",
     lines: [{series: "client", key: "tpot_p50", label: "p50", color: COLORS[0], width: 2},
             {series: "client", key: "tpot_p99", label: "p99", color: COLORS[1], width: 1.5, dash: true}]},
    {id: "itl", title: "ITL", source: "client: the requests' own ITL p50 (median) and p99 (p99)", unit: "ms",
     lines: [{series: "client", key: "itl_p50", label: "p50", color: COLORS[0], width: 2},
             {series: "client", key: "itl_p99", label: "p99", color: COLORS[1], width: 1.5, dash: true}]},
    {id: "ttft", title: "TTFT p50", source: "client, exact", unit: "ms",
     lines: [{series: "client", key: "ttft_p50", label: "p50", color: COLORS[4], width: 2}]},
    {id: "throughput", title: "Output tokens/s", source: "client; server dashed", unit: "tok/s",
     lines: [{series: "client", key: "tok_s", label: "client (finished requests)", color: COLORS[2], width: 2},
             {series: "server", key: "gen_tok_s", label: "server generated", color: COLORS[3], width: 1.5,
              dash: true}]},
    {id: "queue", title: "Server requests", source: "server gauges; users from Locust", unit: "",
     lines: [{series: "server", key: "running", label: "running", color: COLORS[0], width: 2},
             {series: "server", key: "waiting", label: "waiting", color: COLORS[1], width: 2},
             {series: "client", key: "users", label: "users", color: "#98a2b3", width: 1.5, dash: true,
              step: true}]},
    {id: "lag", title: "Client event-loop lag", source: "worst load generator", unit: "%",
     rules: [{y: 1, label: "1 %: timestamps late", color: "#d1242f"}],
     lines: [{series: "client", key: "lag_pct", label: "late wake-ups (>= 5 ms)", color: COLORS[5], width: 2}]},
    {id: "cpu", title: "Client CPU", source: "busiest load generator, share of one core", unit: "%",
     rules: [{y: 50, label: "50 %: what --processes auto plans for", color: "#d1242f"}],
     lines: [{series: "client", key: "cpu_pct", label: "CPU", color: COLORS[0], width: 2}]},
    // Open loop only (--rate, --rates): drawn once a point has them.
    {id: "arrivals", title: "Arrival rate", source: "asked vs sent on schedule (rows reported)", unit: "req/s",
     optional: true,
     lines: [{series: "client", key: "rate_sent", label: "sent", color: COLORS[2], width: 2},
             {series: "client", key: "rate_target", label: "asked", color: "#98a2b3", width: 1.5, dash: true,
              step: true}]},
    {id: "lateness", title: "Lateness p99", source: "send after the intended start", unit: "ms", optional: true,
     rules: [{y: 50, label: "50 ms: schedule not kept", color: "#d1242f"}],
     lines: [{series: "client", key: "late_p99", label: "p99", color: COLORS[6], width: 2}]},
    // With a GPU power exporter among the metrics URLs (docs/cost.md): drawn once a point has it.
    {id: "power", title: "GPU power", source: "DCGM exporter, every GPU scraped (spec-sim: modelled)", unit: "W",
     optional: true,
     lines: [{series: "server", key: "power_w", label: "power", color: COLORS[5], width: 2}]}
  ];

  function levelText(level) {
    // a level is a user count, or a rate key such as "4/s"
    if (typeof level === "string") return level.replace(/\/s$/, " req/s");
    return level + (level === 1 ? " user" : " users");
  }

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }

  function niceStep(span, ticks) {
    var raw = span / ticks, mag = Math.pow(10, Math.floor(Math.log10(raw))), n = raw / mag;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
  }

  function fmt(v, unit) {
    if (v === null || v === undefined || isNaN(v)) return "–";
    var a = Math.abs(v), s;
    if (Number.isInteger(v) && a < 10000) s = String(v);
    else if (a >= 10000) s = (v / 1000).toFixed(a >= 100000 ? 0 : 1) + "k";
    else if (a >= 100) s = v.toFixed(0);
    else if (a >= 10) s = v.toFixed(1);
    else if (a >= 1) s = v.toFixed(2);
    else s = v.toFixed(3);
    return unit ? s + " " + unit : s;
  }

  function tickLabel(v, step) {
    if (step >= 1000) return fmt(v);
    return String(parseFloat(v.toFixed(6)));  // 0.25, 0.5, 1, 2.5: as many decimals as the tick has
  }

  function clock(sec) {
    sec = Math.max(0, Math.round(sec));
    var m = Math.floor(sec / 60), s = sec % 60;
    return m + ":" + (s < 10 ? "0" : "") + s;
  }

  function column(data, series, key) {
    var block = data[series], i = block.fields.indexOf(key), t = block.fields.indexOf("t");
    return block.points.map(function (p) { return [p[t], p[i]]; });
  }

  // The lines a chart draws: [{label, color, width, dash, step, pts: [[t, v], ...]}]
  function linesOf(chart, data) {
    var out = [];
    chart.lines.forEach(function (line) {
      var pts = column(data, line.series, line.key);
      if (!line.positions) { out.push(Object.assign({}, line, {pts: pts})); return; }
      var k = pts.reduce(function (n, p) { return Math.max(n, p[1] ? p[1].length : 0); }, 0);
      for (var j = 0; j < k; j++) {
        out.push({label: "position " + (j + 1), width: 1.3, color: POSITION_COLORS[Math.min(j, 5)],
                  pts: pts.map(function (p) { return [p[0], p[1] && p[1].length > j ? p[1][j] : null]; })});
      }
    });
    return out;
  }

  // A point without a value (a scrape too close to the previous one to measure a rate) is skipped,
  // not a gap: a missing scrape leaves no point at all.
  function path(pts, x, y, step) {
    var d = "", pen = false;
    pts.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || isNaN(p[1])) return;
      var px = x(p[0]).toFixed(1), py = y(p[1]).toFixed(1);
      if (!pen) d += "M" + px + " " + py;
      else if (step) d += "H" + px + "V" + py;
      else d += "L" + px + " " + py;
      pen = true;
    });
    return d;
  }

  function render(chart, data, t0, t1) {
    var lines = linesOf(chart, data);
    var vals = [];
    lines.forEach(function (l) { l.pts.forEach(function (p) { if (p[1] !== null && !isNaN(p[1])) vals.push(p[1]); }); });
    var top = chart.max !== undefined ? chart.max : Math.max.apply(null, vals.concat([0]));
    if (chart.rules && chart.max === undefined) {
      chart.rules.forEach(function (r) { if (vals.length) top = Math.max(top, r.y * 1.15); });
    }
    if (!(top > 0)) top = 1;
    var step = niceStep(top, 4);
    if (chart.max === undefined) top = Math.ceil(top * 1.05 / step) * step;
    var iw = W - M.l - M.r, ih = H - M.t - M.b, span = Math.max(t1 - t0, 1);
    var x = function (t) { return M.l + (t - t0) / span * iw; };
    var y = function (v) { return M.t + ih - v / top * ih; };
    var s = [];
    // level bands and marks
    var levels = data.levels || [];
    levels.forEach(function (mark, i) {
      var a = Math.max(mark[0], t0), b = i + 1 < levels.length ? levels[i + 1][0] : t1;
      if (i % 2 === 1) s.push('<rect class="band" x="' + x(a).toFixed(1) + '" y="' + M.t + '" width="' +
                              Math.max(0, x(b) - x(a)).toFixed(1) + '" height="' + ih + '"/>');
    });
    for (var v = 0; v <= top + 1e-9; v += step) {
      s.push('<line class="grid" x1="' + M.l + '" x2="' + (W - M.r) + '" y1="' + y(v).toFixed(1) + '" y2="' +
             y(v).toFixed(1) + '"/><text class="axis" x="' + (M.l - 6) + '" y="' + (y(v) + 4).toFixed(1) +
             '" text-anchor="end">' + esc(tickLabel(v, step)) + '</text>');
    }
    var tstep = niceStep(span, 6);
    tstep = tstep < 10 ? 10 : tstep < 15 ? 15 : tstep < 30 ? 30 : tstep < 60 ? 60 : Math.ceil(tstep / 60) * 60;
    for (var tt = 0; tt <= span + 1e-9; tt += tstep) {
      s.push('<text class="axis" x="' + x(t0 + tt).toFixed(1) + '" y="' + (H - 8) + '" text-anchor="middle">' +
             clock(tt) + '</text>');
    }
    levels.forEach(function (mark) {
      var px = x(Math.max(mark[0], t0)).toFixed(1);
      s.push('<line class="level" x1="' + px + '" x2="' + px + '" y1="' + (M.t - 4) + '" y2="' + (M.t + ih) +
             '"/><text class="levellabel" x="' + (+px + 3) + '" y="' + (M.t - 8) + '">' +
             esc(levelText(mark[1])) + '</text>');
    });
    var rules = (chart.rules || []).filter(function (r) { return r.y <= top; });
    rules.forEach(function (r) {
      s.push('<line class="rule" stroke="' + r.color + '" x1="' + M.l + '" x2="' + (W - M.r) + '" y1="' +
             y(r.y).toFixed(1) + '" y2="' + y(r.y).toFixed(1) + '"/>');
    });
    var drawn = 0;
    lines.slice().reverse().forEach(function (l) {
      var d = path(l.pts, x, y, l.step);
      if (!d) return;
      drawn += 1;
      s.push('<path data-line="' + esc(l.label) + '" fill="none" stroke="' + l.color + '" stroke-width="' +
             (l.width || 1.5) + '"' + (l.dash ? ' stroke-dasharray="5 3"' : '') +
             ' stroke-linejoin="round" d="' + d + '"/>');
    });
    // The rules' labels come after the data, on a halo of the background: a line never crosses them out.
    rules.forEach(function (r) {
      s.push('<text class="rulelabel" x="' + (W - M.r - 2) + '" y="' + (y(r.y) - 3).toFixed(1) +
             '" text-anchor="end" fill="' + r.color + '">' + esc(r.label) + '</text>');
    });
    s.push('<line class="grid" x1="' + M.l + '" x2="' + M.l + '" y1="' + M.t + '" y2="' + (M.t + ih) + '"/>');
    if (!drawn) {
      s.push('<text class="nodata" x="' + (M.l + iw / 2) + '" y="' + (M.t + ih / 2) +
             '" text-anchor="middle">' + esc(data.started ? "no data yet" : "start a test in Locust") + '</text>');
    }
    var legend = lines.map(function (l) {
      var last = null;
      for (var i = l.pts.length - 1; i >= 0; i--) { if (l.pts[i][1] !== null) { last = l.pts[i][1]; break; } }
      return '<span><i style="border-color:' + l.color + '"' + (l.dash ? ' class="dash"' : '') + '></i>' +
             esc(l.label) + ' <b>' + esc(fmt(last, chart.unit)) + '</b></span>';
    });
    var points = lines.reduce(function (n, l) {
      return n + l.pts.filter(function (p) { return p[1] !== null && p[1] !== undefined; }).length;
    }, 0);
    var fig = document.getElementById("chart-" + chart.id);
    if (chart.optional && !points) {  // a closed loop has no arrival rate to draw
      if (fig) fig.remove();
      return;
    }
    if (!fig) {
      fig = document.createElement("figure");
      fig.id = "chart-" + chart.id;
      fig.dataset.chart = chart.id;
      document.getElementById("charts").appendChild(fig);
    }
    fig.dataset.points = points;
    fig.dataset.levels = levels.length;
    fig.innerHTML = '<figcaption><h2>' + esc(chart.title) + (chart.unit ? ' <small>(' + esc(chart.unit) +
      ')</small>' : '') + '</h2><small>' + esc(chart.source) + '</small></figcaption>' +
      '<svg viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="' + esc(chart.title) + '">' + s.join("") +
      '</svg><div class="legend">' + legend.join("") + '</div>';
  }

  function latest(data, series, key) {
    var col = column(data, series, key);
    for (var i = col.length - 1; i >= 0; i--) if (col[i][1] !== null && col[i][1] !== undefined) return col[i][1];
    return null;
  }

  function facts(data) {
    var el = document.getElementById("state");
    el.textContent = data.state;
    el.className = data.state;
    var end = data.stopped || data.now;
    var items = [["users", data.users], ["level", data.level ? levelText(data.level) : "–"],
                 ["elapsed", data.started ? clock(end - data.started) : "–"],
                 ["acceptance", fmt(latest(data, "server", "acceptance"))],
                 ["TPOT p50", fmt(latest(data, "client", "tpot_p50"), "ms")],
                 ["ITL p50", fmt(latest(data, "client", "itl_p50"), "ms")],
                 ["output", fmt(latest(data, "client", "tok_s"), "tok/s")]];
    if (data.warmup_until && data.now < data.warmup_until && !data.stopped) items.push(["", "warm-up"]);
    document.getElementById("facts").innerHTML = items.map(function (kv) {
      return "<span>" + esc(kv[0]) + " <b>" + esc(kv[1]) + "</b></span>";
    }).join("");
    document.getElementById("window").textContent = data.window_s;
    document.getElementById("tick").textContent = data.tick_s;
  }

  // The current level's table per task (prompt class), each number with its 95% interval.
  function withInterval(row, f, key, unit) {
    var v = row[f.indexOf(key)], lo = row[f.indexOf(key + "_lo")], hi = row[f.indexOf(key + "_hi")];
    if (v === null || v === undefined) return "–";
    return fmt(v, unit) + (lo === null || hi === null ? "" : " <small>[" + fmt(lo) + ", " + fmt(hi) + "]</small>");
  }

  function tasks(data) {
    var t = data.tasks, el = document.getElementById("tasks");
    if (!t || !t.rows.length) { el.hidden = true; return; }
    var f = t.fields;
    el.hidden = false;
    document.getElementById("tasks-level").textContent = t.level + (t.level === 1 ? " user" : " users");
    document.getElementById("tasks-body").innerHTML = t.rows.map(function (row) {
      return '<tr data-task="' + esc(row[0]) + '"><td>' + esc(row[0]) + "</td><td>" + esc(row[1]) + "</td><td>" +
        esc(row[2]) + "</td><td>" + withInterval(row, f, "acceptance") + "</td><td>" +
        withInterval(row, f, "tpot_p50", "ms") + "</td><td>" + withInterval(row, f, "tok_s") + "</td></tr>";
    }).join("");
  }

  function draw(data) {
    facts(data);
    tasks(data);
    var t0 = data.started || data.now, t1 = data.stopped || data.now;
    CHARTS.forEach(function (chart) { render(chart, data, t0, t1); });
    document.body.dataset.state = data.state;
    document.body.dataset.updated = String(data.now);
  }

  function poll() {
    fetch("live.json", {cache: "no-store", credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(draw)
      .catch(function (e) { document.getElementById("state").textContent = "offline: " + e.message; })
      .then(function () { setTimeout(poll, POLL_MS); });
  }
  poll();
})();
