// The operator console: renders the overview the gateway sends (GET api/overview once, then
// SSE `overview` events). Every value goes in through textContent or SVG attributes, never
// as HTML: entrypoint names and error codes come from workers and handlers.
"use strict";

(function () {
  const base = document.body.dataset.base || "";
  const api = base + "/console/api";
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";

  function text(id, value) {
    const el = $(id);
    if (el) el.textContent = value === null || value === undefined ? "–" : String(value);
  }

  function ms(value) {
    if (value === null || value === undefined) return "–";
    return value >= 1000 ? (value / 1000).toLocaleString() + " s" : value + " ms";
  }

  function ago(atMs, nowMs) {
    if (!atMs) return "–";
    const s = Math.max(0, Math.round((nowMs - atMs) / 1000));
    return s < 120 ? s + " s ago" : Math.round(s / 60) + " min ago";
  }

  function bytes(n) {
    if (!n) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }

  // Replaces a table body's rows: one row per item, `key` names it in data-key.
  function rows(tableId, items, key, cells) {
    const body = $(tableId).tBodies[0];
    body.replaceChildren();
    if (items.length === 0) {
      const tr = document.createElement("tr");
      const td = document.createElement("td");
      td.colSpan = $(tableId).tHead.rows[0].cells.length;
      td.className = "empty";
      td.textContent = "none";
      tr.appendChild(td);
      body.appendChild(tr);
      return;
    }
    for (const item of items) {
      const tr = document.createElement("tr");
      tr.dataset.key = key(item);
      for (const [name, value] of cells(item)) {
        const td = document.createElement("td");
        td.className = name;
        if (value instanceof Node) td.appendChild(value);
        else td.textContent = value === null || value === undefined ? "–" : String(value);
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  // actions.js renders its tables (failed tasks, audit log) with the same function.
  window.consoleRows = rows;

  function chart(svgId, points, series) {
    const svg = $(svgId);
    svg.replaceChildren();
    const width = 600, height = 160, pad = 4;
    let max = 1;
    for (const p of points) for (const s of series) max = Math.max(max, p[s] || 0);
    const x = (i) => pad + (i * (width - 2 * pad)) / Math.max(1, points.length - 1);
    const y = (v) => height - pad - ((v || 0) * (height - 2 * pad)) / max;
    for (const s of series) {
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("class", "line " + s);
      line.setAttribute("points", points.map((p, i) => x(i).toFixed(1) + "," + y(p[s]).toFixed(1)).join(" "));
      svg.appendChild(line);
    }
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "8");
    label.setAttribute("y", "16");
    label.setAttribute("class", "axis");
    label.textContent = "max " + max.toLocaleString();
    svg.appendChild(label);
  }

  function render(o) {
    text("mode", o.mode);
    text("live", o.tasks.live);
    text("queued", o.tasks.queued);
    text("running", o.tasks.running);
    text("waiting", o.tasks.waiting);
    text("workers-count", o.workers.length);
    text("capacity", o.capacity);
    const t = o.totals;
    text("minutes", t.minutes);
    text("admitted", t.admitted);
    text("completed", t.completed);
    text("failed", t.failed);
    text("cancelled", t.cancelled);
    text("recovered", t.recovered);
    text("latency", [t.p50_ms, t.p95_ms, t.p99_ms].map(ms).join(" / "));
    text("settled", o.payments.enabled || o.payments.settled ? o.payments.settled : "off");
    text("awaiting", o.payments.enabled ? o.payments.awaiting_recovery : "off");

    rows("entrypoints", o.entrypoints, (e) => e.name, (e) => [
      ["name", e.paused ? e.name + " (paused, " + e.paused.mode + ")" : e.name],
      ["queued", e.queued], ["running", e.running],
      ["capacity", e.capacity], ["workers", e.workers],
      ["actions", window.consoleActions ? window.consoleActions.entrypoint(e) : null],
    ]);
    rows("workers", o.workers, (w) => w.id, (w) => [
      ["id", w.draining ? w.id + " (draining)" : w.id], ["host", w.host],
      ["entrypoints", w.entrypoints.join(", ")],
      ["concurrency", w.concurrency], ["leases", w.leases], ["seen", ago(w.last_seen_ms, o.at_ms)],
      ["actions", window.consoleActions ? window.consoleActions.worker(w) : null],
    ]);
    if (window.consoleActions) window.consoleActions.overview(o);
    rows("failures", o.failures, (f) => f.task_id, (f) => [
      ["when", new Date(f.at_ms).toLocaleTimeString()], ["entrypoint", f.entrypoint],
      ["code", f.code], ["task", f.task_id],
    ]);
    rows("memory", o.store_memory, (m) => m.node, (m) => [
      ["node", m.node], ["used", bytes(m.used)], ["max", m.max ? bytes(m.max) : "no limit"],
      ["fill", m.fill === null ? "–" : (m.fill * 100).toFixed(1) + " %" +
        (m.high_water ? " (mark " + Math.round(m.high_water * 100) + " %)" : "")],
    ]);
    chart("chart-rates", o.chart.points, ["admitted", "completed", "failed", "cancelled", "recovered"]);
    chart("chart-latency", o.chart.points, ["p50_ms", "p99_ms"]);

    const partial = $("partial");
    partial.hidden = o.partial.length === 0;
    partial.textContent = o.partial.length ? "Not read this time: " + o.partial.join(", ") : "";
    document.body.dataset.updated = String(o.at_ms);
  }

  function status(textValue, ok) {
    const el = $("status");
    el.textContent = textValue;
    el.className = "status " + (ok ? "ok" : "down");
  }

  fetch(api + "/overview", { credentials: "same-origin" })
    .then((r) => {
      if (r.status === 401) { window.location.reload(); return null; }
      return r.json();
    })
    .then((o) => { if (o) render(o); })
    .catch(() => status("not reachable", false));

  const events = new EventSource(api + "/events");
  events.addEventListener("open", () => status("live", true));
  events.addEventListener("overview", (e) => {
    status("live", true);
    try { render(JSON.parse(e.data)); } catch (err) { status("bad update", false); }
  });
  events.addEventListener("error", () => status("reconnecting…", false));
})();
