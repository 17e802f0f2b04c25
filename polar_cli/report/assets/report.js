// Polar report, the index page: figures, charts (hand-written SVG), the session table with filters.
// Reads its data from <script id="data">; needs no network. Filters live in location.hash, so a reload keeps them.
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const F = DATA.figures, S = DATA.sessions;
const app = document.getElementById("app");
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US"));
const pct = (r) => (r === null || r === undefined ? "-" : (100 * r).toFixed(1) + "%");
const secs = (s) => (s === null || s === undefined ? "-" : s < 120 ? s.toFixed(1) + " s" : s < 7200 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(2) + " h");
const COLORS = { accepted: "#2e9b5f", rejected: "#d0493c", error: "#8a56c2" };

function figureCards() {
  const rr = F.reject_reasons || {}, tok = F.tokens || {};
  const cards = [
    ["attempts", "sessions finished", num(F.attempts)],
    ["accepted", "accepted (" + pct(F.acceptance_rate) + ")", num(F.accepted)],
    ["rejected", "rejected", num(F.rejected)],
    ["errors", "errors (unfinished)", num(F.errors_last_segment)],
    ["retried", "retried and finished", num(F.errors_retried)],
    ["tamper", "tamper rejects", num(rr.tamper || 0)],
    ["lookups", "sessions with lookups", num((F.lookups || {}).sessions)],
    ["duration", "duration", secs(F.wall_seconds)],
    ["sampled", "tokens sampled", num(tok.completion)],
    ["trainable", "tokens trainable", num(tok.trainable)],
    ["prompt", "prompt tokens", num(tok.prompt)],
    ["calls", "model calls", num(F.model_calls)],
  ];
  return cards.map(([id, k, v]) => `<div class=figure data-figure="${id}"><div class=v>${v}</div><div class=k>${k}</div></div>`).join("");
}

// a horizontal bar chart; rows: [{label, parts: [[value, color, name]]}]
function hbars(rows, { width = 560, labelW = 150, unit = "" } = {}) {
  if (!rows.length) return '<p class=muted>nothing yet</p>';
  const rowH = 20, h = rows.length * rowH + 6, max = Math.max(1, ...rows.map((r) => r.parts.reduce((a, p) => a + p[0], 0)));
  const scale = (width - labelW - 120) / max;
  let out = `<svg width="${width}" height="${h}" role=img>`;
  rows.forEach((r, i) => {
    const y = i * rowH + 3;
    out += `<text x="${labelW - 6}" y="${y + 13}" text-anchor=end>${esc(r.label.length > 28 ? "…" + r.label.slice(-27) : r.label)}<title>${esc(r.label)}</title></text>`;
    let x = labelW, total = 0;
    for (const [v, color, name] of r.parts) {
      if (v > 0) out += `<rect x="${x}" y="${y}" width="${Math.max(1, v * scale)}" height="${rowH - 5}" fill="${color}"><title>${esc(r.label)}: ${num(v)} ${esc(name)}</title></rect>`;
      x += v * scale; total += v;
    }
    out += `<text x="${x + 4}" y="${y + 13}">${esc(r.note ?? num(total) + unit)}</text>`;
  });
  return out + "</svg>";
}

function acceptanceChart(field, limit) {
  const groups = {};
  for (const s of S) {
    const g = (groups[s[field] || "?"] ||= { accepted: 0, rejected: 0, error: 0 });
    g[s.kind === "accepted" ? "accepted" : s.kind === "error" ? "error" : "rejected"] += 1;
  }
  const rows = Object.entries(groups).map(([label, g]) => {
    const n = g.accepted + g.rejected;
    return { label, n: n + g.error, parts: [[g.accepted, COLORS.accepted, "accepted"], [g.rejected, COLORS.rejected, "rejected"], [g.error, COLORS.error, "errors"]],
      note: `${g.accepted}/${n}` + (n ? ` (${pct(g.accepted / n)})` : "") + (g.error ? ` +${g.error} err` : "") };
  }).sort((a, b) => b.n - a.n);
  const more = rows.length > limit ? `<p class=muted>${rows.length - limit} more not shown</p>` : "";
  return hbars(rows.slice(0, limit)) + legend() + more;
}
const legend = () => `<div class=legend>${Object.entries(COLORS).map(([k, c]) => `<i style="background:${c}"></i>${k}`).join("")}</div>`;

function reasonsChart() {
  const rows = Object.entries(F.reject_reasons || {}).map(([label, n]) => ({ label: label || "(none)", parts: [[n, COLORS.rejected, "sessions"]] }));
  return hbars(rows.sort((a, b) => b.parts[0][0] - a.parts[0][0]));
}

function quantiles(xs) {
  const s = [...xs].sort((a, b) => a - b), q = (p) => s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))];
  return { min: s[0], q1: q(0.25), med: q(0.5), q3: q(0.75), p95: q(0.95), max: s[s.length - 1], mean: s.reduce((a, b) => a + b, 0) / s.length, n: s.length };
}

// one box plot row per stage (whiskers min..max, box q1..q3, tick at the median, dot at p95), a log scale in seconds
function stageChart() {
  const stages = ["init", "ready_wait", "run", "postrun", "eval", "total"].filter((k) => S.some((s) => s.timing[k] !== undefined));
  if (!stages.length) return '<p class=muted>nothing yet</p>';
  const width = 520, labelW = 90, rowH = 30, h = stages.length * rowH + 26;
  const all = stages.flatMap((k) => S.map((s) => s.timing[k]).filter((v) => v !== undefined));
  const lo = Math.log10(Math.max(0.01, Math.min(...all.filter((v) => v > 0), 1))), hi = Math.log10(Math.max(1, ...all)) + 0.05;
  const X = (v) => labelW + (Math.log10(Math.max(v, 0.01)) - lo) / (hi - lo) * (width - labelW - 20);
  let out = `<svg width="${width}" height="${h}" role=img>`;
  for (let e = Math.ceil(lo); e <= hi; e++) {
    const x = X(10 ** e);
    out += `<line class=axis x1="${x}" x2="${x}" y1="0" y2="${h - 18}"/><text x="${x}" y="${h - 4}" text-anchor=middle>${secs(10 ** e)}</text>`;
  }
  stages.forEach((k, i) => {
    const q = quantiles(S.map((s) => s.timing[k]).filter((v) => v !== undefined)), y = i * rowH + 6, m = y + 9;
    const tip = `<title>${k}: n=${q.n} min ${secs(q.min)}, median ${secs(q.med)}, mean ${secs(q.mean)}, p95 ${secs(q.p95)}, max ${secs(q.max)}</title>`;
    out += `<text x="${labelW - 8}" y="${m + 4}" text-anchor=end>${k.toUpperCase()}</text>`;
    out += `<line x1="${X(q.min)}" x2="${X(q.max)}" y1="${m}" y2="${m}" stroke="#98a2b3"/>`;
    out += `<rect data-stage="${k}" x="${X(q.q1)}" y="${y}" width="${Math.max(2, X(q.q3) - X(q.q1))}" height="18" fill="#cfe0fa" stroke="#2f6fd0">${tip}</rect>`;
    out += `<line x1="${X(q.med)}" x2="${X(q.med)}" y1="${y}" y2="${y + 18}" stroke="#1d2330" stroke-width="2"/>`;
    out += `<circle cx="${X(q.p95)}" cy="${m}" r=2.5 fill="#d0493c">${tip}</circle>`;
  });
  return out + "</svg><div class=legend>box: quartiles, bar: median, red dot: p95, whiskers: min..max (log scale)</div>";
}

function tokenChart() {
  const xs = S.map((s) => s.completion_tokens).filter((v) => v > 0);
  if (!xs.length) return '<p class=muted>no tokens yet</p>';
  const bins = 24, max = Math.max(...xs), step = Math.max(1, Math.ceil((max + 1) / bins));
  const counts = new Array(bins).fill(0), trained = new Array(bins).fill(0);
  for (const s of S) if (s.completion_tokens > 0) { const b = Math.min(bins - 1, Math.floor(s.completion_tokens / step)); counts[b]++; trained[b] += s.trainable_tokens > 0 ? 1 : 0; }
  const width = 520, h = 160, top = Math.max(...counts), bw = (width - 40) / bins;
  let out = `<svg width="${width}" height="${h + 30}" role=img><line class=axis x1=30 x2="${width}" y1="${h}" y2="${h}"/>`;
  counts.forEach((c, i) => {
    const bh = (c / top) * (h - 10), th = (trained[i] / top) * (h - 10), x = 32 + i * bw;
    out += `<rect x="${x}" y="${h - bh}" width="${bw - 2}" height="${bh}" fill="#cfe0fa"><title>${num(i * step)}-${num((i + 1) * step - 1)} tokens: ${c} sessions</title></rect>`;
    out += `<rect x="${x}" y="${h - th}" width="${bw - 2}" height="${th}" fill="#2f6fd0" opacity=.35 pointer-events=none></rect>`;
  });
  out += `<text x=30 y="${h + 14}">0</text><text x="${width}" y="${h + 14}" text-anchor=end>${num(max)} sampled tokens</text><text x=0 y=12>${top}</text>`;
  return out + "</svg><div class=legend>sessions by tokens sampled; darker: sessions with trainable tokens</div>";
}

// ---- the table ----
const COLS = [["id", "session"], ["harness", "harness"], ["repo", "repository"], ["kind", "verdict"], ["status", "status"],
  ["reason", "reason"], ["traces", "traces", 1], ["completion_tokens", "sampled", 1], ["trainable_tokens", "trainable", 1], ["total", "seconds", 1]];
const state = Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
const options = (field) => [...new Set(S.map((s) => s[field] || ""))].sort();
function select(field, label) {
  return `<label>${label} <select data-filter="${field}"><option value="">all</option>${options(field).map((v) => `<option ${state[field] === v ? "selected" : ""} value="${esc(v)}">${esc(v || "(none)")}</option>`).join("")}</select></label>`;
}
function renderTable() {
  const q = (state.q || "").toLowerCase(), key = state.sort || "", dir = state.dir === "asc" ? 1 : -1;
  let rows = S.filter((s) => ["harness", "kind", "status", "reason", "repo"].every((f) => !state[f] || (s[f] || "") === state[f])
    && (!q || `${s.id} ${s.key} ${s.instance} ${s.detail}`.toLowerCase().includes(q)));
  if (key) rows = [...rows].sort((a, b) => { const x = key === "total" ? a.timing.total : a[key], y = key === "total" ? b.timing.total : b[key]; return (x > y ? 1 : x < y ? -1 : 0) * dir; });
  document.getElementById("count").textContent = `${rows.length} of ${S.length} sessions`;
  const body = rows.slice(0, 5000).map((s) => `<tr data-kind="${s.kind}"><td><a href="sessions/${encodeURIComponent(s.page)}">${esc(s.id)}</a><div class=muted>${esc(s.instance)}</div></td>`
    + `<td>${esc(s.harness)}</td><td>${esc(s.repo)}</td><td><span class="badge ${s.kind}">${s.kind}</span></td><td>${esc(s.status)}</td>`
    + `<td title="${esc(s.detail)}">${esc(s.reason)}</td><td class=n>${s.traces}</td><td class=n>${num(s.completion_tokens)}</td><td class=n>${num(s.trainable_tokens)}</td>`
    + `<td class=n>${s.timing.total === undefined ? "-" : s.timing.total.toFixed(1)}</td></tr>`).join("");
  document.getElementById("rows").innerHTML = body;
  location.replace("#" + new URLSearchParams(Object.entries(state).filter(([, v]) => v)).toString());
}

function render() {
  const when = new Date(F.read_at * 1000).toLocaleString();
  app.innerHTML = `<header><h1>${esc(F.name)} ${F.live ? '<span class="badge live">in progress</span>' : ""}</h1>
    <div class=sub>${esc(F.run_dir)} · ${esc(F.engine || F.kind)} ${esc(F.model || "")} · read ${esc(when)} · tokens: ${esc(DATA.tokenizer || "ids")}</div></header>
    <main><section><h2>Figures</h2><div class=figures>${figureCards()}</div></section>
    <div class=grid2><section><h2>Acceptance by harness</h2>${acceptanceChart("harness", 30)}</section>
    <section><h2>Acceptance by repository</h2>${acceptanceChart("repo", 25)}</section>
    <section><h2>Reject reasons</h2>${reasonsChart()}</section>
    <section><h2>Stage times</h2>${stageChart()}</section>
    <section><h2>Tokens per session</h2>${tokenChart()}</section></div>
    <section style="margin-top:16px"><h2>Sessions</h2><div class=filters>${select("harness", "harness")}${select("kind", "verdict")}
    ${select("status", "status")}${select("reason", "reason")}<input id=q placeholder="search id, instance, reason" value="${esc(state.q || "")}">
    <span id=count class=muted></span></div><table><thead><tr>${COLS.map(([k, l, n]) => `<th data-sort="${k}" class="${n ? "n" : ""}">${l}</th>`).join("")}</tr></thead><tbody id=rows></tbody></table></section></main>`;
  app.querySelectorAll("[data-filter]").forEach((el) => el.addEventListener("change", () => { state[el.dataset.filter] = el.value; renderTable(); }));
  document.getElementById("q").addEventListener("input", (e) => { state.q = e.target.value; renderTable(); });
  app.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => {
    state.dir = state.sort === th.dataset.sort && state.dir !== "asc" ? "asc" : "desc"; state.sort = th.dataset.sort; renderTable();
  }));
  renderTable();
}
render();

// `polar view`: poll the page's Last-Modified and reload when the report was rebuilt
function watch() {
  if (app.dataset.refresh !== "1" || location.protocol === "file:") return;
  let seen = null;
  setInterval(async () => {
    try {
      const r = await fetch(location.pathname, { method: "HEAD", cache: "no-store" });
      const m = r.headers.get("Last-Modified");
      if (seen && m && m !== seen) location.reload();
      seen = m || seen;
    } catch (e) { /* the server went away: keep what is shown */ }
  }, 3000);
}
watch();
