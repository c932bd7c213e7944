// ytsched web UI: one page, four views, refreshed in place every REFRESH_MS from the
// JSON API. What the reader expanded or collapsed is kept across refreshes (and
// reloads, in localStorage).
"use strict";

const REFRESH_MS = 1500;
const collapsed = new Set(JSON.parse(localStorage.getItem("ytsched.collapsed") || "[]"));
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const pct = (x) => (x == null ? "-" : (x * 100).toFixed(1) + "%");
const RESOURCES = ["cpu", "memory", "gpu", "user_slots"];

window.addEventListener("error", (e) => report("script error: " + e.message));
window.addEventListener("unhandledrejection", (e) => report("script error: " + (e.reason && e.reason.message || e.reason)));
function report(msg) {
  const div = document.createElement("div");
  div.textContent = msg;
  document.getElementById("errors").appendChild(div);
}

// The web token (`ytsched auth token USER`): taken once from a `#token=` link (what
// `ytsched up` prints) or the sign-in form, then kept in this browser's localStorage and
// sent as a Bearer header; the address bar never keeps it.
const TOKEN_KEY = "ytsched.token";
(function takeTokenFromLink() {
  const m = location.hash.match(/^#token=([A-Za-z0-9_]{1,200})$/);
  if (!m) return;
  localStorage.setItem(TOKEN_KEY, m[1]);
  history.replaceState(null, "", location.pathname + location.search);
})();

class NeedsToken extends Error {}

async function json(path) {
  const token = localStorage.getItem(TOKEN_KEY);
  const headers = token ? {Authorization: "Bearer " + token} : {};
  const r = await fetch(path, {cache: "no-store", headers});
  if (r.status === 401) throw new NeedsToken(await r.text());
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}

// ---- acting on an operation ----------------------------------------------------------
// Buttons go through YTsaurus's HTTP API (`/api/v4/...`, POST: nothing that changes
// state is reachable by a GET), as the signed-in user, with the same rights as on the
// bus; each asks for confirmation first. The server decides: a button shown to someone
// who may not act would only get a 403.
let viewer = null;
async function me() {
  if (!viewer) viewer = await json("/api/v4/get_current_user");
  return viewer;
}

async function act(command, params) {
  const token = localStorage.getItem(TOKEN_KEY);
  const r = await fetch(`/api/v4/${command}`, {
    method: "POST",
    cache: "no-store",
    headers: {Authorization: "Bearer " + token, "Content-Type": "application/json", "X-YT-Header-Format": "json"},
    body: JSON.stringify(params),
  });
  if (!r.ok) {
    let message = r.status + "";
    try { message = JSON.parse(await r.text()).message; } catch (_) { /* not a YT error */ }
    throw new Error(`${command}: ${message}`);
  }
}

const ACTIONS = {
  abort: {label: "Abort", ask: (id) => `Abort operation ${id}? Its running jobs are killed; this cannot be undone.`, run: (id) => act("abort_operation", {operation_id: id})},
  suspend: {label: "Suspend", ask: (id) => `Suspend operation ${id}? It gets no new jobs until resumed; running jobs go on.`, run: (id) => act("suspend_operation", {operation_id: id})},
  resume: {label: "Resume", ask: (id) => `Resume operation ${id}?`, run: (id) => act("resume_operation", {operation_id: id})},
  update: {
    label: "Change pool/weight",
    ask: (id) => `Move operation ${id} to pool '${draft.pool}' with weight ${draft.weight}?`,
    run: (id) => act("update_operation_parameters", {operation_id: id, parameters: {pool: draft.pool, weight: Number(draft.weight)}}),
  },
};
let pending = null; // {action, id} awaiting confirmation
const draft = {pool: null, weight: null, id: null};
let actionMessage = "";

function mayControl(info, who) {
  return who.admin || info.user === who.user || (info.spec.owners || []).includes(who.user);
}

function actionsPanel(info, who) {
  if (!["pending", "running"].includes(info.state) || !mayControl(info, who)) return "";
  if (draft.id !== info.id) Object.assign(draft, {id: info.id, pool: info.pool, weight: info.weight});
  if (pending && pending.id === info.id) {
    return `<div class="confirm" id="confirm"><p>${esc(ACTIONS[pending.action].ask(info.id))}</p>` +
      `<button data-confirm="yes">Confirm</button> <button data-confirm="no">Cancel</button></div>`;
  }
  const buttons = ["abort", info.suspended ? "resume" : "suspend"]
    .map((a) => `<button data-action="${a}">${ACTIONS[a].label}</button>`).join(" ");
  return `<div class="actions">${buttons} · pool <input data-draft="pool" size="16" value="${esc(draft.pool)}"> ` +
    `weight <input data-draft="weight" size="5" value="${esc(draft.weight)}"> <button data-action="update">${ACTIONS.update.label}</button>` +
    `<p class="muted" id="action-message">${esc(actionMessage)}</p></div>`;
}

document.addEventListener("input", (e) => {
  if (e.target.dataset && e.target.dataset.draft) draft[e.target.dataset.draft] = e.target.value;
});

document.addEventListener("click", async (e) => {
  const button = e.target.closest("button[data-action], button[data-confirm]");
  if (!button) return;
  const id = document.querySelector("[data-operation-id]")?.dataset.operationId;
  if (button.dataset.action) {
    pending = {action: button.dataset.action, id};
  } else if (button.dataset.confirm === "yes" && pending) {
    const {action} = pending;
    pending = null;
    try {
      await ACTIONS[action].run(id);
      actionMessage = `${ACTIONS[action].label}: done`;
    } catch (err) {
      actionMessage = err.message;
    }
  } else {
    pending = null;
  }
  refresh();
});

function signInForm(why) {
  return `<h1>Sign in</h1><form id="sign-in"><p class="muted">${esc(why)}</p>` +
    `<p>Paste a web token (<code>ytsched auth token USER</code> prints one):</p>` +
    `<input id="token" type="password" autocomplete="off" size="72" placeholder="ytst_…"> <button type="submit">Sign in</button></form>`;
}

document.addEventListener("submit", (e) => {
  if (e.target.id !== "sign-in") return;
  e.preventDefault();
  const t = document.getElementById("token").value.trim();
  if (t) localStorage.setItem(TOKEN_KEY, t);
  viewer = null;
  signingIn = false;
  refresh();
});

function bar(kind, ratio, title) {
  const w = Math.max(0, Math.min(1, ratio || 0)) * 100;
  return `<div class="bar ${kind}" title="${esc(title)}"><span style="width:${w.toFixed(1)}%"></span></div>`;
}

// Usage, fair share and demand bars at the dominant resource; every resource on hover.
function bars(e) {
  const per = (v) => RESOURCES.map((r) => `${r} ${pct(v && v[r])}`).join(", ");
  const fair = e.detailed_fair_share ? e.detailed_fair_share.total : null;
  return `<td class="bars">` +
    bar("usage", e.usage_ratio, "usage " + pct(e.usage_ratio) + " — " + per(e.usage_share)) +
    bar("fair", e.fair_share_ratio, "fair share " + pct(e.fair_share_ratio) + " — " + per(fair)) +
    bar("demand", e.demand_ratio, "demand " + pct(e.demand_ratio) + " — " + per(e.demand_share)) +
    `</td><td class="nums">${pct(e.usage_ratio)} / ${pct(e.fair_share_ratio)} / ${pct(e.demand_ratio)}</td>`;
}

function resources(v) {
  if (!v) return "";
  return Object.entries(v).filter(([, x]) => x != null && isFinite(x) && x > 0)
    .map(([k, x]) => k === "memory" ? `${k} ${(x / 2 ** 30).toFixed(1)}G` : `${k} ${x}`).join(", ");
}

function starvation(s) {
  return s && s !== "non_starving" ? `<span class="starving">${esc(s)}</span>` : esc(s || "");
}

// ---- pool trees -----------------------------------------------------------------
async function poolsView() {
  const orchid = await json("/api/orchid");
  const trees = orchid.scheduler.pool_trees;
  let h = `<h1>Pool trees</h1><p class="legend">bars:<span style="background:#16a34a"></span>usage<span style="background:#2563eb"></span>fair share<span style="background:#f59e0b"></span>demand (at the dominant resource; hover for each resource)</p>`;
  for (const [name, t] of Object.entries(trees)) {
    h += `<h2 data-tree="${esc(name)}">${esc(name)}</h2><p class="muted">${t.node_count} node(s) · ${esc(resources(t.resource_limits))}</p>`;
    for (const a of t.alerts || []) h += `<div class="alert">${esc(a)}</div>`;
    h += `<table><tr><th>pool / operation</th><th>usage · fair share · demand</th><th></th><th>mode</th><th>weight</th><th>guarantee</th><th>limits</th><th>starvation</th><th>integral volume</th><th>operations</th></tr>`;
    const children = {};
    for (const [p, v] of Object.entries(t.pools)) (children[v.parent ?? ""] ||= []).push(["pool", p, v]);
    for (const [o, v] of Object.entries(t.operations)) (children[v.pool] ||= []).push(["op", o, v]);
    const rows = (parent, depth) => {
      let out = "";
      for (const [kind, id, v] of (children[parent] || []).sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] === "pool" ? -1 : 1))) {
        const key = `${name}/${kind}/${id}`;
        const kids = children[id] || [];
        const open = !collapsed.has(key);
        const toggle = kind === "pool" && kids.length ? `<span class="toggle" data-key="${esc(key)}">${open ? "▾" : "▸"}</span>` : `<span class="toggle"></span>`;
        const label = kind === "pool" ? esc(id) : `<a href="/operations/${esc(id)}">${esc(id)}</a> <span class="muted">${esc(v.user || "")} · ${esc(v.state || "")}</span>`;
        out += `<tr class="${kind}" data-${kind === "pool" ? "pool" : "operation"}="${esc(id)}"><td class="name" style="padding-left:${0.5 + depth * 1.3}em">${toggle}${label}</td>` + bars(v) +
          `<td>${esc(v.mode || "")}</td><td>${v.weight ?? ""}</td><td>${esc(resources(v.strong_guarantee_resources))}</td><td>${esc(resources(v.resource_limits))}</td>` +
          `<td>${starvation(v.starvation_status)}</td><td>${v.accumulated_resource_ratio_volume != null ? v.accumulated_resource_ratio_volume.toFixed(2) : ""}</td>` +
          `<td>${kind === "pool" ? `${v.running_operation_count}/${v.max_running_operation_count} running` : `${v.running_job_count} job(s) running`}</td></tr>`;
        if (kind === "pool" && open) out += rows(id, depth + 1);
      }
      return out;
    };
    h += rows("", 0) + `</table>`;
  }
  return h;
}

// ---- operations -------------------------------------------------------------------
// Newest first, a page at a time: `/operations?cursor=…` goes on from where the
// previous page stopped.
async function operationsView() {
  const cursor = new URLSearchParams(location.search).get("cursor");
  const page = await json("/api/operations?limit=100" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  const ops = page.operations;
  let h = `<h1>Operations</h1><table><tr><th>id</th><th>title</th><th>user</th><th>pool</th><th>state</th><th>jobs running/completed/total</th></tr>`;
  for (const o of ops) {
    h += `<tr data-operation="${esc(o.id)}"><td><a href="/operations/${esc(o.id)}">${esc(o.id)}</a></td><td>${esc(o.title || "")}</td><td>${esc(o.user)}</td><td>${esc(o.pool)}</td><td>${esc(stateWords(o))}${o.spec && o.spec.is_gang ? " · gang" : ""}</td><td>${o.jobs.running}/${o.jobs.completed}/${o.jobs.total}</td></tr>`;
  }
  h += `</table>`;
  if (page.next_cursor) h += `<p><a id="older" href="/operations?cursor=${encodeURIComponent(page.next_cursor)}">older operations</a></p>`;
  return h;
}

// An operation's state, with why it may not be given jobs (suspended, pending...).
function stateWords(o) {
  return o.unschedulable_reason && o.unschedulable_reason !== o.state ? `${o.state} (${o.unschedulable_reason})` : o.state;
}

function chart(samples) {
  if (!samples.length) return `<p class="muted">no samples yet (taken every 2 s from fair-share updates, kept 5 minutes)</p>`;
  if (samples.length === 1) samples = [samples[0], {...samples[0], at: samples[0].at + 1}];
  const W = 640, H = 160, t0 = samples[0].at, t1 = Math.max(samples[samples.length - 1].at, t0 + 1);
  const top = Math.max(0.01, ...samples.map((s) => Math.max(s.usage, s.fair_share)));
  const line = (f) => samples.map((s) => `${((s.at - t0) / (t1 - t0) * W).toFixed(1)},${(H - f(s) / top * (H - 10)).toFixed(1)}`).join(" ");
  return `<svg class="chart" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}"><polyline fill="none" stroke="#2563eb" stroke-width="2" points="${line((s) => s.fair_share)}"/><polyline fill="none" stroke="#16a34a" stroke-width="2" points="${line((s) => s.usage)}"/></svg>` +
    `<p class="legend"><span style="background:#16a34a"></span>usage<span style="background:#2563eb"></span>fair share · last ${Math.round((t1 - t0) / 1000)} s, top of chart ${pct(top)} of the tree</p>`;
}

async function operationView(id) {
  const enc = encodeURIComponent(id);
  const [info, jobs, why, history, who] = await Promise.all([
    json(`/api/operations/${enc}`),
    json(`/api/operations/${enc}/jobs?limit=100`),
    json(`/api/operations/${enc}/explain`).catch(() => null),
    json(`/api/operations/${enc}/history`).catch(() => []),
    me().catch(() => ({user: null, admin: false})),
  ]);
  let h = `<h1>Operation <span data-operation-id="${esc(info.id)}">${esc(info.id)}</span></h1>${actionsPanel(info, who)}<table>`;
  for (const [k, v] of [["title", info.title], ["user", info.user], ["pool", Object.entries(info.pool_trees || {}).map(([t, p]) => `${t}: ${p}`).join(", ") || info.pool], ["state", stateWords(info)], ["gang", info.spec.is_gang ? "yes: all its jobs run together or none does" : "no"], ["weight", info.weight], ["resource limits", info.spec.resource_limits ? resources(info.spec.resource_limits) : ""], ["jobs", `${info.jobs.total} total: ${info.jobs.waiting} waiting, ${info.jobs.running} running, ${info.jobs.completed} completed, ${info.jobs.failed} failed, ${info.jobs.aborted} aborted`], ["usage", resources(info.resource_usage)], ["demand", resources(info.resource_demand)], ["error", info.error]]) {
    h += `<tr><th>${k}</th><td>${esc(v ?? "")}</td></tr>`;
  }
  h += `</table><h2>Tasks</h2><table><tr><th>task</th><th>command</th><th>jobs</th><th>cpu</th><th>memory</th><th>gpu</th><th>files · layers</th></tr>`;
  for (const [name, t] of Object.entries(info.spec.tasks || {})) {
    h += `<tr><td>${esc(name)}</td><td><code>${esc(t.command)}</code></td><td>${t.job_count ?? 1}</td><td>${t.cpu_limit ?? ""}</td><td>${typeof t.memory_limit === "number" ? (t.memory_limit / 2 ** 20).toFixed(0) + "M" : esc(t.memory_limit ?? "")}</td><td>${t.gpu_limit ?? 0}</td><td>${esc((t.file_paths || []).map((f) => f.file_name + (f.executable ? " (x)" : "")).join(", "))}${(t.layer_paths || []).length ? " · " + t.layer_paths.length + " layer(s)" : ""}</td></tr>`;
  }
  h += `</table><h2>Why it is where it is</h2><pre id="explain">${esc(why ? why.text : "not available")}</pre>`;
  h += `<h2>Usage against fair share</h2>${chart(history)}`;
  // The operation's own history (submitted, pending and why, running, its end) with
  // what happened to the jobs shown below (preempted, aborted, failed).
  const events = (info.history || []).map((e) => [e.time, e.event]);
  for (const j of jobs.jobs) {
    if (j.state === "failed") events.push([j.finish_time, `job ${j.id} failed: ${j.error || ""}`]);
    if (j.state === "aborted") events.push([j.finish_time, `job ${j.id} ${j.abort_reason === "preempted" ? "preempted" : "aborted (" + (j.abort_reason || "") + ")"}: ${j.error || ""}`]);
  }
  events.sort((a, b) => (a[0] || 0) - (b[0] || 0));
  h += `<h2>Events</h2><table><tr><th>time</th><th>event</th></tr>`;
  for (const [t, e] of events) h += `<tr class="event"><td>${t ? new Date(t).toLocaleTimeString() : ""}</td><td>${esc(e)}</td></tr>`;
  h += `</table><h2>Jobs</h2><table><tr><th>job</th><th>task</th><th>state</th><th>node</th><th>start</th><th>finish</th><th>abort reason / error</th></tr>`;
  const time = (ms) => (ms ? new Date(ms).toLocaleTimeString() : "");
  for (const j of jobs.jobs) {
    h += `<tr data-job="${esc(j.id)}"><td>${esc(j.id)}</td><td>${esc(j.task_name)}#${j.job_index}</td><td>${esc(j.state)}</td><td>${esc(j.node_id || "")}</td><td>${time(j.start_time)}</td><td>${time(j.finish_time)}</td><td>${esc([j.abort_reason, j.error].filter(Boolean).join(": "))}</td></tr>`;
  }
  h += `</table>`;
  if (jobs.next_cursor) h += `<p class="muted">The first 100 attempts; all: <code>ytsched list-jobs ${esc(id)}</code></p>`;
  return h;
}

// ---- nodes ------------------------------------------------------------------------
async function nodesView() {
  const page = await json("/api/nodes?limit=5000");
  const nodes = page.nodes;
  let h = `<h1>Nodes</h1><table><tr><th>node</th><th>state</th><th>tree</th><th>utilization</th><th></th><th>running jobs</th><th>tags</th><th>maintenance</th></tr>`;
  for (const n of nodes) {
    const util = RESOURCES.filter((r) => n.resource_limits[r] > 0)
      .map((r) => [r, n.resource_usage[r] / n.resource_limits[r]]);
    const m = n.maintenance || {};
    const maint = ["banned", "decommissioned", "disable_scheduler_jobs"].filter((k) => m[k]).join(", ");
    h += `<tr data-node="${esc(n.id)}"><td>${esc(n.id)}</td><td>${esc(n.state)}${n.error ? " — " + esc(n.error) : ""}</td><td>${esc(n.tree || "")}</td><td class="bars">` +
      util.map(([r, u]) => bar("usage", u, `${r} ${pct(u)}`)).join("") +
      `</td><td>${util.map(([r, u]) => `${r} ${pct(u)}`).join("<br>")}</td><td>${n.running_job_count}</td><td>${esc([...n.system_tags, ...n.tags, ...n.user_tags].join(" "))}</td><td>${esc(maint || "in service")}</td></tr>`;
  }
  h += `</table>`;
  if (page.next_cursor) h += `<p class="muted">The first ${nodes.length} nodes; all: <code>ytsched list-nodes</code> or <code>/api/nodes?cursor=…</code></p>`;
  return h;
}

// ---- usage --------------------------------------------------------------------------
// Who used how much over a window, from the event log (`ytsched usage`), with each
// pool's usage against its fair share over the window.
async function usageView() {
  const q = new URLSearchParams(location.search);
  const by = q.get("by") || "pool", since = q.get("since") || "7d";
  const r = await json(`/api/usage?by=${encodeURIComponent(by)}&since=${encodeURIComponent(since)}`);
  const link = (b, s, text, on) => `<a class="${on ? "active" : ""}" href="/usage?by=${b}&since=${s}">${text}</a>`;
  let h = `<h1>Usage</h1><p class="choices">by ${["pool", "user", "tree", "operation"].map((b) => link(b, since, b, b === by)).join(" ")}` +
    ` · over the last ${["1h", "24h", "7d", "30d"].map((s) => link(by, s, s, s === since)).join(" ")}</p>`;
  const f = (v, d = 3) => (v == null ? "" : Number(v).toFixed(d));
  h += `<table id="usage"><tr><th>${esc(by)}</th><th>cpu-hours</th><th>memory GiB-hours</th><th>gpu-hours</th><th>completed</th><th>failed</th><th>aborted</th><th>preempted</th><th>hours lost to preemption</th><th>operations</th><th>wait p50 s</th><th>wait p95 s</th><th>fair-share attainment</th><th>bytes fetched</th></tr>`;
  for (const row of r.rows) {
    h += `<tr data-group="${esc(row.group)}"><td>${esc(row.group)}</td><td>${f(row.cpu_hours)}</td><td>${f(row.memory_gib_hours)}</td><td>${f(row.gpu_hours)}</td><td>${row.jobs_completed}</td><td>${row.jobs_failed}</td><td>${row.jobs_aborted}</td><td>${row.jobs_preempted}</td><td>${f(row.hours_lost_to_preemption)}</td><td>${row.operations}</td><td>${f(row.wait_p50_s, 1)}</td><td>${f(row.wait_p95_s, 1)}</td><td>${f(row.fair_share_attainment)}</td><td>${row.bytes_fetched ?? 0}</td></tr>`;
  }
  h += `</table>`;
  if (!r.rows.length) h += `<p class="muted">nothing ran in this window</p>`;
  for (const [pool, points] of Object.entries(r.series || {})) {
    h += `<h2>${esc(pool)}</h2>${chart(points)}`;
  }
  return h;
}

// ---- routing and refresh ------------------------------------------------------------
// The link YTsaurus's client prints for an operation (`/?page=operation&id=...`).
(function followYtLink() {
  const q = new URLSearchParams(location.search);
  if (q.get("page") === "operation" && q.get("id")) {
    history.replaceState(null, "", "/operations/" + encodeURIComponent(q.get("id")) + location.hash);
  }
})();

function view() {
  const p = location.pathname;
  if (p.startsWith("/operations/")) return ["operations", () => operationView(decodeURIComponent(p.slice("/operations/".length)))];
  if (p === "/operations") return ["operations", operationsView];
  if (p === "/nodes") return ["nodes", nodesView];
  if (p === "/usage") return ["usage", usageView];
  return ["pools", poolsView];
}

let busy = false;
let signingIn = false;
async function refresh() {
  if (busy || signingIn) return;
  // What is being typed or confirmed is not redrawn away.
  if (document.activeElement && document.activeElement.dataset && document.activeElement.dataset.draft) return;
  busy = true;
  const [name, render] = view();
  try {
    const html = await render();
    const page = document.getElementById("page");
    const y = window.scrollY;
    page.innerHTML = html;
    window.scrollTo(0, y);
    for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.getAttribute("href").slice(1) === name);
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.ready = "1";
  } catch (e) {
    if (e instanceof NeedsToken) {
      // Polling stops until a token is given: a refresh would wipe what is being typed.
      signingIn = true;
      document.getElementById("page").innerHTML = signInForm(e.message);
      document.getElementById("status").textContent = "signed out";
      document.body.dataset.ready = "1";
      return;
    }
    document.getElementById("status").textContent = "not updated: " + e.message;
  } finally {
    busy = false;
  }
}

document.addEventListener("click", (e) => {
  const t = e.target.closest(".toggle[data-key]");
  if (!t) return;
  const key = t.dataset.key;
  if (collapsed.has(key)) collapsed.delete(key); else collapsed.add(key);
  localStorage.setItem("ytsched.collapsed", JSON.stringify([...collapsed]));
  refresh();
});

refresh();
setInterval(refresh, REFRESH_MS);
