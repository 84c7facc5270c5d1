// opscope HTML report: builds every section from the inlined JSON. Strings from the trace only
// ever reach the page through textContent / SVG text nodes, never innerHTML.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("opscope-data").textContent);
  const SVGNS = "http://www.w3.org/2000/svg";
  const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6"];
  const main = document.getElementById("main");
  const nav = document.getElementById("nav");
  const tip = document.getElementById("tip");

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") {
      if (!isFinite(v)) return "";
      if (Number.isInteger(v)) return v.toLocaleString("en-US");
      const a = Math.abs(v);
      return a >= 100 ? v.toFixed(1) : a >= 1 ? v.toFixed(3) : v.toPrecision(3);
    }
    if (Array.isArray(v)) return v.map((x) => (Array.isArray(x) ? "[" + fmt(x) + "]" : x && typeof x === "object" ? brief(x) : fmt(x))).join(", ");
    if (typeof v === "object") return brief(v);
    return String(v);
  }
  // An object in a cell: its name and first figure ("aten::mm 56%"), never a JSON dump.
  function brief(o) {
    const keys = Object.keys(o);
    const name = keys.find((k) => typeof o[k] === "string");
    const num = keys.find((k) => typeof o[k] === "number");
    if (name && num) return `${o[name]} (${num.endsWith("_us") ? fmtUs(o[num]) : fmt(o[num])})`;
    return keys.map((k) => `${k}=${typeof o[k] === "object" && o[k] !== null ? "…" : fmt(o[k])}`).join(", ");
  }
  function fmtBytes(b) {
    const a = Math.abs(b);
    for (const [u, n] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) if (a >= n) return (b / n).toPrecision(3) + " " + u;
    return b.toFixed(0) + " B";
  }
  // A cell in human units, by what its column name says it holds (the raw value stays in data-v).
  function fmtCol(c, v) {
    if (typeof v !== "number" || !isFinite(v)) return fmt(v);
    const n = c.toLowerCase();
    if (n.endsWith("_us")) return fmtUs(v);
    if (n.endsWith("_ns")) return fmtUs(v / 1000);
    if (n === "pct" || n.endsWith("_pct") || n === "pct_span" || n === "pct_of_peak") return fmtPct(v);
    if (n === "bytes" || n.endsWith("_bytes") || n.endsWith("allocated") || n.endsWith("reserved") || n === "fragmentation") return fmtBytes(v);
    if (n.endsWith("gbps")) return v.toPrecision(3) + " GB/s";
    if (n.endsWith("tflops")) return v.toPrecision(3) + " TFLOP/s";
    return fmt(v);
  }
  function fmtPct(v) {
    if (v === null || v === undefined || !isFinite(v)) return "";
    const a = Math.abs(v);
    if (a === 0) return "0%";
    if (a < 0.01) return "<0.01%";
    return (a >= 10 ? v.toFixed(0) : a < 1 ? v.toPrecision(2) : v.toFixed(1)) + "%";
  }
  function fmtUs(us) {
    if (us === null || us === undefined) return "";
    const a = Math.abs(us);
    if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    return us.toFixed(2) + " µs";
  }
  function hover(node, text) {
    node.addEventListener("mousemove", (e) => {
      tip.hidden = false;
      tip.textContent = typeof text === "function" ? text() : text;
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 320) + "px";
      tip.style.top = e.clientY + 14 + "px";
    });
    node.addEventListener("mouseleave", () => { tip.hidden = true; });
  }
  function section(id, title) {
    const s = el("section");
    s.id = id;
    s.appendChild(el("h2", title));
    main.appendChild(s);
    const a = el("a", title);
    a.href = "#" + id;
    nav.appendChild(a);
    return s;
  }
  const isRows = (v) => Array.isArray(v) && v.length > 0 && v.every((r) => r && typeof r === "object" && !Array.isArray(r));

  // Sortable table ------------------------------------------------------------------------------
  function table(rows, opts) {
    opts = opts || {};
    const cols = opts.cols || [];
    if (!opts.cols) for (const r of rows) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
    const wrap = el("div", null, "tablewrap");
    const t = el("table");
    const thead = el("thead"), tr = el("tr");
    const tbody = el("tbody");
    let data = rows.slice(), sortCol = null, dir = 1;
    const limit = opts.limit || 300;
    function body() {
      tbody.replaceChildren();
      for (const r of data.slice(0, limit)) {
        const row = el("tr");
        for (const c of cols) {
          const v = r[c];
          if ((opts.links || []).includes(c)) {  // a viewer link (made by the report, not the trace)
            const td = el("td");
            if (v) {
              const a = el("a", "open", "viewer");
              a.href = v;
              a.target = "opscope-viewer";
              a.rel = "noopener noreferrer";
              td.appendChild(a);
            }
            row.appendChild(td);
            continue;
          }
          const td = el("td", fmtCol(c, v), typeof v === "number" ? "num" : "");
          if (typeof v === "number") td.setAttribute("data-v", String(v));
          if (c === "severity" && typeof v === "string") td.className = "sev-" + v.toLowerCase();
          row.appendChild(td);
        }
        tbody.appendChild(row);
      }
    }
    cols.forEach((c) => {
      const th = el("th", c.replace(/_(us|ns|bytes)$/, "").replace(/_/g, " "));
      th.setAttribute("data-col", c);
      th.addEventListener("click", () => {
        dir = sortCol === c ? -dir : (typeof (rows.find((r) => r[c] !== null && r[c] !== undefined) || {})[c] === "number" ? -1 : 1);
        sortCol = c;
        data.sort((a, b) => {
          const x = a[c], y = b[c];
          if (x === y) return 0;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          if (typeof x === "number" && typeof y === "number") return (x - y) * dir;
          return String(x).localeCompare(String(y)) * dir;
        });
        for (const h of thead.querySelectorAll("th")) h.className = "";
        th.className = dir > 0 ? "sorted-asc" : "sorted-desc";
        body();
      });
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    t.appendChild(thead);
    t.appendChild(tbody);
    body();
    wrap.appendChild(t);
    const out = el("div");
    out.appendChild(wrap);
    if (rows.length > limit) out.appendChild(el("p", `showing ${limit} of ${rows.length} rows (sort to see others first)`, "muted"));
    return out;
  }

  function kv(obj) {
    const dl = el("dl", null, "kv");
    for (const k of Object.keys(obj)) {
      const v = obj[k];
      if (v === null || v === undefined || (typeof v === "object" && !Array.isArray(v))) continue;
      if (Array.isArray(v) && v.some((x) => typeof x === "object")) continue;
      dl.appendChild(el("dt", k));
      dl.appendChild(el("dd", Array.isArray(v) ? v.join(", ") : fmt(v)));
    }
    return dl;
  }

  function generic(parent, value, depth) {
    if (isRows(value)) { parent.appendChild(table(value)); return; }
    if (Array.isArray(value)) { if (value.length) parent.appendChild(el("p", value.map(fmt).join(", "))); else parent.appendChild(el("p", "none", "muted")); return; }
    if (value && typeof value === "object") {
      parent.appendChild(kv(value));
      for (const k of Object.keys(value)) {
        const v = value[k];
        if (isRows(v) || (v && typeof v === "object" && !Array.isArray(v))) {
          parent.appendChild(el(depth ? "h4" : "h3", k));
          generic(parent, v, (depth || 0) + 1);
        }
      }
      return;
    }
    parent.appendChild(el("p", fmt(value)));
  }

  // Axes ----------------------------------------------------------------------------------------
  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) out.push(Math.pow(10, e));
    return out;
  }
  function linTicks(lo, hi, n) {
    const span = hi - lo || 1, raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) out.push(t);
    return out;
  }

  // Sections ------------------------------------------------------------------------------------
  function breakdown() {
    const b = D.breakdown;
    if (!b) return;
    const s = section("breakdown", "Step breakdown");
    const steps = Array.isArray(b) ? b : b.steps;
    if (isRows(steps)) {
      const skip = new Set(["ts_us", "dur_us", "rank", "step", "device_busy_us", "step_us"]);
      const keys = [];
      for (const r of steps) for (const k of Object.keys(r)) if (k.endsWith("_us") && !skip.has(k) && typeof r[k] === "number" && !keys.includes(k)) keys.push(k);
      // Stack only parts that partition a step (communication overlapping compute would count twice).
      const part = ["compute_us", "communication_not_overlapped_us", "memcpy_us", "memset_us", "device_idle_us", "computing_us", "free_us"].filter((k) => keys.includes(k));
      if (part.length >= 2) keys.splice(0, keys.length, ...part);
      const W = 900, H = 260, L = 70, B = 40, T = 10;
      const n = steps.length;
      const totals = steps.map((r) => Math.max(r.dur_us || 0, keys.reduce((a, k) => a + Math.max(0, r[k] || 0), 0)));
      const vmax = Math.max(1, ...totals);
      const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
      g.appendChild(svg("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, class: "axis" }));
      for (const t of linTicks(0, vmax, 5)) {
        const y = H - B - (t / vmax) * (H - B - T);
        g.appendChild(svg("line", { x1: L, y1: y, x2: W - 10, y2: y, class: "grid" }));
        const tx = svg("text", { x: L - 4, y: y + 3, "text-anchor": "end" });
        tx.textContent = fmtUs(t);
        g.appendChild(tx);
      }
      const bw = Math.max(2, Math.min(60, (W - L - 20) / n - 4));
      steps.forEach((r, i) => {
        const x = L + 6 + i * ((W - L - 20) / n);
        let y = H - B;
        keys.forEach((k, ki) => {
          const v = Math.max(0, r[k] || 0);
          const h = (v / vmax) * (H - B - T);
          const rect = svg("rect", { x, y: y - h, width: bw, height: Math.max(0, h), fill: COLORS[ki % COLORS.length] });
          hover(rect, `step ${r.step}  ${k}: ${fmtUs(v)}\nstep time ${fmtUs(r.dur_us)}`);
          g.appendChild(rect);
          y -= h;
        });
        if (r.dur_us) {
          const yd = H - B - (r.dur_us / vmax) * (H - B - T);
          const ln = svg("line", { x1: x - 2, x2: x + bw + 2, y1: yd, y2: yd, stroke: "#1d2330", "stroke-width": 2 });
          hover(ln, `step ${r.step} time ${fmtUs(r.dur_us)}`);
          g.appendChild(ln);
        }
        if (n <= 40) {
          const tx = svg("text", { x: x + bw / 2, y: H - B + 14, "text-anchor": "middle" });
          tx.textContent = String(r.step === null || r.step === undefined ? i : r.step);
          g.appendChild(tx);
        }
      });
      s.appendChild(g);
      const leg = el("div", null, "legend");
      keys.forEach((k, ki) => { const sp = el("span"); const i = el("i"); i.style.background = COLORS[ki % COLORS.length]; sp.appendChild(i); sp.appendChild(document.createTextNode(k)); leg.appendChild(sp); });
      s.appendChild(leg);
      s.appendChild(table(steps));
    }
    if (!Array.isArray(b)) for (const k of Object.keys(b)) if (k !== "steps") { s.appendChild(el("h3", k)); generic(s, b[k], 1); }
  }

  function hotspots() {
    const h = D.hotspots;
    if (!h) return;
    const s = section("hotspots", "Hotspots");
    for (const k of ["ops", "kernels", "op_shapes", "modules"]) {
      if (!isRows(h[k])) continue;
      s.appendChild(el("h3", { ops: "Operators", kernels: "Kernels", op_shapes: "Operators by shape", modules: "Modules" }[k]));
      s.appendChild(table(h[k]));
    }
    if (isRows(h.sources) && !D.sources) { s.appendChild(el("h3", "Source lines")); s.appendChild(table(h.sources)); }
  }

  function sources() {
    const src = D.sources;
    if (!src) return;
    const s = section("sources", "Time per source line");
    generic(s, src, 0);
  }

  function empty(v) {
    if (v === undefined || v === null) return true;
    if (Array.isArray(v)) return v.length === 0;
    if (typeof v === "object") return Object.keys(v).every((k) => empty(v[k]));
    return false;
  }
  function listSection(key, id, title) {
    if (empty(D[key])) return;
    generic(section(id, title), D[key], 0);
  }

  // The first screen: headline card, then the top findings -----------------------------------
  function headline() {
    const st = D._story;
    if (!st) return;
    const h = st.headline;
    const s = section("headline", "Step time " + h.step_text);
    s.className = "card";
    const facts = [h.source, h.format, `${h.ranks} rank${h.ranks === 1 ? "" : "s"}`, D.events !== undefined ? `${fmt(D.events)} events` : "", D.kernels ? `${fmt(D.kernels)} kernels` : ""].filter((x) => x);
    s.appendChild(el("p", facts.join(" · "), "muted"));
    if (h.parts.length) {
      s.appendChild(el("p", `Where it goes (${h.device ? "device" : "host"} time, % ${h.basis}):`));
      const t = el("table", null, "parts");
      const add = (p, depth) => {
        const tr = el("tr");
        tr.appendChild(el("td", p.label, depth ? "sub" : ""));
        tr.appendChild(el("td", fmtUs(p.us), "num"));
        tr.appendChild(el("td", fmtPct(p.pct), "num"));
        const bar = el("td", null, "barcell");
        const b = el("span", null, "bar");
        b.style.width = Math.max(0, Math.min(100, p.pct)) + "%";
        bar.appendChild(b);
        tr.appendChild(bar);
        t.appendChild(tr);
        for (const d of p.detail || []) add(d, depth + 1);
      };
      for (const p of h.parts) add(p, 0);
      s.appendChild(t);
    }
    for (const n of h.notes) s.appendChild(el("p", n, "muted"));
    for (const w of st.warnings) s.appendChild(el("p", w, "note"));
    for (const n of D._notes || []) s.appendChild(el("p", n, "note"));
  }

  function topFindings() {
    const st = D._story;
    if (!st || !st.findings.length) return;
    const n = st.findings.length + st.more_findings;
    const s = section("top-findings", `Top findings (${st.findings.length} of ${n}, by saving)`);
    const ol = el("ol", null, "findings");
    for (const f of st.findings) {
      const li = el("li");
      li.id = "finding-" + f.rank;
      const t = el("div", null, "ftitle");
      t.appendChild(el("span", f.severity, "sev-" + f.severity));
      t.appendChild(document.createTextNode(" " + f.title));
      li.appendChild(t);
      const saving = f.saving_us ? `saves ≈ ${fmtUs(f.saving_us)}/step (${fmtPct(f.saving_pct)} of the step)` : "saving not estimated";
      li.appendChild(el("div", [f.where, saving].filter((x) => x).join(" · "), "where"));
      if (f.fix) li.appendChild(el("code", f.fix, "fix"));
      const v = D._viewer && D._viewer.links ? D._viewer.links[f.rank - 1] : null;
      if (v) {
        // Opens the viewer's tab (one, reused) at the slice; it needs `opscope view` running.
        const a = el("a", `open ${v.why} in the timeline viewer (event ${v.event_id})`, "viewer");
        a.href = v.url;
        a.target = "opscope-viewer";
        a.rel = "noopener noreferrer";
        li.appendChild(a);
      } else if (f.event_ids.length) {
        li.appendChild(el("div", `timeline events ${f.event_ids.join(", ")}`, "muted"));
      }
      ol.appendChild(li);
    }
    s.appendChild(ol);
    if (D._viewer) {
      const p = el("p", "Links open the timeline viewer of this trace; start it first: ", "muted");
      p.appendChild(el("code", D._viewer.command));
      p.id = "viewer-command";
      s.appendChild(p);
    }
    if (st.more_findings) {
      const a = el("a", `${st.more_findings} more in Findings`);
      a.href = "#findings";
      s.appendChild(a);
    }
  }

  // Every finding, each row with its link into the timeline viewer (the top ones have theirs above).
  function allFindings() {
    if (empty(D.findings) || !isRows(D.findings)) { listSection("findings", "findings", "All findings"); return; }
    const links = (D._viewer && D._viewer.links) || [];
    const rows = D.findings.map((f, i) => links[i] ? { ...f, timeline: links[i].url } : { ...f });
    const s = section("findings", "All findings");
    s.appendChild(table(rows, { links: ["timeline"] }));
  }

  function sourceView() {
    const blocks = D.source_blocks;
    if (!Array.isArray(blocks) || !blocks.length) return;
    const s = section("source", `Source (${blocks[0].basis || ""} time per line, forward / backward)`);
    let last = null;
    for (const b of blocks) {
      if (b.file !== last) s.appendChild(el("h3", b.file + (b.truncated ? " (copy cut at the size cap)" : "")));
      last = b.file;
      const t = el("table", null, "source");
      const hr = el("tr");
      for (const c of ["line", "code", "fwd", "bwd"]) hr.appendChild(el("th", c));
      t.appendChild(hr);
      for (const ln of b.lines) {
        const tr = el("tr", null, ln.fwd_us || ln.bwd_us ? "hot" : "");
        tr.appendChild(el("td", ln.line, "num"));
        const code = el("td", null, "code");
        code.appendChild(el("pre", ln.text));
        tr.appendChild(code);
        tr.appendChild(el("td", ln.fwd_us ? fmtUs(ln.fwd_us) : "", "num"));
        tr.appendChild(el("td", ln.bwd_us ? fmtUs(ln.bwd_us) : "", "num"));
        t.appendChild(tr);
      }
      s.appendChild(t);
    }
  }

  function roofline() {
    const r = D.roofline;
    if (!r) return;
    const s = section("roofline", "Roofline");
    const rows = Array.isArray(r) ? r : (r.groups || r.rows || []);
    const pts = rows.filter((p) => p.intensity > 0 && p.achieved_tflops > 0);
    let peakT = !Array.isArray(r) ? (r.peak_tflops || null) : null;
    let peakB = !Array.isArray(r) ? (r.peak_gbps || null) : null;
    let inferred = false;
    const med = (a) => { a.sort((x, y) => x - y); return a.length ? a[Math.floor(a.length / 2)] : null; };
    if (!peakT) { peakT = med(pts.filter((p) => p.bound === "compute" && p.pct_of_peak > 0).map((p) => p.achieved_tflops / (p.pct_of_peak / 100))); inferred = inferred || !!peakT; }
    if (!peakB) { peakB = med(rows.filter((p) => p.bound === "memory" && p.pct_of_peak > 0 && p.achieved_gbps > 0).map((p) => p.achieved_gbps / (p.pct_of_peak / 100))); inferred = inferred || !!peakB; }
    if (pts.length) {
      const W = 760, H = 380, L = 70, B = 44, T = 12, R = 20;
      const xs = pts.map((p) => p.intensity), ys = pts.map((p) => p.achieved_tflops);
      let xlo = Math.min(...xs) / 2, xhi = Math.max(...xs) * 2, ylo = Math.min(...ys) / 2, yhi = Math.max(...ys) * 2;
      if (peakT) yhi = Math.max(yhi, peakT * 2);
      if (peakT && peakB) { const ridge = peakT * 1e3 / peakB; xlo = Math.min(xlo, ridge / 10); xhi = Math.max(xhi, ridge * 10); ylo = Math.min(ylo, peakB * xlo / 1e3); }
      const X = (v) => L + (Math.log10(v) - Math.log10(xlo)) / (Math.log10(xhi) - Math.log10(xlo)) * (W - L - R);
      const Y = (v) => H - B - (Math.log10(v) - Math.log10(ylo)) / (Math.log10(yhi) - Math.log10(ylo)) * (H - B - T);
      const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
      for (const t of logTicks(xlo, xhi)) if (t >= xlo && t <= xhi) { g.appendChild(svg("line", { x1: X(t), x2: X(t), y1: T, y2: H - B, class: "grid" })); const tx = svg("text", { x: X(t), y: H - B + 14, "text-anchor": "middle" }); tx.textContent = fmt(t); g.appendChild(tx); }
      for (const t of logTicks(ylo, yhi)) if (t >= ylo && t <= yhi) { g.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(t), y2: Y(t), class: "grid" })); const tx = svg("text", { x: L - 4, y: Y(t) + 3, "text-anchor": "end" }); tx.textContent = fmt(t); g.appendChild(tx); }
      const xl = svg("text", { x: (L + W) / 2, y: H - 8, "text-anchor": "middle" }); xl.textContent = "arithmetic intensity (FLOP/byte)"; g.appendChild(xl);
      const yl = svg("text", { x: 12, y: H / 2, transform: `rotate(-90 12 ${H / 2})`, "text-anchor": "middle" }); yl.textContent = "achieved TFLOP/s"; g.appendChild(yl);
      if (peakT || peakB) {
        const n = 60, path = [];
        for (let i = 0; i <= n; i++) {
          const xi = Math.pow(10, Math.log10(xlo) + i / n * (Math.log10(xhi) - Math.log10(xlo)));
          let yv = peakT || Infinity;
          if (peakB) yv = Math.min(yv, peakB * xi / 1e3);
          yv = Math.max(ylo, Math.min(yhi, yv));
          path.push((i ? "L" : "M") + X(xi).toFixed(1) + " " + Y(yv).toFixed(1));
        }
        const roof = svg("path", { d: path.join(" "), fill: "none", stroke: "#b00020", "stroke-width": 2 });
        hover(roof, `device roof${inferred ? " (inferred from % of peak)" : ""}\npeak ${fmt(peakT)} TFLOP/s, ${fmt(peakB)} GB/s`);
        g.appendChild(roof);
      }
      const tmax = Math.max(...pts.map((p) => p.time_us || 0), 1);
      pts.forEach((p, i) => {
        const c = svg("circle", { cx: X(p.intensity), cy: Y(p.achieved_tflops), r: 3 + 7 * Math.sqrt((p.time_us || 0) / tmax), fill: p.bound === "memory" ? "#4e79a7" : p.bound === "compute" ? "#f28e2b" : "#889", "fill-opacity": 0.7, stroke: "#1d2330", "stroke-width": 0.5 });
        c.setAttribute("data-i", String(i));
        hover(c, `${p.name}\nshapes ${fmt(p.input_shapes)} ${fmt(p.dtypes)}\nintensity ${fmt(p.intensity)} FLOP/B\n${fmt(p.achieved_tflops)} TFLOP/s, ${fmt(p.achieved_gbps)} GB/s\n${p.pct_of_peak == null ? "% of peak: " + (p.peak_note || "n/a") : fmt(p.pct_of_peak) + " % of peak"} (${p.bound || "?"})\ntime ${fmtUs(p.time_us)} in ${p.calls} calls`);
        g.appendChild(c);
      });
      s.appendChild(g);
      if (inferred) s.appendChild(el("p", "The roof is inferred from the groups' % of peak (the report carries no explicit peaks).", "muted"));
      s.appendChild(el("p", "Orange: compute bound, blue: memory bound; area grows with time.", "muted"));
    } else s.appendChild(el("p", "No operator group has both FLOPs and bytes to place on the roofline.", "muted"));
    const noPeak = rows.find((p) => p.peak_note);
    if (noPeak) s.appendChild(el("p", "% of peak: " + noPeak.peak_note, "muted"));
    if (rows.length) s.appendChild(table(rows));
    if (!Array.isArray(r)) s.appendChild(kv(r));
  }

  function memory() {
    const m = D.memory, curve = D._memory_curve;
    if (!m && !curve) return;
    const s = section("memory", "Memory");
    for (const c of curve || []) {
      if (!c.ts_us.length) continue;
      s.appendChild(el("h3", c.name));
      const W = 900, H = 240, L = 80, B = 34, T = 10, R = 16;
      const t0 = c.ts_us[0], t1 = c.ts_us[c.ts_us.length - 1] || t0 + 1;
      const vmax = Math.max(1, ...c.bytes);
      const X = (t) => L + (t - t0) / Math.max(1e-9, t1 - t0) * (W - L - R);
      const Y = (v) => H - B - (v / vmax) * (H - B - T);
      const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
      for (const t of linTicks(0, vmax, 4)) { g.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(t), y2: Y(t), class: "grid" })); const tx = svg("text", { x: L - 4, y: Y(t) + 3, "text-anchor": "end" }); tx.textContent = (t / 2 ** 20).toFixed(1) + " MiB"; g.appendChild(tx); }
      for (const t of linTicks(0, t1 - t0, 6)) { const tx = svg("text", { x: X(t0 + t), y: H - B + 14, "text-anchor": "middle" }); tx.textContent = fmtUs(t); g.appendChild(tx); }
      let d = `M${X(c.ts_us[0])} ${Y(0)}`;
      for (let i = 0; i < c.ts_us.length; i++) { d += ` L${X(c.ts_us[i]).toFixed(1)} ${Y(c.bytes[i]).toFixed(1)}`; if (i + 1 < c.ts_us.length) d += ` L${X(c.ts_us[i + 1]).toFixed(1)} ${Y(c.bytes[i]).toFixed(1)}`; }
      d += ` L${X(t1)} ${Y(0)} Z`;
      g.appendChild(svg("path", { d, fill: "rgba(78,121,167,0.35)", stroke: "#4e79a7" }));
      const pi = c.bytes.indexOf(vmax);
      const pk = svg("circle", { cx: X(c.ts_us[pi]), cy: Y(vmax), r: 5, fill: "#b00020", class: "peak" });
      hover(pk, `peak ${(vmax / 2 ** 20).toFixed(2)} MiB (${vmax.toLocaleString("en-US")} bytes) at ${fmtUs(c.ts_us[pi] - t0)}`);
      g.appendChild(pk);
      const lab = svg("text", { x: X(c.ts_us[pi]) + 8, y: Y(vmax) + 4 });
      lab.textContent = "peak " + (vmax / 2 ** 20).toFixed(1) + " MiB";
      g.appendChild(lab);
      const band = svg("rect", { x: L, y: T, width: W - L - R, height: H - B - T, fill: "transparent" });
      let last = "";
      band.addEventListener("mousemove", (e) => {
        const rc = g.getBoundingClientRect();
        const t = t0 + ((e.clientX - rc.left) * (W / rc.width) - L) / (W - L - R) * (t1 - t0);
        let lo = 0, hi = c.ts_us.length - 1;
        while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (c.ts_us[mid] <= t) lo = mid; else hi = mid - 1; }
        last = `${fmtUs(c.ts_us[lo] - t0)}: ${(c.bytes[lo] / 2 ** 20).toFixed(2)} MiB`;
      });
      hover(band, () => last);
      g.insertBefore(band, pk);
      s.appendChild(g);
      if (c.downsampled) s.appendChild(el("p", `Curve downsampled from ${c.points.toLocaleString("en-US")} points (the largest value of each interval kept, so the peak is exact).`, "muted"));
    }
    if (m) generic(s, m, 0);
  }

  function trend() {
    const t = D.trend;
    if (!t || !t.series) return;
    const s = section("trend", "Trend over the run");
    const cps = t.change_points || [];
    for (const [metric, ser] of Object.entries(t.series)) {
      const xs = ser.steps || [], ys = ser.values || [];
      const pts = xs.map((x, i) => [x, ys[i]]).filter((p) => p[1] !== null && Number.isFinite(p[1]));
      if (pts.length < 2) continue;
      s.appendChild(el("h3", `${metric}${ser.unit ? " (" + ser.unit + ")" : ""}`));
      const W = 900, H = 200, L = 80, B = 30, T = 10, R = 16;
      const x0 = pts[0][0], x1 = pts[pts.length - 1][0];
      let lo = Math.min(...pts.map((p) => p[1])), hi = Math.max(...pts.map((p) => p[1]));
      if (hi === lo) { hi = lo + 1; }
      const X = (x) => L + (x - x0) / Math.max(1e-9, x1 - x0) * (W - L - R);
      const Y = (v) => H - B - (v - lo) / (hi - lo) * (H - B - T);
      const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", class: "trend-chart" });
      for (const v of linTicks(lo, hi, 4)) { g.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: "grid" })); const tx = svg("text", { x: L - 4, y: Y(v) + 3, "text-anchor": "end" }); tx.textContent = fmt(v); g.appendChild(tx); }
      for (const v of linTicks(x0, x1, 6)) { const tx = svg("text", { x: X(v), y: H - B + 14, "text-anchor": "middle" }); tx.textContent = "step " + Math.round(v); g.appendChild(tx); }
      g.appendChild(svg("path", { d: pts.map((p, i) => `${i ? "L" : "M"}${X(p[0]).toFixed(1)} ${Y(p[1]).toFixed(1)}`).join(" "), fill: "none", stroke: "#4e79a7" }));
      for (const p of pts) { const c = svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: "#4e79a7" }); hover(c, `step ${p[0]}: ${fmt(p[1])} ${ser.unit || ""}`); g.appendChild(c); }
      for (const cp of cps.filter((c) => c.metric === metric)) {
        const m = svg("line", { x1: X(cp.step), x2: X(cp.step), y1: T, y2: H - B, stroke: "#b00020", "stroke-dasharray": "4 3", class: "change-point" });
        hover(m, `change at step ${cp.step}: ${fmt(cp.before)} → ${fmt(cp.after)} (${fmt(cp.ratio)}×)`);
        g.appendChild(m);
      }
      s.appendChild(g);
    }
    if (cps.length) s.appendChild(table(cps.map((c) => ({ step: c.step, metric: c.metric, before: c.before, after: c.after, ratio: c.ratio }))));
    else s.appendChild(el("p", "No change point: every series is steady within its noise.", "muted"));
  }

  headline();
  topFindings();
  sourceView();
  trend();
  breakdown();
  hotspots();
  sources();
  listSection("anomalies", "anomalies", "Anomalies");
  roofline();
  memory();
  allFindings();
  listSection("critical_path", "critical-path", "Critical path");
  if (D.comparison) listSection("comparison", "comparison", "Comparison");
  const done = new Set(["summary", "_story", "source_blocks", "source", "warnings", "errors", "skipped", "oddities", "trend", "hotspots", "sources", "anomalies", "roofline", "breakdown", "memory", "findings", "comparison", "critical_path", "_notes", "_memory_curve", "_viewer", "load", "ranks"]);
  const oneRank = !(Array.isArray(D.ranks) && D.ranks.length > 1);
  for (const k of Object.keys(D)) if (!done.has(k) && !(k === "cluster" && oneRank) && D[k] && typeof D[k] === "object") listSection(k, "x-" + k.replace(/[^a-z0-9_-]/gi, ""), k);
  document.body.setAttribute("data-ready", "1");
})();
