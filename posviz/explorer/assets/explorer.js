/* posviz explorer: draws the numbers posviz computed (the JSON block #posviz-data) with plotly.js.
 * It computes nothing but display arithmetic: the Toeplitz projection from the stored profile, a head's map from
 * its stored factors or offsets, and block means for thumbnails. See docs/explore.md. */
(function () {
  "use strict";
  const marks = { scriptStart: performance.now() };
  const DATA = JSON.parse(document.getElementById("posviz-data").textContent);
  marks.dataParsed = performance.now();
  // the toolbar shows on hover only: at rest it would sit over the plot's title
  const CONFIG = { displaylogo: false, scrollZoom: true, responsive: false, displayModeBar: "hover" };
  const GRID_SIDE = 48;  // cells per side of a head thumbnail
  const state = { rendered: {}, firstRenderMs: null, marks: marks };
  window.posvizExplorer = state;

  // ---- small helpers ---------------------------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  function fmt(x, digits) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    if (Number.isInteger(x) && Math.abs(x) < 1e7) return String(x);
    return Number(x).toPrecision(digits || 4);
  }
  function half(h) {  // IEEE 754 half -> number
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
    if (e === 0) return s * Math.pow(2, -14) * (f / 1024);
    if (e === 31) return f ? NaN : s * Infinity;
    return s * Math.pow(2, e - 15) * (1 + f / 1024);
  }
  function decode(spec) {  // {dtype, shape, bdata} -> typed array (float16 widened to float32)
    const bin = atob(spec.bdata), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    if (spec.dtype === "f4") return new Float32Array(bytes.buffer);
    if (spec.dtype === "i4") return new Int32Array(bytes.buffer);
    if (spec.dtype === "u1") return bytes;
    const raw = new Uint16Array(bytes.buffer), out = new Float32Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = half(raw[i]);
    return out;
  }
  const cache = new Map();
  function arr(spec) { if (!cache.has(spec)) cache.set(spec, decode(spec)); return cache.get(spec); }
  function rows(flat, m) { const out = []; for (let i = 0; i < m; i++) out.push(flat.subarray(i * m, (i + 1) * m)); return out; }
  function range(a, b) { const out = []; for (let i = a; i < b; i++) out.push(i); return out; }
  function centers(edges, first) { return range(0, edges.length - 1).map((b) => first + (edges[b] + edges[b + 1] - 1) / 2); }
  const tooltip = el("div", { id: "tooltip" });
  function showTip(ev, text) {
    tooltip.textContent = text; tooltip.style.display = "block";
    const x = ev && ev.clientX !== undefined ? ev.clientX : 0, y = ev && ev.clientY !== undefined ? ev.clientY : 0;
    tooltip.style.left = (x + 14) + "px"; tooltip.style.top = (y + 14) + "px";
  }
  function hideTip() { tooltip.style.display = "none"; }
  function once(fn) { let pending = false, args; return (...a) => { args = a; if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; fn(...args); }); } }; }

  // A sortable table: columns [{key, label, digits}], rows of objects; onPick(row) when a row is clicked.
  function sortable(id, columns, data, onPick) {
    const table = el("table", { class: "sortable", id: id }), head = el("tr"), body = el("tbody");
    let key = null, dir = 1;
    function draw() {
      const sorted = key === null ? data.slice() : data.slice().sort((a, b) => {
        const x = a[key], y = b[key];
        if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
        return (x < y ? -1 : x > y ? 1 : 0) * dir;
      });
      body.replaceChildren(...sorted.map((r) => {
        const tr = el("tr", {}, ...columns.map((c) => el("td", {}, c.digits === 0 ? String(r[c.key] ?? "–") : fmt(r[c.key], c.digits || 3))));
        if (onPick) tr.addEventListener("click", () => { body.querySelectorAll("tr.selected").forEach((t) => t.classList.remove("selected")); tr.classList.add("selected"); onPick(r); });
        return tr;
      }));
    }
    for (const c of columns) {
      const th = el("th", { "data-key": c.key, title: c.title || c.label }, c.label);
      th.addEventListener("click", () => {
        dir = key === c.key ? -dir : (c.key === "layer" || c.key === "head" ? 1 : -1); key = c.key;
        head.querySelectorAll("th").forEach((t) => t.classList.remove("sorted-asc", "sorted-desc"));
        th.classList.add(dir > 0 ? "sorted-asc" : "sorted-desc"); draw();
      });
      head.append(th);
    }
    table.append(el("thead", {}, head), body); draw();
    return el("div", { class: "table-wrap" }, table);
  }

  function heatmap(z, x, y, extra) {
    return Object.assign({ type: "heatmap", z: z, x: x, y: y, colorscale: "Viridis", hoverinfo: "none", zsmooth: false }, extra || {});
  }
  function squareLayout(title, side, extra) {
    return Object.assign({
      title: { text: title, font: { size: 13 } }, width: side + 90, height: side + 60, margin: { l: 50, r: 20, t: 36, b: 30 },
      xaxis: { title: { text: "key position j" }, constrain: "domain" },
      yaxis: { title: { text: "query position i" }, autorange: "reversed", scaleanchor: "x", constrain: "domain" },
    }, extra || {});
  }

  // ---- tabs --------------------------------------------------------------------------------------------------------
  const tabs = [];
  function addTab(id, title, render) { tabs.push({ id, title, render }); }
  function showTab(id) {
    for (const t of tabs) {
      $("tab-" + t.id).classList.toggle("active", t.id === id);
      $("tabbtn-" + t.id).classList.toggle("active", t.id === id);
    }
    const t = tabs.find((x) => x.id === id);
    if (!state.rendered[id]) { state.rendered[id] = true; return Promise.resolve(t.render($("tab-" + id))); }
    return Promise.resolve();
  }
  state.showTab = showTab;

  // ---- sidebar -----------------------------------------------------------------------------------------------------
  function sidebar() {
    const side = $("sidebar"), s = DATA.sidebar;
    side.append(el("h1", {}, "posviz explorer"), el("div", { class: "note" }, "posviz " + s.versions.posviz));
    side.append(el("h2", {}, "Models"));
    for (const m of DATA.models) {
      const prov = (m.p && m.p.provenance) || (m.heads && m.heads.metadata) || {};
      const dl = el("dl");
      const items = [["model", m.name], ["source", prov.source], ["revision", prov.revision], ["family", prov.family],
        ["tensor", prov.tensor], ["rows", prov.rows ? prov.rows[0] + "–" + (prov.rows[1] - 1) + (prov.stored_rows ? " of " + prov.stored_rows : "") : null],
        ["dtype", prov.dtype], ["E_P sha256", prov.e_p_sha256 ? prov.e_p_sha256.slice(0, 16) + "…" : null],
        ["scheme", m.heads ? m.heads.scheme : null], ["run", m.series ? m.series.run : null]];
      for (const [k, v] of items) if (v !== null && v !== undefined) dl.append(el("dt", {}, k), el("dd", { title: String(v) }, String(v)));
      side.append(dl);
      for (const note of m.notes) side.append(el("div", { class: "note" }, note));
    }
    side.append(el("h2", {}, "Conventions"), el("ul", {}, ...s.conventions.map((c) => el("li", {}, c))));
    side.append(el("h2", {}, "Made with"), el("dl", {}, ...Object.entries(s.versions).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
    side.append(el("div", { class: "note" }, s.docs));
  }

  // ---- P tab -------------------------------------------------------------------------------------------------------
  function pMatrices(v) {  // P, T(P) and P - T(P) as flat float32 arrays at display resolution, made on first use
    if (v._mats) return v._mats;
    const P = arr(v.P), m = v.edges.length - 1, n = v.n, f = arr(v.profile);
    let T;
    if (v.projection) T = arr(v.projection);
    else { T = new Float32Array(m * m); for (let i = 0; i < m; i++) for (let j = 0; j < m; j++) T[i * m + j] = f[j - i + n - 1]; }
    const R = new Float32Array(m * m); for (let q = 0; q < m * m; q++) R[q] = P[q] - T[q];
    v._mats = { p: P, projection: T, residual: R, m: m };
    return v._mats;
  }
  function diagonalShape(k, n, first) {  // the cells with j - i = k, through their centres
    const i0 = Math.max(0, -k), i1 = n - 1 - Math.max(0, k);
    return { type: "line", x0: i0 + k + first, y0: i0 + first, x1: i1 + k + first, y1: i1 + first, line: { color: "#ff2d55", width: 1.5 } };
  }
  function scoreLine(s) {
    return el("div", { class: "headline" }, "off-diagonal R² ", el("b", {}, fmt(s.toeplitzness_offdiag)),
      " (null " + fmt(s.null_mean_offdiag) + (s.null_std_offdiag !== null ? " ± " + fmt(s.null_std_offdiag, 2) : "") +
      ", excess " + fmt(s.excess_offdiag) + ")  ·  full R² " + fmt(s.toeplitzness) + " (null " + fmt(s.null_mean) + ", excess " + fmt(s.excess) + ")");
  }

  function renderP(root) {
    const models = DATA.models.filter((m) => m.p);
    const pick = el("select", { id: "p-model" }, ...models.map((m, i) => el("option", { value: i, title: m.name }, m.label || m.name)));
    const views = [["p", "P"], ["projection", "Toeplitz projection T(P)"], ["residual", "residual P − T(P)"]];
    const radios = el("span", { id: "p-view" }, ...views.map(([val, label], i) => el("label", {},
      el("input", Object.assign({ type: "radio", name: "p-view", value: val }, i === 0 ? { checked: "" } : {})), label)));
    const info = el("div", { id: "p-score" }), readout = el("div", { class: "readout", id: "p-readout" }, " ");
    const map = el("div", { class: "plot", id: "p-heatmap" }), prof = el("div", { class: "plot", id: "p-profile" });
    const robust = el("input", { type: "checkbox", id: "p-robust", checked: "" });
    root.append(el("div", { class: "controls" }, models.length > 1 ? el("label", {}, "model ", pick) : null, radios,
      el("label", { title: "clip the colours to the 1st–99th percentile (P's diagonal would leave every other cell one colour)" }, robust, "robust colour range")), info, readout,
      el("div", { class: "row" }, map, prof), el("div", { class: "note" }, "Hover a cell for (i, j, k = j − i, value); hover the profile to highlight a diagonal. Drag to zoom, double-click to reset."));
    let v = models[0].p, which = "p";
    function draw() {
      const mats = pMatrices(v), m = mats.m, n = v.n, first = v.first_position;
      const xs = v.pooled ? centers(v.edges, first) : range(first, first + n);
      info.replaceChildren(scoreLine(v.score), el("div", { class: "note" },
        (v.pooled ? "P block-averaged to " + m + " × " + m + " for display (n = " + n + "). " : "n = " + n + " positions, exact float32 values. ") +
        "Null: " + v.null_method + "; R²: " + v.r2_method + "; peak offset " + v.peak_offset + "."));
      const extra = which === "residual" ? { colorscale: "RdBu", reversescale: true, zmid: 0 } : {};
      if (robust.checked) Object.assign(extra, { zmin: v.color_ranges[which][0], zmax: v.color_ranges[which][1], zauto: false });
      const trace = heatmap(rows(mats[which], m), xs, xs, extra);
      const side = Math.min(560, Math.max(300, m));
      const done = Plotly.react(map, [trace], squareLayout(v.model + ": " + views.find((x) => x[0] === which)[1], side), CONFIG);
      const f = arr(v.profile), ks = range(-(n - 1), n);
      Plotly.react(prof, [{ type: "scatter", mode: "lines", x: ks, y: f, line: { width: 1.2 }, hoverinfo: "none", name: "f̂(k)" }], {
        title: { text: "diagonal profile f̂(k)", font: { size: 13 } }, width: 460, height: 300, margin: { l: 50, r: 16, t: 36, b: 40 },
        xaxis: { title: { text: "offset k = j − i" } }, yaxis: { title: { text: "mean of P along k" } }, showlegend: false,
      }, CONFIG);
      return done;
    }
    function valueAt(idx) { const mats = pMatrices(v); return mats[which][idx[0] * mats.m + idx[1]]; }
    const highlight = once((k) => {
      const first = v.first_position;
      Plotly.relayout(map, { shapes: [diagonalShape(k, v.n, first)] });
      const f = arr(v.profile), y = f[k + v.n - 1];
      Plotly.relayout(prof, { shapes: [{ type: "line", x0: k, x1: k, yref: "paper", y0: 0, y1: 1, line: { color: "#ff2d55", width: 1 } }],
        annotations: [{ x: k, y: y, text: "k=" + k + ", f̂=" + fmt(y, 4), showarrow: true, arrowhead: 0, ax: 30, ay: -25, font: { size: 11 } }] });
    });
    function hoverText(pt) {
      const first = v.first_position, [r, c] = pt.pointIndex, value = valueAt(pt.pointIndex);
      const label = { p: "P", projection: "T(P)", residual: "P − T(P)" }[which];
      if (!v.pooled) {
        const i = r + first, j = c + first;
        return { k: c - r, text: "i = " + i + ", j = " + j + ", k = j − i = " + (j - i) + "\n" + label + "[i, j] = " + value.toPrecision(6) };
      }
      const e = v.edges, k = Math.round((e[c] + e[c + 1] - e[r] - e[r + 1]) / 2);
      return { k: k, text: "i ∈ [" + (e[r] + first) + ", " + (e[r + 1] + first) + "), j ∈ [" + (e[c] + first) + ", " + (e[c + 1] + first) +
        "), k ≈ " + k + "\n" + label + " block mean = " + value.toPrecision(6) };
    }
    const ready = draw().then(() => {
      map.on("plotly_hover", (ev) => { const h = hoverText(ev.points[0]); readout.textContent = h.text.replace("\n", "   "); showTip(ev.event, h.text); highlight(h.k); });
      map.on("plotly_unhover", hideTip);
      prof.on("plotly_hover", (ev) => { const k = Math.round(ev.points[0].x); readout.textContent = "k = " + k + "   f̂(k) = " + fmt(arr(v.profile)[k + v.n - 1], 6); highlight(k); });
    });
    radios.addEventListener("change", (e) => { which = e.target.value; draw(); });
    robust.addEventListener("change", () => draw());
    pick.addEventListener("change", () => { v = models[+pick.value].p; draw(); });
    return ready;
  }

  // ---- head maps from their stored form ----------------------------------------------------------------------------
  function headMap(layer, h, side) {  // -> {z: Float32Array side*side, m} block means (or exact when side >= rows)
    const m = layer.rows;
    if (layer.form === "factored") {
      const L = arr(layer.left), R = arr(layer.right), rank = layer.left.shape[2], base = h * m * rank, s = Math.min(side, m);
      const edges = range(0, s + 1).map((b) => Math.round(b * m / s));
      const q = poolRows(L, base, m, rank, edges), k = poolRows(R, base, m, rank, edges), z = new Float32Array(s * s);
      for (let i = 0; i < s; i++) for (let j = 0; j < s; j++) { let acc = 0; for (let t = 0; t < rank; t++) acc += q[i * rank + t] * k[j * rank + t]; z[i * s + j] = acc; }
      return { z: z, m: s, edges: edges };
    }
    if (layer.form === "offsets") {
      const F = arr(layer.offsets), n = m, off = h * (2 * n - 1), s = Math.min(side, n);
      const edges = range(0, s + 1).map((b) => Math.round(b * n / s)), z = new Float32Array(s * s);
      for (let a = 0; a < s; a++) for (let b = 0; b < s; b++) {
        if (s === n) { z[a * s + b] = F[off + b - a + n - 1]; continue; }
        const ci = Math.floor((edges[a] + edges[a + 1] - 1) / 2), cj = Math.floor((edges[b] + edges[b + 1] - 1) / 2);
        z[a * s + b] = F[off + cj - ci + n - 1];  // thumbnails of long offset maps: the block's centre cell
      }
      return { z: z, m: s, edges: edges };
    }
    const D = arr(layer.dense), s = Math.min(side, m), edges = range(0, s + 1).map((b) => Math.round(b * m / s)), z = new Float32Array(s * s);
    for (let a = 0; a < s; a++) for (let b = 0; b < s; b++) {
      let acc = 0, c = 0;
      for (let i = edges[a]; i < edges[a + 1]; i++) for (let j = edges[b]; j < edges[b + 1]; j++) { acc += D[h * m * m + i * m + j]; c++; }
      z[a * s + b] = acc / c;
    }
    return { z: z, m: s, edges: edges };
  }
  function poolRows(X, base, m, rank, edges) {
    const s = edges.length - 1, out = new Float32Array(s * rank);
    for (let b = 0; b < s; b++) {
      const w = edges[b + 1] - edges[b];
      for (let i = edges[b]; i < edges[b + 1]; i++) for (let t = 0; t < rank; t++) out[b * rank + t] += X[base + i * rank + t];
      for (let t = 0; t < rank; t++) out[b * rank + t] /= w;
    }
    return out;
  }

  // ---- Heads tab ---------------------------------------------------------------------------------------------------
  const HEAD_COLUMNS = [
    { key: "head", label: "head", digits: 0 }, { key: "toeplitzness_offdiag", label: "off-diag R²" },
    { key: "null_mean_offdiag", label: "null" }, { key: "excess_offdiag", label: "excess" },
    { key: "toeplitzness", label: "full R²" }, { key: "peak_offset", label: "peak k", digits: 0 }, { key: "f_hat_0", label: "f̂(0)" },
  ];
  const ROPE_COLUMNS = [{ key: "dominant_band", label: "dominant band", digits: 0 }, { key: "dominant_wavelength", label: "wavelength" },
    { key: "high_share", label: "high-frequency share" }, { key: "locality", label: "locality" }];

  function renderHeads(root) {
    const models = DATA.models.filter((m) => m.heads);
    const pick = el("select", { id: "heads-model" }, ...models.map((m, i) => el("option", { value: i, title: m.name }, m.label || m.name)));
    const slider = el("input", { type: "range", id: "layer-slider", min: 0, max: 0, step: 1, value: 0 });
    const label = el("span", { id: "layer-label" }), info = el("div", { class: "note", id: "heads-info" });
    const grid = el("div", { class: "plot", id: "heads-grid" }), detail = el("div", { class: "plot", id: "head-map" });
    const prof = el("div", { class: "plot", id: "head-profile" }), readout = el("div", { class: "readout", id: "head-readout" }, " ");
    const tableBox = el("div", { id: "heads-table-box" }), bands = el("div", { class: "plot", id: "heads-bands" });
    root.append(el("div", { class: "controls" }, models.length > 1 ? el("label", {}, "model ", pick) : null,
      el("label", {}, "layer ", slider, label)), info, el("div", { class: "row" }, grid, el("div", {}, readout, detail, prof)), tableBox, bands);
    let hv = models[0].heads, li = 0, head = 0;
    function layer() { return hv.layers[li]; }
    function drawGrid() {
      const L = layer(), H = hv.num_heads, cols = Math.min(H, H > 16 ? 8 : 4), nrows = Math.ceil(H / cols);
      const traces = [], ann = [], lay = { width: 150 * cols + 40, height: 150 * nrows + 40, margin: { l: 10, r: 10, t: 24, b: 10 },
        grid: { rows: nrows, columns: cols, pattern: "independent", xgap: 0.08, ygap: 0.16 }, showlegend: false };
      const byHead = hv.rows.filter((r) => r.layer === L.layer);
      for (let h = 0; h < H; h++) {
        const t = headMap(L, h, GRID_SIDE), ax = h === 0 ? "" : String(h + 1);
        traces.push(heatmap(rows(t.z, t.m), null, null, { xaxis: "x" + ax, yaxis: "y" + ax, showscale: false, name: "head " + h }));
        lay["xaxis" + ax] = { showticklabels: false, ticks: "", showgrid: false, zeroline: false };
        lay["yaxis" + ax] = { showticklabels: false, ticks: "", showgrid: false, zeroline: false, autorange: "reversed", scaleanchor: "x" + ax };
        const r = byHead.find((x) => x.head === h) || {};
        ann.push({ text: "h" + h + "  R² " + fmt(r.toeplitzness_offdiag, 2) + "  k* " + fmt(r.peak_offset), xref: "x" + ax + " domain", yref: "y" + ax + " domain",
          x: 0.5, y: 1.0, yanchor: "bottom", showarrow: false, font: { size: 10 } });
      }
      lay.annotations = ann;
      label.textContent = String(L.layer);
      info.textContent = hv.model + ", layer " + L.layer + " of " + hv.num_layers + " (" + hv.num_heads + " heads, " + hv.n + " positions; " +
        "thumbnails " + GRID_SIDE + " × " + GRID_SIDE + " block means; click a head for its map at " + (hv.pooled ? L.rows + " blocks" : "full resolution") +
        ", values from " + hv.precision + "). " + L.conventions;
      return Plotly.react(grid, traces, lay, CONFIG);
    }
    function drawHead() {
      const L = layer(), t = headMap(L, head, L.rows), first = hv.first_position;
      const xs = t.m === hv.n ? range(first, first + t.m) : centers(t.edges.map((e) => Math.round(e * hv.n / L.rows)), first);
      const r = hv.rows.find((x) => x.layer === L.layer && x.head === head) || {};
      Plotly.react(detail, [heatmap(rows(t.z, t.m), xs, xs)], squareLayout("layer " + L.layer + ", head " + head + ": R² " + fmt(r.toeplitzness_offdiag, 3) +
        " (null " + fmt(r.null_mean_offdiag, 2) + "), peak k " + fmt(r.peak_offset), 380), CONFIG);
      detail._z = t; detail._xs = xs;
      const P = arr(L.profiles), n = hv.n, f = P.subarray(head * (2 * n - 1), (head + 1) * (2 * n - 1));
      Plotly.react(prof, [{ type: "scatter", mode: "lines", x: range(-(n - 1), n), y: f, line: { width: 1.2 } }], {
        title: { text: "offset profile f̂_h(k)", font: { size: 13 } }, width: 470, height: 240, margin: { l: 50, r: 16, t: 34, b: 38 },
        xaxis: { title: { text: "offset k = j − i" } }, showlegend: false }, CONFIG);
    }
    function drawTable() {
      const L = layer(), data = hv.rows.filter((r) => r.layer === L.layer);
      const cols = HEAD_COLUMNS.concat(data.length && "dominant_band" in data[0] ? ROPE_COLUMNS : []);
      tableBox.replaceChildren(el("div", { class: "note" }, "Scores of layer " + L.layer + " (click a column to sort, a row to show its head):"),
        sortable("heads-table", cols, data, (r) => { head = r.head; drawHead(); }));
      if (L.bands) {
        const E = arr(L.bands.energy), B = L.bands.energy.shape[1], wl = L.bands.wavelength;
        const z = range(0, hv.num_heads).map((h) => E.subarray(h * B, (h + 1) * B));
        Plotly.react(bands, [heatmap(z, range(0, B), range(0, hv.num_heads), { colorscale: "Cividis", hoverinfo: "text",
          text: z.map((row, h) => Array.from(row, (e, b) => "head " + h + ", band " + b + " (wavelength " + fmt(wl[b], 4) + " tokens): energy " + fmt(e, 4))) })],
        { title: { text: "RoPE band energy per head (band 0: highest frequency)", font: { size: 13 } }, width: 640, height: 120 + 18 * hv.num_heads,
          xaxis: { title: { text: "band" } }, yaxis: { title: { text: "head" }, autorange: "reversed" }, margin: { l: 50, r: 20, t: 36, b: 40 } }, CONFIG);
      } else bands.replaceChildren();
    }
    function drawAll() { slider.max = hv.layers.length - 1; slider.value = li; const p = drawGrid(); drawHead(); drawTable(); return p; }
    const ready = drawAll().then(() => {
      grid.on("plotly_click", (ev) => { head = ev.points[0].curveNumber; drawHead(); });
      detail.on("plotly_hover", (ev) => {
        const [a, b] = ev.points[0].pointIndex, t = detail._z, xs = detail._xs, value = t.z[a * t.m + b];
        const text = "head " + head + ": i = " + xs[a] + ", j = " + xs[b] + ", k = " + (xs[b] - xs[a]) + "\nA[i, j] = " + value.toPrecision(4);
        readout.textContent = text.replace("\n", "   "); showTip(ev.event, text);
      });
      detail.on("plotly_unhover", hideTip);
    });
    slider.addEventListener("input", () => { li = +slider.value; drawGrid(); drawHead(); drawTable(); });
    pick.addEventListener("change", () => { hv = models[+pick.value].heads; li = 0; head = 0; drawAll(); });
    return ready;
  }

  // ---- Attention and hidden states ---------------------------------------------------------------------------------
  const ATTN_COLUMNS = [{ key: "layer", label: "layer", digits: 0 }, { key: "head", label: "head", digits: 0 },
    { key: "toeplitzness_offdiag", label: "off-diag R²" }, { key: "null_mean_offdiag", label: "null" }, { key: "excess_offdiag", label: "excess" },
    { key: "positional_share", label: "positional share" }, { key: "positional_share_null", label: "share null" },
    { key: "sink_mass", label: "sink mass" }, { key: "entropy_normalised", label: "entropy / log keys" },
    { key: "span50", label: "span 50 %" }, { key: "span90", label: "span 90 %" }, { key: "profile_peak", label: "peak k", digits: 0 }];
  const HIDDEN_COLUMNS = [{ key: "layer", label: "layer", digits: 0 }, { key: "positional_share", label: "positional share" },
    { key: "positional_share_null", label: "share null" }, { key: "toeplitzness_offdiag", label: "off-diag R² of P_l" },
    { key: "toeplitzness_null_offdiag", label: "null" }, { key: "excess_offdiag", label: "excess" }, { key: "rank90", label: "rank 90%", digits: 0 },
    { key: "probe_mae", label: "probe MAE" }, { key: "probe_mae_baseline", label: "MAE baseline" }, { key: "probe_order_accuracy", label: "order accuracy" }];

  function corpusPicker(root, id, render) {  // one model's corpus tabs at a time
    const models = DATA.models.filter((m) => m.corpus), box = el("div");
    const pick = el("select", { id: id }, ...models.map((m, i) => el("option", { value: i, title: m.name }, m.label || m.name)));
    if (models.length > 1) root.append(el("div", { class: "controls" }, el("label", {}, "model ", pick)));
    root.append(box);
    pick.addEventListener("change", () => { box.replaceChildren(); render(box, models[+pick.value].corpus); });
    return render(box, models[0].corpus);
  }

  function attentionView(root, c) {
    const a = c.attention;
    // the statistics a result has (the eager path of transformers 4.x has no entropy or span columns)
    const columns = ATTN_COLUMNS.filter((col) => a.records.some((r) => r[col.key] !== undefined));
    const metric = el("select", { id: "attn-metric" }, ...columns.filter((col) => col.digits !== 0).map((col) => el("option", { value: col.key }, col.label)));
    const matrix = el("div", { class: "plot", id: "attn-matrix" }), prof = el("div", { class: "plot", id: "attn-profile" });
    const recv = el("div", { class: "plot", id: "attn-received" });
    const sinkRates = a.layers.map((l) => { const r = a.records.find((x) => x.layer === l); return r && r.sink_rate !== undefined ? "layer " + l + ": " + fmt(100 * r.sink_rate, 3) + " %" : null; }).filter((x) => x);
    root.append(el("div", { class: "note" }, c.model + ": " + a.conventions), el("div", { class: "controls" }, el("label", {}, "colour by ", metric)),
      el("div", { class: "row" }, matrix, prof, recv));
    if (sinkRates.length) root.append(el("div", { class: "note", id: "attn-sink-rate" }, "sink rate (share of a layer's heads whose mean attention to the first token exceeds "
      + a.records[0].sink_rate_eps + "): " + sinkRates.join(", ")));
    function showHead(layer, head) {
      const n = a.seq_len, P = arr(a.profiles[String(layer)]), f = P.subarray(head * (2 * n - 1), (head + 1) * (2 * n - 1));
      Plotly.react(prof, [{ type: "scatter", mode: "lines", x: range(-(n - 1), n), y: f }], { title: { text: "mean attention profile, layer " + layer + ", head " + head, font: { size: 13 } },
        width: 460, height: 300, xaxis: { title: { text: "offset k = j − i" } }, margin: { l: 50, r: 16, t: 36, b: 40 } }, CONFIG);
      const r = a.records.find((x) => x.layer === layer && x.head === head);
      if (r && r.received_by_position) {  // the positional-bias curve: a U when the middle is lost
        Plotly.react(recv, [{ type: "scatter", mode: "lines", x: r.received_positions, y: r.received_by_position }],
          { title: { text: "attention received by key position, head " + head, font: { size: 13 } }, width: 420, height: 300,
            xaxis: { title: { text: "key position j" } }, yaxis: { title: { text: "mean over the queries that see j" }, type: "log" },
            margin: { l: 60, r: 16, t: 36, b: 40 } }, CONFIG);
      }
    }
    function drawMatrix() {
      const key = metric.value, z = a.layers.map((l) => range(0, a.heads).map((h) => { const r = a.records.find((x) => x.layer === l && x.head === h); return r ? r[key] : null; }));
      return Plotly.react(matrix, [heatmap(z, range(0, a.heads), a.layers, { hoverinfo: "x+y+z", hovertemplate: "layer %{y}, head %{x}: %{z:.4g}<extra></extra>" })],
        { title: { text: "layer × head: " + metric.selectedOptions[0].textContent, font: { size: 13 } }, width: 520, height: 120 + 30 * a.layers.length,
          xaxis: { title: { text: "head" } }, yaxis: { title: { text: "layer" }, autorange: "reversed" }, margin: { l: 50, r: 20, t: 36, b: 40 } }, CONFIG);
    }
    root.append(sortable("attn-table", columns, a.records, (r) => showHead(r.layer, r.head)));
    metric.addEventListener("change", drawMatrix);
    const ready = drawMatrix().then(() => matrix.on("plotly_click", (ev) => showHead(ev.points[0].y, ev.points[0].x)));
    showHead(a.layers[0], 0);
    return ready;
  }

  // ---- Measures tab: any measure of the registry that ran on the corpus (posviz's state-norms, other packages') -----
  function renderMeasures(root) { return corpusPicker(root, "measures-model", measuresView); }

  function measuresView(root, c) {
    for (const [name, m] of Object.entries(c.measures || {})) {
      const values = m.columns.map((col) => el("span", { class: "value" }, col.label + ": " + fmt(m.values[col.key], 4)));
      root.append(el("h3", { class: "measure", id: "measure-" + name }, name + " (" + m.origin + ")"), el("div", { class: "note" }, m.summary),
        el("div", { class: "note measure-values" }, ...values.flatMap((v, i) => (i ? [" · ", v] : [v]))));
      if (m.conventions) root.append(el("div", { class: "note" }, c.model + ": " + m.conventions));
      if (m.records.length) root.append(sortable("measure-table-" + name, m.record_keys.map((k) => ({ key: k, label: k, digits: k === "layer" ? 0 : 4 })), m.records));
    }
  }

  function hiddenView(root, c) {
    const hd = c.hidden, plot = el("div", { class: "plot", id: "hidden-plot" });
    root.append(el("div", { class: "note" }, c.model + ": " + hd.conventions), plot, sortable("hidden-table", HIDDEN_COLUMNS, hd.records));
    const xs = hd.records.map((r) => r.layer), line = (key, name, dash) => ({ type: "scatter", mode: "lines+markers", x: xs, y: hd.records.map((r) => r[key]), name: name, line: { dash: dash || "solid" } });
    return Plotly.react(plot, [line("positional_share", "positional share"), line("positional_share_null", "share null", "dot"),
      line("toeplitzness_offdiag", "off-diag R² of P_l"), line("probe_order_accuracy", "order-probe accuracy")],
    { title: { text: "where position lives, layer by layer (0 = embedding output)", font: { size: 13 } }, width: 720, height: 340,
      xaxis: { title: { text: "hidden state" }, dtick: 1 }, margin: { l: 50, r: 20, t: 36, b: 40 } }, CONFIG);
  }

  // ---- Series --------------------------------------------------------------------------------------------------------
  function renderSeries(root) {
    const s = DATA.models.find((m) => m.series).series;
    const slider = el("input", { type: "range", id: "series-slider", min: 0, max: s.steps.length - 1, step: 1, value: s.steps.length - 1 });
    const label = el("span", { id: "series-label" }), map = el("div", { class: "plot", id: "series-map" }), curve = el("div", { class: "plot", id: "series-curve" });
    root.append(el("div", { class: "controls" }, el("label", {}, "step ", slider, label)), el("div", { class: "row" }, map, curve),
      el("div", { class: "note" }, s.run + ": every complete checkpoint; P block-averaged to " + (s.edges.length - 1) + " × " + (s.edges.length - 1) + "; null: exact mean."));
    const xs = centers(s.edges, 0), ys = s.scores.map((x) => x.toeplitzness_offdiag), nulls = s.scores.map((x) => x.null_mean_offdiag);
    Plotly.react(curve, [{ type: "scatter", mode: "lines+markers", x: s.steps, y: ys, name: "off-diagonal R²" },
      { type: "scatter", mode: "lines", x: s.steps, y: nulls, name: "null", line: { dash: "dot" } }],
    { title: { text: "Toeplitzness of E_P along training", font: { size: 13 } }, width: 460, height: 320, xaxis: { title: { text: "step" } }, margin: { l: 50, r: 16, t: 36, b: 40 } }, CONFIG);
    function draw() {
      const t = +slider.value, m = s.edges.length - 1;
      label.textContent = String(s.steps[t]) + "  (off-diagonal R² " + fmt(ys[t]) + ")";
      Plotly.relayout(curve, { shapes: [{ type: "line", x0: s.steps[t], x1: s.steps[t], yref: "paper", y0: 0, y1: 1, line: { color: "#ff2d55" } }] });
      return Plotly.react(map, [heatmap(rows(arr(s.maps[t]), m), xs, xs, { hoverinfo: "x+y+z", hovertemplate: "i %{y}, j %{x}: %{z:.4g}<extra></extra>" })],
        squareLayout("P at step " + s.steps[t], 380), CONFIG);
    }
    slider.addEventListener("input", draw);
    return draw();
  }

  // ---- Comparison ---------------------------------------------------------------------------------------------------
  function renderCompare(root) {
    const models = DATA.models.filter((m) => m.p), box = el("div", { class: "row" }), divs = [];
    root.append(el("div", { class: "note" }, "P of every model, zoom synchronised (in positions): drag on one to zoom all, double-click to reset."), box);
    let syncing = false;
    const done = models.map((m, i) => {
      const v = m.p, d = el("div", { class: "plot", id: "compare-" + i }), mats = pMatrices(v), first = v.first_position;
      const xs = v.pooled ? centers(v.edges, first) : range(first, first + v.n);
      const side = models.length > 2 ? 300 : 420;
      box.append(el("div", { style: "width: " + (side + 100) + "px" }, scoreLine(v.score), d)); divs.push(d);
      return Plotly.react(d, [heatmap(rows(mats.p, mats.m), xs, xs, { hoverinfo: "x+y+z", hovertemplate: "i %{y}, j %{x}: %{z:.5g}<extra></extra>",
        zmin: v.color_ranges.p[0], zmax: v.color_ranges.p[1], zauto: false })], squareLayout(m.label || m.name, side), CONFIG).then(() => d.on("plotly_relayout", (ev) => {
        if (syncing) return;
        const upd = {};
        for (const k of ["xaxis.range[0]", "xaxis.range[1]", "yaxis.range[0]", "yaxis.range[1]", "xaxis.autorange", "yaxis.autorange"]) if (k in ev) upd[k] = ev[k];
        if (!Object.keys(upd).length) return;
        syncing = true;
        Promise.all(divs.filter((o) => o !== d).map((o) => Plotly.relayout(o, upd))).then(() => { syncing = false; });
      }));
    });
    return Promise.all(done);
  }

  // The measures whose corpus tab has a view of its own (posviz.explorer.tab.PAGE_VIEWS lists the same names).
  const VIEWS = { attention: attentionView, hidden: hiddenView };
  // The measures of the weights whose tab has a view of its own (posviz.explorer.tab.WEIGHT_VIEWS lists the same names).
  const WEIGHT_VIEWS = { toeplitzness: renderP, heads: renderHeads };

  // ---- start -------------------------------------------------------------------------------------------------------
  function start() {
    document.body.append(tooltip);
    sidebar();
    const has = (key) => DATA.models.some((m) => m[key]);
    // the weight tabs: one per measure of the registry with a view of its own here (posviz.explorer.tab.WEIGHT_VIEWS)
    for (const t of DATA.weight_tabs || []) if (WEIGHT_VIEWS[t.name] && has(t.key)) addTab(t.key, t.title, WEIGHT_VIEWS[t.name]);
    // the corpus tabs: one per measure of the registry with a view of its own here (posviz.explorer.tab.PAGE_VIEWS)
    const corpusTabs = new Map();
    for (const m of DATA.models) for (const t of (m.corpus && m.corpus.tabs) || []) if (VIEWS[t.name] && !corpusTabs.has(t.name)) corpusTabs.set(t.name, t.title);
    for (const [name, title] of corpusTabs) addTab(name, title, (root) => corpusPicker(root, name + "-model", VIEWS[name]));
    if (DATA.models.some((m) => m.corpus && Object.keys(m.corpus.measures || {}).length)) addTab("measures", "Measures", renderMeasures);
    if (has("series")) addTab("series", "Series", renderSeries);
    if (DATA.models.filter((m) => m.p).length > 1) addTab("compare", "Comparison", renderCompare);
    const nav = $("tabs"), main = $("panels");
    for (const t of tabs) {
      nav.append(el("button", { id: "tabbtn-" + t.id, onclick: () => showTab(t.id) }, t.title));
      main.append(el("section", { id: "tab-" + t.id, class: "tab" }));
    }
    if (!tabs.length) { main.append(el("p", { class: "error" }, "Nothing to show.")); return; }
    showTab(tabs[0].id).then(() => {
      state.firstRenderMs = performance.now();
      document.body.setAttribute("data-ready", "1");
    });
  }
  start();
})();
