"use strict";
// Everything on this page comes from /status.json on this same endpoint,
// polled once a second; nothing is loaded from anywhere else.
const $ = (id) => document.getElementById(id);
// A name, not an address: nothing is fetched from it.
const SVG = "http://www.w3.org/2000/svg";

function text(value) {
  if (value === null || value === undefined || value === "") return "-";
  if (Array.isArray(value)) return value.length ? value.join(", ") : "-";
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function size(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function age(seconds) {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor(s % 86400 / 3600)).padStart(2, "0")}h`;
}

function rate(value) {
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

// A small line chart of `values` (oldest first), scaled to its own maximum.
function spark(values) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 24");
  const list = values || [];
  const max = Math.max(1e-9, ...list);
  const step = list.length > 1 ? 120 / (list.length - 1) : 0;
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", list.map((v, i) => `${(i * step).toFixed(1)},${(23 - v / max * 22).toFixed(1)}`).join(" "));
  svg.appendChild(line);
  return svg;
}

// Fills `table` with a header row and one row per item; a cell is a string,
// a DOM node, or {text, cls, num, id}.
function fill(table, headers, rows) {
  table.replaceChildren();
  const head = table.insertRow();
  for (const h of headers) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  if (rows.length === 0) {
    const cell = table.insertRow().insertCell();
    cell.colSpan = headers.length; cell.className = "dim"; cell.textContent = "none";
    return;
  }
  for (const row of rows) {
    const tr = table.insertRow();
    for (const value of row) {
      const td = tr.insertCell();
      if (value instanceof Node) { td.appendChild(value); continue; }
      const cell = (value !== null && typeof value === "object") ? value : { text: value };
      td.textContent = text(cell.text);
      if (cell.cls) td.className = cell.cls;
      if (cell.num || typeof cell.text === "number") td.classList.add("n");
      if (cell.id) td.id = cell.id;
    }
  }
}

function marked(value, runtime) {
  return { text: value + (runtime ? "*" : ""), cls: `state ${value}` };
}

function render(status) {
  $("active").textContent = status.active;
  $("uptime").textContent = age(status.uptime_seconds);
  const worst = Math.max(0, ...status.event_loops.map((l) => l.p99_ms_at_most ?? 10000));
  $("lag").textContent = status.event_loops.length ? `p99 ≤ ${worst} ms` : "-";
  $("version").textContent = `version ${status.version}`;
  $("window").textContent = `Charts: the last 5 minutes, one point every ${status.history_interval_seconds} s. * set at run time.`;

  fill($("services"), ["name", "kind", "state", "active", "served", "refused", "conn/s", "", "bytes/s", ""],
    status.services.map((s) => {
      const h = s.history || { connections_per_second: [], bytes_per_second: [] };
      const last = (list) => list.length ? list[list.length - 1] : 0;
      const id = (field) => `svc-${s.name}-${field}`;
      return [s.name, s.kind, marked(s.state, s.set_at_runtime),
        { text: s.active, id: id("active") },
        { text: s.totals.served || 0, id: id("served") },
        { text: s.totals.refused || 0, id: id("refused") },
        { text: rate(last(h.connections_per_second)), num: true },
        spark(h.connections_per_second),
        { text: size(Math.round(last(h.bytes_per_second))) + "/s", num: true },
        spark(h.bytes_per_second)];
    }));

  fill($("backends"), ["service", "member", "state", "weight", "active", "connections", "failures", "check", "source"],
    status.backends.map((b) => [b.service, b.udp ? b.backend + " (udp)" : b.backend, marked(b.state, b.set_at_runtime), b.weight,
      b.active, b.connections, b.failures,
      { text: b.last_check, cls: b.last_check || "" }, b.source]));

  $("sessions-total").textContent = `(${status.sessions.total} live)`;
  fill($("sessions"), ["id", "client", "service", "routed", "age", "in", "out", "backend", "tls"],
    status.sessions.busiest.map((s) => [s.id, s.client, s.service, s.udp ? `udp ${s.routed}` : s.routed, { text: age(s.age), num: true },
      { text: size(s.bytes_in), num: true }, { text: size(s.bytes_out), num: true }, s.backend,
      s.tls ? `${s.tls}${s.cert ? " " + s.cert : ""}` : null]));

  fill($("listeners"), ["kind", "address", "name", "detect", "tls", "proxy from"],
    status.listeners.map((l) => [l.kind, l.address, l.name, l.detect, l.tls, l.accept_proxy_from]));

  fill($("handoff"), ["pid", "uid", "names", "acks", "in flight"],
    status.handoff.map((h) => [h.pid, h.uid, h.names, h.acks, h.in_flight]));

  $("fleet-section").hidden = !status.fleet;
  if (status.fleet) {
    $("fleet-etcd").textContent = `etcd: ${status.fleet.etcd}`;
    fill($("fleet"), ["node", "address", "version", "uptime", "sessions", "last seen"],
      status.fleet.nodes.map((n) => [n.this ? `${n.node} (this)` : n.node, n.address, n.version,
        { text: `${n.uptime} s`, num: true }, n.sessions, { text: `${n.last_seen} s ago`, num: true }]));
  }

  fill($("loops"), ["worker", "samples", "mean", "p99 at most"],
    status.event_loops.map((l) => [l.worker, l.samples, { text: `${l.mean_ms.toFixed(2)} ms`, num: true },
      { text: l.p99_ms_at_most === null ? "> 10 s" : `${l.p99_ms_at_most} ms`, num: true }]));
}

async function poll() {
  try {
    const response = await fetch("status.json", { cache: "no-store" });
    if (!response.ok) throw new Error(`status.json: HTTP ${response.status}`);
    render(await response.json());
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = `not updating: ${e.message}`;
  }
  setTimeout(poll, 1000);
}
poll();
