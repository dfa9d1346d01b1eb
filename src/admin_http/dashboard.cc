#include "admin_http/dashboard.h"

#include <httplib.h>

namespace lmcache::admin_http {
namespace {

// Everything the page needs is in it: nothing is fetched but /status.
constexpr std::string_view kPage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>lmcache-server</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; margin: 0 0 .2em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
.sub { color: #666; }
.panel { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .8em 1em; margin: .6em 0; }
table { border-collapse: collapse; }
td, th { padding: .15em .8em .15em 0; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; width: 12em; height: .8em; background: #eee; vertical-align: middle; }
.bar > span { display: block; height: 100%; background: #4a90d9; }
.bad { color: #b00; font-weight: bold; }
.ok { color: #070; }
#all td:first-child { font-family: monospace; }
</style>
</head>
<body data-state="loading">
<h1>lmcache-server <span id="version" class="sub"></span></h1>
<div class="sub">boot <span id="boot"></span> · phase <span id="phase"></span> ·
 <span id="health"></span> · up <span id="uptime"></span> · refreshed <span id="refreshed">never</span></div>
<div id="problem" class="bad"></div>

<h2>L1 pool</h2>
<div class="panel"><div class="bar"><span id="usage-bar"></span></div> <span id="usage"></span>
<table id="pool"></table></div>

<h2>Lookups</h2>
<div class="panel"><table id="lookups"></table></div>

<h2>L2 tiers</h2>
<div class="panel" id="l2"></div>

<h2>Tenants</h2>
<div class="panel" id="tenants"></div>

<h2>Peers</h2>
<div class="panel" id="peers"></div>

<h2>What failed since this page opened</h2>
<div class="panel" id="errors"></div>

<h2>Every figure of the stats reply</h2>
<div class="panel"><table id="all"></table></div>

<script>
"use strict";
const $ = (id) => document.getElementById(id);
let first = null;     // the counters when the page opened
let previous = null;  // the last reply, for rates
let previousAt = 0;

function bytes(n) {
  if (typeof n !== "number") return String(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}
function text(tag, value, cls) {
  const e = document.createElement(tag);
  e.textContent = value;
  if (cls) e.className = cls;
  return e;
}
// A row: a label and a figure that carries its stats path and raw value.
function figureRow(label, path, value, shown) {
  const tr = document.createElement("tr");
  tr.appendChild(text("td", label));
  const td = text("td", shown === undefined ? String(value) : shown, "n");
  td.dataset.field = path;
  td.dataset.value = String(value);
  tr.appendChild(td);
  return tr;
}
function get(object, path) {
  return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), object);
}
function fill(table, stats, rows) {
  table.replaceChildren();
  for (const [label, path, kind] of rows) {
    const v = get(stats, path);
    if (v === undefined) continue;
    table.appendChild(figureRow(label, path, v, kind === "bytes" ? bytes(v) : undefined));
  }
}
// Every leaf of the stats reply, by path: the table that follows the schema.
function leaves(object, prefix, out) {
  for (const [k, v] of Object.entries(object)) {
    const path = prefix ? prefix + "." + k : k;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) leaves(v, path, out);
    else if (Array.isArray(v)) v.forEach((e, i) => (e !== null && typeof e === "object")
        ? leaves(e, path + "." + i, out) : out.push([path + "." + i, e]));
    else out.push([path, v]);
  }
  return out;
}

function renderPool(s) {
  const l1 = s.stats.l1;
  $("usage-bar").style.width = (100 * (l1.usage_ratio || 0)).toFixed(1) + "%";
  $("usage").textContent = (100 * (l1.usage_ratio || 0)).toFixed(1) + "% used";
  fill($("pool"), s.stats, [
    ["capacity", "l1.capacity_bytes", "bytes"], ["resident", "l1.resident_bytes", "bytes"],
    ["resident objects", "l1.resident_objects"], ["locked", "l1.locked_bytes", "bytes"],
    ["locked objects", "l1.locked_objects"], ["staged", "l1.staging_bytes", "bytes"],
    ["staged objects", "l1.staging_objects"], ["quarantined", "l1.quarantined_bytes", "bytes"],
    ["quarantined objects", "l1.quarantined_objects"], ["pinned", "l1.pinned_bytes", "bytes"],
    ["pinned objects", "l1.pinned_objects"], ["evicted objects", "eviction.evicted_objects"],
  ]);
}

function renderLookups(s) {
  const l = s.stats.lookup;
  const table = $("lookups");
  fill(table, s.stats, [["lookups", "lookup.lookups"], ["requested tokens", "lookup.requested_tokens"],
                        ["hit tokens", "lookup.hit_tokens"]]);
  const rate = l.requested_tokens > 0 ? l.hit_tokens / l.requested_tokens : 0;
  const row = figureRow("hit rate", "lookup.hit_rate", rate, (100 * rate).toFixed(1) + "%");
  table.appendChild(row);
}

function renderL2(s, dt) {
  const box = $("l2");
  box.replaceChildren();
  const adapters = s.stats.l2 && s.stats.l2.adapters;
  if (!adapters || adapters.length === 0) { box.appendChild(text("div", "no L2 tier")); return; }
  const table = document.createElement("table");
  const head = document.createElement("tr");
  for (const h of ["tier", "state", "objects", "usage", "capacity", "store MB/s", "load MB/s"])
    head.appendChild(text("th", h));
  table.appendChild(head);
  adapters.forEach((a, i) => {
    const tr = document.createElement("tr");
    tr.appendChild(text("td", (a.name || a.type + "#" + (i + 1)) + " " + (a.description || "")));
    tr.appendChild(text("td", a.condition ? a.condition : "ok", a.condition ? "bad" : "ok"));
    // By name: adapters join and leave the cascade at runtime.
    const before = previous && previous.stats.l2 &&
        (previous.stats.l2.adapters || []).find((p) => p.name === a.name);
    const rate = (k) => (before && dt > 0) ? ((a[k] - before[k]) / dt / 1e6).toFixed(1) : "-";
    for (const [k, shown] of [["objects"], ["usage_bytes", bytes(a.usage_bytes)],
                              ["capacity_bytes", a.capacity_bytes ? bytes(a.capacity_bytes) : "unbounded"]]) {
      const td = text("td", shown === undefined ? String(a[k]) : shown, "n");
      td.dataset.field = "l2.adapters." + i + "." + k;
      td.dataset.value = String(a[k]);
      tr.appendChild(td);
    }
    tr.appendChild(text("td", rate("stored_bytes"), "n"));
    tr.appendChild(text("td", rate("loaded_bytes"), "n"));
    table.appendChild(tr);
  });
  box.appendChild(table);
}

function renderTenants(s) {
  const box = $("tenants");
  box.replaceChildren();
  const q = s.stats.quota;
  box.appendChild(text("div", "quota mode: " + q.mode));
  const table = document.createElement("table");
  for (const [salt, t] of Object.entries(q.tenants || {})) {
    const tr = document.createElement("tr");
    tr.appendChild(text("td", salt));
    const bar = document.createElement("td");
    const outer = text("span", "", "bar");
    const inner = document.createElement("span");
    inner.style.width = (t.limit_bytes ? Math.min(100, 100 * t.used_bytes / t.limit_bytes) : 0) + "%";
    outer.appendChild(inner);
    bar.appendChild(outer);
    tr.appendChild(bar);
    const used = text("td", bytes(t.used_bytes) + " of " + bytes(t.limit_bytes), "n");
    used.dataset.field = "quota.tenants." + salt + ".used_bytes";
    used.dataset.value = String(t.used_bytes);
    tr.appendChild(used);
    tr.appendChild(text("td", t.refused_objects ? t.refused_objects + " refused" : ""));
    table.appendChild(tr);
  }
  table.appendChild(figureRow("other tenants (no quota)", "quota.other_tenants", q.other_tenants));
  table.appendChild(figureRow("their bytes", "quota.other_used_bytes", q.other_used_bytes,
                              bytes(q.other_used_bytes)));
  box.appendChild(table);
}

function renderPeers(s) {
  const box = $("peers");
  box.replaceChildren();
  if (!s.p2p || !s.p2p.enabled) { box.appendChild(text("div", "P2P is off")); return; }
  const table = document.createElement("table");
  const head = document.createElement("tr");
  for (const h of ["peer", "state", "reason", "rtt ms", "loaded", "GB/s"]) head.appendChild(text("th", h));
  table.appendChild(head);
  for (const p of s.p2p.peers || []) {
    const tr = document.createElement("tr");
    tr.appendChild(text("td", p.url));
    tr.appendChild(text("td", p.state, p.state === "ready" ? "ok" : "bad"));
    for (const v of [p.reason, p.rtt_ms, bytes(p.loaded_bytes), p.load_gbps]) {
      tr.appendChild(text("td", v === undefined || v === null ? "" : String(v)));
    }
    table.appendChild(tr);
  }
  box.appendChild(table);
}

// Counters whose names say something failed, that grew since the page opened.
function renderErrors(s) {
  const box = $("errors");
  box.replaceChildren();
  const now = leaves(s.stats, "", []);
  const then = new Map(leaves(first.stats, "", []));
  const grown = now.filter(([path, v]) => /(error|fail|refused|corrupt|timeout|dropped|lost|mismatch)/.test(path)
      && typeof v === "number" && v > (then.get(path) || 0));
  const conditions = ((s.stats.l2 && s.stats.l2.adapters) || []).filter((a) => a.condition);
  if (grown.length === 0 && conditions.length === 0 && s.is_healthy) {
    box.appendChild(text("div", "nothing", "ok"));
    return;
  }
  if (!s.is_healthy) box.appendChild(text("div", "unhealthy: " + s.reason, "bad"));
  for (const a of conditions) box.appendChild(text("div", a.type + ": " + a.condition, "bad"));
  const table = document.createElement("table");
  for (const [path, v] of grown) table.appendChild(figureRow(path + " (+" + (v - (then.get(path) || 0)) + ")", path, v));
  box.appendChild(table);
}

function renderAll(s) {
  const table = $("all");
  table.replaceChildren();
  for (const [path, v] of leaves(s.stats, "", [])) {
    if (typeof v === "object" && v !== null) continue;
    table.appendChild(figureRow(path, path, v));
  }
}

function render(s, dt) {
  $("version").textContent = s.version;
  $("boot").textContent = s.boot_id;
  $("phase").textContent = s.phase;
  $("health").textContent = s.is_healthy ? "healthy" : "unhealthy: " + s.reason;
  $("health").className = s.is_healthy ? "ok" : "bad";
  $("uptime").textContent = Math.round(s.uptime_seconds) + " s";
  renderPool(s);
  renderLookups(s);
  renderL2(s, dt);
  renderTenants(s);
  renderPeers(s);
  renderErrors(s);
  renderAll(s);
}

async function refresh() {
  try {
    const reply = await fetch("/status", {cache: "no-store"});
    if (!reply.ok) throw new Error("/status answered " + reply.status);
    const s = await reply.json();
    const at = Date.now();
    if (first === null) first = s;
    render(s, previous ? (at - previousAt) / 1000 : 0);
    previous = s;
    previousAt = at;
    $("refreshed").textContent = new Date(at).toLocaleTimeString();
    $("problem").textContent = "";
    document.body.dataset.state = "ok";
  } catch (e) {
    $("problem").textContent = "cannot read /status: " + e.message;
    document.body.dataset.state = "error";
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view DashboardHtml() { return kPage; }

void AddDashboardRoute(httplib::Server& s) {
  s.Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    // Nothing from anywhere else, and only /status to read.
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                   "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::string(kPage), "text/html; charset=utf-8");
  });
}

}  // namespace lmcache::admin_http
