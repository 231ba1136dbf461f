// The txstream console: polls the coordinator's /console/api routes and /tables.
// Everything shown is set as text (never as HTML): names and rows are user data.
"use strict";

const address = new URLSearchParams(location.search);
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};
const refreshMs = Math.max(500, Number(address.get("refresh") || 2000));
const state = {
  table: address.get("table"),
  sort: address.get("sort") || "key",
  order: address.get("order") === "desc" ? "desc" : "asc",
};

async function get(path) {
  const answer = await fetch(path, { headers });
  if (!answer.ok) {
    let why = answer.status + " " + answer.statusText;
    try { why = (await answer.json()).error || why; } catch (e) { /* not JSON */ }
    throw new Error(path + ": " + why);
  }
  return answer;
}

function panelError(panel, error) {
  const p = document.querySelector("#" + panel + " .error");
  p.hidden = !error;
  p.textContent = error ? String(error.message || error) : "";
}

function cell(row, value, numeric) {
  const td = row.insertCell();
  td.textContent = value === null || value === undefined ? "–" : String(value);
  if (numeric) td.className = "num";
  return td;
}

function fill(tbody, items, columns, emptyText) {
  tbody.replaceChildren();
  if (items.length === 0) {
    const row = tbody.insertRow();
    row.className = "empty";
    cell(row, emptyText).colSpan = columns.length;
    return;
  }
  for (const item of items) {
    const row = tbody.insertRow();
    for (const [key, numeric] of columns) cell(row, item[key], numeric);
  }
}

async function loadOverview() {
  const doc = await (await get("/console/api/overview")).json();
  document.getElementById("app-name").textContent = doc.app;
  document.title = "txstream · " + doc.app;
  const select = document.getElementById("table-select");
  select.replaceChildren(...doc.tables.map((t) => new Option(t, t)));
  if (!state.table || !doc.tables.includes(state.table)) state.table = doc.tables[0];
  select.value = state.table;
  select.onchange = () => { state.table = select.value; state.sort = "key"; refreshTable(); };
  document.getElementById("sort-select").onchange = (e) => {
    state.sort = e.target.value; refreshTable();
  };
  document.getElementById("order-select").onchange = (e) => {
    state.order = e.target.value; refreshTable();
  };
}

async function loadGraph() {
  try {
    const blob = await (await get("/console/api/graph.svg")).blob();
    document.getElementById("graph").src = URL.createObjectURL(blob);
    panelError("graph-panel", null);
  } catch (e) { panelError("graph-panel", e); }
}

async function refreshProcedures() {
  try {
    const doc = await (await get("/console/api/procedures")).json();
    document.getElementById("batches-per-s").textContent = doc.commits.batches_per_s;
    const p99 = doc.commits.commit_p99_ms;
    document.getElementById("commit-p99").textContent = p99 === null ? "–" : p99;
    const tbody = document.querySelector("#procedures tbody");
    fill(tbody, doc.procedures, [["procedure"], ["tes_per_s", true], ["p50_ms", true],
      ["p99_ms", true]], "no transaction executions in the last minute");
    doc.procedures.forEach((p, i) => { tbody.rows[i].dataset.procedure = p.procedure; });
    panelError("procedures-panel", null);
  } catch (e) { panelError("procedures-panel", e); }
}

async function refreshTransactions() {
  try {
    const doc = await (await get("/console/api/transactions")).json();
    const pill = document.getElementById("serving");
    pill.textContent = doc.serving ? "serving" : "standby";
    pill.className = "pill " + (doc.serving ? "serving" : "standby");
    document.getElementById("open-count").textContent = "(" + doc.open.length + ")";
    const items = doc.open.map((t) => ({ ...t, participants: t.participants.join(", "),
      voted_yes: t.voted_yes.join(", "), acknowledged: t.acknowledged.join(", ") }));
    fill(document.querySelector("#transactions tbody"), items, [["txn_id"], ["participants"],
      ["voted_yes"], ["decision"], ["acknowledged"], ["timeout_in_s", true]],
      doc.serving ? "none open" : "this coordinator is a standby: the active one holds them");
    panelError("transactions-panel", null);
  } catch (e) { panelError("transactions-panel", e); }
}

async function refreshDeadLetters() {
  try {
    const doc = await (await get("/console/api/dead-letters?limit=20")).json();
    document.getElementById("dead-letter-topic").textContent = "(" + doc.topic + ")";
    const items = doc.records.map((r) => ({ ...r,
      written_ms: new Date(r.written_ms).toLocaleTimeString() }));
    fill(document.querySelector("#dead-letters tbody"), items, [["written_ms"], ["procedure"],
      ["stream"], ["batch_id", true], ["reason"], ["error"]], "none");
    panelError("dead-letters-panel", null);
  } catch (e) { panelError("dead-letters-panel", e); }
}

async function refreshTable() {
  if (!state.table) return;
  try {
    const query = new URLSearchParams({ order: state.order, limit: "100" });
    if (state.sort !== "key") query.set("sort", state.sort);
    const path = "/console/api/tables/" + encodeURIComponent(state.table) + "?" + query;
    const doc = await (await get(path)).json();
    const rows = doc.rows.map(([key, row]) => ({ key: JSON.stringify(key), ...row }));
    const columns = ["key", ...new Set(rows.flatMap((r) => Object.keys(r).slice(1)))];
    const sortSelect = document.getElementById("sort-select");
    if (sortSelect.dataset.columns !== columns.join(",")) {
      sortSelect.replaceChildren(...columns.map((c) => new Option(c, c)));
      sortSelect.dataset.columns = columns.join(",");
    }
    sortSelect.value = state.sort;
    document.getElementById("order-select").value = state.order;
    document.getElementById("table-total").textContent =
      doc.total + " rows" + (doc.caught_up ? "" : ", still reading " + doc.source);
    const table = document.getElementById("table-rows");
    table.tHead.replaceChildren();
    const head = table.tHead.insertRow();
    for (const c of columns) head.appendChild(document.createElement("th")).textContent = c;
    fill(table.tBodies[0], rows, columns.map((c) => [c, rows.length > 0 &&
      typeof rows[0][c] === "number"]), "no rows");
    panelError("table-panel", null);
  } catch (e) { panelError("table-panel", e); }
}

async function refresh() {
  await Promise.all([refreshProcedures(), refreshTransactions(), refreshDeadLetters(),
    refreshTable()]);
  document.getElementById("updated").textContent =
    "updated " + new Date().toLocaleTimeString();
  document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
}

async function start() {
  try {
    await loadOverview();
  } catch (e) {
    document.getElementById("serving").textContent = String(e.message || e);
    setTimeout(start, refreshMs);
    return;
  }
  loadGraph();
  await refresh();
  setInterval(refresh, refreshMs);
}

start();
