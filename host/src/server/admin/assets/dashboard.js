// weir's dashboard: polls /api/overview once a second and drives the admin
// API with the session cookie the login set (never the token itself).
"use strict";

const $ = (sel) => document.querySelector(sel);
const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#4b5563"];
const rows = new Map(); // route path -> its <tr>
let timer = null;

async function api(method, path, body, contentType) {
  const headers = {};
  // Every change carries the header a cross-site form cannot send.
  if (method !== "GET") headers["X-Weir-Admin"] = "1";
  if (contentType) headers["Content-Type"] = contentType;
  const resp = await fetch(path, { method, headers, body, credentials: "same-origin", cache: "no-store" });
  let data = null;
  const text = await resp.text();
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  return { status: resp.status, data };
}

function routeEndpoint(route, action) {
  return "/routes/" + encodeURIComponent(route) + "/" + action;
}

function rate(n) {
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(2) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(2) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n.toFixed(0) + " B";
}

function pairs(obj) {
  const list = Object.entries(obj || {}).map(([k, v]) => k + ": " + v);
  return list.length ? list.join(", ") : "—";
}

function setStatus(text, isError) {
  const s = $("#status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

function makeRow(route) {
  const tr = document.createElement("tr");
  tr.dataset.route = route.path;
  for (const cls of ["path", "behaviour", "version", "conns", "min", "mout", "bin", "bout", "p99", "faults", "overload", "closes", "actions"]) {
    const td = document.createElement("td");
    td.className = cls;
    if (cls === "faults" || cls === "overload" || cls === "closes") td.classList.add("small");
    tr.appendChild(td);
  }
  tr.querySelector(".path").textContent = route.path;
  tr.querySelector(".behaviour").textContent = route.behaviour;
  const actions = document.createElement("div");
  actions.className = "actions";
  if (route.behaviour === "guest") {
    const file = document.createElement("input");
    file.type = "file";
    file.accept = ".wasm,application/wasm";
    file.dataset.route = route.path;
    file.className = "deploy-file";
    actions.appendChild(file);
    const deployBtn = button("deploy", () => deploy(route.path, file));
    deployBtn.className = "deploy";
    actions.appendChild(deployBtn);
    const rollbackBtn = button("rollback", () => change(route.path, "rollback"));
    rollbackBtn.className = "rollback";
    actions.appendChild(rollbackBtn);
  }
  const drainBtn = button("drain", () => change(route.path, tr.classList.contains("draining") ? "resume" : "drain"));
  drainBtn.className = "drain";
  actions.appendChild(drainBtn);
  // A pattern's parameters must be filled in first: "try" puts the pattern
  // in the box and selects its first parameter to be typed over.
  actions.appendChild(button("try", () => {
    const box = $("#console-path");
    box.value = route.path;
    const at = route.path.indexOf("{");
    box.focus();
    if (at >= 0) box.setSelectionRange(at, route.path.indexOf("}", at) + 1);
    else $("#console-text").focus();
  }));
  tr.querySelector(".actions").appendChild(actions);
  return tr;
}

function render(data) {
  const g = data.gateway;
  $("#gateway").textContent = `${g.connections} connections · ${g.upgrades} upgrades · ` +
    `${g.refused_origin} refused by origin${g.draining ? " · DRAINING" : ""}`;
  const tbody = $("#routes tbody");
  const seen = new Set();
  for (const r of data.routes) {
    seen.add(r.path);
    let tr = rows.get(r.path);
    if (!tr) {
      tr = makeRow(r);
      rows.set(r.path, tr);
      tbody.appendChild(tr);
    }
    tr.classList.toggle("draining", !!r.draining);
    tr.querySelector(".version").textContent = r.version !== undefined
      ? `v${r.version}` + (r.pinned ? " · pinned" : "") +
        (r.kept_versions && r.kept_versions.length ? ` (kept ${r.kept_versions.map((v) => "v" + v).join(", ")})` : "")
      : "—";
    tr.querySelector(".version").title = r.pinned
      ? "pinned by a rollback: reloads keep this version until the next deploy or POST /routes/{path}/unpin" : "";
    tr.querySelector(".conns").textContent = String(r.connections);
    tr.querySelector(".min").textContent = rate(r.per_second.messages_in);
    tr.querySelector(".mout").textContent = rate(r.per_second.messages_out);
    tr.querySelector(".bin").textContent = bytes(r.per_second.bytes_in);
    tr.querySelector(".bout").textContent = bytes(r.per_second.bytes_out);
    tr.querySelector(".p99").textContent = r.call_p99_us === undefined ? "—"
      : r.call_p99_us === null ? "no calls" : "≤ " + r.call_p99_us + " µs";
    tr.querySelector(".faults").textContent = r.faults === undefined ? "—" : pairs(r.faults);
    tr.querySelector(".overload").textContent = pairs(r.overload);
    tr.querySelector(".closes").textContent = pairs(r.closes);
    const drainBtn = tr.querySelector("button.drain");
    drainBtn.textContent = r.draining ? "resume" : "drain";
    const rollbackBtn = tr.querySelector("button.rollback");
    if (rollbackBtn) rollbackBtn.disabled = !(r.kept_versions && r.kept_versions.length);
  }
  for (const [path, tr] of rows) {
    if (!seen.has(path)) { tr.remove(); rows.delete(path); }
  }
  const plain = data.routes.find((r) => !r.path.includes("{"));
  $("#console-path").placeholder = plain ? plain.path : "/path";
  const order = data.routes.map((r) => r.path);
  chart($("#chart-connections"), data.history, "connections", order);
  chart($("#chart-messages"), data.history, "messages_in", order);
  const legend = $("#legend");
  legend.replaceChildren(...data.routes.map((r, i) => {
    const span = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = COLORS[i % COLORS.length];
    span.append(swatch, r.path);
    return span;
  }));
}

// One line per route, in the table's order (the legend's colours).
function chart(svg, history, key, order) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 600, H = 180, PAD = 16;
  const paths = order.filter((p) => history.routes[p]);
  let max = 1;
  for (const p of paths) for (const v of history.routes[p][key]) if (v !== null && v > max) max = v;
  const n = history.t.length;
  const children = [];
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "11");
  label.textContent = rate(max) + (n ? ` · last ${n} s` : " · collecting…");
  children.push(label);
  paths.forEach((p, i) => {
    const values = history.routes[p][key];
    const points = [];
    values.forEach((v, j) => {
      if (v === null) return;
      const x = n <= 1 ? W : (j / (n - 1)) * W;
      const y = H - (v / max) * (H - PAD);
      points.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLORS[i % COLORS.length]);
    line.setAttribute("stroke-width", "2");
    line.dataset.route = p;
    children.push(line);
  });
  svg.replaceChildren(...children);
}

async function deploy(route, fileInput) {
  const file = fileInput.files && fileInput.files[0];
  if (!file) { setStatus(`choose a .wasm component for ${route} first`, true); return; }
  setStatus(`deploying ${file.name} to ${route}…`);
  let r;
  try {
    const body = await file.arrayBuffer();
    r = await api("PUT", routeEndpoint(route, "component"), body, "application/wasm");
  } catch (e) {
    setStatus(`deploy to ${route} failed: ${e}`, true);
    return;
  }
  if (r.status === 200) {
    setStatus(`deployed ${route}: version ${r.data.version} (${String(r.data.hash).slice(0, 12)})`);
    fileInput.value = "";
  } else {
    setStatus(`deploy to ${route} failed (${r.status}): ${r.data && r.data.error ? r.data.error : r.data}`, true);
  }
  refresh();
}

async function change(route, action) {
  const r = await api("POST", routeEndpoint(route, action));
  if (r.status === 200) {
    const what = action === "rollback" ? `rolled back to version ${r.data.version}`
      : action === "drain" ? `drained (${r.data.closing} connections closing)` : "resumed";
    setStatus(`${route}: ${what}`);
  } else {
    setStatus(`${action} ${route} failed (${r.status}): ${r.data && r.data.error ? r.data.error : r.data}`, true);
  }
  refresh();
}

let fleetTick = 0;

// The fleet's view (GET /fleet), every other second: one row per route and
// node, a node that does not serve the desired version marked diverged.
async function refreshFleet() {
  const r = await api("GET", "/fleet");
  const summary = $("#fleet-summary");
  const tbody = $("#fleet-routes tbody");
  if (r.status !== 200) {
    summary.textContent = `fleet view unavailable (${r.status}): ${r.data && r.data.error ? r.data.error : r.data}`;
    summary.className = "error";
    return;
  }
  const routes = r.data.routes || [];
  const diverged = routes.filter((route) => !route.agrees).map((route) => route.route);
  summary.className = diverged.length ? "error" : "";
  summary.textContent = `${(r.data.nodes || []).length} nodes · this one is ${r.data.node} · ` +
    (routes.length === 0 ? "nothing deployed to the fleet yet"
      : diverged.length ? `DIVERGED: ${diverged.join(", ")}` : "every node agrees");
  const trs = [];
  for (const route of routes) {
    const d = route.desired;
    for (const n of route.nodes) {
      const tr = document.createElement("tr");
      tr.className = n.agrees ? "" : "diverged";
      const cells = [route.route, n.node,
        n.fleet_version === null ? "—" : `${n.fleet_version} of ${d.version}`,
        n.version === null ? "—" : `v${n.version}`,
        n.hash ? n.hash.slice(0, 12) : "—", n.state];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      tr.title = `desired: ${d.action} by ${d.who}, sha256 ${d.digest}`;
      trs.push(tr);
    }
  }
  tbody.replaceChildren(...trs);
}

async function refresh() {
  const r = await api("GET", "/api/overview");
  if (r.status === 401) { showLogin(); return; }
  if (r.status === 200) {
    showMain();
    render(r.data);
    $("#fleet").hidden = !r.data.fleet;
    if (r.data.fleet && fleetTick++ % 2 === 0) refreshFleet();
  }
}

function showLogin() {
  if (timer) { clearInterval(timer); timer = null; }
  $("#main").hidden = true;
  $("#logout").hidden = true;
  $("#login").hidden = false;
  $("#token").focus();
}

function showMain() {
  $("#login").hidden = true;
  $("#main").hidden = false;
  $("#logout").hidden = false;
  if (!timer) timer = setInterval(refresh, 1000);
}

$("#login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const token = $("#token");
  const r = await api("POST", "/session", token.value.trim(), "text/plain");
  token.value = "";
  if (r.status === 204) { $("#login-error").textContent = ""; refresh(); }
  else $("#login-error").textContent = "That token was refused.";
});

$("#logout").addEventListener("click", async () => {
  await api("DELETE", "/session");
  rows.forEach((tr) => tr.remove());
  rows.clear();
  showLogin();
});

// The console: a WebSocket to this admin listener, bridged to the route.
let consoleSocket = null;

function logLine(cls, text) {
  const li = document.createElement("li");
  li.className = cls;
  li.textContent = text;
  const log = $("#console-log");
  log.appendChild(li);
  log.scrollTop = log.scrollHeight;
}

function consoleOpen(open) {
  $("#console-text").disabled = !open;
  $("#console-send").disabled = !open;
  $("#console-close").disabled = !open;
  $("#console-open").disabled = open;
}

$("#console-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const path = $("#console-path").value.trim();
  if (/[{}]/.test(path)) {
    setStatus(`${path} is a route pattern: fill in its parameters, e.g. /rooms/lobby for /rooms/{room}`, true);
    return;
  }
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + "/console?path=" + encodeURIComponent(path));
  consoleSocket = ws;
  logLine("meta", `opening ${path}…`);
  ws.onmessage = (m) => {
    let ev;
    try { ev = JSON.parse(m.data); } catch (_) { logLine("meta", m.data); return; }
    if (ev.kind === "open") { consoleOpen(true); logLine("meta", "open" + (ev.protocol ? ` (${ev.protocol})` : "")); }
    else if (ev.kind === "text") logLine("in", "← " + ev.data);
    else if (ev.kind === "binary") logLine("in", `← binary, ${atob(ev.base64).length} bytes`);
    else if (ev.kind === "close") logLine("meta", `closed: ${ev.code}${ev.reason ? " " + ev.reason : ""}`);
    else if (ev.kind === "refused") logLine("meta", `refused: HTTP ${ev.status}${ev.body ? " " + ev.body.trim() : ""}`);
    else if (ev.kind === "error") logLine("meta", "error: " + ev.message);
  };
  ws.onclose = () => { consoleOpen(false); if (consoleSocket === ws) consoleSocket = null; };
});

$("#console-send-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#console-text").value;
  if (consoleSocket && consoleSocket.readyState === WebSocket.OPEN) {
    consoleSocket.send(text);
    logLine("out", "→ " + text);
  }
});

$("#console-close").addEventListener("click", () => {
  if (consoleSocket) consoleSocket.close(1000);
});

refresh();
