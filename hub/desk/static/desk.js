// The calling desk's only script: actions through the REST API (fetch), a run's live
// picture from its event stream (EventSource), and the board's refresh. No libraries.
"use strict";

const CSRF = { "X-Callboard-Desk": "1" }; // the API asks cookie-authenticated writes for it
const FINAL = new Set(["success", "partial", "failed", "cancelled", "dry"]);
const main = document.getElementById("main");

function flash(text, ok) {
  let box = document.getElementById("flash");
  if (!box) {
    box = document.createElement("p");
    box.id = "flash";
    box.setAttribute("role", "status");
    box.setAttribute("aria-live", "polite");
    main.prepend(box);
  }
  box.textContent = text;
  box.className = ok ? "ok" : "refused";
}

function summary(body) {
  if (!body || typeof body !== "object") return "";
  const keys = ["state", "status", "attempt", "run_id", "condition", "winner", "deleted"];
  const parts = keys.filter((k) => body[k] !== undefined && body[k] !== null)
    .map((k) => `${k} ${Array.isArray(body[k]) ? body[k].join(", ") : body[k]}`);
  if (body.resolution && body.resolution.winner) parts.push(`winner ${body.resolution.winner}`);
  return parts.join(", ");
}

// As the CLI does: a request that changes state carries an Idempotency-Key of its own and
// is sent again with it after a 503 (waiting the hub's Retry-After, at most 5 s) or a lost
// connection, up to SENDS times; the hub does it once however many times it arrives.
const SENDS = 3;

function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16)); // randomUUID needs https
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function retryAfter(response) {
  const header = response.headers.get("Retry-After");
  const seconds = header === null ? NaN : Number(header);
  return Number.isFinite(seconds) ? Math.min(Math.max(seconds, 0), 5) : 1;
}

async function send(url, init) {
  for (let sent = 1; ; sent++) {
    let wait;
    try {
      const response = await fetch(url, init);
      if (response.status !== 503 || sent >= SENDS) return response;
      wait = retryAfter(response);
    } catch (err) {
      if (sent >= SENDS) throw err;
      wait = 1;
    }
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
  }
}

// Call one REST route as the CLI would; show what came back next to `where` and in #flash.
async function call(method, url, body, label, where) {
  const out = where && where.querySelector("output.outcome");
  if (out) out.textContent = "…";
  const init = { method, headers: { ...CSRF }, credentials: "same-origin" };
  if (method === "POST") init.headers["Idempotency-Key"] = newKey();
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = body;
  }
  let response, data = null;
  try {
    response = await send(url, init);
    data = await response.json().catch(() => null);
  } catch (err) {
    const text = `${label}: the hub did not answer (${err})`;
    if (out) out.textContent = text;
    flash(text, false);
    return null;
  }
  const ok = response.ok;
  const detail = ok ? summary(data) : (data && data.detail) || response.statusText;
  const text = `${label}: ${ok ? "done" : "refused"} (${response.status}${detail ? ": " + detail : ""})`;
  if (out) {
    out.textContent = text;
    out.className = "outcome " + (ok ? "ok" : "refused");
  }
  flash(text, ok);
  return ok ? data || {} : null;
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-url]");
  if (!button) return;
  event.preventDefault();
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  button.disabled = true;
  const label = button.title || button.textContent.trim();
  const data = await call(button.dataset.method, button.dataset.url, button.dataset.body,
    label, button.closest(".action"));
  button.disabled = false;
  if (data && button.dataset.goTo === "run" && data.run_id) {
    window.location.assign(`/runs/${encodeURIComponent(data.run_id)}`);
  } else if (data) {
    if (runId && !source) everything = true; // an ended run acted on (a retry): redraw all
    refreshSoon(0);
  }
});

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-url]");
  if (!form) return;
  event.preventDefault();
  let data;
  if (form.dataset.json !== undefined) { // a JSON body of the numbers filled in (the budget)
    const body = {};
    for (const [key, value] of new FormData(form)) {
      if (String(value).trim() !== "") body[key] = Number(value);
    }
    data = await call("POST", form.dataset.url, JSON.stringify(body), form.dataset.label, form);
  } else {
    const name = new FormData(form).get("name");
    const url = form.dataset.url.replace("{name}", encodeURIComponent(String(name)));
    data = await call("POST", url, undefined, `Raise ${name}`, form);
  }
  if (data) {
    form.reset();
    refreshSoon(0);
  }
});

// Swap server-rendered parts in, keeping keyboard focus on the same control.
function focusKey(el) {
  if (!el || el === document.body) return null;
  if (el.id) return `#${CSS.escape(el.id)}`;
  if (el.dataset && el.dataset.url) {
    return `[data-url="${CSS.escape(el.dataset.url)}"][data-method="${el.dataset.method}"]`;
  }
  return null;
}

// A field's place on the page, found again in the swapped-in HTML.
function fieldKey(el) {
  if (el.id) return `#${CSS.escape(el.id)}`;
  const form = el.form;
  if (!el.name || !form || !form.dataset.url) return null;
  return `form[data-url="${CSS.escape(form.dataset.url)}"] [name="${CSS.escape(el.name)}"]`;
}

const ticks = (el) => el.type === "checkbox" || el.type === "radio";

// What the operator has typed (or ticked) and not sent yet: a live update keeps it.
function typed(target) {
  const kept = [];
  for (const el of target.querySelectorAll("input, textarea")) {
    const edited = ticks(el) ? el.checked !== el.defaultChecked : el.value !== el.defaultValue;
    const key = edited ? fieldKey(el) : null;
    if (key) kept.push([key, ticks(el) ? el.checked : el.value]);
  }
  return kept;
}

function swap(target, html, outer) {
  const key = target.contains(document.activeElement) ? focusKey(document.activeElement) : null;
  const kept = typed(target);
  if (outer) target.outerHTML = html;
  else target.innerHTML = html;
  for (const [field, value] of kept) {
    const again = document.querySelector(field);
    if (!again) continue;
    if (ticks(again)) again.checked = Boolean(value);
    else again.value = String(value);
  }
  if (key) {
    const again = document.querySelector(key);
    if (again) again.focus();
  }
}

function applyParts(parts) {
  for (const [name, html] of Object.entries(parts || {})) {
    const target = main.querySelector(`[data-part="${name}"]`);
    if (target) swap(target, html, false);
  }
}

// -- a run: its events move the picture at once; the rows follow from the server ----------
const runId = main.dataset.run;
const changed = new Set();
let everything = false; // the next refresh redraws every row and node
let timer = null;
let source = null;

function setNode(cue, state, holds) {
  const node = main.querySelector(`.node[data-node="${CSS.escape(cue)}"]`);
  if (!node) return;
  for (const c of [...node.classList]) if (c.startsWith("st-")) node.classList.remove(c);
  node.classList.add(`st-${state}`);
  const label = node.querySelector("[data-label]");
  if (label) label.textContent = state;
  if (holds !== undefined) {
    node.classList.toggle("holder", holds.length > 0);
    const badge = node.querySelector("[data-badge]");
    if (badge) badge.textContent = (holds.length ? "holds " : "uses ") + node.dataset.res;
  }
}

function setRowState(cue, state) {
  const cell = main.querySelector(`tr[data-cue="${CSS.escape(cue)}"] [data-col="state"] .state`);
  if (!cell) return;
  cell.className = `state st-${state}`;
  cell.textContent = state;
}

// One refresh at a time: an answer fetched before a change must not land after a newer
// one. What changes meanwhile waits in `changed` for the next round.
let refreshing = false;
let again = false;

async function refreshRun() {
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  try {
    await redrawRun();
  } finally {
    refreshing = false;
    if (again) {
      again = false;
      refreshRun();
    }
  }
}

async function redrawRun() {
  const names = [...changed];
  changed.clear();
  const all = everything || names.length > 150;
  everything = false;
  const query = all ? "*" : names.map(encodeURIComponent).join(",");
  const response = await fetch(`/runs/${encodeURIComponent(runId)}/parts?cues=${query}`,
    { credentials: "same-origin" });
  if (response.status === 401) {
    flash("Your session ended: log in again to keep this page live.", false);
    if (source) source.close();
    return;
  }
  if (!response.ok) return;
  const data = await response.json();
  for (const [cue, node] of Object.entries(data.nodes)) setNode(cue, node.state, node.holds);
  for (const [cue, html] of Object.entries(data.rows)) {
    const row = main.querySelector(`tr[data-cue="${CSS.escape(cue)}"]`);
    if (row) swap(row, html, true);
  }
  applyParts(data.parts);
  if (!data.live && source) {
    source.close();
    source = null;
  } else if (data.live && !source) {
    follow(); // an ended run running again (a retry): follow it live from now on
  }
}

async function refreshBoard() {
  if (document.hidden) return;
  const response = await fetch(main.dataset.poll, { credentials: "same-origin" });
  if (response.ok) applyParts((await response.json()).parts);
}

function refreshSoon(delayMs) {
  if (timer) clearTimeout(timer);
  timer = setTimeout(() => {
    timer = null;
    if (runId) refreshRun();
    else if (main.dataset.poll) refreshBoard();
  }, delayMs);
}

// The newest event the page shows: at first the run's last one when its state was read
// for the page (every earlier one is drawn already), then each one received. The stream
// starts after it, so an event is news exactly once, whatever the clocks say.
let after = main.dataset.after || "0-0";

function follow() {
  const run = encodeURIComponent(runId);
  source = new EventSource(`/v1/runs/${run}/events?after=${encodeURIComponent(after)}`);
  const note = main.querySelector("[data-live-note]");
  source.onopen = () => { if (note) note.textContent = "live"; };
  const news = (event) => {
    if (event.lastEventId) after = event.lastEventId;
    return JSON.parse(event.data);
  };
  source.addEventListener("cue", (event) => {
    const e = news(event);
    setNode(e.cue, e.state);
    setRowState(e.cue, e.state);
    changed.add(e.cue);
    refreshSoon(250);
  });
  for (const kind of ["go", "reason", "condition", "escalation", "context", "handoff", "attempt_failed"]) {
    source.addEventListener(kind, (event) => {
      news(event);
      refreshSoon(250);
    });
  }
  source.addEventListener("run", (event) => {
    const e = news(event);
    if (!FINAL.has(e.status)) {
      refreshSoon(250);
      return;
    }
    // the stream closes here, so cue events written after the run's ending never
    // arrive: the last refresh redraws every row and node
    everything = true;
    refreshSoon(0);
    source.close();
    source = null;
    if (note) note.textContent = `finished: ${e.status}`;
  });
  source.onerror = () => {
    if (source && source.readyState === EventSource.CLOSED) {
      if (note) note.textContent = "disconnected";
    } else if (note) {
      note.textContent = "reconnecting…";
    }
  };
}

if (runId && main.dataset.live === "1") follow();
if (main.dataset.poll) setInterval(refreshBoard, 3000);

// A link to one dead letter or escalation (#id) opens it.
if (location.hash) {
  const target = document.getElementById(location.hash.slice(1));
  if (target && target.tagName === "DETAILS") target.open = true;
}
