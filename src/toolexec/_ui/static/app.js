// toolexec ui: the page's one script. Every text from the journal is put in the
// document with textContent (never as markup); the server has already escaped
// it as the terminal display does.
"use strict";

const ROW = 24;          // px per table row (app.css --row)
const PAGE = 200;        // rows per fetched page (the server's PAGE)
const POLL_MS = 500;     // how often the page looks again
const LANE = 24;         // px per timeline lane

const state = {
  token: "", session: null, total: 0, pages: new Map(), batch: null, detail: null,
  loadStarted: 0, loadMs: null,
};

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else if (key === "data") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function readToken() {
  const match = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem("toolexec-token", decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem("toolexec-token") || "";
}

async function api(path, body) {
  const init = { headers: { "X-Toolexec-Token": state.token } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function when(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
}

function stateClass(text) {
  if (text === "ok" || text === "done" || text === "finished") return "s-ok";
  if (text === "running" || text === "waiting") return "s-running";
  if (text === "asking" || text === "waiting for approval") return "s-asking";
  return "s-error";
}

// -- sessions and their agent trees ------------------------------------------------

function renderSessions(sessions) {
  const list = document.getElementById("session-list");
  list.replaceChildren(...sessions.map((s) => {
    const agents = el("ul", {}, ...s.agents.map((a) => {
      const depth = a.path.split("/").length - 1;
      const name = a.path.split("/").pop().split("@")[0];
      return el("li", { class: "agent", style: { paddingLeft: `${depth}em` }, title: a.path },
        name, " ", el("span", { class: "badge", title: "calls finished/recorded" }, `${a.finished}/${a.calls}`),
        el("span", { class: `badge ${stateClass(a.status)}`, data: { status: a.status } },
          a.turn !== null && a.status !== "done" ? `${a.status}, turn ${a.turn}` : a.status));
    }));
    const item = el("li", {
      class: "session" + (s.key === state.session ? " selected" : ""), data: { session: s.key },
      on: { click: () => openSession(s.key, s.session) },
    }, el("span", { class: "name" }, s.session), " ",
    el("span", { class: `badge ${stateClass(s.status)}` }, s.status), agents);
    return item;
  }));
}

// -- pending approvals ----------------------------------------------------------------

function decision(d) {
  return `${d.approved ? "approved" : "denied"} by ${d.by || "?"}` +
    `${d.at ? ` at ${when(d.at)}` : ""}${d.reason ? `: ${d.reason}` : ""}`;
}

function renderDecided(decided) {
  document.getElementById("decided-list").replaceChildren(...decided.map((d) => el("li", {
    class: d.approved ? "s-ok" : "s-error",
  }, el("strong", {}, d.summary), ` (session ${d.session}, call ${d.call_id}): ${decision(d)}`)));
}

function renderQuestions(questions, now) {
  document.getElementById("approval-count").textContent = String(questions.length);
  const box = document.getElementById("question-list");
  if (!questions.length) {
    box.replaceChildren(el("p", { class: "muted" }, "No question is waiting."));
    return;
  }
  box.replaceChildren(...questions.map((q) => el("div", { class: "question", data: { question: q.id } },
    el("div", {}, el("strong", {}, q.summary)),
    el("div", { class: "muted" }, `session ${q.session} \u00b7 agent ${q.agent} \u00b7 call ${q.call_id}`,
      q.deadline ? ` \u00b7 times out in ${Math.max(0, Math.round(q.deadline - now))} s` : ""),
    el("pre", {}, q.arguments),
    el("button", { class: "approve", on: { click: () => answer(q.id, true) } }, "Approve"),
    el("button", { class: "deny", on: { click: () => answer(q.id, false) } }, "Deny"))));
}

async function answer(id, approved) {
  const by = document.getElementById("answer-by").value;
  const reason = document.getElementById("answer-reason").value;
  try {
    await api("/api/answer", { question: id, approved, by, reason });
  } catch (error) {
    document.getElementById("journal-status").textContent = `answer failed: ${error.message}`;
  }
  await poll();
}

// -- one session: batches, the calls table (virtualized), a call's details ------------

function openSession(key, shown) {
  state.session = key;
  state.pages = new Map();
  state.batch = null;
  state.detail = null;
  state.loadStarted = performance.now();
  state.loadMs = null;
  document.body.dataset.loadMs = "";
  document.getElementById("session").hidden = false;
  document.getElementById("session-name").textContent = shown;
  document.getElementById("timeline-box").hidden = true;
  document.getElementById("call-detail").hidden = true;
  document.getElementById("calls").scrollTop = 0;
  for (const item of document.querySelectorAll("li.session")) {
    item.classList.toggle("selected", item.dataset.session === key);
  }
  refreshSession();
}

async function refreshSession() {
  if (state.session === null) return;
  const session = state.session;
  const data = await api(`/api/session?session=${encodeURIComponent(session)}`);
  if (session !== state.session) return;
  state.total = data.total;
  document.getElementById("session-total").textContent = `${data.total} calls`;
  renderBatches(data.batches);
  document.getElementById("batch-note").textContent = data.batch_count > data.batches.length
    ? `The latest ${data.batches.length} of ${data.batch_count} batches; a click on a call ` +
      "in the table shows its own batch." : "";
  document.getElementById("calls-spacer").style.height = `${data.total * ROW}px`;
  state.pages = new Map();  // a page is read afresh as it is shown again
  await renderRows();
  if (state.batch !== null) await renderTimeline();
  if (state.detail !== null) await showDetail(state.detail, false);
}

function renderBatches(batches) {
  const list = document.getElementById("batch-list");
  list.replaceChildren(...batches.map((b) => el("div", {
    class: "batch" + (state.batch && state.batch.first === b.first_row ? " selected" : ""),
    data: { first: String(b.first_row) },
    on: { click: () => { state.batch = { first: b.first_row, name: b.batch }; renderTimeline(); } },
  }, `${b.agent} \u00b7 ${b.batch} \u00b7 ${b.finished}/${b.calls} finished`,
  b.pending ? ` \u00b7 ${b.pending} asking` : "")));
}

async function page(number) {
  if (!state.pages.has(number)) {
    const session = state.session;
    const promise = api(`/api/calls?session=${encodeURIComponent(session)}` +
      `&offset=${number * PAGE}&limit=${PAGE}`).then((d) => d.rows);
    state.pages.set(number, promise);
  }
  return state.pages.get(number);
}

async function renderRows() {
  const box = document.getElementById("calls");
  const first = Math.max(0, Math.floor(box.scrollTop / ROW) - 5);
  const last = Math.min(state.total, Math.ceil((box.scrollTop + box.clientHeight) / ROW) + 5);
  const wanted = new Set();
  for (let r = first; r < last; r += 1) wanted.add(Math.floor(r / PAGE));
  const session = state.session;
  const loaded = await Promise.all([...wanted].map((n) => page(n)));
  if (session !== state.session) return;
  const rows = loaded.flat().filter((row) => row.row >= first && row.row < last);
  document.getElementById("calls-spacer").replaceChildren(...rows.map(rowNode));
  if (state.loadMs === null && (rows.length || state.total === 0)) {
    state.loadMs = performance.now() - state.loadStarted;
    document.body.dataset.loadMs = state.loadMs.toFixed(1);
  }
}

function rowNode(r) {
  return el("div", {
    class: "row", style: { top: `${r.row * ROW}px` }, data: { row: String(r.row), call: r.call_id },
    on: { click: () => showDetail(r.row, true) },
  }, el("span", {}, String(r.row + 1)), el("span", { title: r.agent }, r.agent),
  el("span", {}, r.call_id), el("span", {}, r.tool), el("span", { title: r.arguments }, r.arguments),
  el("span", { class: stateClass(r.state) }, r.state), el("span", {}, r.routing || ""),
  el("span", {}, r.result === null ? "" : r.result));
}

async function showDetail(row, scroll) {
  state.detail = row;
  const d = await api(`/api/call?session=${encodeURIComponent(state.session)}&row=${row}`);
  const box = document.getElementById("call-detail");
  const items = [
    ["call", `${d.call_id} (${d.tool}) of agent ${d.agent}, batch ${d.batch}, index ${d.index}`],
    ["state", `${d.state}${d.routing ? `, routed ${d.routing}` : ""}, attempt ${d.attempt}`],
    ["times", `planned ${when(d.times.planned)} started ${when(d.times.started)} ` +
      `finished ${when(d.times.finished)}`],
    ["arguments", el("pre", {}, d.arguments)],
    ["result", d.result === null ? "none yet" : el("pre", {}, d.result)],
  ];
  if (d.answer) items.push(["decided", decision(d.answer)]);
  box.replaceChildren(el("dl", {}, ...items.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
  box.hidden = false;
  if (scroll) {  // the user picked the call: show its batch's timeline too
    state.batch = { first: d.batch_first, name: d.batch };
    await renderTimeline();
    box.scrollIntoView({ block: "nearest" });
  }
}

// -- the timeline of one batch ------------------------------------------------------------

async function renderTimeline() {
  const session = state.session;
  const data = await api(`/api/timeline?session=${encodeURIComponent(session)}&first=${state.batch.first}`);
  if (session !== state.session) return;
  document.getElementById("timeline-box").hidden = false;
  document.getElementById("timeline-name").textContent = state.batch.name;
  for (const item of document.querySelectorAll(".batch")) {
    item.classList.toggle("selected", Number(item.dataset.first) === state.batch.first);
  }
  const timed = data.calls.filter((c) => c.started !== null);
  const box = document.getElementById("timeline");
  const untimed = data.calls.length - timed.length;
  const missing = untimed ? ` ${untimed} of ${data.calls.length} calls are not drawn: no times yet.` : "";
  const note = document.getElementById("timeline-note");
  if (!timed.length) { box.replaceChildren(); box.style.height = "0"; note.textContent = missing; return; }
  const start = Math.min(...timed.map((c) => c.planned ?? c.started));
  const end = Math.max(...timed.map((c) => c.finished ?? data.now));
  note.textContent = `${((end - start) * 1000).toFixed(0)} ms from plan to last end. Hatched: ` +
    "waiting (for a permit or a person); solid: running, coloured by routing class (blue read-only, " +
    "violet concurrent, amber serial); red outline: an error result. A run starts at each " +
    `dashed line: calls that ran together, after the run before ended.${missing}`;
  const width = box.clientWidth || 800;
  const scale = (width - 8) / Math.max(end - start, 1e-3);
  const x = (t) => 4 + (t - start) * scale;
  const lanes = Math.max(...timed.map((c) => c.lane)) + 1;
  box.style.height = `${lanes * LANE + 18}px`;
  const bars = [];
  for (const c of timed) {
    const top = `${16 + c.lane * LANE}px`;
    if (c.planned !== null && c.planned < c.started) {
      bars.push(el("div", { class: "bar wait", title: `${c.call_id} waited`,
        style: { left: `${x(c.planned)}px`, width: `${Math.max(1, (c.started - c.planned) * scale)}px`, top } },
      `${c.call_id} ${c.tool} waited ${((c.started - c.planned) * 1000).toFixed(0)} ms`));
    }
    const finished = c.finished ?? data.now;
    bars.push(el("div", {
      class: `bar r-${c.routing || "none"}${c.state === "ok" ? "" : " failed"}`,
      data: { call: c.call_id, lane: String(c.lane), run: String(c.run), start: String(c.started),
        end: String(finished) },
      title: `${c.call_id} ${c.tool}: ${c.state}, ${c.routing || "not routed yet"}, run ${c.run}`,
      style: { left: `${x(c.started)}px`, width: `${Math.max(2, (finished - c.started) * scale)}px`, top },
    }, `${c.call_id} ${c.tool}`));
  }
  for (const run of data.runs) {
    const near = x(run.start) > width - 60;  // a label at the right edge goes left of its line
    bars.push(el("div", { class: "run" + (near ? " end" : ""), data: { run: String(run.run) },
      title: `run ${run.run}`, style: { left: `${x(run.start)}px`, height: box.style.height } },
    `run ${run.run}`));
  }
  box.replaceChildren(...bars);
}

// -- the loop ------------------------------------------------------------------------

async function poll() {
  try {
    const [sessions, questions] = await Promise.all([api("/api/sessions"), api("/api/questions")]);
    renderSessions(sessions.sessions);
    renderQuestions(questions.questions, questions.now);
    renderDecided(questions.decided);
    if (state.session !== null) await refreshSession();
    document.getElementById("journal-status").textContent = `updated ${when(sessions.now)}`;
  } catch (error) {
    document.getElementById("journal-status").textContent = `not updated: ${error.message}`;
  }
}

async function loop() {
  await poll();
  setTimeout(loop, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  state.token = readToken();
  document.getElementById("answer-by").value = sessionStorage.getItem("toolexec-by") || "";
  document.getElementById("answer-by").addEventListener("change", (e) => {
    sessionStorage.setItem("toolexec-by", e.target.value);
  });
  let scheduled = false;
  document.getElementById("calls").addEventListener("scroll", () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; renderRows(); });
  });
  loop();
});
