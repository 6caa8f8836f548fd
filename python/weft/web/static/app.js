// Weft's run dashboard: one execution, replayed from its journal, then followed
// live, and steered with a read-write token. Plain modern JavaScript, no build
// step: see docs/dashboard.md for why.
//
// How it stays exact: every journaled event carries its `seq`; the page keeps
// the newest one it applied (`lastSeq`) and, on every (re)connect, hands it to
// the server as the handshake's `afterSeq`, so the server sends exactly what is
// missing. An event at or below `lastSeq` is counted as a duplicate and
// dropped; one that skips a seq is counted as a gap (both must stay 0).
//
// Where the figures come from: the server. Codon states, the run's outcome, what
// is to do, costs and totals are the server's `progress.snapshot` (the one fold of
// the journal, weft.progress, that every view of Weft reads), asked for in the
// handshake; the page renders them and never folds the events into figures. The
// events give the rest: transcripts, checkpoints, sentinels, errors, each run's start.
//
// How it stays fast: events only update a model (plain objects and maps) and
// mark what changed; nothing is drawn while a replay pours in, then the page
// is drawn once. After that, one render per animation frame touches only the
// changed rows. Long lists cost what is on screen, not what they hold: the
// codon table draws only the rows in view (the rest are two spacers), the
// timeline and the checkpoints show the newest entries and more on request,
// and a codon's transcript is built from its events only when it is opened.
// Nothing from an event is ever parsed as HTML (textContent only).

const MAX_LIST = 300; // rows kept in the errors and sentinels lists (newest)
const CHART_POINTS = 600; // the chart's polyline is thinned to about its width
const HEAVY_MS = 300; // panels rebuilt whole (timeline, chart...) at most this often
const ROW_PX = 28; // the codon table's row height (style.css sets it; rows never wrap)
const WINDOW_MIN = 150; // a codon table this long or shorter is drawn whole
const OVERSCAN = 30; // rows drawn above and below the visible ones
const CHIPS = 150; // chips shown per run in the timeline before "N earlier"
const CHECKPOINT_ROWS = 100; // checkpoint rows drawn at first, and per "show older"

const $ = (id) => document.getElementById(id);

// -- the model ---------------------------------------------------------------
//
// Two sources, each with its own job. The journaled events (replayed, then live)
// give what the page shows of them as they are: each codon's transcript, the
// checkpoints, sentinels, errors, budget lines, each run's start. The figures,
// which codon is in which state, how the run ended, what is to do, what it cost,
// come from the server's `progress.snapshot` (docs/protocol.md): the one fold of
// the journal every view of Weft reads (weft.progress), never folded here again.

const S = {
  lastSeq: 0,
  targetSeq: null, // lastSeq of the first handshake: reached = first full render
  replayed: false,
  stats: { events: 0, duplicates: 0, gaps: 0, connects: 0, snapshots: 0 },
  time: { parse: 0, apply: 0, render: 0 }, // ms spent on each (benchmarks read them)
  mode: null,
  progress: null, // the newest progress.snapshot's data: the figures
  noProgress: false, // the server could not send them (its error is in the list)
  runs: new Map(), // runId -> {runId, reason, start}: each RunStarted, as it says
  currentRun: null, // the newest RunStarted's runId (stream events carry none)
  codons: new Map(), // runId/codonId -> a codon's kept events (its transcript)
  order: [], // codon ids of the table, in plan order (the snapshot's)
  replay: false, // the server replays a finished execution (server.ready's `replay`): nothing follows
  ended: false, // the server closed because the run ended
  latest: new Map(), // codonId -> key of its newest events record
  checkpoints: [],
  sentinels: [],
  errors: [],
  lastTimestamp: null, // the newest event's time, and when it arrived (Date.now())
  lastArrival: 0,
  budgets: [], // {label, value, axis}
  idle: "",
  execution: "",
};

const dirty = { rows: new Set(), window: false, lines: false, timeline: false, checkpoints: false,
  sentinels: false, errors: false, chart: false, header: true, transcript: false };
let selected = null; // the codon id whose transcript is open
let scheduled = false;

// A codon's events in one run, kept as they came; its transcript (`items`) is
// built from them when it is first opened (see buildItems).
function eventsRecord(runId, codonId) {
  const key = `${runId}/${codonId}`;
  let rec = S.codons.get(key);
  if (!rec) {
    rec = { key, runId, codonId, last: null, events: [], items: [], tools: new Map(), built: 0 };
    S.codons.set(key, rec);
    S.latest.set(codonId, key);
  }
  return rec;
}

function codonOf(data) {
  const id = data.codonId || data.codon;
  if (!id) return null;
  const key = S.latest.get(id);
  return key ? S.codons.get(key) : null;
}

// The events record a row shows: the codon's in the snapshot's run, else its newest.
function recordOf(codonId) {
  const run = S.progress && S.progress.runId;
  return S.codons.get(`${run}/${codonId}`) || S.codons.get(S.latest.get(codonId)) || null;
}

function touchCodon(codonId) {
  dirty.rows.add(codonId);
  if (codonId === selected) dirty.transcript = true;
}

// A codon's checkpoints come in its transitions' metadata (`checkpointSha`); the
// state it moves to says which checkpoint it is.
const CHECKPOINT_TYPES = { starting: "rig-setup", completed: "completed", failed: "error", skipped: "skipped" };
const seenCheckpoints = new Set();
const planFiles = new Map(); // codonId -> its checkpointed files (the plan's entries say them)

function addCheckpoint(sha, type, codonId, runId, time) {
  if (!sha || seenCheckpoints.has(`${runId}/${codonId}/${sha}/${type}`)) return;
  seenCheckpoints.add(`${runId}/${codonId}/${sha}/${type}`);
  S.checkpoints.push({ sha, type, codonId, runId, time, files: (codonId && planFiles.get(codonId)) || [] });
  dirty.checkpoints = true;
}

function planned(entries) {
  for (const e of entries || []) planFiles.set(e.codonId, (e.codon || {}).checkpointedFiles || []);
}

// A stream event of a codon: kept for its transcript (built when opened).
function keep(rec, ev) {
  rec.events.push(ev);
  if (rec.codonId === selected) dirty.transcript = true;
}

function note(kind, time, text) {
  S.errors.push({ kind, time, text });
  if (S.errors.length > MAX_LIST * 2) S.errors.splice(0, S.errors.length - MAX_LIST);
  dirty.errors = true;
}

// One function per event type: each keeps what the page shows of it and marks
// what changed. No event here changes a figure: those are the snapshot's.
const ON = {
  RunStarted(d, ev) {
    const cond = d.startingConditions || {};
    const reason = cond.reason ? `${cond.type}: ${cond.reason}` : cond.type || "";
    S.runs.set(d.runId, { runId: d.runId, reason, start: ev.timestamp });
    S.currentRun = d.runId;
    planned(d.executionPlan);
    dirty.timeline = true;
  },
  RunCrashed(d, ev) {
    note("recovery", ev.timestamp, `Run ${d.runId} crashed (its last codon was ${d.lastCodonStatus || "?"}); last seen ${d.detectedAt || ""}`);
  },
  PlanExtended(d) { planned(d.entries); },
  CodonStarted(d) { eventsRecord(d.runId, d.codonId); },
  CodonTransitioned(d, ev) {
    const meta = d.metadata || {};
    if (meta.checkpointSha) addCheckpoint(meta.checkpointSha, CHECKPOINT_TYPES[d.to] || d.to, d.codonId, d.runId, ev.timestamp);
  },
  CheckpointCreated(d, ev) { addCheckpoint(d.sha, d.checkpointType, d.codonId, d.runId, ev.timestamp); },
  InitialCheckpointSet(d, ev) { addCheckpoint(d.sha, "initial", null, null, ev.timestamp); },
  SentinelStatesUpdated(d, ev) { sentinel(ev); },
  "assistant.action"(d, ev) {
    const rec = codonOf(d);
    if (!rec) return;
    rec.last = d;
    keep(rec, ev);
    touchCodon(rec.codonId);
  },
  "tool.result"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
  },
  "rig.output"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
  },
  "rig.setup.failed"(d, ev) { note("error", ev.timestamp, `Rig setup of ${d.codonId} failed: ${d.message}`); },
  "codon.retry"(d, ev) {
    note("recovery", ev.timestamp, `${d.codonId} will run again (attempt ${d.attempt} of ${d.maxAttempts}): ${d.reason || ""}`);
  },
  "rollback.started"(d, ev) {
    note("recovery", ev.timestamp, `Rollback to ${d.toCodon || "?"} (${d.checkpointType || ""} ${String(d.toCheckpoint || "").slice(0, 10)}) started`);
  },
  "rollback.completed"(d, ev) {
    note("recovery", ev.timestamp, `Rollback completed: run ${d.toRun} continues from ${d.codonId || "?"}`);
  },
  error(d, ev) {
    note("error", ev.timestamp, d.message || JSON.stringify(d));
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
  },
  info(d, ev) { note("info", ev.timestamp, d.message || ""); },
  "server.idle"(d) { S.idle = d.message || d.reason || ""; dirty.header = true; },
  "codon.started"(d, ev) {
    S.idle = "";
    dirty.header = true;
    const rec = codonOf(d);
    if (rec && d.model) keep(rec, ev);
  },
  // The agent session's supervisor and the operator's messages (docs/protocol.md):
  // in the codon's transcript, and the failures in the errors and recovery list.
  "session.message"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("info", ev.timestamp, `${messageText(d)}${rec ? ` (to ${rec.codonId})` : " (for the next prompt)"}`);
  },
  "session.resumed"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
  },
  "session.cooldown"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("recovery", ev.timestamp, `${d.codonId}: ${sessionText(ev)}`);
  },
  "session.gave-up"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("error", ev.timestamp, `${d.codonId}: ${sessionText(ev)}`);
  },
  "breaker.changed"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("recovery", ev.timestamp, sessionText(ev));
  },
  "breaker.waiting"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("recovery", ev.timestamp, `${d.codonId}: ${sessionText(ev)}`);
  },
  // A closed usage window parks the codon (its line says until when, from the snapshot).
  "codon.parked"(d, ev) {
    const rec = codonOf(d);
    if (rec) keep(rec, ev);
    note("recovery", ev.timestamp, `${d.codonId}: ${sessionText(ev)}`);
  },
  "usage.window"(d, ev) {
    note(d.status === "allowed" ? "info" : "recovery", ev.timestamp, sessionText(ev));
  },
};

// The server's figures: the newest snapshot replaces the page's (it is whole).
function progress(d) {
  S.progress = d;
  S.stats.snapshots++;
  S.order = d.codons.map((c) => c.codonId);
  dirty.lines = true;
  dirty.header = true;
  dirty.timeline = true;
  dirty.chart = true;
  if (selected) dirty.transcript = true;
}

function messageText(d) {
  return `${d.urgent ? "urgent message" : "queued message"}: ${d.message || ""}`;
}

// One line for an event of the session supervisor or a circuit breaker.
function sessionText(ev) {
  const d = ev.data || {};
  switch (ev.type) {
    case "session.cooldown":
      return `session ${d.session} failed (${d.errorClass}${d.message ? `: ${d.message}` : ""}); `
        + `resuming in ${fmtMs(d.durationMs)} (${d.consecutiveErrors} error(s) in a row, ${d.totalErrors} in all)`;
    case "session.resumed":
      return `session ${d.session} ${d.resumeSessionId ? `resumes ${d.resumeSessionId}` : "starts afresh"}`
        + ` (${d.reason === "urgent" ? "an urgent message" : d.reason === "window" ? "the usage window opened" : "after a failure"})`;
    case "codon.parked":
      return `${d.session ? `session ${d.session} was refused: ` : ""}the ${d.provider} usage window`
        + `${d.window ? ` (${d.window})` : ""} is closed; parked until ${new Date(d.resumeAt).toISOString()} (no error counted)`;
    case "usage.window":
      return `${d.provider} usage window${d.window ? ` (${d.window})` : ""}: ${d.status}`
        + `${d.utilization == null ? "" : `, ${Math.round(d.utilization * 100)}% used`}`
        + `${d.resetsAt ? `, resets ${new Date(d.resetsAt).toISOString()}` : ""}`;
    case "session.gave-up":
      return `gave up after ${d.sessions} session(s): ${d.message || ""}`;
    case "breaker.changed":
      return `${d.provider} circuit breaker ${d.previous} → ${d.state} (${d.reason}; `
        + `${d.consecutiveFailures} of ${d.failureThreshold} failures)`;
    case "breaker.waiting":
      return d.message || `waiting for the ${d.provider} circuit breaker`;
    default:
      return ev.type;
  }
}

// A codon's transcript items, built from its kept events on first open and
// extended with the events since then: replaying a long run builds none.
function buildItems(rec) {
  const events = rec.events;
  for (; rec.built < events.length; rec.built++) {
    const ev = events[rec.built];
    const d = ev.data || {};
    switch (ev.type) {
      case "assistant.action": {
        const item = { kind: d.action, text: d.content || "", tool: d.toolName || "",
          input: d.toolInput, id: d.toolUseId, result: null };
        if (d.toolUseId) rec.tools.set(d.toolUseId, item);
        rec.items.push(item);
        break;
      }
      case "tool.result": {
        const item = rec.tools.get(d.toolUseId);
        const result = { text: d.result || "", error: !!d.isError, truncated: !!d.truncated };
        if (item) item.result = result;
        else rec.items.push({ kind: "tool_result", text: "", tool: d.toolName || "", result });
        break;
      }
      case "rig.output":
        rec.items.push({ kind: "rig", text: `${d.stream}: ${d.line}` });
        break;
      case "error":
        rec.items.push({ kind: "error", text: d.message || "" });
        break;
      case "codon.started":
        rec.items.push({ kind: "info", text: `${d.harness || ""} ${d.model}` });
        break;
      case "session.message":
        rec.items.push({ kind: "user", text: messageText(d), urgent: !!d.urgent });
        break;
      case "session.gave-up":
        rec.items.push({ kind: "error", text: sessionText(ev) });
        break;
      default:
        rec.items.push({ kind: "session", text: sessionText(ev) });
    }
  }
}

// The last action column: the codon's failure (the snapshot's `<type>: <message>`),
// else what its agent did last.
function lastAction(c) {
  if (c.failure) return c.failure;
  if (c.parked) return `parked until ${c.parked}`;
  const rec = recordOf(c.codonId);
  const d = rec && rec.last;
  if (!d) return "";
  return d.action === "tool_use" ? `tool: ${d.toolName || "?"}`
    : d.action === "thinking" ? "thinking" : (d.content || "").slice(0, 80);
}

// Events of features that grow (sentinels, budgets) are shown by shape, not by name.
function sentinel(ev) {
  S.sentinels.push(ev);
  if (S.sentinels.length > MAX_LIST * 2) S.sentinels.splice(0, S.sentinels.length - MAX_LIST);
  dirty.sentinels = true;
}

function budget(ev) {
  for (const [k, v] of Object.entries(ev.data || {})) {
    if (typeof v !== "number" || !/limit|budget|max/i.test(k)) continue;
    const axis = /token/i.test(k) ? "tokens" : "cost";
    const label = `${ev.type} ${k}`;
    const old = S.budgets.find((b) => b.label === label);
    if (old) old.value = v; else S.budgets.push({ label, value: v, axis });
    dirty.chart = true;
  }
  note("info", ev.timestamp, `${ev.type}: ${JSON.stringify(ev.data)}`);
}

function apply(ev) {
  if (ev.seq <= S.lastSeq) { S.stats.duplicates++; return; }
  if (ev.seq !== S.lastSeq + 1) S.stats.gaps++;
  S.lastSeq = ev.seq;
  S.lastTimestamp = ev.timestamp;
  S.stats.events++;
  const handler = ON[ev.type];
  try {
    if (handler) handler(ev.data || {}, ev);
    else if (ev.type.startsWith("sentinel.")) sentinel(ev);
    else if (ev.type.startsWith("budget")) budget(ev);
  } catch (err) {
    note("error", ev.timestamp, `the dashboard could not show event ${ev.seq} (${ev.type}): ${err}`);
  }
  dirty.header = true;
}

// -- the connection --------------------------------------------------------------

let socket = null;
let token = null;
let wantMode = "readandwrite";
let handshaken = false;
let retryMs = 250;
let commandSeq = 0;
let holdUntil = 0; // tests: stay disconnected until then
const pending = new Map(); // command id -> {li: its line in the actions list, then}

function takeToken() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const fromHash = hash.get("token");
  if (fromHash) {
    sessionStorage.setItem("weft-token", fromHash);
    // The token leaves the address bar (and so screenshots and shared links).
    history.replaceState(null, "", location.pathname);
  }
  return fromHash || sessionStorage.getItem("weft-token");
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/`);
  socket = ws;
  handshaken = false;
  status("connecting", "");
  ws.onopen = () => handshake(ws);
  ws.onmessage = (m) => receive(ws, m.data);
  ws.onclose = (e) => {
    if (socket !== ws) return;
    socket = null;
    // The server closes with 1001 after the run's last event; a run whose
    // outcome was journaled has ended too, however its process went away.
    // Nothing will follow: the page says so and stops trying (a run that
    // continues the execution is a new process, with its own address).
    if (handshaken && (e.code === 1001 || runEnded())) {
      S.ended = true;
      status(S.replay ? "finished · replay" : "run ended", "ended");
      dirty.header = true;
      schedule();
      return;
    }
    status(`disconnected (${e.code}${e.reason ? ": " + e.reason : ""})`, "bad");
    if (token !== null || S.mode) setTimeout(connect, Math.max(retryMs, holdUntil - Date.now()));
    retryMs = Math.min(retryMs * 2, 5000);
  };
}

function handshake(ws) {
  // progress: the server's figures come as progress.snapshot messages.
  const data = { mode: wantMode, afterSeq: S.lastSeq, liveBatches: true, pageSize: 10000, progress: true };
  if (token) data.token = token;
  ws.send(JSON.stringify({ type: "handshake", data }));
}

function receive(ws, text) {
  if (socket !== ws) return;
  const t0 = performance.now();
  const msg = JSON.parse(text);
  S.time.parse += performance.now() - t0;
  const d = msg.data || {};
  switch (msg.type) {
    case "handshake.response":
      handshaken = true;
      retryMs = 250;
      S.stats.connects++;
      S.mode = d.mode;
      if (S.targetSeq === null) S.targetSeq = d.lastSeq;
      showMode();
      break;
    case "server.ready":
      // Always right after handshake.response: whether anything will follow.
      S.execution = d.executionPath || "";
      S.replay = !!d.replay;
      if (S.replay) status("finished · replay", "ended");
      else status("live", "good");
      dirty.header = true;
      break;
    case "history.batch":
    case "live.batch": {
      // For the benchmark's breakdown: when the replay started arriving.
      if (S.stats.events === 0) performance.mark("weft-first-batch");
      const t1 = performance.now();
      S.lastArrival = Date.now();
      for (const ev of d.events) apply(ev);
      S.time.apply += performance.now() - t1;
      break;
    }
    case "progress.snapshot":
      progress(d);
      break;
    case "command.ack":
      answered(d.commandId, true, `${d.command}: accepted`);
      break;
    case "checkpoint.list":
      answered(d.commandId, true, `${(d.checkpoints || []).length} checkpoints`);
      break;
    case "error":
      if (msg.seq !== undefined) {
        apply(msg);
      } else if (!handshaken && d.code === "INVALID_TOKEN") {
        refused(ws, d.message);
      } else if (d.code === "NOT_AVAILABLE" && /^progress\.snapshot/.test(d.message || "")) {
        S.noProgress = true; // the figures will not come: the page says why and draws the rest
        note("error", msg.timestamp, d.message);
      } else if (d.commandId !== undefined && pending.has(String(d.commandId))) {
        answered(d.commandId, false, `${d.command || ""}: ${d.message}`);
      } else {
        note("error", msg.timestamp, `${d.code || "error"}: ${d.message}`);
      }
      break;
    case "pong":
      break;
    default:
      if (msg.seq !== undefined) apply(msg);
  }
  schedule();
}

function refused(ws, message) {
  if (wantMode === "readandwrite") {
    // Not the read-write token: it may be the read token; same connection.
    wantMode = "readonly";
    handshake(ws);
    return;
  }
  token = null;
  sessionStorage.removeItem("weft-token");
  wantMode = "readandwrite";
  ws.onclose = null;
  ws.close();
  socket = null;
  status("no access", "bad");
  login(message);
}

function login(reason) {
  $("login").hidden = false;
  $("login-reason").textContent = reason || "This run needs a token.";
  $("token-input").focus();
}

function send(type, data, label, then) {
  if (!socket || !handshaken) {
    logAction(label || type, false, "not connected");
    return;
  }
  const id = `c-${++commandSeq}`;
  pending.set(id, { li: logAction(label || type, null, "sent"), then });
  socket.send(JSON.stringify(data ? { id, type, data } : { id, type }));
}

function logAction(label, ok, text) {
  const li = document.createElement("li");
  li.className = ok === null ? "pending" : ok ? "ok" : "refused";
  li.textContent = `${label}: ${text}`;
  $("actions").prepend(li);
  while ($("actions").children.length > 8) $("actions").lastChild.remove();
  return li;
}

function answered(commandId, ok, text) {
  const asked = pending.get(String(commandId));
  if (!asked) return;
  pending.delete(String(commandId));
  asked.li.className = ok ? "ok" : "refused";
  asked.li.textContent = text;
  if (asked.then) asked.then(ok);
}

// Whether the newest run has ended (the server's figures say how).
function runEnded() {
  const ending = S.progress && S.progress.ending;
  return !!ending && ending.kind !== "running";
}

function status(text, kind) {
  const el = $("connection");
  el.textContent = text;
  el.className = `pill ${kind}`;
}

function showMode() {
  const rw = S.mode === "readandwrite";
  $("mode").textContent = rw ? "read-write" : "read-only";
  $("controls").hidden = !rw;
  document.body.classList.toggle("readonly", !rw);
  dirty.checkpoints = true;
}

function ask(text) {
  return new Promise((resolve) => {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    dialog.onclose = () => resolve(dialog.returnValue === "ok");
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// -- rendering -----------------------------------------------------------------

function schedule() {
  if (!scheduled) {
    scheduled = true;
    requestAnimationFrame(render);
  }
}

function render() {
  const t0 = performance.now();
  renderAll();
  S.time.render += performance.now() - t0;
}

let heavyAt = 0; // when the whole-panel renders last ran

function renderAll() {
  scheduled = false;
  document.body.dataset.lastSeq = String(S.lastSeq);
  if (S.targetSeq !== null && S.lastSeq < S.targetSeq) {
    // Replaying: only the progress; the panels are built once, at the end.
    $("totals").textContent = `replaying: ${S.lastSeq} of ${S.targetSeq} events`;
    return;
  }
  if (S.targetSeq !== null && !S.progress && !S.noProgress) {
    // The figures follow the replay (progress.snapshot): the panels wait for them.
    $("totals").textContent = `replayed ${S.lastSeq} events; the run's figures are coming`;
    return;
  }
  if (dirty.header) renderHeader();
  if (dirty.rows.size || dirty.window || dirty.lines) renderRows();
  if (dirty.transcript) renderTranscript();
  // Panels rebuilt whole are rebuilt at most every HEAVY_MS while events pour in.
  const now = performance.now();
  if (now - heavyAt >= HEAVY_MS || !S.replayed) {
    heavyAt = now;
    if (dirty.timeline) renderTimeline();
    if (dirty.checkpoints) renderCheckpoints();
    if (dirty.sentinels) renderSentinels();
    if (dirty.errors) renderErrors();
    if (dirty.chart) renderChart();
  } else if (dirty.timeline || dirty.checkpoints || dirty.sentinels || dirty.errors || dirty.chart) {
    setTimeout(schedule, HEAVY_MS);
  }
  if (!S.replayed && S.targetSeq !== null && S.lastSeq >= S.targetSeq) {
    S.replayed = true;
    document.body.dataset.replayed = "1";
    performance.mark("weft-replayed");
    // The next frame starts once this one (with the whole replay) was painted.
    requestAnimationFrame(() => {
      performance.mark("weft-rendered");
      document.body.dataset.rendered = "1";
    });
  }
}

function renderHeader() {
  dirty.header = false;
  $("execution").textContent = S.execution;
  const p = S.progress;
  const totals = p ? p.totals : null;
  const counts = totals ? totals.codons : null;
  $("totals").textContent = totals
    ? `${totals.costText} · ${fmtTokens(totals.tokens)} tokens · ${p.codons.length} codons`
      + `${counts.toDo ? ` (${counts.toDo} to do)` : ""} · ${S.runs.size} run(s) · seq ${S.lastSeq}`
    : `${S.runs.size} run(s) · seq ${S.lastSeq}`;
  // The newest run's outcome: its one word (weft.outcome.WORD, as weft status and
  // weft ls say it), then which codon and why, as weft status says it.
  const ending = p && p.ending;
  const outcome = $("outcome");
  const detail = $("outcome-detail");
  outcome.hidden = !ending;
  detail.hidden = !ending || ending.kind === "running";
  if (ending) {
    outcome.textContent = ending.word;
    outcome.className = `pill outcome s-${ending.kind}`;
    outcome.dataset.outcome = ending.kind;
    detail.textContent = endingText(ending);
  }
  $("idle").textContent = S.ended ? "" : S.idle; // nothing waits for a command any more
}

// Which codon and why, as `weft status` says a run's ending (the word is the badge's).
function endingText(ending) {
  const who = ending.codonId ? `${ending.codonId}: ` : "";
  const forced = ending.forced ? " (the agent was killed)" : "";
  return ending.reason ? `${who}${ending.reason}${forced}` : `${ending.codonId || ""}${forced}`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
  return td;
}

// The codon table, as a list of lines: a group heading (the run, a loop
// iteration) or a codon id. Only the lines in view get a <tr>. The lines are the
// snapshot's codons in plan order: rebuilt when a snapshot comes.
let display = [];
const rows = new Map(); // codon id -> its <tr>, once it was in view
const figures = new Map(); // codon id -> its figures in the newest snapshot

const lineCount = () => display.length;
const lineAt = (i) => display[i];

function rebuildLines() {
  dirty.lines = false;
  const p = S.progress;
  figures.clear();
  display = [];
  if (!p) return;
  const run = S.runs.get(p.runId);
  const toDo = p.totals.codons.toDo;
  display.push({ loop: false, tr: null, text: `run ${p.runId || "(not started)"}`
    + `${run && run.reason ? ` (${run.reason})` : ""}`
    + `${toDo ? ` · to do: ${toDo} codon${toDo === 1 ? "" : "s"}` : ""}` });
  let group = "";
  for (const c of p.codons) {
    figures.set(c.codonId, c);
    const here = c.loop ? `${c.loop.loopId}#${c.loop.iteration}` : "";
    if (c.loop && here !== group) {
      display.push({ loop: true, tr: null, text: `loop ${c.loop.loopId} · iteration ${c.loop.iteration}` });
    }
    group = here;
    display.push(c.codonId);
  }
  for (const id of rows.keys()) if (!figures.has(id)) rows.delete(id);
  shown.total = -1; // redraw the lines in view
}

let shown = { first: 0, last: 0, total: -1 };
const spacers = [spacer(), spacer()];

function spacer() {
  const tr = document.createElement("tr");
  tr.className = "spacer";
  tr.setAttribute("aria-hidden", "true");
  cell(tr, "").colSpan = 6;
  return tr;
}

// The lines in view, with OVERSCAN more each side; all of them for a short table.
function inView() {
  const total = lineCount();
  if (total <= WINDOW_MIN) return [0, total];
  const panel = $("codons-panel");
  // How far the table's body has scrolled above the panel's top edge.
  const top = panel.getBoundingClientRect().top - $("codons").tBodies[0].getBoundingClientRect().top;
  const first = Math.max(0, Math.min(total, Math.floor(top / ROW_PX) - OVERSCAN));
  const last = Math.min(total, first + Math.ceil(panel.clientHeight / ROW_PX) + 2 * OVERSCAN);
  return [first, last];
}

function renderRows() {
  if (dirty.lines) rebuildLines();
  const [first, last] = inView();
  const total = lineCount();
  const moved = first !== shown.first || last !== shown.last || total !== shown.total;
  if (moved) {
    const lines = [];
    for (let i = first; i < last; i++) {
      const line = lineAt(i);
      if (typeof line === "string") {
        let tr = rows.get(line);
        if (!tr) {
          tr = codonRow(line);
          rows.set(line, tr);
        }
        fillRow(tr, figures.get(line));
        lines.push(tr);
      } else {
        if (!line.tr) line.tr = groupRow(line);
        lines.push(line.tr);
      }
    }
    spacers[0].cells[0].style.height = `${first * ROW_PX}px`;
    spacers[1].cells[0].style.height = `${(total - last) * ROW_PX}px`;
    spacers[0].hidden = first === 0;
    spacers[1].hidden = last === total;
    $("codons").tBodies[0].replaceChildren(spacers[0], ...lines, spacers[1]);
    shown = { first, last, total };
  } else {
    for (const id of dirty.rows) {
      const tr = rows.get(id);
      if (tr && tr.isConnected && figures.has(id)) fillRow(tr, figures.get(id));
    }
  }
  dirty.rows.clear();
  dirty.window = false;
}

function groupRow(line) {
  const head = document.createElement("tr");
  head.className = line.loop ? "group loop" : "group";
  cell(head, line.text).colSpan = 6;
  return head;
}

function codonRow(codonId) {
  const tr = document.createElement("tr");
  tr.dataset.key = codonId;
  tr.dataset.codon = codonId;
  for (let i = 0; i < 6; i++) cell(tr, "");
  return tr;
}

// A row says what the snapshot says of the codon: its state (the seed's eight,
// `pending`, or `stopped` for one a stop cut short), the state an earlier run left
// a pending one in, its attempts, time, tokens and cost in the words of every view.
function fillRow(tr, c) {
  const cells = tr.cells;
  cells[0].textContent = c.name ? `${c.codonId} · ${c.name}` : c.codonId;
  const started = c.attempts > 0;
  cells[1].textContent = c.status === "pending" && c.earlier ? `${c.earlier} earlier`
    : `${c.status}${c.attempts > 1 ? ` (try ${c.attempts})` : ""}`;
  cells[1].className = `state s-${c.status}`;
  cells[2].textContent = fmtDuration(c.startedAt, c.endedAt);
  cells[3].textContent = started || c.tokens ? fmtTokens(c.tokens) : "";
  cells[4].textContent = started ? c.costText : "";
  cells[5].textContent = lastAction(c);
  tr.dataset.state = c.status;
  tr.dataset.todo = c.toDo ? "1" : "";
  tr.classList.toggle("todo", c.toDo);
  tr.classList.toggle("selected", c.codonId === selected);
}

let transcriptShown = 0;

function renderTranscript() {
  dirty.transcript = false;
  const box = $("transcript");
  const rec = recordOf(selected);
  if (!rec) return;
  if (box.dataset.key !== rec.key) {
    box.textContent = "";
    box.dataset.key = rec.key;
    transcriptShown = 0;
  }
  buildItems(rec);
  $("transcript-title").textContent = `${rec.codonId} (run ${rec.runId})`;
  // Tool results arrive after their call: re-render the open codon whole when
  // something was filled in, else append only the new items.
  const changed = rec.items.slice(0, transcriptShown).some((it) => it.result && !it.shownResult);
  if (changed) { box.textContent = ""; transcriptShown = 0; }
  const frag = document.createDocumentFragment();
  for (const item of rec.items.slice(transcriptShown)) frag.append(renderItem(item));
  transcriptShown = rec.items.length;
  box.append(frag);
}

function renderItem(item) {
  if (item.kind === "message") {
    const p = document.createElement("p");
    p.className = "t-message";
    p.textContent = item.text;
    return p;
  }
  if (item.kind === "thinking" || item.kind === "tool_use" || item.kind === "tool_result") {
    const details = document.createElement("details");
    details.className = `t-${item.kind}`;
    const summary = document.createElement("summary");
    summary.textContent = item.kind === "thinking" ? "thinking"
      : `${item.tool || "tool"}${item.text && item.text !== item.tool ? ": " + item.text.slice(0, 120) : ""}`
        + (item.input && item.input.file_path ? ` (${item.input.file_path})` : "");
    details.append(summary);
    if (item.kind === "thinking") {
      details.append(pre(item.text));
    } else {
      if (item.input !== undefined) details.append(pre(JSON.stringify(item.input, null, 2)));
      if (item.result) {
        const r = pre(item.result.text + (item.result.truncated ? "\n[truncated]" : ""));
        r.className = item.result.error ? "t-result error" : "t-result";
        details.append(r);
        item.shownResult = true;
      }
    }
    return details;
  }
  const p = document.createElement("p");
  p.className = `t-${item.kind}`;
  p.textContent = item.text;
  return p;
}

function pre(text) {
  const el = document.createElement("pre");
  el.textContent = text;
  return el;
}

// Each run: how it started (its RunStarted) and how it ended (the snapshot's
// `runs`); the newest run's codons that started, as chips.
let allChips = false;

function renderTimeline() {
  dirty.timeline = false;
  const list = $("timeline");
  const frag = document.createDocumentFragment();
  const p = S.progress;
  const endings = new Map((p ? p.runs : []).map((r) => [r.runId, r]));
  for (const run of S.runs.values()) {
    const li = document.createElement("li");
    const title = document.createElement("div");
    const ending = endings.get(run.runId);
    const said = ending ? `${ending.word}${ending.kind !== "running" && (ending.reason || ending.codonId) ? `: ${endingText(ending)}` : ""}` : "";
    title.textContent = `run ${run.runId} · ${run.reason} · ${said} · started ${fmtTime(run.start)}`;
    li.dataset.run = run.runId;
    li.dataset.outcome = ending ? ending.kind : "";
    li.append(title);
    if (p && run.runId === p.runId) li.append(chipsOf(p.codons.filter((c) => c.attempts > 0)));
    frag.append(li);
  }
  list.replaceChildren(frag);
}

function chipsOf(started) {
  const chips = document.createElement("div");
  chips.className = "chips";
  // A run of thousands of codons shows its newest CHIPS; the rest on request.
  const from = allChips ? 0 : Math.max(0, started.length - CHIPS);
  if (from > 0) {
    const more = document.createElement("button");
    more.className = "chip more";
    more.textContent = `${from} earlier codons…`;
    more.onclick = () => { allChips = true; dirty.timeline = true; schedule(); };
    chips.append(more);
  }
  for (const c of started.slice(from)) {
    const chip = document.createElement("span");
    chip.className = `chip s-${c.status}`;
    chip.textContent = c.codonId;
    chip.title = `${c.codonId}: ${c.status}`;
    chip.dataset.key = c.codonId;
    chips.append(chip);
  }
  return chips;
}

let checkpointsShown = 0; // S.checkpoints[oldestShown .. checkpointsShown) have rows
let oldestShown = null;
let olderRow = null; // the "show older" row at the end, while there are older ones

// Rows are added, never rebuilt: a button must not be replaced under the pointer.
// The newest CHECKPOINT_ROWS first; older ones CHECKPOINT_ROWS at a time on request.
function renderCheckpoints() {
  dirty.checkpoints = false;
  const body = $("checkpoints").tBodies[0];
  if (oldestShown === null) {
    oldestShown = Math.max(0, S.checkpoints.length - CHECKPOINT_ROWS);
    checkpointsShown = oldestShown;
  }
  const frag = document.createDocumentFragment();
  for (let i = S.checkpoints.length - 1; i >= checkpointsShown; i--) {
    frag.append(checkpointRow(S.checkpoints[i]));
  }
  checkpointsShown = S.checkpoints.length;
  body.prepend(frag);
  showOlderRow(body);
}

function showOlderRow(body) {
  if (oldestShown > 0 && !olderRow) {
    olderRow = document.createElement("tr");
    olderRow.className = "more";
    const button = document.createElement("button");
    button.onclick = () => {
      const floor = Math.max(0, oldestShown - CHECKPOINT_ROWS);
      const frag = document.createDocumentFragment();
      for (let i = oldestShown - 1; i >= floor; i--) frag.append(checkpointRow(S.checkpoints[i]));
      olderRow.before(frag);
      oldestShown = floor;
      dirty.checkpoints = true;
      schedule();
    };
    cell(olderRow, "").append(button);
    olderRow.cells[0].colSpan = 6;
    body.append(olderRow);
  }
  if (olderRow) {
    olderRow.hidden = oldestShown === 0;
    olderRow.querySelector("button").textContent = `Show older checkpoints (${oldestShown} more)`;
  }
}

function checkpointRow(cp) {
  const tr = document.createElement("tr");
  tr.dataset.sha = cp.sha;
  cp.row = tr;
  cell(tr, fmtTime(cp.time));
  cell(tr, cp.codonId || "(initial)");
  cell(tr, cp.type || "");
  cell(tr, String(cp.sha).slice(0, 10), "mono");
  cell(tr, (cp.files || []).join(", "));
  // Hidden by CSS on a read-only page (body.readonly); the server refuses it anyway.
  const button = document.createElement("button");
  button.textContent = "Roll back here";
  button.className = "rollback";
  button.onclick = async () => {
    const sha = String(cp.sha).slice(0, 10);
    const ok = await ask(`Roll back to the ${cp.type} checkpoint of ${cp.codonId || "the start"} (${sha})? `
      + "The work tree returns to it; later codons stay in history, superseded.");
    if (ok) send("rollback.toCheckpoint", { checkpointSha: cp.sha }, `roll back to ${sha}`);
  };
  cell(tr, "").append(button);
  return tr;
}

function renderSentinels() {
  dirty.sentinels = false;
  const box = $("sentinels");
  const frag = document.createDocumentFragment();
  for (const ev of S.sentinels.slice(-MAX_LIST).reverse()) {
    const card = document.createElement("div");
    card.className = "card";
    const h = document.createElement("h3");
    h.textContent = `${ev.type} · ${fmtTime(ev.timestamp)}`;
    card.append(h);
    const dl = document.createElement("dl");
    for (const [k, v] of Object.entries(ev.data || {})) {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = typeof v === "string" ? v : JSON.stringify(v);
      dl.append(dt, dd);
    }
    card.append(dl);
    frag.append(card);
  }
  box.replaceChildren(frag);
}

function renderErrors() {
  dirty.errors = false;
  const frag = document.createDocumentFragment();
  for (const e of S.errors.slice(-MAX_LIST).reverse()) {
    const li = document.createElement("li");
    li.className = e.kind;
    li.textContent = `${fmtTime(e.time)} ${e.kind}: ${e.text}`;
    frag.append(li);
  }
  $("errors").replaceChildren(frag);
}

function renderChart() {
  dirty.chart = false;
  const svg = $("chart");
  // The run's totals over time: the server's series (its fold's totals, thinned).
  const pts = S.progress ? S.progress.series : [];
  const W = 600, H = 200;
  if (!pts.length) return;
  const last = pts[pts.length - 1];
  const t0 = Date.parse(pts[0][0]);
  const t1 = Math.max(Date.parse(pts[pts.length - 1][0]), t0 + 1);
  const maxCost = Math.max(...S.budgets.filter((b) => b.axis === "cost").map((b) => b.value), last[1], 1e-9) * 1.05;
  const maxTok = Math.max(...S.budgets.filter((b) => b.axis === "tokens").map((b) => b.value), last[2], 1) * 1.05;
  const step = Math.max(1, Math.floor(pts.length / CHART_POINTS));
  let cost = "", tok = "";
  for (let i = 0; i < pts.length; i += step) addPoint(pts[i]);
  if ((pts.length - 1) % step) addPoint(pts[pts.length - 1]);
  function addPoint(p) {
    const x = ((Date.parse(p[0]) - t0) / (t1 - t0)) * W;
    cost += `${x.toFixed(1)},${(H - (p[1] / maxCost) * H).toFixed(1)} `;
    tok += `${x.toFixed(1)},${(H - (p[2] / maxTok) * H).toFixed(1)} `;
  }
  const ns = "http://www.w3.org/2000/svg";
  const parts = [];
  for (const [points, cls] of [[cost, "cost"], [tok, "tokens"]]) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points);
    line.setAttribute("class", cls);
    parts.push(line);
  }
  for (const b of S.budgets) {
    const y = H - (b.value / (b.axis === "cost" ? maxCost : maxTok)) * H;
    const line = document.createElementNS(ns, "line");
    line.setAttribute("x1", "0"); line.setAttribute("x2", String(W));
    line.setAttribute("y1", String(y)); line.setAttribute("y2", String(y));
    line.setAttribute("class", `budget ${b.axis}`);
    const title = document.createElementNS(ns, "title");
    title.textContent = `${b.label}: ${b.value}`;
    line.append(title);
    parts.push(line);
  }
  svg.replaceChildren(...parts);
  $("chart-legend").textContent = `cost (orange) up to ${S.progress.totals.costText} · tokens (blue) up to ${fmtTokens(last[2])}`
    + (S.budgets.length ? ` · budgets (dashed): ${S.budgets.map((b) => `${b.label} ${b.value}`).join(", ")}` : "");
}

// -- formatting ------------------------------------------------------------------

function fmtTokens(v) { return v >= 1e6 ? `${(v / 1e6).toFixed(1)}M` : v >= 1e3 ? `${(v / 1e3).toFixed(1)}k` : String(v || 0); }
function fmtMs(ms) { return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms || 0} ms`; }
function fmtTime(iso) { return iso ? String(iso).slice(11, 19) : ""; }
// The run's clock: the newest event's time plus the time since it arrived. A live
// run's codon ages in real time; a replayed journal's open codon is timed from its
// last event, not from today (the wall clock says nothing about a finished run).
function runNow() {
  return S.lastTimestamp ? Date.parse(S.lastTimestamp) + (Date.now() - S.lastArrival) : Date.now();
}

function fmtDuration(start, end) {
  if (!start) return "";
  const ms = (end ? Date.parse(end) : runNow()) - Date.parse(start);
  if (!(ms >= 0)) return "";
  return ms < 1000 ? `${ms} ms` : ms < 60000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

// -- wiring ---------------------------------------------------------------------

$("codons").addEventListener("click", (e) => {
  const tr = e.target.closest("tr[data-key]");
  if (!tr) return;
  const before = rows.get(selected);
  selected = tr.dataset.key;
  if (before) before.classList.remove("selected");
  tr.classList.add("selected");
  $("transcript").textContent = "";
  $("transcript").dataset.key = "";
  transcriptShown = 0;
  dirty.transcript = true;
  schedule();
});

$("controls").addEventListener("click", async (e) => {
  const button = e.target.closest("button[data-command]");
  if (!button) return;
  if (button.dataset.confirm && !(await ask(button.dataset.confirm))) return;
  send(button.dataset.command, null, button.textContent);
});

// A message for the running codon's agent (`codon.message`): queued for the next
// prompt, or urgent (the session is interrupted and resumed with it at once).
// The text stays in the box until the server accepts it.
$("message").addEventListener("submit", (e) => {
  e.preventDefault();
  const box = $("message-text");
  const message = box.value;
  if (!message.trim()) return;
  const urgent = e.submitter ? e.submitter.value === "urgent" : false;
  send("codon.message", { message, urgent }, urgent ? "urgent message" : "queued message", (ok) => {
    if (ok && box.value === message) box.value = "";
  });
});

$("codons-panel").addEventListener("scroll", () => {
  if (lineCount() > WINDOW_MIN) {
    dirty.window = true;
    schedule();
  }
}, { passive: true });

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token-input").value.trim();
  $("token-input").value = "";
  sessionStorage.setItem("weft-token", token);
  $("login").hidden = true;
  connect();
});

// Running codons' times move on their own.
setInterval(() => {
  for (const c of figures.values()) if (c.startedAt && !c.endedAt) dirty.rows.add(c.codonId);
  if (dirty.rows.size) schedule();
}, 1000);

// For tests and benchmarks: the model, and a way to drop the connection.
window.weftDashboard = {
  state: S,
  drop(holdMs = 0) {
    holdUntil = Date.now() + holdMs;
    if (socket) socket.close();
  },
  send,
  // Nothing left to draw: every panel shows what the page holds (tests wait
  // for this before reading a panel rebuilt at most every HEAVY_MS).
  settled() {
    return !scheduled && dirty.rows.size === 0 && !Object.entries(dirty).some(([k, v]) => k !== "rows" && v === true);
  },
};

// A token pasted into the address bar later (the same page, a new fragment).
window.addEventListener("hashchange", () => {
  const fresh = takeToken();
  if (fresh && fresh !== token) {
    token = fresh;
    wantMode = "readandwrite";
    $("login").hidden = true;
    if (socket) socket.close(); else connect();
  }
});

token = takeToken();
connect();
