// aromcp-workflows web view: plain JavaScript, no framework, no build, nothing fetched
// from elsewhere.  Every text from the server goes into the page as text (never as HTML).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const STATUSES = ["running", "waiting", "completed", "failed", "cancelled", "interrupted"];
const state = { config: { actions: false, csrf: "", stale_after: null }, view: null, viewAt: null, seq: null,
                source: null, timer: null, listTimer: null, listTicket: 0, loading: false, again: false,
                output: {}, outputTimer: null,  // output: step key -> {stdout, stderr, since, running, cut}
                clock: null,  // the instance page's clocks, moved on once a second (`tick`)
                asked: new Map(), questions: null };  // each question's element, kept while it is asked

// -- small helpers ------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) el.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}
function pill(status) { return h("span", { class: `pill ${status}` }, status.replace("_", " ")); }
function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} m ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} m`;
}
function between(a, b) { return a && b ? (new Date(b) - new Date(a)) / 1000 : null; }
// A running clock: the seconds the server counted when the view was read; `tick` adds the
// time since then, once a second, so an open page's durations move without a reload.
function clock(seconds) {
  return seconds === null || seconds === undefined ? "" : h("span", { class: "clock", "data-secs": seconds }, duration(seconds));
}
// A command's output as text to show: its terminal escapes (colours, cursor moves, window
// titles) taken out, the text kept.  It goes into the page as a text node, never as HTML.
const ESCAPES = new RegExp([
  "\\x1b\\][^\\x07\\x1b]*(?:\\x07|\\x1b\\\\|$)",  // OSC: ESC ] ... BEL or ESC \ (or cut at the end)
  "(?:\\x1b\\[|\\x9b)[0-?]*[ -/]*(?:[@-~]|$)",        // CSI: ESC [ (or its 8-bit form) params, final byte
  "\\x1b[PX^_][^\\x1b]*(?:\\x1b\\\\|$)",            // DCS, SOS, PM, APC strings
  "\\x1b[ -/]*[0-~]?",                             // any other escape (charset, keypad...), or a lone ESC
].join("|"), "g");
function plain(text) { return text.replace(ESCAPES, ""); }
function short(value, limit = 80) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text === undefined ? "" : text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}
async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (response.status === 401) { showLogin(body); throw new Error(body.error || "log in first"); }
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}
function setLive(on, hidden) {
  const live = document.getElementById("live");
  live.className = `live ${hidden ? "hidden" : on ? "on" : "off"}`;
  live.textContent = on ? "live" : "reconnecting";
}
// Put `nodes` in `parent` in this order, leaving any that is already there in place: a kept
// node is never taken out, so a field being typed in keeps its text, caret and focus.
function placeChildren(parent, nodes) {
  const keep = new Set(nodes);
  for (const child of [...parent.childNodes]) if (!keep.has(child)) child.remove();
  let at = parent.firstChild;
  for (const node of nodes) {
    if (node === at) at = at.nextSibling;
    else parent.insertBefore(node, at);
  }
}
function crumbs(...parts) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...parts.flatMap((p, i) => (i ? [" / ", p] : [p])));
}

// -- routing ------------------------------------------------------------------------------
function route() {
  stopLive();
  state.route = (state.route || 0) + 1;  // a page still loading for an older route does not start following
  const base = new URL(document.baseURI).pathname;
  const here = location.pathname.startsWith(base) ? location.pathname.slice(base.length) : "";
  const match = here.match(/^instances\/([^/]+)$/);
  if (match) showInstance(decodeURIComponent(match[1]));
  else showList();
}
function go(path) { history.pushState(null, "", path); route(); }
function link(path, text) {
  return h("a", { href: path, onclick: (e) => { if (!e.ctrlKey && !e.metaKey) { e.preventDefault(); go(path); } } }, text);
}

// -- instances list -----------------------------------------------------------------------
function listQuery() {
  const q = new URLSearchParams(location.search);
  return { status: q.get("status") || "", workflow: q.get("workflow") || "", project: q.get("project") || "",
           page: Number(q.get("page") || 1) };
}
function setListQuery(change) {
  const q = { ...listQuery(), ...change };
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(q)) if (value && !(key === "page" && value === 1)) params.set(key, value);
  history.replaceState(null, "", `./${params.toString() ? "?" + params : ""}`);
  loadList();
}
async function showList() {
  crumbs("instances");
  setLive(false, true);
  document.title = "Instances — aromcp-workflows";
  await loadList();
  state.listTimer = setInterval(() => { if (!document.hidden) loadList(true); }, 2000);
}
async function loadList(quiet) {
  const ticket = ++state.listTicket;  // an answer to an older query (filters changed since) is dropped
  const q = listQuery();
  const params = new URLSearchParams({ page: q.page, per_page: 50 });
  for (const key of ["status", "workflow", "project"]) if (q[key]) params.set(key, q[key]);
  let data;
  try { data = await api(`api/instances?${params}`); } catch (error) {
    if (!quiet && ticket === state.listTicket) document.getElementById("main").replaceChildren(h("p", { class: "note error" }, error.message));
    return;
  }
  if (ticket !== state.listTicket || !state.listTimer && quiet) return;
  const main = document.getElementById("main");
  main.replaceChildren(h("div", { class: "panel" }, listFilters(q, data), listTable(data), listPager(q, data)));
}
function select(name, value, options, onchange) {
  const el = h("select", { name, onchange: (e) => onchange(e.target.value) },
               options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)));
  return el;
}
function listFilters(q, data) {
  const statuses = [["", `any status (${Object.values(data.statuses).reduce((a, b) => a + b, 0)})`],
                    ...STATUSES.map((st) => [st, `${st} (${data.statuses[st] || 0})`]),
                    ["stalled", "stalled (agent silent)"]];
  return h("div", { class: "filters" },
    h("h1", {}, "Instances"),
    h("label", {}, "status", select("status", q.status, statuses, (v) => setListQuery({ status: v, page: 1 }))),
    h("label", {}, "workflow", select("workflow", q.workflow, [["", "any"], ...data.workflows.map((w) => [w, w])],
                                      (v) => setListQuery({ workflow: v, page: 1 }))),
    h("label", {}, "project", select("project", q.project, [["", "any"], ...data.projects.map((p) => [p, p])],
                                     (v) => setListQuery({ project: v, page: 1 }))));
}
function listTable(data) {
  if (!data.rows.length) return h("p", { class: "empty" }, "No instances match.");
  const head = h("tr", {}, ["workflow_id", "workflow", "project", "status", "current step(s)", "started", "updated", "duration"]
    .map((t) => h("th", {}, t)));
  const rows = data.rows.map((row) => h("tr", { "data-id": row.workflow_id },
    h("td", {}, link(`instances/${encodeURIComponent(row.workflow_id)}`, h("code", {}, row.workflow_id))),
    h("td", {}, row.workflow),
    h("td", { class: "muted", title: row.project_dir }, short(row.project_dir.split("/").slice(-2).join("/"), 40)),
    h("td", {}, pill(row.status), row.stalled ? [" ", pill("stalled")] : null),
    h("td", { class: "mono" }, short(row.current_steps.join(", "), 60) || "–"),
    h("td", { class: "num" }, when(row.created_at)),
    h("td", { class: "num" }, when(row.updated_at)),
    h("td", { class: "num" }, duration(row.duration_seconds))));
  return h("div", { class: "table-wrap" }, h("table", { class: "instances" }, h("thead", {}, head), h("tbody", {}, rows)));
}
function listPager(q, data) {
  const first = data.total ? (data.page - 1) * data.per_page + 1 : 0;
  const last = Math.min(data.total, data.page * data.per_page);
  return h("div", { class: "pager" },
    h("span", {}, `${first.toLocaleString()}–${last.toLocaleString()} of ${data.total.toLocaleString()}, newest first`),
    h("span", { class: "buttons" },
      h("button", { disabled: data.page <= 1, onclick: () => setListQuery({ page: data.page - 1 }) }, "← newer"),
      h("button", { disabled: last >= data.total, onclick: () => setListQuery({ page: data.page + 1 }) }, "older →")));
}

// -- one instance -------------------------------------------------------------------------
async function showInstance(id) {
  state.view = null;
  state.seq = null;
  crumbs(link("./", "instances"), h("code", {}, id));
  document.title = `${id} — aromcp-workflows`;
  const here = state.route;
  await loadInstance(id);
  if (here !== state.route) return;
  follow(id);
  state.clock = setInterval(tick, 1000);
  if (state.view && state.view.workflow_id === id) lastOutput(id);
}
function follow(id) {
  // Server-sent events say when the instance's version changes (any process, any host);
  // if the stream fails, poll once a second instead.
  if (window.EventSource) {
    const source = new EventSource(`api/instances/${encodeURIComponent(id)}/events`);
    state.source = source;
    source.addEventListener("open", () => setLive(true));
    source.addEventListener("version", (e) => {
      setLive(true);
      if (!state.view || Number(e.data) !== state.view.version) loadInstance(id, true);
    });
    source.addEventListener("error", () => {
      setLive(false);
      // The browser tries again by itself, unless the server refused the stream: a restarted
      // server has forgotten the session (401), so ask once more as a read does: a refusal
      // shows the login panel; anything else, follow again.
      if (source.readyState === EventSource.CLOSED) setTimeout(() => followAgain(id, source), 2000);
    });
  } else {
    state.timer = setInterval(() => loadInstance(id, true), 1000);
    setLive(true);
  }
}
async function followAgain(id, closed) {
  if (state.source !== closed) return;  // the page moved on meanwhile
  try { await api(`api/instances/${encodeURIComponent(id)}`); } catch (error) {
    if (document.querySelector(".login-panel")) return;  // logged out: the login panel is up
  }
  if (state.source === closed) follow(id);
}
function stopLive() {
  if (state.source) state.source.close();
  if (state.timer) clearInterval(state.timer);
  if (state.listTimer) clearInterval(state.listTimer);
  if (state.outputTimer) clearInterval(state.outputTimer);
  if (state.clock) clearInterval(state.clock);
  state.source = state.timer = state.listTimer = state.outputTimer = state.clock = null;
  state.output = {};
  state.asked = new Map();
  state.questions = null;
}
async function loadInstance(id, quiet) {
  if (state.loading) { state.again = true; return; }
  state.loading = true;
  try {
    const view = await api(`api/instances/${encodeURIComponent(id)}`);
    state.view = view;
    state.viewAt = performance.now();  // the view's clocks were read now
    await renderInstance(view);
  } catch (error) {
    if (!quiet) document.getElementById("main").replaceChildren(h("p", { class: "note error" }, error.message));
  } finally {
    state.loading = false;
    if (state.again) { state.again = false; loadInstance(id, true); }
  }
}
async function renderInstance(view) {
  const main = document.getElementById("main");
  const stateAt = state.seq === null ? null : await api(`api/instances/${encodeURIComponent(view.workflow_id)}/state?seq=${state.seq}`).catch(() => null);
  const scroll = [...main.querySelectorAll("[data-keep-scroll]")].map((el) => [el.dataset.keepScroll, el.scrollTop, el.scrollLeft]);
  const focused = focusOf(main);
  placeChildren(main, [
    summary(view),
    view.failures.length ? failures(view) : null,
    view.steps_in_hand.length ? waitingPanel(view) : null,
    view.questions.length ? questionsPanel(view) : null,
    commandsPanel(view),
    h("div", { class: "grid", id: "overview" },
      h("div", {}, h("div", { class: "panel" }, h("h2", {}, "Workflow graph"), legend(), graph(view.graph))),
      h("div", {},
        h("div", { class: "panel" }, h("h2", {}, `Sub-agent tasks (${view.tasks.length})`), lanes(view.tasks)),
        h("div", { class: "panel" }, h("h2", {}, "Messages shown to the user"), messages(view.messages)))),
    h("div", { class: "grid", id: "history-and-state" },
      h("div", { class: "panel" }, h("h2", {}, "History"), timeline(view)),
      h("div", { class: "panel" }, stateSection(view, stateAt))),
    h("div", { class: "panel traces" }, h("h2", {}, "Transform traces"), tracesSection(view))].filter(Boolean));
  for (const [key, top, left] of scroll) {
    const el = main.querySelector(`[data-keep-scroll="${key}"]`);
    if (el) { el.scrollTop = top; el.scrollLeft = left; }
  }
  refocus(main, focused);
  tick();
  followOutput(view);
}
// The field a person is typing in, to find again after the page is redrawn.  Its element is
// kept while its question is asked (`question`), so this is only a fallback.
function focusOf(main) {
  const el = document.activeElement;
  if (!el || !main.contains(el) || !el.dataset.keepFocus) return null;
  const text = typeof el.selectionStart === "number";
  return { key: el.dataset.keepFocus, value: el.value, start: text ? el.selectionStart : null,
           end: text ? el.selectionEnd : null, direction: text ? el.selectionDirection : null };
}
function refocus(main, focused) {
  if (!focused) return;
  const el = [...main.querySelectorAll("[data-keep-focus]")].find((e) => e.dataset.keepFocus === focused.key);
  if (!el || el === document.activeElement || el.disabled) return;
  if (el.value !== focused.value) el.value = focused.value;
  el.focus({ preventScroll: true });
  if (focused.start !== null && typeof el.setSelectionRange === "function") {
    try { el.setSelectionRange(focused.start, focused.end, focused.direction || "none"); } catch (error) { /* not a text field */ }
  }
}
// Once a second: each clock of the view moves on by the time since the view was read, and an
// agent that stays silent past the server's AROMCP_STALE_AFTER is marked stalled (the
// server's rule: only a step an agent holds; a question or a command never is).
function tick() {
  const view = state.view;
  if (!view || state.viewAt === null) return;
  const since = (performance.now() - state.viewAt) / 1000;
  for (const el of document.querySelectorAll("#main [data-secs]")) {
    const text = duration(Number(el.dataset.secs) + since);
    if (el.textContent !== text) el.textContent = text;
  }
  const limit = Number(state.config.stale_after) || null;
  let stalled = Boolean(view.stalled);
  for (const li of document.querySelectorAll("#waiting li[data-waiting=agent]")) {
    const idle = li.dataset.idle === undefined ? null : Number(li.dataset.idle);
    const now = li.dataset.stalled === "true" || (limit !== null && idle !== null && idle + since > limit);
    mark(li, now, () => h("span", { class: "stall-mark" }, " ", pill("stalled")));
    stalled = stalled || now;
  }
  const title = document.querySelector("#main .head h1");
  if (title) mark(title, stalled, () => h("span", { class: "stall-mark" }, " ", pill("stalled")));
  const waiting = document.getElementById("waiting");
  if (waiting) mark(waiting, stalled, stalledNote);
}
function mark(holder, on, make) {
  const there = [...holder.children].find((el) => el.classList.contains("stall-mark"));
  if (on && !there) holder.append(make());
  else if (!on && there) there.remove();
}
// -- who the run waits for, its questions, its commands' output --------------------------
function waitingLine(held) {
  const task = held.task_id ? [h("code", {}, held.task_id), ": "] : "";
  if (held.waiting_for === "user") return [task, "waiting for the user: ", h("b", {}, held.question || "")];
  if (held.waiting_for === "command" && held.stalled) {
    return [task, "command started ", clock(held.for_s), " ago, its server gone (an agent's next call takes its result over): ",
            h("code", {}, held.command || ""), h("span", { class: "stall-mark" }, " ", pill("stalled"))];
  }
  if (held.waiting_for === "command") return [task, "command running ", clock(held.for_s), ": ", h("code", {}, held.command || "")];
  if (held.waiting_for === "task") return [task, `waiting for tasks ${(held.tasks || []).join(", ")} since ${when(held.since)}`];
  const idle = held.idle_s ?? held.for_s;
  return [task, "waiting for the agent (", h("code", {}, held.step_id), `) since ${when(held.since)} — `, clock(idle), " idle",
          held.stalled ? h("span", { class: "stall-mark" }, " ", pill("stalled")) : ""];
}
function waitingPanel(view) {
  return h("div", { class: "panel waiting", id: "waiting" }, h("h2", {}, "Waiting for"),
    h("ul", { class: "waits" }, view.steps_in_hand.map((held) => h("li", {
      "data-waiting": held.waiting_for, "data-stalled": held.stalled ? "true" : null,
      "data-idle": held.waiting_for === "agent" && held.idle_s !== null && held.idle_s !== undefined ? held.idle_s : null },
      pill(held.waiting_for), " ", waitingLine(held)))),
    view.stalled ? stalledNote() : null);
}
function stalledNote() {
  return h("p", { class: "note error stall-mark" }, "Stalled: an agent holding a step has not called for longer than the server "
                                                   + "allows (AROMCP_STALE_AFTER), or the server running a command is gone. Its "
                                                   + "session may have ended; resume it, or cancel.");
}
// The questions panel and each question's element are kept while the same question is asked
// (the same step of the same thread, handed out at the same moment), so that what a person
// has typed, or is sending, is not redrawn away when something else in the run changes.
function questionsPanel(view) {
  const asked = new Map(view.questions.map((q) => [askedKey(view, q), q]));
  for (const key of [...state.asked.keys()]) if (!asked.has(key)) state.asked.delete(key);
  for (const [key, q] of asked) if (!state.asked.has(key)) state.asked.set(key, question(view, q));
  if (!state.questions) state.questions = h("div", { class: "panel questions", id: "questions" });
  if (!state.questions.firstChild) state.questions.append(h("h2", {}, "Waiting for your answer"));
  placeChildren(state.questions, [state.questions.firstChild, ...[...asked.keys()].map((key) => state.asked.get(key))]);
  return state.questions;
}
function askedKey(view, q) {
  const held = view.steps_in_hand.find((s) => s.step_id === q.step_id && (s.task_id || null) === (q.task_id || null));
  return JSON.stringify([view.workflow_id, q.task_id || null, q.step_id, held ? held.since : null, q.prompt]);
}
function question(view, q) {
  const choices = Array.isArray(q.choices) ? q.choices.map((c) => (typeof c === "string" ? c : JSON.stringify(c))) : null;
  const expects = choices ? `one of: ${choices.join(", ")}` : q.pattern ? (q.pattern_hint || `text matching ${q.pattern}`) : "any text";
  const note = h("div", { class: "note" });
  let form = null;
  if (state.config.actions) {
    const field = choices
      ? h("select", { name: "answer" }, choices.map((c) => h("option", { value: c, selected: c === q.default }, c)))
      : h("input", { name: "answer", type: "text", value: q.default ?? "", pattern: q.pattern ? `(?:${q.pattern})` : null,
                     title: q.pattern_hint || null, autocomplete: "off" });
    field.dataset.keepFocus = askedKey(view, q);
    form = h("form", { class: "answer", onsubmit: (e) => { e.preventDefault(); answer(view, q, form, note); } },
      field, h("button", { type: "submit" }, "Answer"));
  }
  return h("div", { class: "question", "data-step": q.step_id },
    h("div", { class: "prompt" }, q.prompt),
    h("div", { class: "muted" }, `step `, h("code", {}, q.step_id), q.task_id ? ` in task ${q.task_id}` : "", ` — expects ${expects}`),
    form || h("div", { class: "muted" }, "Answer it where it was asked, with `aromcp-workflows answer`, or on a page started with --actions."),
    note);
}
// One answer at a time: the field and its button are off from the moment it is sent (a
// double click, a second Enter send nothing more); on again if it is refused.  Once it is
// recorded they stay off until the question leaves the page.
async function answer(view, q, form, note) {
  if (form.dataset.sending) return;
  const field = form.elements.namedItem("answer");
  const value = field.value;
  const controls = [...form.elements];
  form.dataset.sending = "true";
  for (const el of controls) el.disabled = true;
  note.className = "note";
  note.textContent = "answering…";
  try {
    await api(`api/instances/${encodeURIComponent(view.workflow_id)}/answer`, {
      method: "POST", headers: { "X-Aromcp-Token": state.config.csrf || "", "Content-Type": "application/json" },
      body: JSON.stringify({ value, step_id: q.step_id }) });
    note.textContent = "answered: the agent's next call goes on from here";
    loadInstance(view.workflow_id, true);
  } catch (error) {
    delete form.dataset.sending;
    for (const el of controls) el.disabled = false;
    note.className = "note error";
    note.textContent = `not answered: ${error.message}`;
    if (form.isConnected) field.focus({ preventScroll: true });
  }
}
function outputKey(held) { return `${held.task_id || ""}/${held.step_id}`; }
function commandsPanel(view) {
  // every command seen running while this page was open, or else the last one that ended (`lastOutput`)
  const shown = Object.entries(state.output);
  if (!shown.length) return null;
  return h("div", { class: "panel commands", id: "commands" }, h("h2", {}, "Command output"),
    shown.map(([key, out]) => h("div", { class: "command", "data-step": key },
      h("div", {}, h("code", {}, out.command || key), " ", pill(out.running ? "running" : "done"),
        !out.running && out.exit_code !== null && out.exit_code !== undefined
          ? h("span", { class: `exit${out.exit_code ? " nonzero" : ""}` }, ` exit code ${out.exit_code}`) : null,
        out.earlier ? h("span", { class: "muted" }, " (its last run, as the history kept it)") : null),
      ["stdout", "stderr"].map((name) => out[name] ? h("pre", { class: `stream ${name}`, "data-keep-scroll": `${key}:${name}` },
                                                      plain(out[name])) : null),
      out.cut ? h("div", { class: "muted" }, `(the output was cut: only its ${out.kept || "end"} is kept)`) : null)));
}
// A page opened after the command ended: its output, as the history kept it, read once (the
// main thread's last command; nothing when it ran none).
async function lastOutput(id) {
  if (Object.keys(state.output).length || state.view.steps_in_hand.some((held) => held.waiting_for === "command")) return;
  let got;
  try { got = await api(`api/instances/${encodeURIComponent(id)}/output?limit=262144`); } catch (error) { return; }  // as much as a live run keeps
  if (!state.view || state.view.workflow_id !== id || got.running || got.source !== "history" || !got.step_id) return;
  const key = `/${got.step_id}`;
  if (state.output[key] || !(got.stdout.text || got.stderr.text || got.command)) return;
  state.output[key] = { stdout: got.stdout.text, stderr: got.stderr.text, since: [got.stdout.end, got.stderr.end],
                        running: false, ended: true, earlier: true, command: got.command, exit_code: got.exit_code,
                        cut: Boolean(got.stdout.cut || got.stderr.cut), kept: "start" };  // the history keeps a start
  await redrawCommands();
}
async function redrawCommands() {
  const panel = document.getElementById("commands");
  const fresh = commandsPanel(state.view);
  if (panel && fresh) panel.replaceWith(fresh);
  else if (fresh) await renderInstance(state.view);  // drawn before the first output came
  for (const pre of document.querySelectorAll("#commands pre")) pre.scrollTop = pre.scrollHeight;
}
function followOutput(view) {
  const running = view.steps_in_hand.filter((held) => held.waiting_for === "command");
  for (const held of running) {
    const key = outputKey(held);
    const seen = state.output[key];  // a step that ran before (a loop, or the run shown at load) runs again: a new run
    if (!seen || (!seen.running && seen.started !== held.since)) {
      state.output[key] = { stdout: "", stderr: "", since: [null, null], running: true, command: held.command, started: held.since };
    }
  }
  for (const [key, out] of Object.entries(state.output)) {
    if (!running.some((held) => outputKey(held) === key) && out.running) out.ending = true;  // read its last bytes once more
  }
  if (!state.outputTimer && Object.keys(state.output).length) {
    state.outputTimer = setInterval(() => pollOutput(view.workflow_id), 1000);
    pollOutput(view.workflow_id);
  }
}
async function pollOutput(id) {
  let changed = false;
  for (const [key, out] of Object.entries(state.output)) {
    if (!out.running) continue;
    const [task, step] = key.split("/");
    const params = new URLSearchParams({ step_id: step });
    if (task) params.set("task_id", task);
    if (out.since[0] !== null) params.set("stdout_since", out.since[0]);
    if (out.since[1] !== null) params.set("stderr_since", out.since[1]);
    let got;
    try { got = await api(`api/instances/${encodeURIComponent(id)}/output?${params}`); } catch (error) { continue; }
    for (const [i, name] of [[0, "stdout"], [1, "stderr"]]) {
      const slice = got[name];
      if (!slice) continue;
      if (out.since[i] === null || slice.start !== out.since[i]) out[name] = slice.text;  // the first read, or a cut
      else out[name] += slice.text;
      if (slice.text) changed = true;
      out.since[i] = slice.end;
      out.cut = out.cut || Boolean(slice.cut);
    }
    out.command = got.command || out.command;
    if (got.exit_code !== null && got.exit_code !== undefined) out.exit_code = got.exit_code;
    if (!got.running || out.ending) { out.running = false; out.ended = true; changed = true; }
  }
  if (changed && state.view && state.view.workflow_id === id) await redrawCommands();
  if (!Object.values(state.output).some((out) => out.running) && state.outputTimer) {
    clearInterval(state.outputTimer);
    state.outputTimer = null;
  }
}
const FINISHED = ["completed", "failed", "cancelled"];  // their duration is start to end: it no longer moves
function summary(view) {
  const facts = [["workflow", view.workflow], ["project", view.project_dir], ["started", when(view.created_at)],
                 ["updated", when(view.updated_at)],
                 ["duration", FINISHED.includes(view.status) ? duration(view.duration_seconds) : clock(view.duration_seconds)],
                 ["current", view.current_steps.join(", ") || "–"], ["version", view.version]];
  return h("div", { class: "panel head" },
    h("div", { class: "title" },
      h("h1", {}, h("code", {}, view.workflow_id), " ", pill(view.status),
        view.stalled ? h("span", { class: "stall-mark" }, " ", pill("stalled")) : null),
      h("div", { class: "facts" }, facts.map(([k, v]) => h("span", {}, `${k} `, h("b", {}, v instanceof Node ? v : String(v))))),
      view.error ? h("div", { class: "note error" }, view.error) : null,
      h("div", { id: "action-note", class: "note" })),
    state.config.actions ? actions(view) : null);
}
function actions(view) {
  const finished = FINISHED.includes(view.status);
  return h("div", { class: "actions" },
    h("button", { onclick: () => act(view, "retry"), disabled: !["failed", "interrupted", "cancelled"].includes(view.status) }, "Retry"),
    h("button", { onclick: () => act(view, "fork") }, "Fork"),
    h("button", { class: "danger", onclick: () => act(view, "cancel"), disabled: finished }, "Cancel"));
}
async function act(view, name) {
  const note = document.getElementById("action-note");
  if (name === "cancel" && !confirm(`Cancel ${view.workflow_id}? It cannot be resumed.`)) return;
  note.className = "note";
  note.textContent = `${name}…`;
  try {
    const result = await api(`api/instances/${encodeURIComponent(view.workflow_id)}/${name}`,
                             { method: "POST", headers: { "X-Aromcp-Token": state.config.csrf || "" } });
    if (name === "fork" && result.workflow_id && result.workflow_id !== view.workflow_id) {
      go(`instances/${encodeURIComponent(result.workflow_id)}`);
      return;
    }
    note.textContent = `${name}: done`;
    loadInstance(view.workflow_id, true);
  } catch (error) {
    note.className = "note error";
    note.textContent = `${name} refused: ${error.message}`;
  }
}
function failures(view) {
  return h("div", { class: "panel" }, h("h2", {}, "Errors"), view.failures.map((f) => h("div", { class: "failure" },
    h("div", {}, f.message),
    h("div", { class: "where" },
      f.step_id ? ["step ", h("code", {}, f.step_id), f.step_type ? ` (${f.step_type})` : "", f.task_id ? ` in task ${f.task_id}` : ""] : "",
      f.file ? [" — ", h("code", {}, `${f.file}${f.line ? ":" + f.line : ""}${f.column ? ":" + f.column : ""}`)] : "",
      f.file_changed ? " (the file has changed since this instance started)" : ""))));
}

// -- the graph ----------------------------------------------------------------------------
function legend() {
  return h("div", { class: "legend" }, ["done", "current", "failed", "skipped", "not_reached"].map((m) => pill(m)));
}
function graph(g) {
  const svg = s("svg", { width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`, role: "img",
                         "aria-label": "workflow graph" });
  svg.append(s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                                          markerHeight: 7, orient: "auto-start-reverse" },
                               s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#9aa3ad" }))));
  for (const b of g.blocks) {
    svg.append(s("g", { class: `block ${b.kind}` }, s("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 8 }),
                 s("text", { x: b.x + 8, y: b.y + 13 }, b.title)));
  }
  for (const e of g.edges) svg.append(edge(e));
  for (const n of g.nodes) svg.append(node(n));
  return h("div", { class: "graph", "data-keep-scroll": "graph" }, svg);
}
function edge(e) {
  const p = e.points;
  let d = `M ${p[0][0]} ${p[0][1]}`;
  if (e.back) {
    d += ` C ${p[1][0]} ${p[1][1]}, ${p[1][0]} ${p[1][1]}, ${p[1][0]} ${(p[1][1] + p[2][1]) / 2}`;
    d += ` C ${p[2][0]} ${p[2][1]}, ${p[2][0]} ${p[2][1]}, ${p[3][0]} ${p[3][1]}`;
  } else {
    for (let i = 1; i < p.length; i++) {
      const [x0, y0] = p[i - 1], [x1, y1] = p[i];
      const my = (y0 + y1) / 2;
      d += ` C ${x0} ${my}, ${x1} ${my}, ${x1} ${y1}`;
    }
  }
  const group = s("g", {}, s("path", { d, class: `edge${e.dotted ? " dotted" : ""}`, "marker-end": "url(#arrow)" }));
  if (e.label) {
    const last = p[p.length - 1];
    const [x, y] = e.back ? [p[1][0] + 3, (p[1][1] + p[2][1]) / 2] : [(p[0][0] + last[0]) / 2 + 5, last[1] - 6];
    group.append(s("text", { x, y, class: "edge-label" }, e.label));
  }
  return group;
}
function node(n) {
  const g = s("g", { class: `node ${n.mark}`, "data-node": n.id, "data-step": n.step_id || "", "data-mark": n.mark });
  const cx = n.x + n.w / 2, cy = n.y + n.h / 2;
  if (n.shape === "diamond") {
    g.append(s("polygon", { points: `${cx},${n.y} ${n.x + n.w},${cy} ${cx},${n.y + n.h} ${n.x},${cy}` }));
  } else if (n.shape === "loop") {
    const k = 12;
    g.append(s("polygon", { points: `${n.x + k},${n.y} ${n.x + n.w - k},${n.y} ${n.x + n.w},${cy} ${n.x + n.w - k},${n.y + n.h} ${n.x + k},${n.y + n.h} ${n.x},${cy}` }));
  } else {
    const rx = n.shape === "round" ? n.h / 2 : n.shape === "agent" ? 2 : 5;
    g.append(s("rect", { x: n.x, y: n.y, width: n.w, height: n.h, rx }));
    if (n.shape === "parallel") g.append(s("rect", { x: n.x + 4, y: n.y + 4, width: n.w - 8, height: n.h - 8, rx: 3, fill: "none" }));
  }
  const top = cy - ((n.lines.length - 1) * 15) / 2 + 4;
  n.lines.forEach((line, i) => g.append(s("text", { x: cx, y: top + i * 15, "text-anchor": "middle" }, line)));
  if (n.runs > 1) {
    const label = `×${n.runs}`, w = 8 + label.length * 6;
    g.append(s("rect", { x: n.x + n.w - w + 6, y: n.y - 8, width: w, height: 15, rx: 7, class: "badge-bg" }),
             s("text", { x: n.x + n.w - w / 2 + 6, y: n.y + 3, "text-anchor": "middle", class: "badge" }, label));
  }
  if (n.detail) g.append(s("text", { x: n.x + n.w + 6, y: n.y + n.h - 2, class: "detail" }, n.detail));
  g.append(s("title", {}, `${n.step_id || n.role}: ${n.mark}${n.detail ? " — " + n.detail : ""}`));
  return g;
}

// -- tasks, messages, history, state, traces ----------------------------------------------
function lanes(tasks) {
  if (!tasks.length) return h("p", { class: "empty" }, "This workflow has started no sub-agent tasks yet.");
  return h("div", { class: "lanes", "data-keep-scroll": "lanes" }, tasks.map((t) => h("div", { class: "lane", "data-task": t.task_id },
    h("code", {}, t.task_id),
    h("span", { class: "item", title: short(t.item, 400) }, short(t.item, 60)),
    pill(t.status),
    t.error ? h("span", { class: "step err" }, t.error)
            : h("span", { class: "step" }, t.current_step ? ["at ", h("code", {}, t.current_step)] :
                t.finished_at ? `took ${duration(between(t.started_at, t.finished_at))}` : t.started_at ? "" : "not started"))));
}
function messages(list) {
  if (!list.length) return h("p", { class: "empty" }, "No messages yet.");
  return h("ul", { class: "messages", "data-keep-scroll": "messages" },
    list.map((m) => h("li", {}, h("span", { class: "when" }, when(m.timestamp)), m.message)));
}
function timeline(view) {
  const entries = view.timeline;
  if (!entries.length) return h("p", { class: "empty" }, "Nothing has run yet.");
  const spans = entries.map((e) => between(e.started_at, e.completed_at) || 0);
  const longest = Math.max(0.001, ...spans);
  const rows = entries.map((e, i) => {
    const point = pointFor(view, e);
    const row = h("tr", { class: `${point ? "selectable" : ""}${point && point.seq === state.seq ? " selected" : ""}`,
                          title: point ? "show the state after this step" : "",
                          onclick: point ? () => pickState(point.seq) : null },
      h("td", { class: "num muted" }, when(e.started_at)),
      h("td", { class: "mono" }, e.step_id || "", e.task_id ? h("span", { class: "muted" }, ` (${e.task_id})`) : ""),
      h("td", { class: "muted" }, e.type || ""),
      h("td", {}, pill(e.status || "running")),
      h("td", { class: "num" }, e.completed_at ? duration(spans[i]) : ""),
      h("td", {}, h("div", { class: `bar ${e.status === "failed" ? "failed" : ""}` })));
    row.lastChild.firstChild.style.width = `${Math.max(2, (spans[i] / longest) * 100)}%`;
    return row;
  });
  return h("div", { class: "timeline", "data-keep-scroll": "timeline" },
    h("table", {}, h("thead", {}, h("tr", {}, ["started", "step", "type", "status", "took", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows)));
}
function pointFor(view, entry) {
  const matching = view.state_points.filter((p) => p.step_id && p.step_id === entry.step_id && (p.task_id || null) === (entry.task_id || null));
  return matching.length ? matching[matching.length - 1] : null;
}
function pickState(seq) {
  state.seq = seq;
  if (state.view) renderInstance(state.view);
}
function stateSection(view, at) {
  const points = view.state_points;
  const options = [["", "now"], ...points.slice().reverse().map((p) =>
    [String(p.seq), `after #${p.seq} ${p.kind === "started" ? "start" : p.step_id || p.by || p.kind}${p.task_id ? " (" + p.task_id + ")" : ""}`])];
  const chooser = select("state-at", state.seq === null ? "" : String(state.seq), options,
                         (v) => pickState(v === "" ? null : Number(v)));
  const shown = at ? at.state : { raw: view.state.raw, state: view.state.state, computed: view.state.computed };
  const changed = new Set(at ? at.changed : []);
  return h("div", {},
    h("div", { class: "state-head" }, h("h2", {}, "State"), h("label", { class: "muted" }, "as it was ", chooser)),
    at && at.changed.length ? h("p", { class: "muted" }, "changed here: ", at.changed.map((c) => h("code", {}, c + " "))) : null,
    at && !at.complete ? h("p", { class: "note error" }, at.note || "this state could not be shown whole") : null,
    h("div", { class: "tree", "data-keep-scroll": "state" },
      ["raw", "state", "computed"].map((tier) => [h("div", { class: "row tier" }, tier), tree(shown[tier] || {}, tier, 1, changed)]),
      at ? null : [h("div", { class: "row tier" }, "inputs"), tree(view.state.inputs || {}, "inputs", 1, changed)]));
}
const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
function childPath(path, key) {
  if (typeof key === "number") return `${path}[${key}]`;
  return IDENT.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}
function tree(value, path, depth, changed) {
  const rows = [];
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  for (const [key, item] of entries) {
    const here = childPath(path, key);
    const container = item !== null && typeof item === "object";
    const row = h("div", { class: `row${changed.has(here) ? " changed" : ""}`, "data-path": here },
      "  ".repeat(depth), h("span", { class: "key" }, Array.isArray(value) ? `[${key}]` : key), ": ",
      container ? (Array.isArray(item) ? `[${item.length}]` : "{…}") : literal(item));
    rows.push(row);
    if (container && depth < 8) rows.push(...tree(item, here, depth + 1, changed));
  }
  return rows;
}
function literal(value) {
  if (typeof value === "string") return h("span", { class: "str" }, JSON.stringify(value));
  if (typeof value === "number") return h("span", { class: "num" }, String(value));
  return h("span", { class: "lit" }, String(value));
}
function tracesSection(view) {
  const holder = h("div", {}, h("button", { onclick: async () => {
    try {
      const data = await api(`api/instances/${encodeURIComponent(view.workflow_id)}/traces`);
      holder.replaceChildren(traceTable(data.traces));
    } catch (error) { holder.replaceChildren(h("p", { class: "note error" }, error.message)); }
  } }, "Show the transform traces"));
  return holder;
}
function traceTable(traces) {
  if (!traces.length) return h("p", { class: "empty" }, "No computed field has been recomputed.");
  return h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ["time", "field", "trigger", "input", "output", "ms"].map((t) => h("th", {}, t)))),
    h("tbody", {}, traces.slice(-200).reverse().map((t) => h("tr", {},
      h("td", { class: "num muted" }, when(t.timestamp)), h("td", { class: "mono" }, t.field), h("td", { class: "muted" }, t.trigger || ""),
      h("td", { class: "mono" }, short(t.input)), h("td", { class: "mono" }, t.error ? short(t.error) : short(t.output)),
      h("td", { class: "num" }, t.duration_ms ?? ""))))));
}

// -- logging in ---------------------------------------------------------------------------
// Every read needs a login: a session cookie (HttpOnly, so this script never sees it) from
// the one-time login URL the server gave its user, or the server's bearer token, traded
// here for the same cookie.  The token goes in a header, never in the address.
function showLogin(refusal) {
  stopLive();
  clearInterval(state.listTimer);
  state.listTimer = null;
  setLive(false, true);
  crumbs("log in");
  document.title = "Log in — aromcp-workflows";
  const note = h("p", { class: "note error", id: "login-note" });
  const field = h("input", { type: "password", name: "token", autocomplete: "off", placeholder: "bearer token" });
  const form = h("form", { class: "login", onsubmit: async (e) => {
    e.preventDefault();
    const response = await fetch("api/login", { method: "POST", credentials: "same-origin",
                                                headers: { Authorization: `Bearer ${field.value.trim()}` } });
    field.value = "";
    if (response.ok) { location.reload(); return; }
    note.textContent = "That token was not accepted.";
  } }, field, h("button", { type: "submit" }, "Log in"));
  document.getElementById("main").replaceChildren(h("div", { class: "panel login-panel" },
    h("h1", {}, "Log in"),
    h("p", {}, "Open the one-time login URL this server gave you: ", h("code", {}, "aromcp-workflows ui"),
      " prints it on its terminal (or names the private file that holds it), and ",
      h("code", {}, "serve --http --ui"), " names that file in its log. Each login URL works once; the server then makes the next."),
    refusal.token_login ? [h("p", {}, "Or paste the server's bearer token:"), form, note] : null));
}

// -- start --------------------------------------------------------------------------------
async function start() {
  window.addEventListener("popstate", route);
  try { state.config = await api("api/config"); } catch (error) { return; }  // not logged in: the login panel shows
  route();
}
document.addEventListener("DOMContentLoaded", start);
