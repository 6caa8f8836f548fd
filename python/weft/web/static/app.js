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
// How it stays fast: events only update a model (plain objects and maps) and
// mark what changed; nothing is drawn while a replay pours in, then the page
// is drawn once. After that, one render per animation frame touches only the
// changed rows. Long lists cost what is on screen, not what they hold: the
// codon table draws only the rows in view (the rest are two spacers), the
// timeline and the checkpoints show the newest entries and more on request,
// and a codon's transcript is built from its events only when it is opened.
// Nothing from an event is ever parsed as HTML (textContent only).

const TERMINAL = new Set(["completed", "failed", "skipped"]);
const DONE = new Set(["completed", "skipped"]); // a codon the plan does not run again
const PENDING = "pending"; // a planned codon not started (or to run again): weft.progress.PENDING
// The one word of each outcome (weft.outcome.WORD).
const WORD = { running: "running", completed: "completed", failed: "failed", stopped: "stopped",
  budget: "budget-stopped", crashed: "crashed" };
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

const S = {
  lastSeq: 0,
  targetSeq: null, // lastSeq of the first handshake: reached = first full render
  replayed: false,
  stats: { events: 0, duplicates: 0, gaps: 0, connects: 0 },
  time: { parse: 0, apply: 0, render: 0 }, // ms spent on each (benchmarks read them)
  mode: null,
  runs: new Map(), // runId -> {runId, reason, status, outcome, start, keys: [], stoppedBy}
  currentRun: null, // the newest RunStarted's runId (stream events carry none)
  codons: new Map(), // runId/codonId -> codon record
  order: [], // codon keys in the order they started
  plan: new Map(), // codonId -> {name, loop, files}
  planOrder: [], // codon ids in plan order (a fresh RunStarted's plan, PlanExtended, PlanTrimmed)
  pending: new Map(), // codonId -> row record of a planned codon not started (status "pending")
  replay: false, // the server replays a finished execution (server.ready's `replay`): nothing follows
  ended: false, // the server closed because the run ended
  latest: new Map(), // codonId -> key of its newest record
  checkpoints: [],
  sentinels: [],
  errors: [],
  series: [], // [timestamp (ISO; parsed only for the points drawn), total cost, total tokens]
  lastTimestamp: null, // the newest event's time, and when it arrived (Date.now())
  lastArrival: 0,
  budgets: [], // {label, value, axis}
  totalCost: 0,
  totalTokens: 0,
  idle: "",
  execution: "",
};

const dirty = { rows: new Set(), window: false, pending: false, timeline: false, checkpoints: false,
  sentinels: false, errors: false, chart: false, header: true, transcript: false };
let selected = null; // the codon key whose transcript is open
let scheduled = false;

function codonRecord(runId, codonId, time) {
  const key = `${runId}/${codonId}`;
  let rec = S.codons.get(key);
  if (!rec) {
    const plan = S.plan.get(codonId) || {};
    // `events`: the codon's own stream events, kept as they came; its transcript
    // (`items`) is built from them when it is first opened (see buildItems).
    rec = { key, runId, codonId, name: plan.name || "", loop: plan.loop || null,
      status: "preparing", start: time, end: null, cost: 0, tokens: 0, last: null,
      failure: "", superseded: false, events: [], items: [], tools: new Map(), built: 0 };
    S.codons.set(key, rec);
    S.order.push(key);
    addDisplay(rec);
    const run = S.runs.get(runId);
    if (run) run.keys.push(key);
    const older = S.latest.get(codonId);
    if (older && older !== key) supersede(older);
    S.latest.set(codonId, key);
    dirty.timeline = true;
    dirty.pending = true;
  }
  return rec;
}

function supersede(key) {
  const rec = S.codons.get(key);
  if (rec && !rec.superseded) {
    rec.superseded = true;
    dirty.checkpoints = true;
    dirty.pending = true;
    touch(rec);
  }
}

function touch(rec) {
  dirty.rows.add(rec.key);
  if (rec.key === selected) dirty.transcript = true;
}

function tokensOf(t) {
  if (!t) return 0;
  return (t.inputTokens || 0) + (t.outputTokens || 0) + (t.cacheReadTokens || 0)
    + (t.cacheCreationTokens || 0);
}

function setCost(rec, cost, tokens, time) {
  S.totalCost += cost - rec.cost;
  S.totalTokens += tokens - rec.tokens;
  rec.cost = cost;
  rec.tokens = tokens;
  S.series.push([time, S.totalCost, S.totalTokens]);
  dirty.chart = true;
  dirty.header = true;
  touch(rec);
}

function codonOf(data) {
  const id = data.codonId || data.codon;
  if (!id) return null;
  const key = S.latest.get(id);
  return key ? S.codons.get(key) : null;
}

// The plan: what the run will do, in order. A fresh RunStarted carries it whole;
// a loop's next iteration (PlanExtended) and the rest of a loop that ended early
// (PlanTrimmed) change it; a continuation run keeps it. Codons of the plan that
// have not started are the table's pending rows (weft.progress keeps the same order).
function planEntries(entries) {
  const ids = [];
  for (const e of entries || []) {
    const c = e.codon || {};
    const loop = e.loopContext ? { id: e.loopContext.loopId, iteration: e.loopContext.iteration } : null;
    S.plan.set(e.codonId, { name: c.name || "", loop, files: c.checkpointedFiles || [] });
    ids.push(e.codonId);
  }
  dirty.pending = true;
  return ids;
}

function extendPlan(afterId, entries) {
  const added = planEntries(entries);
  const order = S.planOrder;
  let at = order.length;
  for (let i = order.length - 1; i >= 0; i--) {
    if (order[i] === afterId) { at = i + 1; break; }
  }
  const known = new Set(order);
  order.splice(at, 0, ...[...new Set(added)].filter((id) => !known.has(id)));
}

function trimPlan(codonIds) {
  const dropped = new Set(codonIds);
  S.planOrder = S.planOrder.filter((id) => !dropped.has(id));
  dirty.pending = true;
}

// Whether a planned codon is still to do: never started, or its newest record
// was undone by a rollback, ended by a stop (`interrupted`: it stays to do), or
// failed in an earlier run (a continuation runs it again).
function toDo(codonId) {
  const key = S.latest.get(codonId);
  if (!key) return true;
  const rec = S.codons.get(key);
  if (rec.superseded || rec.interrupted) return true;
  return rec.runId !== S.currentRun && !DONE.has(rec.status) && TERMINAL.has(rec.status);
}

// The text of a FailureReason (its wire key is `type`): "<type>: <message>", as
// weft.progress words it.
function failureText(reason) {
  if (!reason) return "unknown reason";
  if (typeof reason !== "object") return String(reason);
  const type = reason.type || "error";
  return reason.message ? `${type}: ${reason.message}` : type;
}

// A codon's checkpoints come in its transitions' metadata (`checkpointSha`); the
// state it moves to says which checkpoint it is.
const CHECKPOINT_TYPES = { starting: "rig-setup", completed: "completed", failed: "error", skipped: "skipped" };
const seenCheckpoints = new Set();

function addCheckpoint(sha, type, codonId, runId, time) {
  if (!sha || seenCheckpoints.has(`${runId}/${codonId}/${sha}/${type}`)) return;
  seenCheckpoints.add(`${runId}/${codonId}/${sha}/${type}`);
  const plan = (codonId && S.plan.get(codonId)) || {};
  S.checkpoints.push({ sha, type, codonId, runId, time, files: plan.files || [] });
  dirty.checkpoints = true;
}

// A stream event of a codon: kept for its transcript (built when opened).
function keep(rec, ev) {
  rec.events.push(ev);
  if (rec.key === selected) dirty.transcript = true;
}

function note(kind, time, text) {
  S.errors.push({ kind, time, text });
  if (S.errors.length > MAX_LIST * 2) S.errors.splice(0, S.errors.length - MAX_LIST);
  dirty.errors = true;
}

// One function per event type: each updates the model and marks what changed.
const ON = {
  RunStarted(d, ev) {
    const cond = d.startingConditions || {};
    const reason = cond.reason ? `${cond.type}: ${cond.reason}` : cond.type || "";
    // stoppedBy: what ends the run as failed if it ends now (the newest codon's own
    // failure, a fatal error, the run's budget): only for journals older than
    // RunFailed's codonId and reason, where a RunFailed with none was a stop.
    S.runs.set(d.runId, { runId: d.runId, reason, status: "running", outcome: "",
      start: ev.timestamp, keys: [], stoppedBy: null });
    S.currentRun = d.runId;
    // A fresh run carries its plan; a continuation's goes on with the one known.
    if (d.executionPlan) S.planOrder = planEntries(d.executionPlan);
    dirty.timeline = true;
    dirty.pending = true;
  },
  RunCompleted(d) { endRun(d.runId, "completed", ""); },
  RunFailed(d) {
    const run = S.runs.get(d.runId);
    if (d.codonId || d.reason) {
      endRun(d.runId, "failed", failedText(d.codonId, d.reason));
    } else if (run && run.stoppedBy) {
      const by = run.stoppedBy;
      endRun(d.runId, "failed", by.codonId ? failedText(by.codonId, by.reason) : by.reason);
    } else {
      // An older journal's stop (Ctrl-C, q, server.shutdown) was a RunFailed
      // that nothing failed: it was stopped.
      endRun(d.runId, "stopped", "stopped");
    }
  },
  // Weft's own: a stop asked for (graceful or forced) or a budget ceiling crossed.
  RunStopped(d) {
    const stays = d.codonId ? ` (${d.codonId} stays to do)` : "";
    if (d.by === "budget") {
      endRun(d.runId, "budget", `budget-stopped: ${d.reason || budgetText(d.budget)}${stays}`);
    } else {
      // "stopped (forced) by you": the reason says who, without the word twice.
      const word = d.forced ? "stopped (forced)" : "stopped";
      const why = d.reason || "";
      const said = /^stopped\b/i.test(why) ? `${word}${why.slice(7)}` : why ? `${word}: ${why}` : word;
      endRun(d.runId, "stopped", `${said}${stays}`);
    }
  },
  RunCrashed(d, ev) {
    // The core fails the crashed run's active codon ("Server crashed"): so does the page.
    const run = S.runs.get(d.runId);
    for (const key of run ? [...run.keys].reverse() : []) {
      const rec = S.codons.get(key);
      if (TERMINAL.has(rec.status) || rec.superseded) continue;
      rec.status = "failed";
      rec.end = d.detectedAt || ev.timestamp;
      rec.failure = "crash: Server crashed";
      touch(rec);
      break;
    }
    endRun(d.runId, "crashed", `crashed (last seen ${d.detectedAt || "?"})`);
    note("recovery", ev.timestamp, `Run ${d.runId} crashed (its last codon was ${d.lastCodonStatus || "?"}); last seen ${d.detectedAt || ""}`);
  },
  PlanExtended(d) { extendPlan(d.afterCodonId, d.entries); },
  PlanTrimmed(d) { trimPlan(d.codonIds); },
  CodonStarted(d, ev) {
    codonRecord(d.runId, d.codonId, d.startTime || ev.timestamp);
    const run = S.runs.get(d.runId);
    if (run && run.stoppedBy && run.stoppedBy.codonId) run.stoppedBy = null; // its failure was ignored
  },
  CodonTransitioned(d, ev) {
    const rec = codonRecord(d.runId, d.codonId, ev.timestamp);
    rec.status = d.to;
    if (TERMINAL.has(d.to)) rec.end = d.timestamp || ev.timestamp;
    const meta = d.metadata || {};
    if (meta.checkpointSha) addCheckpoint(meta.checkpointSha, CHECKPOINT_TYPES[d.to] || d.to, d.codonId, d.runId, ev.timestamp);
    if (d.to === "failed") {
      rec.failure = failureText(meta.failureReason);
      // Interrupted is the codon a stop ended; any other failure would end the run as failed.
      rec.interrupted = (meta.failureReason || {}).type === "interrupted";
      if (!rec.interrupted) stoppedBy({ codonId: d.codonId, reason: rec.failure });
      dirty.pending = true;
    }
    if (d.to === "preparing") dirty.pending = true;
    touch(rec);
    dirty.timeline = true;
  },
  CostsUpdated(d, ev) {
    setCost(codonRecord(d.runId, d.codonId, ev.timestamp), d.cost || 0, tokensOf(d.tokens), ev.timestamp);
  },
  CostsIncremented(d, ev) {
    const rec = codonRecord(d.runId, d.codonId, ev.timestamp);
    setCost(rec, rec.cost + (d.costDelta || 0), rec.tokens + tokensOf(d.tokensDelta), ev.timestamp);
  },
  CodonFinalCostSet(d, ev) {
    setCost(codonRecord(d.runId, d.codonId, ev.timestamp), d.finalCost || 0, tokensOf(d.finalTokens), ev.timestamp);
  },
  CheckpointCreated(d, ev) { addCheckpoint(d.sha, d.checkpointType, d.codonId, d.runId, ev.timestamp); },
  InitialCheckpointSet(d, ev) { addCheckpoint(d.sha, "initial", null, null, ev.timestamp); },
  SentinelStatesUpdated(d, ev) { sentinel(ev); },
  "assistant.action"(d, ev) {
    const rec = codonOf(d);
    if (!rec) return;
    rec.last = d;
    keep(rec, ev);
    touch(rec);
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
    for (const id of d.codonsToProcess || []) {
      const key = S.latest.get(id);
      if (key) supersede(key);
    }
    dirty.timeline = true;
    note("recovery", ev.timestamp, `Rollback to ${d.toCodon || "?"} (${d.checkpointType || ""} ${String(d.toCheckpoint || "").slice(0, 10)}) started`);
  },
  "rollback.completed"(d, ev) {
    note("recovery", ev.timestamp, `Rollback completed: run ${d.toRun} continues from ${d.codonId || "?"}`);
  },
  error(d, ev) {
    if (d.fatal) stoppedBy({ codonId: null, reason: d.message || "a fatal error" });
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
};

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
        + ` (${d.reason === "urgent" ? "an urgent message" : "after a failure"})`;
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

function lastAction(rec) {
  if (rec.status === "failed" && rec.failure) return rec.failure;
  const d = rec.last;
  if (!d) return rec.failure || "";
  return d.action === "tool_use" ? `tool: ${d.toolName || "?"}`
    : d.action === "thinking" ? "thinking" : (d.content || "").slice(0, 80);
}

function stoppedBy(what) {
  const run = S.runs.get(S.currentRun);
  if (run) run.stoppedBy = what;
}

function failedText(codonId, reason) {
  return `failed${codonId ? ` at ${codonId}` : ""}${reason ? `: ${reason}` : ""}`;
}

function budgetText(b) {
  if (!b) return "a budget ceiling";
  return `${b.scope || "run"} ${b.kind} ${b.used} of ${b.limit}${b.source ? ` (${b.source})` : ""}`;
}

// status: the outcome's kind (weft.outcome: completed, failed, stopped, budget,
// crashed); outcome: it in words, with which codon and why.
function endRun(runId, status, outcome) {
  const run = S.runs.get(runId);
  if (run) {
    run.status = status;
    run.outcome = outcome || WORD[status] || status;
  }
  dirty.timeline = true;
  dirty.header = true;
  dirty.pending = true;
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
    else if (ev.type.startsWith("budget")) {
      if (ev.type === "budget.exceeded" && (ev.data || {}).scope === "run") {
        stoppedBy({ codonId: null, reason: (ev.data || {}).message || "the run's budget" });
      }
      budget(ev);
    }
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
  const data = { mode: wantMode, afterSeq: S.lastSeq, liveBatches: true, pageSize: 10000 };
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

// Whether the newest run has ended (its outcome is journaled).
function runEnded() {
  const run = S.runs.get(S.currentRun);
  return !!run && run.status !== "running";
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
  if (dirty.header) renderHeader();
  if (dirty.rows.size || dirty.window || dirty.pending) renderRows();
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
  $("totals").textContent = `${fmtCost(S.totalCost)} · ${fmtTokens(S.totalTokens)} tokens · `
    + `${S.order.length} codon records · ${S.runs.size} run(s) · seq ${S.lastSeq}`;
  // The newest run's outcome, in words: which codon failed and why, who stopped it.
  const run = S.runs.get(S.currentRun);
  const outcome = $("outcome");
  outcome.hidden = !run;
  if (run) {
    outcome.textContent = run.status === "running" ? "running" : run.outcome;
    outcome.className = `pill outcome s-${run.status}`;
    outcome.dataset.outcome = run.status;
  }
  $("idle").textContent = S.ended ? "" : S.idle; // nothing waits for a command any more
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
  return td;
}

function groupOf(rec) {
  const loop = rec.loop ? ` · loop ${rec.loop.id} iteration ${rec.loop.iteration}` : "";
  return `${rec.runId}${loop}`;
}

// The codon table, as a list of lines: a group heading (a run, a loop
// iteration) or a codon record's key. Only the lines in view get a <tr>.
// After the records come the plan's codons still to do (`tail`, rebuilt when
// the plan or a record changes), under a "to do" heading.
const display = [];
let tail = [];
const rows = new Map(); // codon key -> its <tr>, once it was in view
let lastGroup = "";

const lineCount = () => display.length + tail.length;
const lineAt = (i) => (i < display.length ? display[i] : tail[i - display.length]);
const recOf = (key) => S.codons.get(key) || S.pending.get(key);

function rebuildTail() {
  dirty.pending = false;
  const todo = S.planOrder.filter(toDo);
  const pending = new Map();
  const lines = [];
  if (todo.length) {
    lines.push({ loop: false, tr: null, text: `to do · ${todo.length} codon${todo.length === 1 ? "" : "s"} not started` });
  }
  let group = "";
  for (const id of todo) {
    const plan = S.plan.get(id) || {};
    const loop = plan.loop || null;
    const here = loop ? `${loop.id}#${loop.iteration}` : "";
    if (loop && here !== group) lines.push({ loop: true, tr: null, text: `loop ${loop.id} · iteration ${loop.iteration}` });
    group = here;
    const key = `pending/${id}`;
    pending.set(key, S.pending.get(key) || { key, runId: S.currentRun, codonId: id, name: plan.name || "",
      loop, status: PENDING, start: null, end: null, cost: 0, tokens: 0, last: null, failure: "",
      superseded: false });
    lines.push(key);
  }
  for (const key of S.pending.keys()) if (!pending.has(key)) rows.delete(key);
  S.pending = pending;
  tail = lines;
  shown.total = -1; // redraw the lines in view
}

function addDisplay(rec) {
  const group = groupOf(rec);
  if (group !== lastGroup) {
    lastGroup = group;
    const run = S.runs.get(rec.runId);
    display.push({ loop: !!rec.loop, tr: null,
      text: rec.loop ? `loop ${rec.loop.id} · iteration ${rec.loop.iteration}`
        : `run ${rec.runId}${run && run.reason ? ` (${run.reason})` : ""}` });
  }
  display.push(rec.key);
  dirty.window = true;
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
  if (dirty.pending) rebuildTail();
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
          tr = codonRow(recOf(line));
          rows.set(line, tr);
        }
        fillRow(tr, recOf(line));
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
    for (const key of dirty.rows) {
      const tr = rows.get(key);
      if (tr && tr.isConnected) fillRow(tr, S.codons.get(key));
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

function codonRow(rec) {
  const tr = document.createElement("tr");
  tr.dataset.key = rec.key;
  tr.dataset.codon = rec.codonId;
  for (let i = 0; i < 6; i++) cell(tr, "");
  return tr;
}

// What a row calls a record's state: the seed's eight, except that a codon a
// stop cut short (failed as `interrupted`) is "stopped", as weft run says: it
// did not fail, it stays to do (weft.progress.CodonProgress.stopped).
function shownStatus(rec) {
  return rec.status === "failed" && rec.interrupted ? "stopped" : rec.status;
}

function fillRow(tr, rec) {
  const c = tr.cells;
  c[0].textContent = rec.name ? `${rec.codonId} · ${rec.name}` : rec.codonId;
  const pending = rec.status === PENDING;
  const status = shownStatus(rec);
  c[1].textContent = status;
  c[1].className = `state s-${status}`;
  c[2].textContent = fmtDuration(rec.start, rec.end);
  c[3].textContent = pending ? "" : fmtTokens(rec.tokens);
  c[4].textContent = pending ? "" : fmtCost(rec.cost);
  c[5].textContent = lastAction(rec);
  tr.dataset.state = status;
  tr.classList.toggle("superseded", rec.superseded);
  tr.classList.toggle("selected", rec.key === selected);
}

let transcriptShown = 0;

function renderTranscript() {
  dirty.transcript = false;
  const box = $("transcript");
  const rec = S.codons.get(selected);
  if (!rec) return;
  buildItems(rec);
  $("transcript-title").textContent = `${rec.codonId} (run ${rec.runId})${rec.superseded ? " · superseded" : ""}`;
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

function renderTimeline() {
  dirty.timeline = false;
  const list = $("timeline");
  const frag = document.createDocumentFragment();
  for (const run of S.runs.values()) {
    const li = document.createElement("li");
    const title = document.createElement("div");
    title.textContent = `run ${run.runId} · ${run.reason} · ${run.status === "running" ? "running" : run.outcome} · started ${fmtTime(run.start)}`;
    li.append(title);
    const chips = document.createElement("div");
    chips.className = "chips";
    // A run of thousands of codons shows its newest CHIPS; the rest on request.
    const from = run.allChips ? 0 : Math.max(0, run.keys.length - CHIPS);
    if (from > 0) {
      const more = document.createElement("button");
      more.className = "chip more";
      more.textContent = `${from} earlier codons…`;
      more.onclick = () => { run.allChips = true; dirty.timeline = true; schedule(); };
      chips.append(more);
    }
    for (let i = from; i < run.keys.length; i++) {
      const key = run.keys[i];
      const rec = S.codons.get(key);
      const chip = document.createElement("span");
      chip.className = `chip s-${shownStatus(rec)}${rec.superseded ? " superseded" : ""}`;
      chip.textContent = rec.codonId;
      chip.title = `${rec.codonId}: ${shownStatus(rec)}${rec.superseded ? " (superseded)" : " (on the thread)"}`;
      chip.dataset.key = key;
      chips.append(chip);
    }
    li.append(chips);
    frag.append(li);
  }
  list.replaceChildren(frag);
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
  for (let i = oldestShown; i < S.checkpoints.length; i++) {
    const cp = S.checkpoints[i];
    const rec = S.codons.get(`${cp.runId}/${cp.codonId}`);
    cp.row.classList.toggle("superseded", !!(rec && rec.superseded));
  }
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
  const pts = S.series;
  const W = 600, H = 200;
  if (!pts.length) return;
  const t0 = Date.parse(pts[0][0]);
  const t1 = Math.max(Date.parse(pts[pts.length - 1][0]), t0 + 1);
  const maxCost = Math.max(...S.budgets.filter((b) => b.axis === "cost").map((b) => b.value), S.totalCost, 1e-9) * 1.05;
  const maxTok = Math.max(...S.budgets.filter((b) => b.axis === "tokens").map((b) => b.value), S.totalTokens, 1) * 1.05;
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
  $("chart-legend").textContent = `cost (orange) up to ${fmtCost(S.totalCost)} · tokens (blue) up to ${fmtTokens(S.totalTokens)}`
    + (S.budgets.length ? ` · budgets (dashed): ${S.budgets.map((b) => `${b.label} ${b.value}`).join(", ")}` : "");
}

// -- formatting ------------------------------------------------------------------

function fmtCost(v) { return `$${(v || 0).toFixed(4)}`; }
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
  for (const rec of S.codons.values()) if (!TERMINAL.has(rec.status) && !rec.superseded && rec.start) dirty.rows.add(rec.key);
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
