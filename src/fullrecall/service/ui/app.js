// The fullrecall memory inspector: plain JavaScript over the service's /v1 routes, no build step.
"use strict";

const PAGE = 100;
const SUMMARY_PAGE = 200;
const KEY_ITEM = "fullrecall-key";
const $ = (id) => document.getElementById(id);
const state = { conversations: [], owner: null, conv: null, offset: 0, last: 0, marks: null };

// -- small helpers ---------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

// A stored string (an id, a message, a fact) among the page's words: isolated, so a direction override or
// right-to-left text in it cannot reorder the words around it.
const bdi = (s) => el("bdi", {}, s);

function when(t) {
  return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
}

function num(x) {
  return typeof x === "number" ? x.toFixed(3) : "—";
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY_ITEM) || ""}` };
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const body = await response.json().catch(() => null);
  if (response.status === 401) askKey("That key was not accepted.");
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

function ownerParams() {
  return { user_id: state.owner && state.owner.user_id, agent_id: state.owner && state.owner.agent_id };
}

function archivePath() {
  return `/v1/inspector/conversations/${encodeURIComponent(state.conv.conversation_id)}/archive`;
}

function convPath(suffix = "") {
  return `/v1/conversations/${encodeURIComponent(state.conv.conversation_id)}${suffix}`;
}

function status(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "muted";
}

// A binary part (an image, a document, audio) by the kind it is: its base64 is no reading matter.
const MEDIA = { image_url: "image", input_image: "image", image: "image", input_audio: "audio", file: "file",
  input_file: "file", document: "document" };
const mediaOf = (b) => (b.type !== undefined ? (Object.hasOwn(MEDIA, b.type) ? MEDIA[b.type] : undefined)
  : ["image", "document", "video"].find((k) => b[k] !== undefined));  // Converse: the part's key names it

// The readable text of a content part in any supported shape (OpenAI, Converse, Anthropic).
function partText(b) {
  if (typeof b === "string") return b;
  if (b === null || typeof b !== "object") return JSON.stringify(b);
  if (b.text !== undefined) return b.text;
  if (b.toolUse) return `[tool call ${b.toolUse.name}] ${JSON.stringify(b.toolUse.input)}`;
  if (b.toolResult) return `[tool result] ${contentText(b.toolResult.content)}`;
  if (b.type === "tool_use") return `[tool call ${b.name}] ${JSON.stringify(b.input)}`;
  if (b.type === "tool_result") return `[tool result] ${contentText(b.content)}`;
  const media = mediaOf(b);
  return media ? `[${media}]` : JSON.stringify(b);
}

function contentText(c) {
  if (typeof c === "string") return c;
  return Array.isArray(c) ? c.map(partText).join("\n") : JSON.stringify(c);
}

// An OpenAI assistant message's tool calls, each with its name and arguments (a JSON text as sent).
function callText(t) {
  const f = (t && (t.function || t.custom)) || {};
  const args = f.arguments ?? f.input;
  return `[tool call ${f.name}] ${typeof args === "string" ? args : JSON.stringify(args)}`;
}

// The readable text of a stored message in any supported shape: its content, then its tool calls.
function textOf(message) {
  const c = message && message.content;
  const calls = message && Array.isArray(message.tool_calls) ? message.tool_calls.map(callText) : [];
  if (c === null || c === undefined) return calls.length ? calls.join("\n") : JSON.stringify(message);
  return [contentText(c), ...calls].filter((part) => part !== "").join("\n");
}

function messageRow(m) {
  if (m.kind === "summary") {  // a managed window starts with the summary of what left it
    const covers = m.covers ? ` of positions ${m.covers[0]}–${m.covers[1]}` : "";
    return el("li", { class: "summary-row" }, el("span", { class: "pos" }, "Σ"), el("span", { class: "role" }, "summary"),
      el("span", { class: "text" }, bdi(textOf(m.message)), el("span", { class: "muted" }, ` (the newest summary${covers})`)));
  }
  return el("li", { "data-position": m.position, "data-id": m.id },
    el("span", { class: "pos", title: when(m.created_at) }, `#${m.position}`),
    el("span", { class: `role ${m.role}` }, m.role),
    el("span", { class: "text" }, textOf(m.message)));
}

// -- the key ---------------------------------------------------------------------------------
function askKey(error = "") {
  $("key-error").textContent = error;
  $("key").value = "";
  if (!$("key-dialog").open) $("key-dialog").showModal();
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY_ITEM, $("key").value.trim());
  $("key-dialog").close();
  start();
});
$("change-key").addEventListener("click", () => askKey());

function confirmed(...parts) {  // words and stored strings (bdi)
  return new Promise((resolve) => {
    const dialog = $("confirm");
    $("confirm-text").replaceChildren(...parts);
    const done = (answer) => () => { dialog.close(); $("confirm-yes").onclick = $("confirm-no").onclick = null; resolve(answer); };
    $("confirm-yes").onclick = done(true);
    $("confirm-no").onclick = done(false);
    dialog.showModal();
  });
}

// -- users and conversations -----------------------------------------------------------------
const ownerKey = (c) => JSON.stringify([c.user_id || "", c.agent_id || ""]);
// bdi's isolation inside an <option>, which holds text only; an isolate control inside the string (U+2066-U+2069)
// would close or unbalance the wrapper, so each shows as its code point instead
const codePoint = (c) => `<U+${c.codePointAt(0).toString(16).toUpperCase()}>`;
const isolated = (s) => `\u2068${s.replace(/[\u2066-\u2069]/g, codePoint)}\u2069`;
const ownerLabel = (o) => (o.agent_id ? `${isolated(o.user_id || "(default user)")} · agent ${isolated(o.agent_id)}`
  : o.user_id || "(default user)");

async function start() {
  const listed = await api("/v1/inspector/conversations").catch((error) => { $("pick").textContent = error.message; });
  if (!listed) return;
  const { tenant, conversations, truncated } = listed;
  $("who").replaceChildren("tenant ", bdi(tenant));
  state.conversations = conversations;
  const owners = new Map();
  for (const c of conversations) owners.set(ownerKey(c), { user_id: c.user_id, agent_id: c.agent_id });
  const select = $("user");
  const previous = state.owner ? ownerKey(state.owner) : null;
  select.replaceChildren(...[...owners].map(([k, o]) => el("option", { value: k }, ownerLabel(o))));
  if (previous && owners.has(previous)) select.value = previous;
  $("no-conversations").hidden = conversations.length > 0;
  $("truncated").hidden = !truncated;  // the server lists a first part only: say so, or the list looks whole
  $("truncated").textContent = truncated
    ? `Only the first ${conversations.length.toLocaleString()} conversations are listed (by user, agent and id).` : "";
  pickOwner();
}

function pickOwner() {
  const k = $("user").value;
  state.owner = k ? { user_id: JSON.parse(k)[0] || null, agent_id: JSON.parse(k)[1] || null } : null;
  const list = state.conversations.filter((c) => ownerKey(c) === k);
  $("conversations").replaceChildren(...list.map((c) => el("li", {},
    el("button", { type: "button", "data-conversation": c.conversation_id, onclick: () => openConversation(c),
      class: state.conv && state.conv.conversation_id === c.conversation_id ? "active" : "" },
      el("span", {}, c.conversation_id), el("small", {}, c.messages.toLocaleString())))));
  loadFacts();
  loadPatterns();
}
$("user-other").addEventListener("change", () => {
  const name = $("user-other").value.trim();
  if (!name) return;
  const k = JSON.stringify([name, ""]);
  if (![...$("user").options].some((o) => o.value === k)) $("user").append(el("option", { value: k }, name));
  $("user").value = k;
  $("user-other").value = "";
  $("user").dispatchEvent(new Event("change"));
});
$("user").addEventListener("change", () => { state.conv = null; $("conversation").hidden = true; $("pick").hidden = false; pickOwner(); });

async function openConversation(c) {
  state.conv = c;
  state.marks = null;
  for (const b of document.querySelectorAll("#conversations button")) {
    b.classList.toggle("active", b.dataset.conversation === c.conversation_id);
  }
  $("pick").hidden = true;
  $("conversation").hidden = false;
  $("conversation-title").textContent = c.conversation_id;
  $("hits").replaceChildren();
  status("");
  await Promise.all([loadPage(null), loadWindow(), loadSummaries(), loadTimeline()]);
}

// -- window, summaries, stats ----------------------------------------------------------------
async function loadWindow() {
  const { messages } = await api(convPath("/messages") + query(ownerParams()));
  $("window-count").textContent = `${messages.length} messages`;
  $("window").replaceChildren(...messages.map(messageRow));
}

async function loadSummaries() {
  const { summaries } = await api(convPath("/summaries") + query(ownerParams()));
  $("summary-count").textContent = summaries.length ? `${summaries.length}` : "none yet";
  $("summaries").replaceChildren(...summaries.map((s) => {
    const [from, to] = s.covers;
    const list = el("ol", { class: "expanded" });
    const more = el("button", { type: "button", class: "more", hidden: "" });
    let next = from;
    const page = async () => {  // the covered positions, SUMMARY_PAGE at a time: a summary may cover thousands
      const limit = Math.min(SUMMARY_PAGE, to - next + 1);
      const { messages } = await api(archivePath() + query({ ...ownerParams(), offset: next, limit }));
      list.append(...messages.map(messageRow));
      next += limit;
      more.hidden = next > to;
      more.textContent = `show more (${(to - next + 1).toLocaleString()} left)`;
    };
    more.addEventListener("click", page);
    const gist = s.text.length > 160 ? `${s.text.slice(0, 160)}…` : s.text;
    const details = el("details", { "data-summary": s.id },
      el("summary", {}, el("b", {}, `positions ${from}–${to}`), " ",
        el("span", { class: "muted" }, `${(to - from + 1).toLocaleString()} messages · ${when(s.created_at)} · `), gist),
      el("div", { class: "text summary-text" }, s.text), list, more);
    details.addEventListener("toggle", () => { if (details.open && next === from) page(); });
    return details;
  }));
}

async function loadTimeline() {
  const t = await api(`/v1/inspector/conversations/${encodeURIComponent(state.conv.conversation_id)}/timeline` + query(ownerParams()));
  $("stats").replaceChildren(
    el("div", {}, el("b", {}, t.total.toLocaleString()), "archived messages"),
    el("div", {}, el("b", {}, t.summaries), "summaries"),
    el("div", {}, el("b", {}, t.window), "in the window"),
    el("div", {}, el("b", {}, t.series.length ? when(t.series[0].t).slice(0, 10) : "—"), "first message"));
  drawChart(t.series);
}

function drawChart(series) {
  const svg = $("chart");
  svg.replaceChildren();
  if (!series.length) return;
  const W = 600, H = 120, pad = 8;
  const t0 = series[0].t, t1 = series[series.length - 1].t;
  const byTime = t1 > t0;
  const top = Math.max(1, ...series.map((p) => p.archived));
  const x = (p, i) => pad + (W - 2 * pad) * (byTime ? (p.t - t0) / (t1 - t0) : i / Math.max(1, series.length - 1));
  const y = (v) => H - pad - (H - 2 * pad) * v / top;
  const ns = "http://www.w3.org/2000/svg";
  for (const [field, color] of [["archived", "--archived"], ["summarized", "--summarized"], ["window", "--window"]]) {
    const line = document.createElementNS(ns, "polyline");
    const points = [];  // steps: a count holds until the next sample
    series.forEach((p, i) => {
      if (i) points.push(`${x(p, i).toFixed(1)},${y(series[i - 1][field]).toFixed(1)}`);
      points.push(`${x(p, i).toFixed(1)},${y(p[field]).toFixed(1)}`);
    });
    line.setAttribute("points", points.join(" "));
    line.setAttribute("stroke", getComputedStyle(document.documentElement).getPropertyValue(color));
    line.setAttribute("class", field);
    svg.append(line);
  }
}

// -- the archive timeline, a page at a time --------------------------------------------------
async function loadPage(offset) {
  const path = archivePath();
  if (offset === null) {  // open on the newest page
    const probe = await api(path + query({ ...ownerParams(), offset: 0, limit: 1 }));
    offset = Math.floor(probe.last_position / PAGE) * PAGE;
  }
  const page = await api(path + query({ ...ownerParams(), offset, limit: PAGE }));
  state.offset = page.offset;
  state.last = page.last_position;
  $("page-info").textContent = `positions ${page.offset}–${Math.min(page.offset + PAGE - 1, page.last_position)} of ${page.total.toLocaleString()}`;
  $("prev").disabled = $("first").disabled = page.offset === 0;
  $("next").disabled = $("last").disabled = page.offset + PAGE > page.last_position;
  $("timeline").replaceChildren(...page.messages.map(messageRow));
  mark();
}

function mark() {
  const m = state.marks;
  for (const li of $("timeline").children) {
    const p = Number(li.dataset.position);
    li.classList.toggle("in-range", !!m && p >= m.start && p <= m.end);
    li.classList.toggle("hit", !!m && p === m.position);
  }
  const hit = $("timeline").querySelector("li.hit");
  if (hit) hit.scrollIntoView({ block: "center" });
}

$("first").addEventListener("click", () => loadPage(0));
$("prev").addEventListener("click", () => loadPage(Math.max(0, state.offset - PAGE)));
$("next").addEventListener("click", () => loadPage(state.offset + PAGE));
$("last").addEventListener("click", () => loadPage(Math.floor(state.last / PAGE) * PAGE));
$("goto").addEventListener("change", () => loadPage(Math.floor(Number($("goto").value) / PAGE) * PAGE));

// -- search ------------------------------------------------------------------------------------
$("search-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = { query: $("query").value, top_k: Number($("top-k").value), radius: Number($("radius").value),
    scope: { ...ownerParams(), conversation_id: state.conv.conversation_id } };
  try {
    const { hits, elapsed_ms } = await api("/v1/search", { method: "POST", body });
    status(`${hits.length} recalled in ${elapsed_ms} ms`);
    $("hits").replaceChildren(...hits.map((h) => {
      const s = h.scores || {};
      const show = el("button", { type: "button", class: "show", onclick: () => {
        state.marks = { position: h.position, start: h.range.start, end: h.range.end };
        loadPage(Math.floor(h.position / PAGE) * PAGE);
      } }, `show #${h.range.start}–${h.range.end} in the timeline`);
      return el("li", { "data-position": h.position },
        el("div", {}, el("b", { class: `role ${h.role}` }, `#${h.position} ${h.role}: `), el("span", { class: "text" }, textOf(h.message))),
        el("div", { class: "scores" },
          el("span", {}, "dense ", el("b", { class: "dense" }, num(s.dense))),
          el("span", {}, "lexical ", el("b", { class: "lexical" }, num(s.lexical))),
          el("span", {}, "fused ", el("b", { class: "fused" }, num(s.fused))),
          el("span", {}, "rerank ", el("b", { class: "rerank" }, num(s.rerank))),
          el("span", {}, `range ${h.range.start}–${h.range.end}`), show));
    }));
  } catch (error) {
    status(error.message, true);
  }
});

// -- forget ------------------------------------------------------------------------------------
$("forget-conversation").addEventListener("click", async () => {
  const c = state.conv;
  if (!(await confirmed("Forget conversation “", bdi(c.conversation_id),
    `” (${c.messages} messages) everywhere? This cannot be undone.`))) return;
  const { deleted } = await api(convPath() + query(ownerParams()), { method: "DELETE" });
  state.conv = null;
  $("conversation").hidden = true;
  $("pick").hidden = false;
  $("pick").replaceChildren("Forgot ", bdi(c.conversation_id),
    `: ${deleted.messages} messages, ${deleted.vectors ?? 0} vectors.`);
  await start();
});

// -- long-term memory: facts and procedural patterns -------------------------------------------
function absent(node, what, error) {
  const missing = error instanceof ApiError && (error.status === 404 || error.status === 405);
  node.replaceChildren(el("p", { class: missing ? "muted" : "error" },
    missing ? `This server does not serve ${what}.` : error.message));
}

async function loadFacts() {
  const node = $("facts");
  try {
    const body = await api("/v1/facts" + query({ ...ownerParams(), history: $("fact-history").checked }));
    renderFacts(body.facts || []);
  } catch (error) {
    absent(node, "long-term facts", error);
  }
}
$("fact-history").addEventListener("change", loadFacts);

function renderFacts(facts) {
  if (!facts.length) return $("facts").replaceChildren(el("p", { class: "muted" }, "No facts for this user."));
  const rows = facts.map((f) => {
    const forget = el("button", { type: "button", class: "danger forget-fact", onclick: async () => {
      if (!(await confirmed("Forget the fact “", bdi(f.text), "” for good?"))) return;
      await api(`/v1/facts/${encodeURIComponent(f.id)}` + query(ownerParams()), { method: "DELETE" });
      loadFacts();
    } }, "Forget");
    const about = f.attribute ? [bdi(f.subject), " · ", bdi(f.attribute), " = ", bdi(f.value ?? "")] : f.subject;
    // not current: ended (superseded), or dated in the future (it holds from then on, until its end if it has one)
    const upcoming = !f.current && f.valid.from * 1000 > Date.now();
    const kind = f.current ? "current" : upcoming ? "upcoming" : "superseded";
    return el("tr", { class: kind, "data-fact": f.id },
      el("td", {}, f.text), el("td", { class: "muted" }, about),
      el("td", {}, upcoming ? [`from ${when(f.valid.from)} `, el("span", { class: "muted" }, "(not yet current)")]
        : when(f.valid.from)),
      el("td", {}, f.valid.to ? when(f.valid.to) : upcoming ? "—" : "now"),
      el("td", {}, f.mentions > 1 ? `${f.mentions}×` : ""), el("td", {}, forget));
  });
  $("facts").replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["fact", "about", "valid from", "until", "said", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
}

async function loadPatterns(event) {
  if (event) event.preventDefault();
  const node = $("patterns");
  const task = $("pattern-query").value.trim();
  try {
    const body = task
      ? await api("/v1/patterns/search", { method: "POST", body: { query: task, top_k: 10, ...ownerParams() } })
      : await api("/v1/patterns" + query(ownerParams()));
    const patterns = body.patterns || [];
    if (!patterns.length) return node.replaceChildren(el("p", { class: "muted" }, task ? "No similar pattern." : "No patterns for this user."));
    node.replaceChildren(...patterns.map((p) => el("div", { class: "pattern", "data-pattern": p.id },
      el("b", {}, bdi(p.query)), p.query_type ? el("span", { class: "muted" }, " (", bdi(p.query_type), ")") : "",
      el("div", { class: "scores" },
        el("span", {}, "success ", el("b", { class: "success" }, num(p.success_score))),
        p.similarity !== undefined ? el("span", {}, "similarity ", el("b", { class: "similarity" }, num(p.similarity))) : "",
        el("span", {}, `used ${p.success_count}×`),
        el("span", {}, `${Math.round(p.avg_execution_time_ms)} ms on average`),
        el("span", {}, `last ${when(p.last_used)}`)),
      el("ol", { class: "steps" }, (p.tools_used || []).map((t) => el("li", {}, t))))));
  } catch (error) {
    absent(node, "procedural patterns", error);
  }
}
$("pattern-form").addEventListener("submit", loadPatterns);

// -- go ------------------------------------------------------------------------------------------
if (sessionStorage.getItem(KEY_ITEM)) start();
else askKey();
