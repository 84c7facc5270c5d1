// opscope timeline viewer: draws the server's per-pixel-aggregated slices on one canvas.
// Every string from the trace reaches the DOM through textContent, never innerHTML.
"use strict";
(function () {
  const LABEL_W = 200, RULER_H = 26, ROW_H = 18, TRACK_PAD = 6, COUNTER_H = 42, GROUP_H = 20;
  const PAGE = 1000;  // search matches per page (the server's cap)
  const STACK_SHOWN = 3;  // call-stack frames listed before 'show all'
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#8cd17d", "#a0cbe8"];
  const FINDING_COLORS = ["#d7191c", "#7b3294", "#e7298a", "#b35806", "#1b7837", "#2166ac"];
  const ANOMALY_COLOR = "#ff1744", BAND_COLOR = "#ff8c00";
  const canvas = document.getElementById("tl");
  const ctx = canvas.getContext("2d");
  const tip = document.getElementById("tip");
  const $ = (id) => document.getElementById(id);

  const S = {
    tracks: [], groups: [], layout: [], byTrack: new Map(), totalH: 0,
    t0: 0, t1: 1, end: 1, scrollY: 0,
    collapsed: new Set(),     // group names folded to their header
    unfolded: new Set(),      // track ids whose Python stacks are shown in full
    data: new Map(),          // track id -> {start, end, nsPerPx, folded, d: response}
    fetchTimer: 0, selected: null, selRange: null, range: null, flows: [],
    matches: [], total: 0, pageOff: 0, cur: -1,
    overlays: [], bands: [], layers: [], layerOn: new Map(), origin: 0, originText: "0", sources: [],
    mouse: null, width: 800, height: 600, dpr: 1,
  };
  const stats = { frames: [], firstPaintMs: null, fetches: 0, lastSearchMs: null, ready: false, linkApplied: null,
    ticks: [], labels: [], outlines: 0, bandRects: 0 };

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

  // A ruler label: the unit from the size of the times on the ruler (one unit for all its ticks),
  // the decimals from the tick step, so that two ticks never print the same text however far in
  // one zooms.
  function fmtTick(t, step, scale) {
    const a = Math.max(scale, step);
    let unit = 1, suf = " ns";
    if (a >= 1e9) { unit = 1e9; suf = " s"; } else if (a >= 1e6) { unit = 1e6; suf = " ms"; } else if (a >= 1e3) { unit = 1e3; suf = " µs"; }
    const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / unit) - 1e-9)));
    const s = (t / unit).toFixed(dec);
    return (/^-0(\.0*)?$/.test(s) ? s.slice(1) : s) + suf;
  }

  function color(name) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    return PALETTE[Math.abs(h) % PALETTE.length];
  }

  const isTyping = (t) => t instanceof HTMLTextAreaElement ||
    (t instanceof HTMLInputElement && !["checkbox", "radio", "button", "submit", "reset"].includes(t.type));

  // Layout -------------------------------------------------------------------------------------
  const isFolded = (t) => t.folded_depth !== null && t.folded_depth !== undefined && !S.unfolded.has(t.id);
  const shownDepth = (t) => (isFolded(t) ? t.folded_depth : t.max_depth);
  const trackH = (t) => (t.type === "counter" ? COUNTER_H : (shownDepth(t) + 1) * ROW_H + TRACK_PAD);

  // Groups in the order a reader follows the work: each host process, then the device streams
  // its threads launch into (by the thread launching most of each stream's work), then counters.
  function buildGroups() {
    const byName = new Map(), byId = new Map(S.tracks.map((t) => [t.id, t]));
    for (const t of S.tracks) {
      let g = byName.get(t.group);
      if (!g) {
        g = { name: t.group, rank: t.rank, tracks: [], kind: t.type === "counter" ? "counter" : (t.is_device ? "device" : "host") };
        byName.set(t.group, g);
      }
      g.tracks.push(t);
    }
    const all = [...byName.values()];
    const host = all.filter((g) => g.kind === "host"), dev = all.filter((g) => g.kind === "device");
    const big = 1e12;
    for (const g of dev) {
      g.tracks.sort((a, b) => ((a.launched_by ?? big) - (b.launched_by ?? big)) || a.id - b.id);
      const first = g.tracks.find((t) => t.launched_by !== null && t.launched_by !== undefined);
      g.anchor = first ? byId.get(first.launched_by).group : null;
    }
    const ranks = [...new Set(all.map((g) => g.rank))].sort((a, b) => a - b);
    const out = [], placed = new Set();
    for (const r of ranks) {
      for (const h of host.filter((g) => g.rank === r)) {
        out.push(h);
        for (const d of dev) if (d.anchor === h.name && !placed.has(d)) { out.push(d); placed.add(d); }
      }
      for (const d of dev) if (d.rank === r && !placed.has(d)) { out.push(d); placed.add(d); }
      for (const c of all) if (c.kind === "counter" && c.rank === r) out.push(c);
    }
    S.groups = out;
  }

  function layout() {
    let y = 0;
    S.layout = [];
    S.byTrack = new Map();
    for (const g of S.groups) {
      const H = { kind: "group", g, y, h: GROUP_H };
      S.layout.push(H);
      g.y0 = y;
      y += GROUP_H;
      if (!S.collapsed.has(g.name)) {
        for (const t of g.tracks) {
          const L = { kind: "track", t, g, y, h: trackH(t) };
          S.layout.push(L);
          S.byTrack.set(t.id, L);
          y += L.h + 1;
        }
      }
      g.y1 = y;
    }
    S.totalH = y;
    S.scrollY = Math.max(0, Math.min(S.scrollY, maxScroll()));
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
  const rowTop = (L) => RULER_H + L.y - S.scrollY;
  const maxScroll = () => Math.max(0, S.totalH - (S.height - RULER_H) + 20);

  function visibleRows() {
    const out = [];
    for (const L of S.layout) {
      const top = rowTop(L);
      if (top + L.h >= RULER_H && top <= S.height) out.push(L);
    }
    return out;
  }
  const visibleTracks = () => visibleRows().filter((L) => L.kind === "track");

  // Fetching -----------------------------------------------------------------------------------
  function scheduleFetch(delay) {
    clearTimeout(S.fetchTimer);
    S.fetchTimer = setTimeout(fetchVisible, delay === undefined ? 60 : delay);
  }

  function fetchVisible() {
    const span = S.t1 - S.t0;
    const curNsPerPx = span / plotW();
    const need = { 0: [], 1: [] };
    for (const L of visibleTracks()) {
      const c = S.data.get(L.t.id), fold = isFolded(L.t);
      // Nothing starts before 0: a window from 0 covers a view that begins left of it.
      const ok = c && c.folded === fold && c.start <= Math.max(0, S.t0) && c.end >= S.t1 && c.nsPerPx <= curNsPerPx * 1.5 && c.nsPerPx >= curNsPerPx / 4;
      if (!ok) need[fold ? 1 : 0].push(L.t.id);
    }
    // One view width of margin on each side, at three times the screen's resolution, so that
    // panning and a little zooming draw from what is already here.
    const start = Math.max(0, Math.floor(S.t0 - span));
    const end = Math.ceil(S.t1 + span);
    const px = Math.round(plotW() * 3);
    const nsPerPx = Math.max(1, Math.floor((end - start) / px));
    for (const fold of [0, 1]) {
      if (!need[fold].length) continue;
      stats.fetches++;
      api(`/api/slices?track=${need[fold].join(",")}&start_ns=${start}&end_ns=${end}&px=${px}&fold=${fold}`).then((r) => {
        for (const d of r.tracks) {
          if (d.type === "slice") d.colors = d.names.map(color);
          S.data.set(d.track, { start, end, nsPerPx: r.ns_per_px || nsPerPx, folded: fold === 1, d });
        }
        invalidate();
      }).catch((e) => console.error(e));
    }
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

  function clipToPlot() {
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, RULER_H, plotW(), S.height - RULER_H);
    ctx.clip();
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
    const rows = visibleRows();
    for (const L of rows) {
      if (L.kind !== "track") continue;
      const top = rowTop(L);
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, Math.max(top, RULER_H), pw, L.h);
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
      ctx.fillStyle = "#e1e5ec";
      ctx.fillRect(0, top + L.h, W, 1);
    }
    // Overlays, the range, the selected slice and flows: inside the plot only.
    clipToPlot();
    drawOverlays();
    if (S.selRange) {
      // While dragging, the whole column; once summarised, the tracks the summary covers.
      const a = xOf(S.selRange[0]), b = xOf(S.selRange[1]);
      ctx.fillStyle = "rgba(31,95,191,0.15)";
      if (S.range && !(drag && drag.range)) {
        for (const id of S.range.tracks) {
          const L = S.byTrack.get(id);
          if (L) ctx.fillRect(Math.min(a, b), rowTop(L), Math.abs(b - a), L.h);
        }
      } else ctx.fillRect(Math.min(a, b), RULER_H, Math.abs(b - a), H - RULER_H);
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
    ctx.restore();
    drawLabels(rows);
    drawRuler();
    if (S.mouse && !drag) updateTip();
    const dt = performance.now() - t0p;
    stats.frames.push(dt);
    if (stats.frames.length > 2000) stats.frames.splice(0, 1000);
    if (drawn > 0 && stats.firstPaintMs === null) stats.firstPaintMs = performance.now();
    stats.lastDrawn = drawn;
  }

  function groupTitle(g) {
    return (S.collapsed.has(g.name) ? "▸ " : "▾ ") + g.name + "  (" + g.tracks.length + ")";
  }

  function drawHeader(g, top) {
    ctx.fillStyle = "#e4e8f0";
    ctx.fillRect(0, top, S.width, GROUP_H);
    ctx.fillStyle = "#c9d0dc";
    ctx.fillRect(0, top + GROUP_H - 1, S.width, 1);
    ctx.fillStyle = "#1d2330";
    ctx.font = "600 11px system-ui, sans-serif";
    ctx.fillText(groupTitle(g), 6, top + GROUP_H / 2);
    ctx.font = "11px system-ui, sans-serif";
  }

  // Track names stay in view: the label column never pans, a tall track's name follows the top of
  // its visible part, and the header of the group being read is pinned under the ruler.
  function drawLabels(rows) {
    stats.labels = [];
    const stickyTop = RULER_H + GROUP_H;
    for (const L of rows) {
      const top = rowTop(L);
      if (L.kind === "group") { drawHeader(L.g, top); continue; }
      ctx.fillStyle = "#f6f7fa";
      ctx.fillRect(0, top, LABEL_W, L.h);
      const y = Math.max(top + 12, Math.min(stickyTop + 10, top + L.h - 8));
      const name = L.t.name.slice(0, 30);
      ctx.fillStyle = "#1d2330";
      ctx.fillText(name, 14, y);
      stats.labels.push({ track: L.t.id, y, top, text: name });
      let sub = null;
      if (L.t.folded_depth !== null && L.t.folded_depth !== undefined) {
        sub = isFolded(L.t) ? `▸ Python stack (${L.t.max_depth + 1} levels)` : "▾ fold Python stack";
      } else if (L.t.launched_by !== null && L.t.launched_by !== undefined) {
        const lt = S.tracks.find((t) => t.id === L.t.launched_by);
        if (lt) sub = "← " + lt.name.slice(0, 26);
      }
      if (sub && y + 14 <= top + L.h - 2) {
        ctx.fillStyle = "#667";
        ctx.fillText(sub, 14, y + 14);
      }
      ctx.fillStyle = "#e1e5ec";
      ctx.fillRect(0, top + L.h, LABEL_W, 1);
    }
    const g = stickyGroup();
    if (g) {
      // Pushed up by the next group's header as it arrives.
      const next = RULER_H + g.y1 - S.scrollY;
      drawHeader(g, Math.min(RULER_H, next - GROUP_H));
    }
  }

  function stickyGroup() {
    for (const g of S.groups) {
      const top = RULER_H + g.y0 - S.scrollY, bottom = RULER_H + g.y1 - S.scrollY;
      if (top < RULER_H && bottom > RULER_H) return g;
    }
    return null;
  }

  function layerColor(key) {
    const L = S.layers.find((l) => l.key === key);
    return L ? L.color : ANOMALY_COLOR;
  }

  function drawOverlays() {
    stats.outlines = 0;
    stats.bandRects = 0;
    if (!$("showov").checked) return;
    if (S.layerOn.get("critical_path") !== false) {
      ctx.fillStyle = BAND_COLOR;
      const scale = plotW() / (S.t1 - S.t0);
      for (const b of S.bands) {
        const L = S.byTrack.get(b.track);
        if (!L) continue;
        const top = rowTop(L);
        if (top + L.h < RULER_H || top > S.height) continue;
        const y = top + L.h - 4;
        let px1 = -1, px2 = -1;
        for (let i = 0; i < b.ts.length; i++) {
          const x1 = LABEL_W + (b.ts[i] - S.t0) * scale, x2 = LABEL_W + (b.end[i] - S.t0) * scale;
          if (x2 < LABEL_W || x1 > S.width) continue;
          if (px2 >= 0 && x1 - px2 < 1) { px2 = Math.max(px2, x2); continue; }  // merge within a pixel
          if (px2 >= 0) { ctx.fillRect(px1, y, Math.max(1, px2 - px1), 3); stats.bandRects++; }
          px1 = x1; px2 = x2;
        }
        if (px2 >= 0) { ctx.fillRect(px1, y, Math.max(1, px2 - px1), 3); stats.bandRects++; }
      }
    }
    ctx.lineWidth = 2;
    for (const o of S.overlays) {
      const e = o.event;
      if (!e || e.track === null || S.layerOn.get(o.layer) === false) continue;
      const r = rectOf(e);
      if (!r || r.x > S.width || r.x + r.w < LABEL_W) continue;
      ctx.strokeStyle = layerColor(o.layer);
      ctx.strokeRect(r.x, r.y, Math.max(2, r.w), r.h);
      stats.outlines++;
    }
    ctx.lineWidth = 1;
  }

  function depthOf(e, L) {
    if (L.t.type === "counter") return 0;
    if (isFolded(L.t)) return e.fdepth === undefined ? e.depth : e.fdepth;
    return e.depth;
  }

  function rectOf(e) {
    const L = S.byTrack.get(e.track);
    if (!L) return null;
    const depth = depthOf(e, L);
    if (depth < 0) return null;  // a Python frame folded away
    const top = rowTop(L);
    const x = xOf(e.ts), w = e.dur * plotW() / (S.t1 - S.t0);
    const y = L.t.type === "counter" ? top : top + 2 + depth * ROW_H;
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
    stats.ticks = [];
    for (let i = 0; first + i * step <= S.t1; i++) {
      const t = first + i * step;
      const x = Math.round(xOf(t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, RULER_H - 8);
      ctx.lineTo(x, RULER_H);
      ctx.stroke();
      const label = fmtTick(t, step, Math.max(Math.abs(S.t0), Math.abs(S.t1)));
      ctx.fillText(label, x + 3, 10);
      stats.ticks.push(label);
    }
    ctx.fillStyle = "#eef1f6";
    ctx.fillRect(0, 0, LABEL_W, RULER_H);
    ctx.fillStyle = "#334";
    ctx.fillText("span " + fmtDur(span), 6, 13);
  }

  // Tooltip ------------------------------------------------------------------------------------
  // Recomputed after every frame from where the mouse is, so that a jump, a zoom or new data
  // never leaves it describing a slice that is no longer under the cursor.
  function updateTip() {
    const m = S.mouse;
    const h = m ? hit(m.x, m.y) : null;
    if (!h) { tip.hidden = true; return; }
    const text = (h.count > 1 ? `${h.count} slices, longest: ` : "") + h.name + "\n" + fmtDur(h.dur);
    if (tip.hidden || tip.textContent !== text) tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(m.x + 12, S.width - 200) + "px";
    tip.style.top = (m.y + 14) + "px";
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
    S.scrollY = Math.max(0, Math.min(maxScroll(), S.scrollY + dy));
    invalidate();
    scheduleFetch();
  }

  function resetView() {
    const pad = S.end * 0.02 + 1;
    S.scrollY = 0;
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

  function relayout() {
    layout();
    invalidate();
    scheduleFetch(0);
  }

  function ensureVisible(e) {
    const t = S.tracks.find((x) => x.id === e.track);
    if (!t) return;
    let changed = false;
    if (S.collapsed.has(t.group)) { S.collapsed.delete(t.group); changed = true; }
    if (isFolded(t) && e.fdepth !== undefined && e.fdepth < 0) { S.unfolded.add(t.id); changed = true; }
    if (changed) layout();
    const L = S.byTrack.get(e.track);
    if (!L) return;
    const y = L.y + (L.t.type === "counter" ? 0 : Math.max(0, depthOf(e, L)) * ROW_H);
    const viewH = S.height - RULER_H - GROUP_H;
    if (y < S.scrollY + GROUP_H || y + ROW_H > S.scrollY + GROUP_H + viewH) {
      S.scrollY = Math.max(0, Math.min(maxScroll(), y - viewH / 3));
    }
  }

  function jumpTo(e) {
    if (!e || e.track === null || e.track === undefined) return Promise.resolve();
    const span = Math.max(e.dur * 3, 2000);
    ensureVisible(e);
    setView(e.ts + e.dur / 2 - span / 2, e.ts + e.dur / 2 + span / 2);
    return select(e.id);
  }

  // "]": the far end of an arrow leaving the selected slice; "[": the near end of one arriving.
  function otherEnd(dir) {
    if (!S.selected) return Promise.resolve();
    const id = S.selected.id;
    const f = dir > 0 ? S.flows.find((x) => x.src.id === id) : S.flows.find((x) => x.dst.id === id);
    if (!f) return Promise.resolve();
    return jumpTo(dir > 0 ? f.dst : f.src);
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
        if (d.id[i] === id && d.count[i] === 1) {
          return { id, track: tid, depth: d.depth[i], fdepth: d.depth[i], ts: d.ts[i], dur: d.dur[i] };
        }
      }
    }
    return null;
  }

  // Hit testing --------------------------------------------------------------------------------
  function hit(x, y) {
    if (x < LABEL_W || y < RULER_H) return null;
    const g = stickyGroup();
    if (g && y < RULER_H + GROUP_H) return null;
    for (const L of visibleTracks()) {
      const top = rowTop(L);
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

  // A click on a group header folds the group; on a track's name, its Python stack.
  function clickLabel(x, y) {
    const g = stickyGroup();
    if (g && y >= RULER_H && y < RULER_H + GROUP_H) { toggleGroup(g); return true; }
    for (const L of visibleRows()) {
      const top = rowTop(L);
      if (y < top || y > top + L.h) continue;
      if (L.kind === "group") { toggleGroup(L.g); return true; }
      if (x < LABEL_W && L.t.folded_depth !== null && L.t.folded_depth !== undefined) {
        if (S.unfolded.has(L.t.id)) S.unfolded.delete(L.t.id); else S.unfolded.add(L.t.id);
        relayout();
        return true;
      }
      return false;
    }
    return false;
  }

  function toggleGroup(g) {
    if (S.collapsed.has(g.name)) S.collapsed.delete(g.name); else S.collapsed.add(g.name);
    relayout();
  }

  // Selection and details ----------------------------------------------------------------------
  function select(id) {
    return api(`/api/event/${id}`).then((ev) => {
      S.selected = { id, ev, summary: { id, track: ev.track, depth: ev.depth, fdepth: ev.fdepth, ts: ev.ts, dur: ev.dur } };
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
      if (ev.source_code) box.appendChild(sourceTable(ev.source_code));
    }
    if (ev.stack && ev.stack.length) {
      // Folded: the innermost frames and the source line's frame; the rest behind a button.
      box.appendChild(el("h3", "Python call stack"));
      const ol = el("ol", null, "stack");
      const userAt = ev.stack.findIndex((f) => f.is_user);
      let hidden = 0;
      ev.stack.forEach((f, i) => {
        const li = el("li", `${f.file}:${f.line} ${f.function}`, f.is_user ? "user" : "");
        li.value = i + 1;
        if (i >= STACK_SHOWN && i !== userAt) { li.hidden = true; hidden++; }
        ol.appendChild(li);
      });
      box.appendChild(ol);
      if (hidden) {
        const b = el("button", `show all ${ev.stack.length} frames`, "unfold");
        b.addEventListener("click", () => { for (const li of ol.children) li.hidden = false; b.remove(); });
        box.appendChild(b);
      }
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

  // The captured code around the source line, with each line's forward/backward time.
  function sourceTable(sc) {
    const tbl = el("table", null, "code");
    const head = el("tr");
    for (const h of ["", "code", "fwd", "bwd"]) head.appendChild(el("th", h));
    tbl.appendChild(head);
    for (const r of sc.lines) {
      const tr = el("tr", null, r.line === sc.line ? "here" : "");
      tr.appendChild(el("td", r.line, "ln"));
      tr.appendChild(el("td", r.text, "txt"));
      tr.appendChild(el("td", r.fwd_us ? fmtDur(r.fwd_us * 1e3) : "", "t"));
      tr.appendChild(el("td", r.bwd_us ? fmtDur(r.bwd_us * 1e3) : "", "t"));
      tbl.appendChild(tr);
    }
    return tbl;
  }

  function renderFlowList(flows) {
    const fl = $("flowlist");
    if (!fl) return;
    fl.replaceChildren();
    if (!flows.length) return;
    fl.appendChild(el("h3", "Flows ([ / ]: other end)"));
    const ul = el("ul");
    const id = S.selected ? S.selected.id : null;
    for (const f of flows) {
      const li = el("li");
      li.appendChild(el("span", f.kind + ": "));
      li.appendChild(link(f.src));
      li.appendChild(el("span", " → "));
      li.appendChild(link(f.dst));
      const far = f.src.id === id ? f.dst : f.src;
      li.appendChild(el("span", " "));
      const b = el("button", "⇄ other end", "other");
      b.title = "Jump to the other end of this flow";
      b.addEventListener("click", () => { b.blur(); jumpTo(far); });
      li.appendChild(b);
      ul.appendChild(li);
    }
    fl.appendChild(ul);
  }

  // Range summary ------------------------------------------------------------------------------
  function summariseRange(a, b, y0, y1) {
    const lo = Math.min(y0, y1), hi = Math.max(y0, y1);
    let ids = visibleTracks().filter((L) => {
      const top = rowTop(L);
      return L.t.type === "slice" && top <= hi && top + L.h >= lo;
    }).map((L) => L.t.id);
    if (!ids.length) ids = visibleTracks().filter((L) => L.t.type === "slice").map((L) => L.t.id);
    const start = Math.max(0, Math.round(Math.min(a, b))), end = Math.round(Math.max(a, b));
    S.range = { start, end, tracks: ids, result: null };
    return api(`/api/range?start_ns=${start}&end_ns=${end}&track=${ids.join(",")}&top=10`).then((r) => {
      if (!S.range || S.range.start !== start || S.range.end !== end) return;
      S.range.result = r;
      renderRange(r);
    });
  }

  function renderRange(r) {
    const box = $("range");
    $("rangebox").hidden = false;
    box.replaceChildren();
    box.appendChild(el("div", `${fmtDur(r.end_ns - r.start_ns)} on ${r.tracks} track${r.tracks === 1 ? "" : "s"}: ` +
      `${r.slices} slices, ${r.ops} ops, ${r.kernels} kernels (${fmtDur(r.kernel_ns)} of kernel time)`, "figs"));
    const table = (head, rows) => {
      const t = el("table"), tr = el("tr");
      for (const h of head) tr.appendChild(el("th", h));
      t.appendChild(tr);
      for (const row of rows) {
        const x = el("tr");
        row.forEach((v, i) => x.appendChild(el("td", v, i > 0 && i >= row.length - 2 ? "n" : "")));
        t.appendChild(x);
      }
      box.appendChild(t);
    };
    table(["kind", "count", "time in range"], r.by_kind.map((k) => [k.kind, k.count, fmtDur(k.total_ns)]));
    table(["name", "count", "time in range"], r.top.map((k) => [k.name, k.count, fmtDur(k.total_ns)]));
  }

  // Search -------------------------------------------------------------------------------------
  let searchTimer = 0, searchSeq = 0;
  function searchUrl(offset) {
    const q = $("search").value;
    return `/api/search?q=${encodeURIComponent(q)}&case=${$("case").checked ? 1 : 0}&word=${$("word").checked ? 1 : 0}&limit=${PAGE}&offset=${offset}`;
  }

  function runSearch() {
    const q = $("search").value;
    const seq = ++searchSeq;
    if (!q) { S.matches = []; S.total = 0; S.pageOff = 0; S.cur = -1; renderMatches(); return Promise.resolve(); }
    const t0 = performance.now();
    return api(searchUrl(0)).then((r) => {
      if (seq !== searchSeq) return;
      S.matches = r.matches;
      S.total = r.total;
      S.pageOff = 0;
      S.cur = -1;
      renderMatches();
      stats.lastSearchMs = performance.now() - t0;
      stats.lastSearchServerMs = r.server_ms;
    });
  }

  function loadPage(offset) {
    const seq = searchSeq;
    return api(searchUrl(offset)).then((r) => {
      if (seq !== searchSeq) return;
      S.matches = r.matches;
      S.total = r.total;
      S.pageOff = offset;
      renderMatches();
    });
  }

  function renderMatches() {
    const ol = $("matches");
    ol.replaceChildren();
    ol.start = S.pageOff + 1;
    S.matches.forEach((m, i) => {
      const li = el("li");
      li.appendChild(link(m, m.name));
      li.appendChild(el("span", " @" + fmtDur(m.ts) + " (" + fmtDur(m.dur) + ")"));
      li.querySelector("a").addEventListener("click", () => { S.cur = S.pageOff + i; markCur(); });
      ol.appendChild(li);
    });
    const n = S.matches.length;
    $("mcount").textContent = S.total > n ? `(${S.pageOff + 1}–${S.pageOff + n} of ${S.total})` : `(${S.total})`;
    markCur();
  }

  function markCur() {
    const lis = $("matches").children;
    for (let i = 0; i < lis.length; i++) lis[i].className = S.pageOff + i === S.cur ? "cur" : "";
    $("count").textContent = S.total ? `${S.cur + 1} / ${S.total}` : ($("search").value ? "no match" : "");
  }

  function step(dir) {
    if (!S.total) return Promise.resolve();
    const idx = S.cur < 0 && dir < 0 ? S.total - 1 : (S.cur + dir + S.total) % S.total;
    const inPage = idx >= S.pageOff && idx < S.pageOff + S.matches.length;
    const ready = inPage ? Promise.resolve() : loadPage(Math.floor(idx / PAGE) * PAGE);
    return ready.then(() => {
      S.cur = idx;
      markCur();
      const li = $("matches").children[idx - S.pageOff];
      if (li) li.scrollIntoView({ block: "nearest" });
      return jumpTo(S.matches[idx - S.pageOff]);
    });
  }

  // Overlays -----------------------------------------------------------------------------------
  // One layer per finding rule (findings first, in the server's order), one for anomalies, and
  // the critical path; each can be switched off from its legend entry.
  function loadOverlays() {
    return api("/api/overlays").then((r) => {
      S.overlays = r.overlays;
      S.bands = r.bands || [];
      let fi = 0;
      S.layers = (r.layers || []).map((l) => ({ ...l,
        color: l.kind === "critical_path" ? BAND_COLOR : l.kind === "finding" ? FINDING_COLORS[fi++ % FINDING_COLORS.length] : ANOMALY_COLOR }));
      const box = $("layers");
      box.replaceChildren();
      for (const l of S.layers) {
        const div = el("div", null, "layer");
        div.dataset.key = l.key;
        const lab = el("label");
        const cb = el("input");
        cb.type = "checkbox";
        cb.checked = S.layerOn.get(l.key) !== false;
        cb.addEventListener("change", () => { S.layerOn.set(l.key, cb.checked); cb.blur(); invalidate(); });
        const sw = el("span", null, l.kind === "critical_path" ? "swatch band" : "swatch");
        if (l.kind === "critical_path") sw.style.background = l.color; else sw.style.borderColor = l.color;
        lab.appendChild(cb);
        lab.appendChild(sw);
        const what = l.kind === "finding" ? "finding: " : "";
        lab.appendChild(el("span", `${what}${l.title} (${l.count})`));
        div.appendChild(lab);
        const items = S.overlays.filter((o) => o.layer === l.key);
        if (items.length) {
          const det = el("details");
          det.appendChild(el("summary", items.length === 1 ? "1 item" : `${items.length} items`));
          const ol = el("ol");
          for (const o of items.slice(0, 200)) {
            const li = el("li");
            if (o.event) li.appendChild(link(o.event, o.label || o.event.name));
            else li.appendChild(el("span", o.label || ""));
            ol.appendChild(li);
          }
          det.appendChild(ol);
          div.appendChild(det);
        } else if (l.kind === "critical_path") {
          div.appendChild(el("div", `a band under ${S.bands.length} track${S.bands.length === 1 ? "" : "s"}`, "hint"));
        }
        box.appendChild(div);
      }
      for (const o of S.overlays) {
        if (o.layer || o.kind !== "error") continue;
        box.appendChild(el("div", o.label || "", "hint"));
      }
      $("ocount").textContent = `(${S.layers.reduce((n, l) => n + l.count, 0)})`;
      invalidate();
    }).catch((e) => { $("ocount").textContent = "(unavailable)"; console.error(e); });
  }

  // Links --------------------------------------------------------------------------------------
  // The address's fragment opens a slice: #sel=<event id>&t=<start_ns>,<end_ns>&src=<file name>
  // (opscope/report/viewer/links.py; the HTML report's findings link here). t is in the trace's
  // own clock, absolute: BigInt keeps its digits exact past 2**53 before the origin is taken off.
  function parseHash() {
    const h = new URLSearchParams(location.hash.replace(/^#/, ""));
    const out = {};
    const sel = h.get("sel");
    if (sel !== null && /^\d+$/.test(sel)) out.sel = Number(sel);
    const m = /^(-?\d+),(-?\d+)$/.exec(h.get("t") || "");
    if (m) out.t = [m[1], m[2]];
    if (h.get("src")) out.src = h.get("src");
    return out;
  }

  function showLinkNotes(notes) {
    const box = $("linknote");
    box.replaceChildren(...notes.map((n) => el("div", n)));
    box.hidden = notes.length === 0;
  }

  function applyHash() {
    const h = parseHash();
    const notes = [];
    // a report names its trace by file name, or by its run directory's name
    const names = S.sources.map((x) => x.split(/[\\/]/).pop());
    const parts = S.sources.flatMap((x) => x.split(/[\\/]/));
    if (h.src && !parts.includes(h.src)) {
      notes.push(`This link was made for ${h.src}; this viewer shows ${names.join(", ") || "another trace"}.`);
    }
    if (h.t) {
      const a = Number(BigInt(h.t[0]) - BigInt(S.originText));
      const b = Number(BigInt(h.t[1]) - BigInt(S.originText));
      if (b > a) setView(a, b);
    }
    const done = h.sel === undefined ? Promise.resolve() : api(`/api/event/${h.sel}`).then((ev) => {
      const e = { id: h.sel, track: ev.track, depth: ev.depth, fdepth: ev.fdepth, ts: ev.ts, dur: ev.dur };
      if (!h.t) return jumpTo(e);
      ensureVisible(e);
      return select(h.sel);
    }).catch(() => { notes.push(`Event ${h.sel} is not in this trace.`); });
    return done.then(() => { showLinkNotes(notes); stats.linkApplied = location.hash; });
  }
  window.addEventListener("hashchange", () => { applyHash(); });

  // Input --------------------------------------------------------------------------------------
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    drag = { x0: x, y0: y, x, y, t0: S.t0, t1: S.t1, sy: S.scrollY, range: e.shiftKey, moved: false };
    if (drag.range) { S.selRange = [tOf(x), tOf(x)]; S.range = null; }
    canvas.style.cursor = drag.range ? "col-resize" : "grabbing";
    tip.hidden = true;
  });
  window.addEventListener("mousemove", (e) => {
    const r = canvas.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    if (drag) {
      if (Math.abs(x - drag.x0) + Math.abs(y - drag.y0) > 3) drag.moved = true;
      drag.x = x; drag.y = y;
      if (drag.range) { S.selRange[1] = tOf(x); invalidate(); return; }
      const dt = (x - drag.x0) * (drag.t1 - drag.t0) / plotW();
      S.scrollY = Math.max(0, Math.min(maxScroll(), drag.sy - (y - drag.y0)));
      setView(drag.t0 - dt, drag.t1 - dt);
      return;
    }
    if (e.target !== canvas) { S.mouse = null; tip.hidden = true; return; }
    S.mouse = { x, y };
    updateTip();
  });
  canvas.addEventListener("mouseleave", () => { if (!drag) { S.mouse = null; tip.hidden = true; } });
  window.addEventListener("mouseup", () => {
    if (!drag) return;
    const d = drag;
    drag = null;
    canvas.style.cursor = "grab";
    if (d.range) {
      if (!d.moved) { S.selRange = null; S.range = null; $("rangebox").hidden = true; }
      else summariseRange(S.selRange[0], S.selRange[1], d.y0, d.y);
      invalidate();
      return;
    }
    if (!d.moved) {
      if (clickLabel(d.x0, d.y0)) return;
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
      if (e.key === "Enter") { e.preventDefault(); clearTimeout(searchTimer); (S.total || !$("search").value ? Promise.resolve() : runSearch()).then(() => step(e.shiftKey ? -1 : 1)); }
      if (e.key === "Escape") $("search").blur();
      return;
    }
    // Only fields one types into keep the keys: a clicked checkbox or button must not.
    if (isTyping(e.target) || e.ctrlKey || e.metaKey || e.altKey) return;
    const k = e.key.toLowerCase();
    if (k === "w") zoomAt(0.8);
    else if (k === "s") zoomAt(1.25);
    else if (k === "a") pan(-0.2);
    else if (k === "d") pan(0.2);
    else if (k === "z" || k === "f") zoomToSelection();
    else if (k === "0") resetView();
    else if (k === "]") otherEnd(1);
    else if (k === "[") otherEnd(-1);
    else if (k === "escape") { S.selRange = null; invalidate(); }
    else return;
    e.preventDefault();
  });

  // A checkbox or button keeps focus after a click; give it back to the page.
  const blurAfter = (id, fn) => $(id).addEventListener(id === "next" || id === "prev" || id === "zoomsel" || id === "reset" ? "click" : "change", (e) => { e.currentTarget.blur(); fn(); });
  $("search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 150); });
  blurAfter("case", runSearch);
  blurAfter("word", runSearch);
  blurAfter("next", () => step(1));
  blurAfter("prev", () => step(-1));
  blurAfter("zoomsel", zoomToSelection);
  blurAfter("reset", resetView);
  blurAfter("showflows", () => {
    if ($("showflows").checked && S.selected) loadFlows(S.selected.id); else { S.flows = []; invalidate(); }
  });
  blurAfter("showov", invalidate);
  window.addEventListener("resize", resize);
  window.__opscope = { S, stats, jumpTo, select, screenPos, hit, rowTop, otherEnd,
    setView, applyHash, draw: () => draw() };

  api("/api/tracks").then((r) => {
    S.tracks = r.tracks;
    S.end = Math.max(1, r.end_ns);
    S.origin = r.origin_ns;
    S.originText = r.origin_text;
    S.sources = r.sources || [];
    $("source").textContent = (r.sources && r.sources[0]) || "";
    $("source").title = (r.sources || []).join("\n");
    buildGroups();
    layout();
    const pad = S.end * 0.02 + 1;
    S.t0 = -pad; S.t1 = S.end + pad;
    resize();
    stats.ready = true;
    loadOverlays();
    if (location.hash.length > 1) applyHash();
  }).catch((e) => { $("details").textContent = "could not load the profile: " + e.message; });
})();
