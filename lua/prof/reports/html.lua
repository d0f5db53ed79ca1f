-- prof.reports.html — report.html, the dashboard: one self-contained page
-- (inline CSS, JavaScript and SVG; no network) that draws the analyses'
-- data, which it carries as JSON in a <script type="application/json">.
--
-- window(data): step time chart with the phases stacked, GPU utilization
-- over time, memory over time, a flame graph of the CPU samples, the top
-- kernels, ranges, copies and CPU tables, and the findings.
-- run(data): step time per rank, the per-rank table and the straggler.
--
-- A window or dump that overlaps a hang (data.meta.hangs) starts with a
-- plain link to each hang's own report.html (../hang<K>_step<N>/), outside
-- the script, so it reads without JavaScript too.
--
-- The page sets <body data-status="ok"> once every chart is drawn, or
-- "error" (and shows the message) if its script fails; the tests read that.

local json = require("prof.json")
local steps_report = require("prof.reports.steps")

local M = {}

-- Colours (also used by the tests to find the charts in a screenshot).
M.COLORS = {
	data = "#e4572e", forward = "#4c72b0", backward = "#55a868",
	optimizer = "#8172b2", other = "#b8b8b8", step = "#4c72b0",
	gpu = "#2a9d8f", memory = "#e9a03b",
}

local CSS = [[
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#fff;color:#222}
header{background:#1f2933;color:#fff;padding:14px 24px}
header h1{font-size:20px;margin:0 0 4px}
header .meta{color:#cbd2d9;font-size:13px}
nav.hangs{background:#fdecea;border-bottom:1px solid #f5c2bd;padding:8px 24px}
main{padding:8px 24px 40px;max-width:1400px}
section{margin:18px 0}
h2{font-size:16px;margin:0 0 8px;border-bottom:1px solid #e4e7eb;padding-bottom:4px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:18px}
.grid>section{min-width:0}
.grid>section.wide{grid-column:1/-1}
.tbl{overflow-x:auto}
.findings li{margin:4px 0}
.none{color:#7b8794;font-style:italic}
table{border-collapse:collapse;font-size:12px;width:100%}
th,td{padding:3px 6px;border-bottom:1px solid #eef0f2;text-align:right;white-space:nowrap}
th{background:#f5f7fa;font-weight:600}
td.name,th.name{text-align:left;width:100%;max-width:0;min-width:10em;overflow:hidden;text-overflow:ellipsis}
svg text{font:11px system-ui,sans-serif;fill:#3e4c59}
.legend span{display:inline-block;margin-right:12px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
#error{display:none;background:#fde8e8;color:#9b1c1c;padding:8px 12px;margin:12px 0}
.flame rect{stroke:#fff;stroke-width:.5}
]]

-- The drawing code. Every chart is an SVG built from the data; sizes are
-- fixed in CSS pixels so screenshots are comparable.
local JS = [==[
"use strict";
(function () {
var NS = "http://www.w3.org/2000/svg";
var C = COLORS;
var PH = PHASES;
function el(tag, attrs, parent) {
  var e = document.createElementNS(NS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function h(tag, text, parent, cls) {
  var e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}
function ms(ns) { return (ns / 1e6).toFixed(3) + " ms"; }
function time(ns) {
  var a = Math.abs(ns);
  if (a < 1e3) return Math.round(ns) + " ns";
  if (a < 1e6) return (ns / 1e3).toFixed(3) + " us";
  if (a < 1e9) return (ns / 1e6).toFixed(3) + " ms";
  return (ns / 1e9).toFixed(3) + " s";
}
function pct(x) { return (100 * x).toFixed(1) + " %"; }
function bytes(b) {
  var u = ["B", "kB", "MB", "GB", "TB"], i = 0;
  while (b >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return i ? b.toFixed(2) + " " + u[i] : Math.round(b) + " B";
}
function none(parent, text) { h("p", text, parent, "none"); }
function svgBox(parent, w, hgt) {
  return el("svg", { width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt }, parent);
}
/* A round tick step for an axis from 0 to max in about n steps: 1, 2,
 * 2.5 or 5 times a power of ten. */
function niceStep(max, n) {
  if (!(max > 0)) return 1;
  var raw = max / n, p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
}
/* A tick label: v in the unit of units[] ([size, name], ascending) that
 * suits `top`, the axis's end, with no trailing zeros ("2.5 ms"). */
function tick(v, top, units) {
  var u = units[0];
  units.forEach(function (x) { if (top >= x[0]) u = x; });
  var s = (v / u[0]).toFixed(3).replace(/\.?0+$/, "");
  return (s === "" ? "0" : s) + (u[1] ? " " + u[1] : "");
}
var TIME_UNITS = [[1, "ns"], [1e3, "us"], [1e6, "ms"], [1e9, "s"]];
var BYTE_UNITS = [[1, "B"], [1e3, "kB"], [1e6, "MB"], [1e9, "GB"], [1e12, "TB"]];
function timeTick(v, top) { return tick(v, top, TIME_UNITS); }
function bytesTick(v, top) { return tick(v, top, BYTE_UNITS); }
/* The y axis from 0 at y1 up to y0, with round ticks (niceStep) labelled
 * fmt(value, top); returns top, the value at y0 (max or a little more),
 * which the chart scales its marks to. */
function axisY(svg, x0, y0, y1, max, fmt) {
  var step = niceStep(max, 4), k = Math.max(1, Math.ceil(max / step - 1e-9)), top = step * k;
  el("line", { x1: x0, y1: y0, x2: x0, y2: y1, stroke: "#9aa5b1" }, svg);
  for (var i = 0; i <= k; i++) {
    var y = y1 - (y1 - y0) * i / k;
    el("line", { x1: x0, y1: y, x2: x0 - 4, y2: y, stroke: "#9aa5b1" }, svg);
    var t = el("text", { x: x0 - 6, y: y + 4, "text-anchor": "end" }, svg);
    t.textContent = fmt(step * i, top);
  }
  return top;
}
function legend(parent, names) {
  var d = h("div", null, parent, "legend");
  names.forEach(function (n) {
    var s = h("span", null, d);
    var i = h("i", null, s); i.style.background = C[n] || n;
    s.appendChild(document.createTextNode(n));
  });
}
/* A table of rows, one column per [title, value(row), is a name]. It
 * keeps to its parent's width: a name column takes the room the numbers
 * leave, its names cut with an ellipsis and whole on hover (their title);
 * a table whose numbers alone are wider scrolls in its own box. */
function table(parent, rows, cols) {
  if (!rows.length) return;
  var box = h("div", null, parent, "tbl");
  var t = h("table", null, box), tr = h("tr", null, t);
  cols.forEach(function (c) { h("th", c[0], tr, c[2] ? "name" : ""); });
  rows.forEach(function (r) {
    var tr2 = h("tr", null, t);
    cols.forEach(function (c) {
      var td = h("td", c[1](r), tr2, c[2] ? "name" : "");
      if (c[2]) td.title = td.textContent;
    });
  });
}

/* Step time: one bar per step, phases stacked when known. */
function stepChart(parent, steps) {
  var list = (steps && steps.steps) || [];
  if (!list.length) return none(parent, "No steps were captured.");
  var W = 640, H = 260, L = 70, B = 30, T = 10, R = 10;
  var max = 0; list.forEach(function (s) { max = Math.max(max, s.dur); });
  var svg = svgBox(parent, W, H); svg.id = "chart-steps";
  max = axisY(svg, L, T, H - B, max, timeTick);
  var bw = (W - L - R) / list.length;
  list.forEach(function (s, i) {
    var x = L + i * bw + bw * 0.1, w = Math.max(1, bw * 0.8), y = H - B;
    var parts = s.has_phases ? PH.map(function (p) { return [p, s.phases[p]]; }) : [["step", s.dur]];
    parts.forEach(function (p) {
      var hh = max > 0 ? (H - B - T) * p[1] / max : 0;
      y -= hh;
      var r = el("rect", { x: x, y: y, width: w, height: Math.max(0, hh), fill: C[p[0]] }, svg);
      el("title", {}, r).textContent = "step " + s.step + " " + p[0] + ": " + ms(p[1]);
    });
    if (list.length <= 40) {
      var t = el("text", { x: x + w / 2, y: H - B + 14, "text-anchor": "middle" }, svg);
      t.textContent = s.step;
    }
  });
  if (steps.has_phases) legend(parent, PH);
}

/* GPU busy fraction per bucket of the window, as an area. */
function gpuChart(parent, gpu) {
  if (!gpu || !gpu.present) return none(parent, "No GPU activity in this window.");
  var W = 640, H = 200, L = 50, B = 30, T = 10, R = 10, b = gpu.buckets;
  var svg = svgBox(parent, W, H); svg.id = "chart-gpu";
  axisY(svg, L, T, H - B, 1, function (v) { return Math.round(v * 100) + "%"; });
  var bw = (W - L - R) / b.length;
  b.forEach(function (v, i) {
    var hh = (H - B - T) * Math.min(1, v);
    var r = el("rect", { x: L + i * bw, y: H - B - hh, width: Math.max(1, bw), height: hh, fill: C.gpu }, svg);
    el("title", {}, r).textContent = pct(v) + " busy";
  });
  var t = el("text", { x: L, y: H - 8 }, svg);
  t.textContent = "0";
  t = el("text", { x: W - R, y: H - 8, "text-anchor": "end" }, svg);
  t.textContent = time(gpu.bucket_ns * b.length);
  h("p", "Busy " + pct(gpu.utilization) + " of step time (" + time(gpu.busy) + " of " +
    time(gpu.span) + "); idle " + time(gpu.idle) + " in " + gpu.nidle + " gaps.", parent);
  table(parent, gpu.gaps, [["Idle gap", function (g) { return time(g.dur); }],
    ["Step", function (g) { return g.step === undefined ? "" : g.step; }],
    ["Main thread in", function (g) { return g.cpu ? g.cpu + " (" + pct(g.cpu_share) + ")" : ""; }, true]]);
}

/* Allocated memory over time, one line per device. */
function memoryChart(parent, mem, t0) {
  if (!mem || !mem.present) return none(parent, "No memory events in this window.");
  var W = 640, H = 200, L = 70, B = 30, T = 10, R = 10;
  var max = 0, lo = Infinity, hi = -Infinity;
  mem.devices.forEach(function (d) {
    max = Math.max(max, d.peak);
    d.points.forEach(function (p) { lo = Math.min(lo, p[0]); hi = Math.max(hi, p[0]); });
  });
  if (hi <= lo) hi = lo + 1;
  var svg = svgBox(parent, W, H); svg.id = "chart-memory";
  max = axisY(svg, L, T, H - B, max, bytesTick);
  mem.devices.forEach(function (d) {
    var pts = [], prev = null;
    d.points.forEach(function (p) {
      var x = L + (W - L - R) * (p[0] - lo) / (hi - lo);
      var y = H - B - (max > 0 ? (H - B - T) * p[1] / max : 0);
      if (prev !== null) pts.push(x.toFixed(1) + "," + prev);
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
      prev = y.toFixed(1);
    });
    pts.push((W - R) + "," + prev);
    var area = [L + "," + (H - B)].concat(pts, [(W - R) + "," + (H - B)]);
    el("polygon", { points: area.join(" "), fill: C.memory, "fill-opacity": 1 }, svg);
    var px = L + (W - L - R) * (d.peak_ts - lo) / (hi - lo);
    el("line", { x1: px, y1: T, x2: px, y2: H - B, stroke: "#b42318", "stroke-dasharray": "3,3" }, svg);
    var t = el("text", { x: Math.min(px + 4, W - 120), y: T + 12 }, svg);
    t.textContent = "peak " + bytes(d.peak) + " (device " + d.device + ")";
  });
}

/* Flame graph: the root at the bottom, width = samples; as wide as its
 * section (the page's width). */
function flame(parent, s) {
  if (!s || !s.present) return none(parent, "No CPU samples in this window.");
  var W = Math.max(320, Math.floor(parent.clientWidth) || 1000), ROW = 17, depth = 0;
  (function d(n, k) { depth = Math.max(depth, k); (n.c || []).forEach(function (c) { d(c, k + 1); }); })(s.tree, 0);
  var H = (depth + 1) * ROW + 4;
  var svg = svgBox(parent, W, H); svg.id = "chart-flame"; svg.setAttribute("class", "flame");
  /* drawn for the section's width now, scaled to it if that changes (a
   * scroll bar appearing as the page grows) */
  svg.setAttribute("width", "100%"); svg.removeAttribute("height");
  svg.style.display = "block";
  function hue(name) {
    var x = 0; for (var i = 0; i < name.length; i++) x = (x * 31 + name.charCodeAt(i)) | 0;
    return Math.abs(x);
  }
  (function draw(n, x, w, k) {
    if (w < 0.3) return;
    var y = H - (k + 1) * ROW, v = hue(n.n);
    var r = el("rect", { x: x, y: y, width: w, height: ROW - 1,
      fill: "rgb(" + (205 + v % 50) + "," + (80 + (v >> 3) % 120) + "," + (40 + (v >> 6) % 40) + ")" }, svg);
    el("title", {}, r).textContent = n.n + ": " + n.v + " " + s.unit + " (" + pct(n.v / s.tree.v) + ")";
    if (w > 40) {
      var t = el("text", { x: x + 3, y: y + ROW - 5 }, svg);
      t.textContent = n.n.length * 6 > w ? n.n.slice(0, Math.max(1, Math.floor(w / 6) - 1)) + "…" : n.n;
    }
    var cx = x;
    (n.c || []).forEach(function (c) { var cw = w * c.v / n.v; draw(c, cx, cw, k + 1); cx += cw; });
  })(s.tree, 0, W, 0);
  h("p", s.samples + " samples" + (s.unit === "weight" ? " of weight " + s.total + " (timer periods); widths are weight" : "") +
    (s.truncated ? " (tree truncated)" : "") + "; hover a frame for its " + s.unit + ".", parent);
}

function findings(parent, list) {
  if (!list || !list.length) return none(parent, "Nothing stands out.");
  var ol = h("ol", null, parent, "findings");
  list.forEach(function (f) { var li = h("li", f.text, ol); li.dataset.id = f.id; });
}

function nsTable(parent, rows, nameTitle, empty) {
  if (!rows || !rows.length) return none(parent, empty);
  table(parent, rows.slice(0, 25), [["Time (%)", function (r) { return (100 * r.share).toFixed(1); }],
    ["Total", function (r) { return time(r.total); }], ["Instances", function (r) { return r.count; }],
    ["Avg", function (r) { return time(r.avg); }], ["Med", function (r) { return time(r.med); }],
    ["Min", function (r) { return time(r.min); }], ["Max", function (r) { return time(r.max); }],
    ["StdDev", function (r) { return time(r.std); }], [nameTitle, function (r) { return r.name; }, true]]);
}

function windowPage(d, root) {
  var m = d.meta;
  var label = (m.recorder ? "recorder dump " : "window ") + m.window;
  document.title = "profhost: " + label + ", steps " + m.first_step + "-" + m.last_step;
  var hd = h("header", null, root);
  h("h1", "profhost report: " + label + ", steps " + m.first_step + "-" + m.last_step +
    " (rank " + m.rank + ")", hd);
  h("div", (m.program || "?") + " (pid " + m.pid + ") on " + (m.hostname || "?") +
    (m.run ? ", run " + m.run : "") + " · " + time(m.duration) + " · " + m.events + " events" +
    (m.drops && m.drops.total ? " · " + m.drops.total + " dropped" : ""), hd, "meta");
  var main = h("main", null, root);
  var sec = h("section", null, main); h("h2", "Findings", sec); findings(sec, d.findings);
  var g = h("div", null, main, "grid");
  sec = h("section", null, g); h("h2", "Step time", sec); stepChart(sec, d.steps);
  sec = h("section", null, g); h("h2", "GPU utilization", sec); gpuChart(sec, d.gpu);
  sec = h("section", null, g); h("h2", "Memory", sec); memoryChart(sec, d.memory);
  sec = h("section", null, g, "wide"); h("h2", "Top kernels", sec);
  nsTable(sec, d.kernels && d.kernels.rows, "Name", "No kernels in this window.");
  sec = h("section", null, main); h("h2", "CPU samples (flame graph)", sec); flame(sec, d.samples);
  g = h("div", null, main, "grid");
  sec = h("section", null, g, "wide"); h("h2", "Ranges (nvtx_sum)", sec);
  nsTable(sec, d.nvtx && d.nvtx.rows, "Range", "No annotation ranges in this window.");
  sec = h("section", null, g); h("h2", "CPU self time", sec);
  if (d.cpu && d.cpu.rows.length)
    table(sec, d.cpu.rows, [["Self", function (r) { return time(r.self); }],
      ["Calls", function (r) { return r.count; }], ["Total", function (r) { return time(r.total); }],
      ["Name", function (r) { return r.name; }, true]]);
  else none(sec, "No CPU ranges.");
  if (d.modules && d.modules.rows.length) {
    sec = h("section", null, g); h("h2", "Modules (self time)", sec);
    table(sec, d.modules.rows, [["Self", function (r) { return time(r.self); }],
      ["Calls", function (r) { return r.count; }], ["Total", function (r) { return time(r.total); }],
      ["Module", function (r) { return r.name; }, true]]);
  }
  sec = h("section", null, g); h("h2", "Memory copies", sec);
  if (d.copies && d.copies.rows.length)
    table(sec, d.copies.rows, [["Count", function (r) { return r.count; }],
      ["Time", function (r) { return time(r.time); }], ["Bytes", function (r) { return bytes(r.bytes); }],
      ["GB/s", function (r) { return r.gbps.toFixed(2); }], ["Kind", function (r) { return r.name; }, true]]);
  else none(sec, "No memory copies.");
  var errs = Object.keys(d.errors || {});
  if (errs.length) {
    sec = h("section", null, main); h("h2", "Analyses that failed", sec);
    errs.forEach(function (k) { h("p", k + ": " + d.errors[k], sec); });
  }
}

function runPage(d, root) {
  document.title = "profhost: run " + (d.run || "");
  var hd = h("header", null, root);
  h("h1", "profhost run report: " + (d.run || d.program || ""), hd);
  h("div", d.ranks.length + " ranks, " + d.windows.length + " windows", hd, "meta");
  var main = h("main", null, root);
  var sec = h("section", null, main); h("h2", "Stragglers", sec);
  if (d.straggler) h("p", d.verdict + ".", sec);
  else none(sec, "Nothing to compare (one rank, or no common step).");
  sec = h("section", null, main); h("h2", "Step time by rank", sec);
  if (!d.steps.length) none(sec, "No steps.");
  else {
    var W = 900, H = 280, L = 70, B = 30, T = 10, R = 10, max = 0, n = d.ranks.length;
    d.steps.forEach(function (s) { s.by_rank.forEach(function (v) { if (v) max = Math.max(max, v); }); });
    var svg = svgBox(sec, W, H); svg.id = "chart-ranks";
    max = axisY(svg, L, T, H - B, max, timeTick);
    var gw = (W - L - R) / d.steps.length;
    d.steps.forEach(function (s, i) {
      s.by_rank.forEach(function (v, k) {
        if (!v) return;
        var hh = (H - B - T) * v / max, w = Math.max(1, gw * 0.8 / n);
        var r = el("rect", { x: L + i * gw + gw * 0.1 + k * w, y: H - B - hh, width: w, height: hh,
          fill: d.ranks[k] === s.last ? C.data : C.step }, svg);
        el("title", {}, r).textContent = "step " + s.step + " rank " + d.ranks[k] + ": " + ms(v);
      });
      if (d.steps.length <= 40) {
        var t = el("text", { x: L + i * gw + gw / 2, y: H - B + 14, "text-anchor": "middle" }, svg);
        t.textContent = s.step;
      }
    });
    h("p", "Bars: one per rank in rank order; in red the rank the others waited for.", sec);
  }
  sec = h("section", null, main); h("h2", "Per rank", sec);
  table(sec, d.per_rank, [["Rank", function (r) { return r.rank; }], ["Steps", function (r) { return r.steps; }],
    ["Mean", function (r) { return ms(r.mean); }], ["Median", function (r) { return ms(r.median); }],
    ["Max", function (r) { return ms(r.max); }]].concat(PH.map(function (p) {
      return [p, function (r) { return r.phases ? ms(r.phases[p]) : ""; }];
    }), [["GPU busy", function (r) { return r.gpu_utilization === undefined ? "" : pct(r.gpu_utilization); }],
    ["Top finding", function (r) { return r.finding || ""; }, true]]));
}

window.addEventListener("error", function (ev) {
  var e = document.getElementById("error");
  e.style.display = "block"; e.textContent = "report error: " + ev.message;
  document.body.dataset.status = "error";
});
var data = JSON.parse(document.getElementById("data").textContent);
var root = document.getElementById("root");
if (data.kind === "run") runPage(data, root); else windowPage(data, root);
document.body.dataset.status = "ok";
})();
]==]

-- Text for HTML: & < > " ' escaped.
local function esc(s)
	return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
		['"'] = "&quot;", ["'"] = "&#39;" }))
end

-- The links to the hang reports a window overlaps ("" when none).
local function hang_nav(data)
	local hangs = data.meta and data.meta.hangs or {}
	if #hangs == 0 then
		return ""
	end
	local parts = { "<nav class=\"hangs\">" }
	for i, h in ipairs(hangs) do
		local dir = "../" .. esc(h.dir) .. "/"
		parts[#parts + 1] = string.format("%s<b>Hang %d</b>: step %d had not ended after "
			.. "%.1f s: <a href=\"%sreport.html\">the hang report</a> "
			.. "(<a href=\"%shang_report.txt\">hang_report.txt</a>)",
			i > 1 and "<br>\n" or "", h.hang, h.step, h.stalled_s, dir, dir)
	end
	parts[#parts + 1] = "</nav>\n"
	return table.concat(parts)
end

local function page(data)
	local colors = json.encode(M.COLORS)
	local phases = json.encode(steps_report.PHASES)
	return table.concat({
		"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
		"<title>profhost report</title>\n<style>", CSS, "</style>\n</head>\n",
		"<body data-status=\"loading\">\n<div id=\"error\"></div>\n", hang_nav(data),
		"<div id=\"root\"></div>\n",
		"<script type=\"application/json\" id=\"data\">", json.encode(data), "</script>\n",
		"<script>\nvar COLORS = ", colors, ";\nvar PHASES = ", phases, ";\n", JS, "</script>\n</body>\n</html>\n",
	})
end

-- The dashboard of one window.
function M.window(data)
	return page(data)
end

-- The dashboard of a run (several windows and ranks).
function M.run(data)
	return page(data)
end

return M
