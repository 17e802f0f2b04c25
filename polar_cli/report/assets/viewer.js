// Polar trajectory viewer: one session's verdict, the lineage of its traces, each trace's conversation and tokens.
// Reads <script id="data"> and window.POLAR_VOCAB (vocab.js: id -> token text, null when no tokenizer was here).
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const V = window.POLAR_VOCAB || null;
const app = document.getElementById("app");
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const FOLD = 1500;

function folded(text, cls = "") {
  text = String(text ?? "");
  if (text.length <= FOLD && text.split("\n").length <= 40) return `<pre class="${cls}">${esc(text)}</pre>`;
  const lines = text.split("\n").length;
  return `<details class=fold><summary>${esc(text.slice(0, 240))}… (${num(text.length)} chars, ${lines} lines)</summary><pre class="${cls}">${esc(text)}</pre></details>`;
}

function content(c) {
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p.text ?? JSON.stringify(p))).join("\n");
  return c ?? "";
}

function message(m) {
  const resent = m.weight === 0, role = m.role || "?";
  let out = `<div class="msg ${esc(role)}${resent ? " resent" : ""}"><span class=role>${esc(role)}</span>`;
  if (resent) out += ' <span class=muted>re-sent (trained in an earlier trace, weight 0)</span>';
  if (role === "tool") out += ` <span class=muted>result of ${esc(m.tool_call_id || m.name || "")}</span>`;
  if (m.reasoning_content) out += `<details><summary>reasoning (${num(m.reasoning_content.length)} chars)</summary><pre>${esc(m.reasoning_content)}</pre></details>`;
  const text = content(m.content);
  if (text) out += folded(text);
  for (const call of m.tool_calls || []) {
    const fn = call.function || {};
    let args = fn.arguments ?? "";
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* a freeform tool: as sent */ }
    out += `<div class=call>→ <b>${esc(fn.name)}</b> <span class=muted>${esc(call.id || "")}</span>${folded(args)}</div>`;
  }
  return out + "</div>";
}

// the lineage as a small tree: each trace under the trace it branched from, the edge labelled kind@seq
function lineage() {
  const T = D.traces;
  if (!T.length) return '<p class=muted>no traces</p>';
  const byIndex = Object.fromEntries(T.map((t) => [t.index, t])), depth = {}, col = {}, perDepth = {};
  const depthOf = (t, seen = 0) => { const p = t.lineage && t.lineage.parent; return p === null || p === undefined || !byIndex[p] || seen > 50 ? 0 : 1 + depthOf(byIndex[p], seen + 1); };
  for (const t of T) { depth[t.index] = depthOf(t); col[t.index] = (perDepth[depth[t.index]] = (perDepth[depth[t.index]] ?? -1) + 1); }
  const W = 150, H = 64, width = Math.max(...Object.values(perDepth)) * W + W + 10, height = (Math.max(...Object.values(depth)) + 1) * H + 10;
  const X = (i) => 10 + col[i] * W, Y = (i) => 8 + depth[i] * H;
  let out = `<svg width="${width}" height="${height}" id=lineage role=img>`;
  for (const t of T) {
    const p = t.lineage && t.lineage.parent;
    if (p === null || p === undefined || !byIndex[p]) continue;
    const x1 = X(p) + 60, y1 = Y(p) + 30, x2 = X(t.index) + 60, y2 = Y(t.index);
    out += `<path d="M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}" fill=none stroke="#98a2b3"/>`;
    out += `<text x="${(x1 + x2) / 2 + 4}" y="${(y1 + y2) / 2 + 4}" class=muted>@${t.lineage.at_seq ?? "?"}</text>`;
  }
  for (const t of T) {
    const kind = (t.lineage && t.lineage.kind) || "trace", cut = t.metadata.end === "truncated";
    out += `<g data-trace="${t.index}" style="cursor:pointer"><rect x="${X(t.index)}" y="${Y(t.index)}" width=120 height=30 rx=6 fill="${cut ? "#fbe2df" : "#eef3fc"}" stroke="#2f6fd0"/>`
      + `<text x="${X(t.index) + 60}" y="${Y(t.index) + 13}" text-anchor=middle>#${t.index} ${esc(kind)}</text>`
      + `<text x="${X(t.index) + 60}" y="${Y(t.index) + 25}" text-anchor=middle>${t.seqs.length} call(s)${cut ? " · cut" : ""}</text></g>`;
  }
  return out + "</svg>";
}

function verdict() {
  const e = D.eval;
  if (!e) return '<p class=muted>no evaluation</p>';
  let out = `<div class=kv><b>outcome</b><span>${esc(e.outcome ?? (e.resolved ? "resolved" : "unresolved"))}</span><b>reason</b><span>${esc(e.reason ?? "")}</span></div>`;
  let tests = e.tests || [];
  if (!tests.length && e.tests_status) {
    for (const group of ["FAIL_TO_PASS", "PASS_TO_PASS"]) {
      const g = e.tests_status[group] || {};
      for (const t of g.success || []) tests.push({ test: t, group, status: "", ok: true });
      for (const t of g.failure || []) tests.push({ test: t, group, status: "", ok: false });
    }
  }
  if (tests.length) {
    out += `<table id=tests><thead><tr><th>group</th><th>test</th><th>log says</th><th>verdict</th></tr></thead><tbody>`
      + tests.map((t) => `<tr><td>${esc(t.group)}</td><td><code>${esc(t.test)}</code></td><td>${esc(t.status)}</td><td><span class="badge ${t.ok ? "ok" : "fail"}">${t.ok ? "pass" : "fail"}</span></td></tr>`).join("")
      + "</tbody></table>";
  }
  if (D.log) out += `<details id=testlog><summary>test log (${num(D.log.length)} chars)</summary><pre>${esc(D.log)}</pre></details>`;
  return out;
}

const piece = (id) => (V && V[id] !== undefined ? V[id] : `⟨${id}⟩`);
const shown = (s) => esc(s).replace(/\n/g, "↵\n");

function responseTokens(t) {
  const drifted = new Set(t.metadata.turns_drifted || []), marks = {};
  for (const [seq, start, end] of t.metadata.turns || []) { marks[start] = seq; if (drifted.has(seq)) for (let i = start; i < end; i++) marks["d" + i] = 1; }
  let out = "";
  for (let i = 0; i < t.response_ids.length; i++) {
    const m = t.loss_mask[i], lp = t.logprobs[i];
    const cls = (m ? "t1" : "t0") + (marks["d" + i] ? " drift" : "") + (marks[i] !== undefined ? " turn" : "");
    const tip = `#${i} id ${t.response_ids[i]}` + (m ? ` · logprob ${lp} · p ${Math.exp(lp).toFixed(3)}` : " · context") + (marks[i] !== undefined ? ` · call ${marks[i]}` : "") + (marks["d" + i] ? " · drifted turn" : "");
    out += `<span class="${cls}" title="${tip}">${shown(piece(t.response_ids[i]))}</span>`;
  }
  return out;
}

function trace(t) {
  const trained = t.loss_mask.reduce((a, b) => a + b, 0), meta = t.metadata, l = t.lineage || {};
  const cut = meta.end === "truncated";
  let out = `<div class=kv><b>lineage</b><span>${esc(l.kind || "-")}${l.parent !== null && l.parent !== undefined ? ` from trace #${l.parent} after call ${l.at_seq}` : ""}${l.tool_call_id ? ` (tool call ${esc(l.tool_call_id)})` : ""}</span>`
    + `<b>calls</b><span>${t.seqs.join(", ")}</span><b>tokens</b><span>${num(t.prompt_ids.length)} prompt, ${num(t.response_ids.length)} response, <b class=trace-trained>${num(trained)}</b> trained</span>`
    + `<b>finish</b><span>${esc(t.finish_reason)} · start ${esc(meta.start ?? "-")} · end ${esc(meta.end ?? "-")}${cut ? ' <span class=cut>cut: the conversation goes on in another trace</span>' : ""}</span>`
    + `<b>drift</b><span>${(meta.turns_drifted || []).length ? `calls ${meta.turns_drifted.join(", ")} drifted (${num(meta.drift_tokens)} tokens), outlined red` : "none"}</span>`
    + `<b>tools</b><span>${esc(t.tools.join(", ") || "none")}</span></div>`;
  out += `<h3>Conversation</h3>${t.messages.map(message).join("")}`;
  out += `<h3>Tokens</h3><div class=legend><i style="background:var(--train)"></i>trained (loss mask 1; hover: logprob)<i style="background:var(--ctx)"></i>context (mask 0)<i style="outline:1.5px solid var(--bad)"></i>drifted turn<i style="border-left:2px solid var(--accent)"></i>start of a call</div>`;
  out += `<details class=prompt><summary>prompt: ${num(t.prompt_ids.length)} tokens of context, never trained</summary><div class="toks p" data-prompt="${t.index}"></div></details>`;
  out += `<div class=toks>${responseTokens(t)}</div>`;
  return out;
}

function render() {
  const s = D.session, sm = D.summary, trained = D.traces.reduce((a, t) => a + t.loss_mask.reduce((x, y) => x + y, 0), 0);
  const missing = D.expected_traces && D.traces.length < D.expected_traces ? `<span class="badge live">${D.traces.length} of ${D.expected_traces} traces written so far</span>` : "";
  const timing = Object.entries(sm.timing).map(([k, v]) => `${k} ${v.toFixed(1)} s`).join(" · ");
  app.innerHTML = `<header><h1><a href="../index.html">report</a> / ${esc(sm.id)} <span class="badge ${sm.kind}">${sm.kind}</span> ${missing}</h1>
    <div class=sub>${esc(s.key)} · ${esc(sm.harness)} · ${esc(sm.repo)} · ${esc(s.model || "")}</div></header><main>
    <section><h2>Session</h2><div class=kv><b>status</b><span>${esc(sm.status)}</span><b>reason</b><span>${esc(s.reason || "-")}</span>
    <b>reward</b><span>${esc(s.reward ?? "-")}</span><b>trained</b><span id=trained>trained tokens: ${trained}</span>
    <b>stages</b><span>${esc(timing || "-")}</span><b>tokens view</b><span>${V ? esc(D.tokenizer) : "ids (" + esc(D.tokenizer_note || "no tokenizer") + ")"}</span></div>
    ${s.patch ? `<details><summary>patch (${num(s.patch.length)} chars)</summary><pre>${esc(s.patch)}</pre></details>` : ""}</section>
    <section><h2>Verdict</h2>${verdict()}</section>
    <section><h2>Lineage</h2>${lineage()}</section>
    <section><h2>Traces</h2><div class=tabs>${D.traces.map((t) => `<button data-tab="${t.index}">#${t.index} ${esc((t.lineage || {}).kind || "")}</button>`).join("")}</div><div id=trace></div></section></main>`;
  const show = (i) => {
    const t = D.traces.find((x) => String(x.index) === String(i));
    if (!t) return;
    document.getElementById("trace").innerHTML = trace(t);
    app.querySelectorAll("[data-tab]").forEach((b) => b.classList.toggle("on", b.dataset.tab === String(i)));
    const p = app.querySelector("details.prompt");
    p.addEventListener("toggle", () => { const el = p.querySelector(".toks"); if (!el.innerHTML) el.innerHTML = t.prompt_ids.map((id) => `<span title="id ${id}">${shown(piece(id))}</span>`).join(""); }, { once: true });
  };
  app.querySelectorAll("[data-tab]").forEach((b) => b.addEventListener("click", () => show(b.dataset.tab)));
  app.querySelectorAll("#lineage [data-trace]").forEach((g) => g.addEventListener("click", () => show(g.dataset.trace)));
  if (D.traces.length) show(D.traces[0].index);
}
render();
