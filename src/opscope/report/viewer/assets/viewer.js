// opscope timeline viewer: draws the server's per-pixel-aggregated slices on one canvas.
// Every string from the trace reaches the DOM through textContent, never innerHTML.
"use strict";
(function () {
  const LABEL_W = 200, RULER_H = 26, ROW_H = 18, TRACK_PAD = 6, COUNTER_H = 42;
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#a0cbe8"];
  const canvas = document.getElementById("tl");
  const ctx = canvas.getContext("2d");
  const tip = document.getElementById("tip");
  const $ = (id) => document.getElementById(id);

  const S = {
    tracks: [], layout: [], totalH: 0, t0: 0, t1: 1, end: 1, scrollY: 0,
    data: new Map(),          // track id -> {start, end, nsPerPx, d: response}
    pending: false, fetchTimer: 0, selected: null, selRange: null, flows: [],
    matches: [], cur: -1, overlays: [], ovById: new Map(), origin: 0,
    width: 800, height: 600, dpr: 1,
  };
  const stats = { frames: [], firstPaintMs: null, fetches: 0, lastSearchMs: null, ready: false };
  window.__opscope = { S, stats, jumpTo, select, screenPos, draw: () => draw() };

  function api(path) {
    return fetch(path, { headers: { "Accept": "application/json" } }).then((r) => {
      if (!r.ok) throw new Error(path + ": HTTP " + r.status);
      return r.json();
    });
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function fmtDur(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(2) + " µs";
    return Math.round(ns) + " ns";
  }

  function color(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    return PALETTE[Math.abs(h) % PALETTE.length];
  }

  // Layout -------------------------------------------------------------------------------------
  function layout() {
    let y = 0;
    S.layout = S.tracks.map((t) => {
      const h = t.type === "counter" ? COUNTER_H : (t.max_depth + 1) * ROW_H + TRACK_PAD;
      const L = { t, y, h };
      y += h + 1;
      return L;
    });
    S.totalH = y;
  }

  function resize() {
    const r = canvas.getBoundingClientRect();
    S.dpr = window.devicePixelRatio || 1;
    S.width = Math.max(100, r.width);
    S.height = Math.max(100, r.height);
    canvas.width = Math.round(S.width * S.dpr);
    canvas.height = Math.round(S.height * S.dpr);
    invalidate();
    scheduleFetch(0);
  }

  const plotW = () => S.width - LABEL_W;
  const xOf = (ts) => LABEL_W + (ts - S.t0) * plotW() / (S.t1 - S.t0);
  const tOf = (x) => S.t0 + (x - LABEL_W) * (S.t1 - S.t0) / plotW();

  function visibleTracks() {
    const out = [];
    for (const L of S.layout) {
      const top = RULER_H + L.y - S.scrollY;
      if (top + L.h >= RULER_H && top <= S.height) out.push(L);
    }
    return out;
  }

  // Fetching -----------------------------------------------------------------------------------
  function scheduleFetch(delay) {
    clearTimeout(S.fetchTimer);
    S.fetchTimer = setTimeout(fetchVisible, delay === undefined ? 60 : delay);
  }

  function fetchVisible() {
    const span = S.t1 - S.t0;
    const curNsPerPx = span / plotW();
    const need = [];
    for (const L of visibleTracks()) {
      const c = S.data.get(L.t.id);
      const ok = c && c.start <= S.t0 && c.end >= S.t1 && c.nsPerPx <= curNsPerPx * 1.5 && c.nsPerPx >= curNsPerPx / 4;
      if (!ok) need.push(L.t.id);
    }
    if (!need.length) return;
    // One view width of margin on each side, at three times the screen's resolution, so that
    // panning and a little zooming draw from what is already here.
    const start = Math.max(0, Math.floor(S.t0 - span));
    const end = Math.ceil(S.t1 + span);
    const px = Math.round(plotW() * 3);
    const nsPerPx = Math.max(1, Math.floor((end - start) / px));
    stats.fetches++;
    api(`/api/slices?track=${need.join(",")}&start_ns=${start}&end_ns=${end}&px=${px}`).then((r) => {
      for (const d of r.tracks) {
        if (d.type === "slice") d.colors = d.names.map(color);
        S.data.set(d.track, { start, end, nsPerPx: r.ns_per_px || nsPerPx, d });
      }
      invalidate();
    }).catch((e) => console.error(e));
  }

  // Drawing ------------------------------------------------------------------------------------
  let raf = 0;
  function invalidate() {
    if (!raf) raf = requestAnimationFrame(() => { raf = 0; draw(); });
  }

  function niceStep(ns) {
    const p = Math.pow(10, Math.floor(Math.log10(ns)));
    for (const m of [1, 2, 5, 10]) if (p * m >= ns) return p * m;
    return p * 10;
  }

  function draw() {
    const t0p = performance.now();
    const W = S.width, H = S.height;
    ctx.setTransform(S.dpr, 0, 0, S.dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    let drawn = 0;
    const pw = plotW();
    const scale = pw / (S.t1 - S.t0);
    const ovOn = $("showov").checked;
    for (const L of visibleTracks()) {
      const top = RULER_H + L.y - S.scrollY;
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, top, pw, L.h);
      ctx.clip();
      const c = S.data.get(L.t.id);
      if (c && L.t.type === "slice") {
        const d = c.d, ts = d.ts, du = d.dur, dp = d.depth, nm = d.name, cnt = d.count;
        let prevDepth = -1, prevX = -1e9;
        for (let i = 0; i < ts.length; i++) {
          const x1 = LABEL_W + (ts[i] - S.t0) * scale;
          let x2 = x1 + du[i] * scale;
          if (x2 < LABEL_W || x1 > W) continue;
          if (x2 - x1 < 1) {
            // Several slices in one pixel column of one row draw as one: skip the rest.
            const xi = x1 | 0;
            if (dp[i] === prevDepth && xi <= prevX) continue;
            prevDepth = dp[i]; prevX = xi;
            x2 = x1 + 1;
          }
          const y = top + 2 + dp[i] * ROW_H;
          ctx.fillStyle = cnt[i] > 1 ? "#8a94a6" : d.colors[nm[i]];
          ctx.fillRect(x1, y, x2 - x1, ROW_H - 2);
          drawn++;
          const w = x2 - x1;
          if (w > 40 && cnt[i] === 1) {
            const lx = Math.max(x1, LABEL_W) + 3;
            const room = Math.min(x2, W) - lx - 2;
            if (room > 20) {
              const name = d.names[nm[i]];
              const chars = Math.floor(room / 6.2);
              ctx.fillStyle = "#ffffff";
              ctx.fillText(name.length > chars ? name.slice(0, Math.max(1, chars - 1)) + "…" : name, lx, y + ROW_H / 2 - 1);
            }
          }
        }
      } else if (c && L.t.type === "counter") {
        const d = c.d, ts = d.ts, v = d.value;
        const vmax = d.max > 0 ? d.max : 1;
        const base = top + L.h - 2, hh = L.h - 6;
        ctx.fillStyle = "rgba(78,121,167,0.45)";
        ctx.strokeStyle = "#4e79a7";
        ctx.beginPath();
        ctx.moveTo(LABEL_W, base);
        for (let i = 0; i < ts.length; i++) {
          const x = Math.max(LABEL_W, Math.min(W, LABEL_W + (ts[i] - S.t0) * scale));
          const xn = i + 1 < ts.length ? Math.max(LABEL_W, Math.min(W, LABEL_W + (ts[i + 1] - S.t0) * scale)) : W;
          const y = base - (v[i] / vmax) * hh;
          ctx.lineTo(x, y);
          ctx.lineTo(xn, y);
        }
        ctx.lineTo(W, base);
        ctx.closePath();
        ctx.fill();
        ctx.stroke();
        drawn += ts.length;
      }
      ctx.restore();
      // Label column.
      ctx.fillStyle = "#f6f7fa";
      ctx.fillRect(0, top, LABEL_W, L.h);
      ctx.fillStyle = "#778";
      ctx.fillText(L.t.group, 6, top + 8);
      ctx.fillStyle = "#1d2330";
      ctx.fillText(L.t.name.slice(0, 30), 6, top + 21);
      ctx.fillStyle = "#e1e5ec";
      ctx.fillRect(0, top + L.h, W, 1);
    }
    // Overlays, selection range, selected slice, flows.
    if (ovOn) {
      for (const o of S.overlays) {
        const e = o.event;
        if (!e || e.track === null) continue;
        const r = rectOf(e);
        if (!r) continue;
        ctx.strokeStyle = o.kind === "critical_path" ? "#ff8c00" : "#d7191c";
        ctx.lineWidth = 2;
        ctx.strokeRect(r.x, r.y, Math.max(2, r.w), r.h);
      }
      ctx.lineWidth = 1;
    }
    if (S.selRange) {
      const a = xOf(S.selRange[0]), b = xOf(S.selRange[1]);
      ctx.fillStyle = "rgba(31,95,191,0.15)";
      ctx.fillRect(Math.min(a, b), RULER_H, Math.abs(b - a), H - RULER_H);
    }
    if (S.selected && S.selected.summary) {
      const r = rectOf(S.selected.summary);
      if (r) {
        ctx.strokeStyle = "#000";
        ctx.lineWidth = 2;
        ctx.strokeRect(r.x - 1, r.y - 1, Math.max(2, r.w) + 2, r.h + 2);
        ctx.lineWidth = 1;
      }
    }
    if ($("showflows").checked) drawFlows();
    drawRuler();
    const dt = performance.now() - t0p;
    stats.frames.push(dt);
    if (stats.frames.length > 2000) stats.frames.splice(0, 1000);
    if (drawn > 0 && stats.firstPaintMs === null) stats.firstPaintMs = performance.now();
    stats.lastDrawn = drawn;
  }

  function rectOf(e) {
    const L = S.layout[e.track];
    if (!L) return null;
    const top = RULER_H + L.y - S.scrollY;
    const x = xOf(e.ts), w = e.dur * plotW() / (S.t1 - S.t0);
    const y = L.t.type === "counter" ? top : top + 2 + e.depth * ROW_H;
    return { x, y, w, h: L.t.type === "counter" ? L.h : ROW_H - 2 };
  }

  function drawFlows() {
    ctx.strokeStyle = "#c2185b";
    ctx.fillStyle = "#c2185b";
    ctx.lineWidth = 1.5;
    for (const f of S.flows) {
      const a = rectOf(f.src), b = rectOf(f.dst);
      if (!a || !b) continue;
      const x1 = a.x + Math.max(1, a.w), y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
      ctx.beginPath();
      ctx.moveTo(x1, y1);
      const mx = (x1 + x2) / 2;
      ctx.bezierCurveTo(mx, y1, mx, y2, x2, y2);
      ctx.stroke();
      ctx.beginPath();
      ctx.moveTo(x2, y2);
      ctx.lineTo(x2 - 6, y2 - 4);
      ctx.lineTo(x2 - 6, y2 + 4);
      ctx.fill();
    }
    ctx.lineWidth = 1;
  }

  function drawRuler() {
    const W = S.width;
    ctx.fillStyle = "#eef1f6";
    ctx.fillRect(0, 0, W, RULER_H);
    ctx.fillStyle = "#c9d0dc";
    ctx.fillRect(0, RULER_H - 1, W, 1);
    const span = S.t1 - S.t0;
    const step = niceStep(span / Math.max(1, plotW() / 110));
    const first = Math.ceil(S.t0 / step) * step;
    ctx.fillStyle = "#334";
    ctx.strokeStyle = "#c9d0dc";
    for (let t = first; t <= S.t1; t += step) {
      const x = Math.round(xOf(t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, RULER_H - 8);
      ctx.lineTo(x, RULER_H);
      ctx.stroke();
      ctx.fillText(fmtDur(t), x + 3, 10);
    }
    ctx.fillStyle = "#eef1f6";
    ctx.fillRect(0, 0, LABEL_W, RULER_H);
    ctx.fillStyle = "#334";
    ctx.fillText("span " + fmtDur(span), 6, 13);
  }

  // View changes -------------------------------------------------------------------------------
  function setView(t0, t1) {
    const minSpan = 100;
    if (t1 - t0 < minSpan) { const m = (t0 + t1) / 2; t0 = m - minSpan / 2; t1 = m + minSpan / 2; }
    const pad = (S.end) * 0.05;
    if (t1 - t0 > S.end + 2 * pad) { t0 = -pad; t1 = S.end + pad; }
    S.t0 = t0; S.t1 = t1;
    invalidate();
    scheduleFetch();
  }

  function zoomAt(factor, x) {
    const t = tOf(x === undefined ? LABEL_W + plotW() / 2 : x);
    setView(t - (t - S.t0) * factor, t + (S.t1 - t) * factor);
  }

  function pan(fraction) {
    const d = (S.t1 - S.t0) * fraction;
    setView(S.t0 + d, S.t1 + d);
  }

  function scrollBy(dy) {
    S.scrollY = Math.max(0, Math.min(Math.max(0, S.totalH - (S.height - RULER_H) + 20), S.scrollY + dy));
    invalidate();
    scheduleFetch();
  }

  function resetView() {
    const pad = S.end * 0.02 + 1;
    setView(-pad, S.end + pad);
  }

  function zoomToSelection() {
    if (S.selRange) {
      const [a, b] = S.selRange;
      S.selRange = null;
      setView(Math.min(a, b), Math.max(a, b));
    } else if (S.selected && S.selected.summary) {
      const e = S.selected.summary;
      const pad = Math.max(e.dur * 0.15, 50);
      setView(e.ts - pad, e.ts + e.dur + pad);
    }
  }

  function ensureVisible(e) {
    const L = S.layout[e.track];
    if (!L) return;
    const y = L.y + (L.t.type === "counter" ? 0 : e.depth * ROW_H);
    const viewH = S.height - RULER_H;
    if (y < S.scrollY || y + ROW_H > S.scrollY + viewH) {
      S.scrollY = Math.max(0, y - viewH / 3);
    }
  }

  function jumpTo(e) {
    if (!e || e.track === null || e.track === undefined) return Promise.resolve();
    const span = Math.max(e.dur * 3, 2000);
    ensureVisible(e);
    setView(e.ts + e.dur / 2 - span / 2, e.ts + e.dur / 2 + span / 2);
    return select(e.id);
  }

  function screenPos(id) {
    const e = (S.selected && S.selected.summary && S.selected.summary.id === id) ? S.selected.summary : null;
    const cand = e || findLoaded(id);
    if (!cand) return null;
    const r = rectOf(cand);
    if (!r) return null;
    const rc = canvas.getBoundingClientRect();
    const x1 = Math.max(r.x, LABEL_W), x2 = Math.min(r.x + Math.max(r.w, 1), S.width);
    if (x2 < x1) return null;
    return { x: rc.left + (x1 + x2) / 2, y: rc.top + r.y + r.h / 2 };
  }

  function findLoaded(id) {
    for (const [tid, c] of S.data) {
      const d = c.d;
      if (d.type !== "slice") continue;
      for (let i = 0; i < d.id.length; i++) {
        if (d.id[i] === id && d.count[i] === 1) return { id, track: tid, depth: d.depth[i], ts: d.ts[i], dur: d.dur[i] };
      }
    }
    return null;
  }

  // Hit testing --------------------------------------------------------------------------------
  function hit(x, y) {
    if (x < LABEL_W || y < RULER_H) return null;
    for (const L of visibleTracks()) {
      const top = RULER_H + L.y - S.scrollY;
      if (y < top || y > top + L.h || L.t.type !== "slice") continue;
      const depth = Math.floor((y - top - 2) / ROW_H);
      const c = S.data.get(L.t.id);
      if (!c) return null;
      const d = c.d, t = tOf(x), tol = 2 * (S.t1 - S.t0) / plotW();
      let best = -1;
      for (let i = 0; i < d.ts.length; i++) {
        if (d.depth[i] !== depth) continue;
        if (d.ts[i] - tol <= t && t <= d.ts[i] + d.dur[i] + tol) {
          if (best < 0 || (d.ts[i] <= t && t <= d.ts[i] + d.dur[i])) best = i;
          if (d.ts[i] <= t && t <= d.ts[i] + d.dur[i]) break;
        }
      }
      if (best < 0) return null;
      return { id: d.id[best], track: L.t.id, depth, ts: d.ts[best], dur: d.dur[best], count: d.count[best], name: d.names[d.name[best]] };
    }
    return null;
  }

  // Selection and details ----------------------------------------------------------------------
  function select(id) {
    return api(`/api/event/${id}`).then((ev) => {
      S.selected = { id, ev, summary: { id, track: ev.track, depth: ev.depth, ts: ev.ts, dur: ev.dur } };
      renderDetails(ev);
      invalidate();
      if ($("showflows").checked) return loadFlows(id);
      S.flows = [];
      return null;
    });
  }

  function loadFlows(id) {
    return api(`/api/flows/${id}`).then((r) => {
      S.flows = r.flows;
      renderFlowList(r.flows);
      invalidate();
    });
  }

  function link(summary, text) {
    const a = el("a", text || summary.name, "jump");
    a.dataset.id = String(summary.id);
    a.addEventListener("click", () => jumpTo(summary));
    return a;
  }

  function renderDetails(ev) {
    const box = $("details");
    box.replaceChildren();
    box.appendChild(el("div", ev.name, "name"));
    const dl = el("dl");
    const add = (k, v) => {
      if (v === null || v === undefined || v === "") return;
      dl.appendChild(el("dt", k));
      dl.appendChild(el("dd", typeof v === "object" ? JSON.stringify(v) : v));
    };
    add("kind", ev.kind);
    add("duration", fmtDur(ev.dur));
    add("start", fmtDur(ev.ts));
    add("step", ev.step);
    add("module", ev.module);
    add("shapes", ev.input_dims);
    add("dtypes", ev.input_types);
    add("strides", ev.input_strides);
    add("concrete", ev.concrete_inputs);
    for (const k of ["rank", "pid", "tid", "device", "stream", "flops", "bytes", "grid", "block", "registers", "shared_mem", "occupancy", "correlation", "external_id", "seq", "is_backward"]) add(k, ev[k]);
    if (ev.args && typeof ev.args === "object") for (const k of Object.keys(ev.args)) add(k, ev.args[k]);
    box.appendChild(dl);
    if (ev.source) {
      box.appendChild(el("h3", "Source line"));
      box.appendChild(el("div", `${ev.source.file}:${ev.source.line} (${ev.source.function})`, "src"));
    }
    if (ev.stack && ev.stack.length) {
      box.appendChild(el("h3", "Python call stack"));
      const ol = el("ol", null, "stack");
      for (const f of ev.stack) ol.appendChild(el("li", `${f.file}:${f.line} ${f.function}`, f.is_user ? "user" : ""));
      box.appendChild(ol);
    }
    const group = (title, list) => {
      if (!list || !list.length) return;
      box.appendChild(el("h3", title));
      const ul = el("ul");
      for (const s of list) { const li = el("li"); li.appendChild(link(s)); li.appendChild(el("span", " " + fmtDur(s.dur))); ul.appendChild(li); }
      box.appendChild(ul);
    };
    group("Kernels", ev.kernels);
    group("Launches", ev.launches);
    group("Launched by", ev.launch ? [ev.launch] : []);
    group("Issued by operator", ev.op ? [ev.op] : []);
    group("Forward partner", ev.forward ? [ev.forward] : []);
    group("Backward partners", ev.backward);
    group("Enclosing slices", ev.ancestors);
    const fl = el("div");
    fl.id = "flowlist";
    box.appendChild(fl);
  }

  function renderFlowList(flows) {
    const fl = $("flowlist");
    if (!fl) return;
    fl.replaceChildren();
    if (!flows.length) return;
    fl.appendChild(el("h3", "Flows"));
    const ul = el("ul");
    for (const f of flows) {
      const li = el("li");
      li.appendChild(el("span", f.kind + ": "));
      li.appendChild(link(f.src));
      li.appendChild(el("span", " → "));
      li.appendChild(link(f.dst));
      ul.appendChild(li);
    }
    fl.appendChild(ul);
  }

  // Search -------------------------------------------------------------------------------------
  let searchTimer = 0, searchSeq = 0;
  function runSearch() {
    const q = $("search").value;
    const seq = ++searchSeq;
    if (!q) { S.matches = []; S.cur = -1; renderMatches(0); return Promise.resolve(); }
    const t0 = performance.now();
    const url = `/api/search?q=${encodeURIComponent(q)}&case=${$("case").checked ? 1 : 0}&word=${$("word").checked ? 1 : 0}`;
    return api(url).then((r) => {
      if (seq !== searchSeq) return;
      S.matches = r.matches;
      S.cur = -1;
      renderMatches(r.total);
      stats.lastSearchMs = performance.now() - t0;
      stats.lastSearchServerMs = r.server_ms;
    });
  }

  function renderMatches(total) {
    const ol = $("matches");
    ol.replaceChildren();
    S.matches.forEach((m, i) => {
      const li = el("li");
      li.appendChild(link(m, m.name));
      li.appendChild(el("span", " @" + fmtDur(m.ts) + " (" + fmtDur(m.dur) + ")"));
      li.querySelector("a").addEventListener("click", () => { S.cur = i; markCur(); });
      ol.appendChild(li);
    });
    $("mcount").textContent = total > S.matches.length ? `(${S.matches.length} of ${total})` : `(${total})`;
    markCur();
  }

  function markCur() {
    const lis = $("matches").children;
    for (let i = 0; i < lis.length; i++) lis[i].className = i === S.cur ? "cur" : "";
    $("count").textContent = S.matches.length ? `${S.cur + 1} / ${S.matches.length}` : ($("search").value ? "no match" : "");
  }

  function step(dir) {
    if (!S.matches.length) return Promise.resolve();
    S.cur = (S.cur + dir + S.matches.length) % S.matches.length;
    markCur();
    const li = $("matches").children[S.cur];
    if (li) li.scrollIntoView({ block: "nearest" });
    return jumpTo(S.matches[S.cur]);
  }

  // Overlays -----------------------------------------------------------------------------------
  function loadOverlays() {
    return api("/api/overlays").then((r) => {
      S.overlays = r.overlays;
      const ol = $("overlays");
      ol.replaceChildren();
      for (const o of r.overlays) {
        const li = el("li");
        li.appendChild(el("span", o.kind + ": "));
        if (o.event) li.appendChild(link(o.event, o.label || o.event.name));
        else li.appendChild(el("span", o.label || ""));
        ol.appendChild(li);
      }
      $("ocount").textContent = `(${r.overlays.length})`;
      invalidate();
    }).catch((e) => { $("ocount").textContent = "(unavailable)"; console.error(e); });
  }

  // Input --------------------------------------------------------------------------------------
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    drag = { x0: x, y0: y, x, y, t0: S.t0, t1: S.t1, sy: S.scrollY, range: e.shiftKey, moved: false };
    if (drag.range) S.selRange = [tOf(x), tOf(x)];
    canvas.style.cursor = drag.range ? "col-resize" : "grabbing";
  });
  window.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    if (drag) {
      if (Math.abs(x - drag.x0) + Math.abs(y - drag.y0) > 3) drag.moved = true;
      if (drag.range) { S.selRange[1] = tOf(x); invalidate(); return; }
      const dt = (x - drag.x0) * (drag.t1 - drag.t0) / plotW();
      S.scrollY = Math.max(0, drag.sy - (y - drag.y0));
      setView(drag.t0 - dt, drag.t1 - dt);
      return;
    }
    if (e.target !== canvas) return;
    const h = hit(x, y);
    if (h) {
      tip.hidden = false;
      tip.textContent = (h.count > 1 ? `${h.count} slices, longest: ` : "") + h.name + "\n" + fmtDur(h.dur);
      tip.style.left = Math.min(x + 12, S.width - 200) + "px";
      tip.style.top = (y + 14) + "px";
    } else tip.hidden = true;
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    canvas.style.cursor = "grab";
    if (d.range) { if (!d.moved) S.selRange = null; invalidate(); return; }
    if (!d.moved) {
      const h = hit(d.x0, d.y0);
      if (h) select(h.id);
    }
  });
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    if (e.shiftKey) { scrollBy(e.deltaY || e.deltaX); return; }
    const f = Math.pow(1.0015, e.deltaY);
    zoomAt(f, e.clientX - r.left);
  }, { passive: false });

  window.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === "f") { e.preventDefault(); $("search").focus(); $("search").select(); return; }
    if (e.target === $("search")) {
      if (e.key === "Enter") { e.preventDefault(); clearTimeout(searchTimer); (S.matches.length ? Promise.resolve() : runSearch()).then(() => step(e.shiftKey ? -1 : 1)); }
      if (e.key === "Escape") $("search").blur();
      return;
    }
    if (e.target instanceof HTMLInputElement) return;
    const k = e.key.toLowerCase();
    if (k === "w") zoomAt(0.8);
    else if (k === "s") zoomAt(1.25);
    else if (k === "a") pan(-0.2);
    else if (k === "d") pan(0.2);
    else if (k === "z" || k === "f") zoomToSelection();
    else if (k === "0") resetView();
    else if (k === "escape") { S.selRange = null; invalidate(); }
    else return;
    e.preventDefault();
  });

  $("search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 150); });
  $("case").addEventListener("change", runSearch);
  $("word").addEventListener("change", runSearch);
  $("next").addEventListener("click", () => step(1));
  $("prev").addEventListener("click", () => step(-1));
  $("zoomsel").addEventListener("click", zoomToSelection);
  $("reset").addEventListener("click", resetView);
  $("showflows").addEventListener("change", () => {
    if ($("showflows").checked && S.selected) loadFlows(S.selected.id); else { S.flows = []; invalidate(); }
  });
  $("showov").addEventListener("change", invalidate);
  window.addEventListener("resize", resize);

  api("/api/tracks").then((r) => {
    S.tracks = r.tracks;
    S.end = Math.max(1, r.end_ns);
    S.origin = r.origin_ns;
    $("source").textContent = (r.sources && r.sources[0]) || "";
    $("source").title = (r.sources || []).join("\n");
    layout();
    const pad = S.end * 0.02 + 1;
    S.t0 = -pad; S.t1 = S.end + pad;
    resize();
    stats.ready = true;
    loadOverlays();
  }).catch((e) => { $("details").textContent = "could not load the profile: " + e.message; });
})();
