// `weft ui`'s list page: the machine's executions; opening one goes to its live
// run's dashboard, or to a read-only replay of its journal. The token comes in
// the URL fragment (never sent to a server) and goes out in an Authorization
// header only.

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 3000;
let token = null;

function takeToken() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("weft-ui-token", fromHash);
    history.replaceState(null, "", location.pathname);
  }
  return fromHash || sessionStorage.getItem("weft-ui-token");
}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
  const body = await res.json();
  if (res.status === 401) {
    sessionStorage.removeItem("weft-ui-token");
    token = null;
    login(body.message);
    throw new Error(body.error);
  }
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function login(reason) {
  $("login").hidden = false;
  if (reason) $("login-reason").textContent = reason;
  $("connection").textContent = "no access";
}

function age(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86400) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.append(td);
  return td;
}

async function refresh() {
  if (!token) return;
  let doc;
  try {
    doc = await api("/api/executions");
  } catch (err) {
    $("connection").textContent = `error: ${err.message}`;
    return;
  }
  $("connection").textContent = `${doc.executions.length} executions`;
  $("connection").className = "pill good";
  $("root").textContent = doc.root;
  const frag = document.createDocumentFragment();
  for (const e of doc.executions) {
    const tr = document.createElement("tr");
    tr.dataset.id = e.id;
    tr.dataset.state = e.state;
    cell(tr, e.id).title = e.path;
    cell(tr, e.hank);
    cell(tr, e.state, `state s-${e.state === "live" ? "running" : e.state}`);
    cell(tr, String(e.codons));
    // The server words the cost (weft.money.known_cost): `unpriced`, `≥ $X` or `$X`;
    // `cost` is null when the model had no price.
    cell(tr, e.costText, "cost");
    cell(tr, age(e.ageSeconds));
    const button = document.createElement("button");
    button.textContent = e.live ? "Watch live" : "Replay";
    button.className = "open";
    button.onclick = () => open(e.id);
    cell(tr, "").append(button);
    frag.append(tr);
  }
  $("executions").tBodies[0].replaceChildren(frag);
  $("message").textContent = doc.executions.length ? "" : `No executions under ${doc.root} yet.`;
}

async function open(id) {
  try {
    const target = await api(`/api/open/${encodeURIComponent(id)}`);
    location.href = `${target.url}#token=${encodeURIComponent(target.token)}`;
  } catch (err) {
    $("message").textContent = `Cannot open ${id}: ${err.message}`;
  }
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token-input").value.trim();
  $("token-input").value = "";
  sessionStorage.setItem("weft-ui-token", token);
  $("login").hidden = true;
  refresh();
});

// A token pasted into the address bar later (the same page, a new fragment).
window.addEventListener("hashchange", () => {
  const fresh = takeToken();
  if (fresh && fresh !== token) {
    token = fresh;
    $("login").hidden = true;
    refresh();
  }
});

token = takeToken();
if (token) refresh(); else login();
setInterval(refresh, REFRESH_MS);
