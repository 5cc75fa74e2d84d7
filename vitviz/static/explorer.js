// The Explorer: attention computed (attention.js) and drawn in the browser. Runs as gr.HTML's js_on_load, with
// `element`, `props`, `trigger` and `watch` in scope. props.value is the analysis' meta (vitviz/explorer.py);
// layers come from GET vitviz/explorer/layer as raw float32. Text is HTML, so it grows with the projector mode.

// Events for other views on the page (the Q·K scatter, say), on `document`:
// - it dispatches "vitviz-hover", detail {layer, head, query, mode}, whenever the query, layer or head it shows
//   changes; query is a token index (prefix tokens first), PROBE or READOUT below; mode "attention" or "inside";
// - it listens for "vitviz-highlight", detail {patches: [token indices] | null}: those tokens' patches are
//   outlined on its large canvas (prefix tokens have no place there); null clears the outline.

const PROBE = -1; // the query of an attention-pool's probe (SigLIP's readout), which is no token of the layers
const READOUT = -2; // the readout of several tokens (a distilled DeiT's two): their rows averaged, as the model does

const root = element.querySelector(".vx") || element;
// data-mode "attention": every head of the layer; "inside": one head, step by step (the Inside a head tab)
const INSIDE = root.dataset.mode === "inside";
const STORE = ((window.vitviz = window.vitviz || {}).layerStore ||= new Map()); // layers, shared by both modes
const FETCHES = (window.vitviz.layerFetches ||= new Map()); // layers on their way, shared too: one fetch each
const $ = (sel) => root.querySelector(sel);
root.innerHTML = `
  <div class="vx-bar">
    <label>Layer <input class="vx-layer" type="range" min="0" max="0" value="0" step="1"><b class="vx-layer-out">0</b></label>
    <label>Head <select class="vx-head"></select></label>
    <label>Show <select class="vx-measure"><option value="w">weight α</option><option value="wv">weight × value norm ‖α W_O v‖</option></select></label>
    <label>Temperature <input class="vx-temp" type="range" min="-2" max="2" value="0" step="0.05"><b class="vx-temp-out">T = 1.00 (the model)</b></label>
    <label>Colours <select class="vx-scale"><option value="own">each map to its own maximum</option><option value="shared">shared by the layer's heads</option></select></label>
    <label>View <select class="vx-view"><option value="heads">this layer's heads</option><option value="model">every layer × head</option></select></label>
    <button class="vx-readout" type="button">Query: readout (CLS)</button>
  </div>
  <div class="vx-status" role="status"></div>
  <div class="vx-main">
    <figure class="vx-big">
      <canvas class="vx-canvas vx-big-canvas"></canvas>
      <figcaption class="vx-big-cap"></figcaption>
    </figure>
    <div class="vx-side">
      <div class="vx-tiles"></div>
      <div class="vx-legend">
        <div class="vx-bar-row"><span class="vx-lo">0</span><span class="vx-ramp"></span><span class="vx-hi"></span></div>
        <div class="vx-scale-note"></div>
        <div><span class="vx-swatch"></span> the query patch (white, black border; none when the query is the readout).
          Hover to move it, click to pin it.</div>
      </div>
    </div>
  </div>
  <div class="vx-model" hidden></div>
  <div class="vx-mech"></div>`;

const ui = {
  layer: $(".vx-layer"), layerOut: $(".vx-layer-out"), head: $(".vx-head"), measure: $(".vx-measure"),
  temp: $(".vx-temp"), tempOut: $(".vx-temp-out"), view: $(".vx-view"), readout: $(".vx-readout"),
  status: $(".vx-status"), big: $(".vx-big-canvas"), bigCap: $(".vx-big-cap"), tiles: $(".vx-tiles"),
  model: $(".vx-model"), mech: $(".vx-mech"), lo: $(".vx-lo"), hi: $(".vx-hi"), ramp: $(".vx-ramp"),
  scaleNote: $(".vx-scale-note"), scale: $(".vx-scale"),
};

const S = {
  meta: null, shape: null, layers: new Map(), wanted: [], inflight: null, generation: 0, photo: null,
  layer: -1, head: 0, query: 0, pinned: false, T: 1, measure: "w", view: "heads", scale: "own",
  scores: null, weights: null, work: null, probe: null, tileCanvases: [], modelCanvases: [], pending: null, frame: 0,
  waiters: [], failed: new Map(), drag: null, pendingStamp: null, latencies: [], // latencies: pointer event -> its maps painted, ms
  highlight: null, told: "", // the tokens outlined at another view's request; the last vitviz-hover sent
};
const HIGHLIGHT = "#00e5ff"; // cyan: apart from the query's white marker and from every colormap's ends

function endpoint(layer) {
  const base = ((window.gradio_config && window.gradio_config.root) || location.origin).replace(/\/$/, "");
  const q = new URLSearchParams({ session: S.meta.session, key: S.meta.key, layer: String(layer) });
  return `${base}/vitviz/explorer/layer?${q}`;
}

function readoutQuery() {
  // the query that the readout button and hover(l, h, -1) ask: the probe, the readout's one token, or its tokens
  if (S.probe) return PROBE;
  const { tokens } = S.meta.readout;
  return tokens.length === 1 ? tokens[0] : READOUT;
}

function shortName(t) {
  if (t === PROBE) return "the pooling probe";
  if (t === READOUT) return "the readout";
  const n = S.meta.prefix.length;
  if (t < n) return S.meta.prefix[t];
  const p = t - n, gw = S.meta.grid[1];
  return `p${p} (${Math.floor(p / gw)}, ${p % gw})`;
}

function headColour(h) {
  const colours = S.meta.headColours; // plots.HEAD_COLOURS: the charts' colours, colour-blind safe
  return colours[h % colours.length];
}

function tokenName(t) {
  if (t === PROBE) return "the readout, the pooling probe (a learned query that reads the last layer's tokens; the layer slider does not change it)";
  if (t === READOUT) return `the readout, ${S.meta.readout.tokens.map((i) => S.meta.prefix[i]).join(" and ")}: their rows averaged, as the model averages what it reads from them`;
  const m = S.meta, n = m.prefix.length;
  if (t < n) return m.prefix[t];
  const p = t - n, gw = m.grid[1];
  return `patch ${p} (row ${Math.floor(p / gw)}, column ${p % gw})`;
}

// ---- data: one fetch at a time, the layer on screen first, then its neighbours
function storeKey(layer) { return `${S.meta.session}|${S.meta.key}|${layer}`; }

function arrived(layer, data) {
  S.layers.set(layer, data);
  showStatus();
  if (layer === S.layer || S.view === "model") schedule();
  S.waiters = S.waiters.filter((w) => (S.layers.has(w.layer) ? (w.resolve(), false) : true));
}

function want(layer, first) {
  if (layer < 0 || layer >= S.meta.layers || S.layers.has(layer) || (S.inflight && S.inflight.layer === layer)) return;
  const kept = STORE.get(storeKey(layer)); // the other mode fetched it already
  if (kept) { arrived(layer, kept); return; }
  S.wanted = S.wanted.filter((l) => l !== layer);
  if (first) S.wanted.unshift(layer); else S.wanted.push(layer);
  pump();
}

function pump() {
  if (S.inflight || !S.meta) return;
  while (S.wanted.length && S.layers.has(S.wanted[0])) S.wanted.shift(); // the other mode brought it meanwhile
  if (!S.wanted.length) return;
  const layer = S.wanted.shift(), generation = S.generation, started = performance.now(), key = storeKey(layer);
  S.inflight = { layer };
  let fetching = FETCHES.get(key);
  if (!fetching) {
    const { tokens, heads, dh } = S.shape;
    fetching = fetch(endpoint(layer), { credentials: "same-origin" })
      .then(async (r) => {
        if (!r.ok) throw Object.assign(new Error((await r.text()) || `HTTP ${r.status}`), { status: r.status });
        const data = vitvizLayer(await r.arrayBuffer(), tokens, heads, dh);
        data.fetchMs = performance.now() - started;
        STORE.set(key, data);
        return data;
      })
      .finally(() => FETCHES.delete(key));
    FETCHES.set(key, fetching);
  }
  fetching
    .then((data) => { if (generation === S.generation) { S.failed.delete(layer); arrived(layer, data); } })
    .catch((e) => {
      if (generation !== S.generation) return;
      if (e.status === 503) { setTimeout(() => want(layer, layer === S.layer), 300); return; } // busy: again soon
      S.failed.set(layer, e.message);
      ui.status.textContent = `Layer ${layer} could not be loaded: ${e.message}`;
      if (layer === S.layer) ui.bigCap.textContent = `Layer ${layer} could not be loaded: ${e.message}`;
      S.waiters = S.waiters.filter((w) => (w.layer === layer ? (w.reject(e), false) : true));
    })
    .finally(() => {
      if (generation !== S.generation) return;
      S.inflight = null;
      pump();
    });
}

function whenLoaded(layer) {
  if (S.layers.has(layer)) return Promise.resolve();
  const waiting = new Promise((resolve, reject) => S.waiters.push({ layer, resolve, reject }));
  want(layer, true); // after the waiter: a layer the other mode already holds arrives at once
  return waiting;
}

function showStatus() {
  if (!S.meta) return;
  const n = S.layers.size, L = S.meta.layers;
  const mb = S.layers.size ? (S.layers.values().next().value.bytes / 1e6).toFixed(1) : "?";
  ui.status.textContent = n < L
    ? `Layers in this browser: ${n} of ${L} (${mb} MB each, the rest loading in the background)`
    : `All ${L} layers are in this browser (${mb} MB each): every move below is computed here, with no trip to the server.`;
}

// ---- a new analysis
function start(meta) {
  S.generation += 1;
  S.inflight = null; S.layers = new Map(); S.wanted = []; S.waiters = []; S.failed = new Map();
  S.meta = meta;
  if (!meta || !meta.tokens) { // no photo: nothing of the last one stays on screen
    S.meta = null;
    for (const el of [ui.tiles, ui.model, ui.mech, ui.bigCap]) el.innerHTML = "";
    ui.big.getContext("2d").clearRect(0, 0, ui.big.width, ui.big.height);
    ui.status.textContent = "Upload a photo or click an example.";
    return;
  }
  const mine = `${meta.session}|${meta.key}|`;
  for (const k of [...STORE.keys()]) if (!k.startsWith(mine)) STORE.delete(k); // one photo's layers at a time
  S.shape = { tokens: meta.tokens, heads: meta.heads, dh: meta.headWidth, scale: meta.scale };
  S.scores = new Float32Array(meta.tokens);
  S.weights = new Float32Array(meta.heads * meta.tokens);
  S.work = new Float32Array(meta.tokens);
  S.layer = S.layer < 0 ? meta.layers - 1 : Math.min(S.layer, meta.layers - 1); // the last layer at first
  S.head = Math.min(S.head, meta.heads - 1);
  S.query = 0; S.pinned = false;
  ui.layer.max = String(meta.layers - 1); ui.layer.value = String(S.layer); ui.layerOut.textContent = S.layer;
  ui.head.innerHTML = Array.from({ length: meta.heads }, (_, h) => `<option value="${h}">head ${h}</option>`).join("");
  ui.head.value = String(S.head);
  S.probe = meta.probe ? { q: floats(meta.probe.q), k: floats(meta.probe.k), valueNorms: floats(meta.probe.valueNorms) } : null;
  ui.readout.hidden = !S.probe && !meta.readout.tokens.length;
  ui.readout.textContent = S.probe ? "Query: readout (the pooling probe)"
    : `Query: readout (${meta.readout.tokens.map((i) => meta.prefix[i]).join(" + ")})`;
  buildTiles(); buildModelView();
  const img = new Image();
  img.onload = () => { S.photo = img; schedule(); };
  img.src = meta.photo;
  want(S.layer, true);
  for (let d = 1; d < meta.layers; d++) { want(S.layer + d, false); want(S.layer - d, false); }
  showStatus();
}

function floats(base64) {
  const text = atob(base64), bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return new Float32Array(bytes.buffer); // little-endian, as Python wrote it
}

function colourRamp() {
  const lut = S.meta.colormaps[S.meta.cmap] || S.meta.colormaps.inferno;
  const stops = [0, 64, 128, 192, 255].map((i) => `rgb(${lut[3 * i]},${lut[3 * i + 1]},${lut[3 * i + 2]}) ${(i / 2.55).toFixed(0)}%`);
  ui.ramp.style.background = `linear-gradient(to right, ${stops.join(",")})`;
}

const STEPS = ["2 · Scores minus the top score, s − max s", "4 · Weight × value norm, α ‖W<sub>O</sub> v‖"];

function buildTiles() {
  ui.tiles.innerHTML = "";
  S.tileCanvases = [];
  if (INSIDE) {
    ui.tiles.classList.add("vx-steps");
    for (const step of STEPS) {
      const fig = document.createElement("figure");
      fig.className = "vx-tile vx-step";
      fig.innerHTML = `<canvas class="vx-canvas"></canvas><figcaption>${step}</figcaption><div class="vx-range"></div>`;
      attachPointer(fig.querySelector("canvas"));
      ui.tiles.appendChild(fig);
      S.tileCanvases.push(fig.querySelector("canvas"));
    }
    colourRamp();
    return;
  }
  for (let h = 0; h < S.meta.heads; h++) {
    const fig = document.createElement("figure");
    fig.className = "vx-tile";
    fig.style.borderColor = headColour(h);
    fig.innerHTML = `<canvas class="vx-canvas"></canvas><figcaption>head ${h}</figcaption>`;
    const canvas = fig.querySelector("canvas");
    canvas.dataset.head = String(h);
    attachPointer(canvas, h);
    ui.tiles.appendChild(fig);
    S.tileCanvases.push(canvas);
  }
  colourRamp();
}

function buildModelView() {
  const { layers, heads } = S.meta;
  ui.model.style.gridTemplateColumns = `auto repeat(${heads}, minmax(0, 1fr))`;
  const cells = ['<div class="vx-mh"></div>'];
  for (let h = 0; h < heads; h++) cells.push(`<div class="vx-mh">head ${h}</div>`);
  for (let l = 0; l < layers; l++) {
    cells.push(`<div class="vx-ml">layer ${l}</div>`);
    for (let h = 0; h < heads; h++) cells.push(`<canvas class="vx-canvas" data-layer="${l}" data-head="${h}"></canvas>`);
  }
  ui.model.innerHTML = cells.join("");
  S.modelCanvases = Array.from(ui.model.querySelectorAll("canvas"));
  for (const c of S.modelCanvases) {
    c.addEventListener("click", () => { setLayer(+c.dataset.layer); S.head = +c.dataset.head; ui.head.value = c.dataset.head; setView("heads"); });
  }
}

// ---- pointer: the last position wins; one computation and paint per animation frame
function attachPointer(canvas, head) {
  // A mouse: hover moves the query, a click pins it (a second click on it unpins). A finger or a pen: the query
  // follows it while it is down, and stays pinned where it lifts.
  canvas.addEventListener("pointermove", (e) => {
    if (S.pinned && S.drag !== e.pointerId) return;
    const t = patchAt(canvas, e);
    if (t === null) return;
    S.pending = t;
    S.pendingStamp = e.timeStamp;
    schedule();
  });
  canvas.addEventListener("pointerdown", (e) => {
    const t = patchAt(canvas, e);
    if (t === null) return;
    if (head !== undefined && head !== S.head) { S.head = head; ui.head.value = String(head); }
    if (e.pointerType === "mouse") S.pinned = !(S.pinned && t === (S.pending ?? S.query));
    else { S.pinned = true; S.drag = e.pointerId; }
    S.pending = t;
    schedule();
  });
  const lift = (e) => { if (S.drag === e.pointerId) S.drag = null; };
  canvas.addEventListener("pointerup", lift);
  canvas.addEventListener("pointercancel", lift);
}

function patchAt(canvas, e) {
  if (!S.meta) return null;
  const r = canvas.getBoundingClientRect(), [gh, gw] = S.meta.grid;
  const x = (e.clientX - r.left) / r.width, y = (e.clientY - r.top) / r.height;
  if (!(x >= 0 && x < 1 && y >= 0 && y < 1)) return null;
  return S.meta.prefix.length + Math.floor(y * gh) * gw + Math.floor(x * gw);
}

function schedule() {
  if (!S.frame) S.frame = requestAnimationFrame(() => { S.frame = 0; paint(); });
}

// ---- computing and painting
function rowData(layer) {
  // the probe attends once, after the last layer, with its own query, keys and values: the same for every layer
  return S.query === PROBE ? S.probe : S.layers.get(layer);
}

function computeLayer(layer) {
  const data = rowData(layer), { tokens, heads } = S.shape;
  const queries = S.query === READOUT ? S.meta.readout.tokens : [S.query === PROBE ? 0 : S.query];
  let entropy = 0;
  for (let h = 0; h < heads; h++) {
    const row = S.weights.subarray(h * tokens, (h + 1) * tokens);
    for (const [i, query] of queries.entries()) { // several readout tokens: the mean of their rows
      vitvizScores(S.scores, data, h, query, S.shape);
      if (i === 0) { vitvizSoftmax(row, S.scores, S.T); continue; }
      vitvizSoftmax(S.work, S.scores, S.T);
      for (let j = 0; j < tokens; j++) row[j] = (row[j] * i + S.work[j]) / (i + 1);
    }
    if (h === S.head) { entropy = 0; for (let j = 0; j < tokens; j++) if (row[j] > 0) entropy -= row[j] * Math.log(row[j]); }
  }
  vitvizScores(S.scores, data, S.head, queries[0], S.shape); // the chosen head's scores (its first query's), for the mechanism
  return entropy;
}

function shown(layer, h) {
  // what a map paints for head h: α_j, or α_j ||W_O,h v_j||, over the patches
  const { tokens } = S.shape, n = S.meta.prefix.length;
  const row = S.weights.subarray(h * tokens, (h + 1) * tokens);
  if (S.measure === "w") return row.subarray(n);
  const norms = rowData(layer).valueNorms.subarray(h * tokens, (h + 1) * tokens);
  for (let j = n; j < tokens; j++) S.work[j] = row[j] * norms[j];
  return S.work.subarray(n);
}

function sizeCanvas(canvas) {
  const ratio = S.meta.photoSize[1] / S.meta.photoSize[0];
  const w = Math.max(1, Math.round(canvas.clientWidth * (window.devicePixelRatio || 1)));
  const h = Math.max(1, Math.round(w * ratio));
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
}

// The page's colour scale, as maps.colour_scale makes it, from the rule in the meta (its floor and percentiles):
// "log" spans log10 of the values above floor x the largest, between two percentiles; "robust" is linear up to the
// upper percentile; "min-max" spans the values. A scale is made from every map it is shared by.
function percentileOf(sorted, q) { // numpy's default: linear between the two nearest ranks
  const at = (sorted.length - 1) * q / 100, i = Math.floor(at), f = at - i;
  return i + 1 < sorted.length ? sorted[i] + f * (sorted[i + 1] - sorted[i]) : sorted[i];
}

function scaleOf(maps, kind = S.meta.colourScale) {
  const { floor: fraction, percentiles: [low, high] } = S.meta.scaleRule;
  let lo = Infinity, hi = -Infinity;
  for (const m of maps) for (let i = 0; i < m.length; i++) { lo = Math.min(lo, m[i]); hi = Math.max(hi, m[i]); }
  if (kind === "log") {
    const floor = hi > 0 ? Math.max(hi * fraction, 1.1754944e-38) : 1e-12, above = [];
    let a = Infinity, b = -Infinity;
    for (const m of maps) for (let i = 0; i < m.length; i++) {
      const v = Math.log10(Math.max(m[i], floor)); a = Math.min(a, v); b = Math.max(b, v);
      if (m[i] > floor) above.push(v);
    }
    above.sort((x, y) => x - y);
    const from = above.length ? percentileOf(above, low) : 0, to = above.length ? percentileOf(above, high) : 0;
    return to > from ? { log: true, floor, lo: from, hi: to } : { log: true, floor, lo: a, hi: b };
  }
  if (kind === "robust") {
    const all = []; for (const m of maps) for (let i = 0; i < m.length; i++) all.push(m[i]);
    all.sort((x, y) => x - y);
    const clip = percentileOf(all, high);
    if (clip > lo) return { log: false, lo, hi: clip };
  }
  return { log: false, lo, hi };
}

function atScale(v, sc) { return sc.log ? Math.log10(Math.max(v, sc.floor)) : v; }

const cells = document.createElement("canvas");
function drawMap(canvas, values, sc, markQuery) {
  sizeCanvas(canvas);
  const ctx = canvas.getContext("2d"), [gh, gw] = S.meta.grid;
  const lut = S.meta.colormaps[S.meta.cmap] || S.meta.colormaps.inferno;
  if (cells.width !== gw || cells.height !== gh) { cells.width = gw; cells.height = gh; }
  const cctx = cells.getContext("2d"), img = cctx.createImageData(gw, gh), px = img.data;
  const span = Math.max(sc.hi - sc.lo, 1e-12), alpha = Math.round(255 * S.meta.alpha);
  for (let i = 0; i < gh * gw; i++) {
    const t = Math.min(1, Math.max(0, (atScale(values[i], sc) - sc.lo) / span));
    const c = 3 * Math.round(t * 255);
    px[4 * i] = lut[c]; px[4 * i + 1] = lut[c + 1]; px[4 * i + 2] = lut[c + 2]; px[4 * i + 3] = alpha;
  }
  cctx.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = true;
  if (S.photo) ctx.drawImage(S.photo, 0, 0, canvas.width, canvas.height); else ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false; // one square per patch, no smoothing
  ctx.drawImage(cells, 0, 0, canvas.width, canvas.height);
  if (markQuery) drawMarker(ctx, canvas);
  if (canvas === ui.big && S.highlight) drawHighlight(ctx, canvas);
}

function drawHighlight(ctx, canvas) {
  const n = S.meta.prefix.length, [gh, gw] = S.meta.grid, cw = canvas.width / gw, ch = canvas.height / gh;
  const thick = Math.max(2, Math.round(Math.min(canvas.width, 900) / 300));
  for (const t of S.highlight) {
    if (!(t >= n && t < n + gh * gw)) continue;
    const p = t - n, x = (p % gw) * cw, y = Math.floor(p / gw) * ch;
    ctx.lineWidth = thick + 2; ctx.strokeStyle = "#000";
    ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
    ctx.lineWidth = thick; ctx.strokeStyle = HIGHLIGHT;
    ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
  }
}

function tell() {
  // vitviz-hover, once per change of what is shown
  const told = `${S.layer}|${S.head}|${S.query}`;
  if (told === S.told) return;
  S.told = told;
  const detail = { layer: S.layer, head: S.head, query: S.query, mode: INSIDE ? "inside" : "attention" };
  document.dispatchEvent(new CustomEvent("vitviz-hover", { detail }));
}

function drawMarker(ctx, canvas) {
  const n = S.meta.prefix.length, [gh, gw] = S.meta.grid;
  if (S.query < n) return; // a prefix token has no place on the photo: the caption names it
  const p = S.query - n, cw = canvas.width / gw, ch = canvas.height / gh;
  const x = (p % gw) * cw, y = Math.floor(p / gw) * ch;
  const thick = Math.max(3, Math.round(Math.min(canvas.width, 900) / 150));
  ctx.lineWidth = thick + 4; ctx.strokeStyle = "#000";
  ctx.strokeRect(x - thick / 2, y - thick / 2, cw + thick, ch + thick);
  ctx.lineWidth = thick; ctx.strokeStyle = "#fff";
  ctx.strokeRect(x - thick / 2, y - thick / 2, cw + thick, ch + thick);
}


function pct(x) { return x >= 0.1 ? `${(100 * x).toFixed(1)} %` : x >= 0.001 ? `${(100 * x).toFixed(2)} %` : `${(100 * x).toExponential(1)} %`; }

function paint() {
  if (!S.meta || !S.meta.tokens) return null;
  if (S.pending !== null) { S.query = S.pending; S.pending = null; }
  if (S.query === PROBE && S.view === "model") S.query = S.meta.prefix.length; // the probe has no layers to tile
  if (!S.layers.has(S.layer) && S.query !== PROBE) {
    ui.bigCap.textContent = S.failed.has(S.layer) ? `Layer ${S.layer} could not be loaded: ${S.failed.get(S.layer)}`
      : `Loading layer ${S.layer}…`;
    S.pendingStamp = null; // the wait for a layer is not a pointer's latency
    return null;
  }
  const t0 = performance.now();
  const entropy = computeLayer(S.layer);
  const maps = [];
  for (let h = 0; h < S.meta.heads; h++) maps.push(shown(S.layer, h).slice());
  const shared = S.scale === "own" ? null : scaleOf(maps);
  const scaleFor = (v) => shared || scaleOf([v]);
  if (INSIDE) paintSteps();
  else if (S.view === "model") paintModel();
  else maps.forEach((v, h) => drawMap(S.tileCanvases[h], v, scaleFor(v), true));
  const big = maps[S.head], bigScale = scaleFor(big);
  drawMap(ui.big, big, bigScale, true);
  const label = (x) => (S.measure === "w" ? pct(x) : x.toPrecision(3));
  const end = (x) => label(bigScale.log ? 10 ** x : x);
  ui.lo.textContent = end(bigScale.lo);
  ui.hi.textContent = end(bigScale.hi);
  const whose = S.scale === "own" ? `each map on its own (the large one: ${end(bigScale.lo)} to ${end(bigScale.hi)})`
    : `one scale for the layer's ${S.meta.heads} heads`;
  ui.scaleNote.textContent = `Colour: ${S.meta.scaleName}, as the page's colour scale sets it; ${whose}.`;
  caption(entropy);
  mechanism();
  tell();
  const paintMs = performance.now() - t0;
  if (S.pendingStamp !== null) { S.latencies.push(performance.now() - S.pendingStamp); S.pendingStamp = null; }
  if (S.latencies.length > 1000) S.latencies.splice(0, 500);
  const { tokens } = S.shape;
  return { weights: S.weights.slice(S.head * tokens, (S.head + 1) * tokens), paintMs };
}

function paintSteps() {
  // the chosen head's scores as s - max s (softmax ignores a shift), and its weight x value norms
  const n = S.meta.prefix.length, { tokens } = S.shape, s = S.scores;
  let best = 0;
  for (let j = 1; j < tokens; j++) if (s[j] > s[best]) best = j;
  const hi = s[best];
  let lo = 0, patchTop = -Infinity;
  for (let j = n; j < tokens; j++) { lo = Math.min(lo, s[j] - hi); patchTop = Math.max(patchTop, s[j] - hi); }
  const shifted = new Float32Array(tokens - n);
  for (let j = n; j < tokens; j++) shifted[j - n] = s[j] - hi - lo; // from 0 (the lowest patch) up
  drawMap(S.tileCanvases[0], shifted, { log: false, lo: 0, hi: patchTop - lo }, true); // scores: always linear
  const norms = rowData(S.layer).valueNorms.subarray(S.head * tokens, (S.head + 1) * tokens);
  const row = S.weights.subarray(S.head * tokens, (S.head + 1) * tokens), wv = new Float32Array(tokens - n);
  for (let j = n; j < tokens; j++) wv[j - n] = row[j] * norms[j];
  const wvScale = scaleOf([wv]), wvEnd = (x) => (wvScale.log ? 10 ** x : x).toPrecision(3);
  drawMap(S.tileCanvases[1], wv, wvScale, true);
  const ranges = ui.tiles.querySelectorAll(".vx-range");
  ranges[0].textContent = `colour: ${lo.toFixed(2)} (dark) to ${patchTop.toFixed(2)} (bright); 0 is the top key, ` +
    `${best < n ? `${S.meta.prefix[best]}, not on the photo` : shortName(best)}`;
  ranges[1].textContent = `colour: ${S.meta.scaleName}, ${wvEnd(wvScale.lo)} to ${wvEnd(wvScale.hi)}`;
}

function paintModel() {
  // every loaded layer's heads for this query: layer by layer, rows of the grid
  const keep = S.layer, { heads } = S.meta;
  for (const c of S.modelCanvases) if (!S.layers.has(+c.dataset.layer)) c.getContext("2d").clearRect(0, 0, c.width, c.height);
  for (const [l] of S.layers) {
    computeLayer(l);
    const vs = [];
    for (let h = 0; h < heads; h++) vs.push(shown(l, h).slice());
    const shared = S.scale === "own" ? null : scaleOf(vs);
    for (let h = 0; h < heads; h++) drawMap(S.modelCanvases[l * heads + h], vs[h], shared || scaleOf([vs[h]]), true);
  }
  computeLayer(keep);
}

function caption(entropy) {
  const n = S.meta.prefix.length, { tokens } = S.shape;
  const row = S.weights.subarray(S.head * tokens, (S.head + 1) * tokens);
  const prefix = S.meta.prefix.map((name, i) => `${name} ${pct(row[i])}`).join(", ");
  const hidden = S.meta.prefix.length > 1 ? "The prefix tokens are not on the photo; they get" : "Not on the photo:";
  const where = S.query === PROBE ? `After layer ${S.meta.layers - 1}` : `Layer ${S.layer}`;
  ui.bigCap.innerHTML = (INSIDE ? "<b>3 · Weights α = softmax(s / T).</b> " : "") + `${where}, <span class="vx-chip" style="background:${headColour(S.head)}"></span><b>head ${S.head}</b>: ` +
    `attention of <b>${tokenName(S.query)}</b>${S.pinned ? " (pinned: click it again to unpin)" : ""}. ` +
    `Over the ${tokens} keys it is as spread out as if ${Math.exp(entropy).toFixed(1)} keys shared it equally (the effective number of keys, e<sup>entropy</sup>). ` +
    (S.meta.prefix.length ? `${hidden} ${prefix}.` : "");
}

const TIE = 0.005; // a score this close to the top one shows as 0.00: it is named a tie, never "−0.00"

function belowTop(gap, top) {
  // s_j − max s as a class reads it: the top key, a tie with it, or how far below it
  if (top) return "0 (the top key)";
  return Math.abs(gap) < TIE ? "tied with the top key" : gap.toFixed(2);
}

function mechanism() {
  const { tokens, dh } = S.shape;
  const s = S.scores, w = S.weights.subarray(S.head * tokens, (S.head + 1) * tokens);
  const norms = rowData(S.layer).valueNorms.subarray(S.head * tokens, (S.head + 1) * tokens);
  const model = new Float32Array(tokens);
  vitvizSoftmax(model, s, 1);
  let hi = -Infinity, lo = Infinity;
  for (let j = 0; j < tokens; j++) { if (s[j] > hi) hi = s[j]; if (s[j] < lo) lo = s[j]; }
  const order = Array.from({ length: tokens }, (_, j) => j).sort((a, b) => w[b] - w[a]).slice(0, 6);
  const rows = order.map((j) => `<tr><td>${shortName(j)}</td><td>${s[j].toFixed(2)}</td><td>${belowTop(s[j] - hi, j === order[0])}</td>` +
    `<td>${pct(w[j])}</td><td>${pct(model[j])}</td><td>${(w[j] * norms[j]).toPrecision(3)}</td></tr>`).join("");
  const second = order.length > 1 ? +(s[order[1]] - hi).toFixed(2) : 0;
  const exponent = +(second / S.T).toFixed(2); // rounded as shown, so that e^x agrees with a calculator
  const of = S.query === PROBE ? "the pooling probe" : `layer ${S.layer}`;
  const runnerUp = Math.abs(second) < TIE
    ? `the next key, ${shortName(order[1])}, is tied with the top key (their scores differ by less than ${TIE}), so it gets the same weight`
    : `a key ${Math.abs(second).toFixed(2)} below the top gets e<sup>${exponent.toFixed(2)}</sup> = ${pct(Math.exp(exponent))} of the top key's weight`;
  const [first, ...rest] = S.query === READOUT ? S.meta.readout.tokens.map((i) => S.meta.prefix[i]) : [];
  const averaged = first ? `<p>The readout's row is the mean of ${[first, ...rest].join(" and ")}'s rows; the scores here are ${first}'s, the weights α the mean.</p>` : "";
  ui.mech.innerHTML = `<h4>How head ${S.head} of ${of} computes this row</h4>${averaged}
    <p>Scores s<sub>j</sub> = q·k<sub>j</sub>/√${dh} of the query against all ${tokens} keys run from ${lo.toFixed(2)} to ${hi.toFixed(2)}.
    Softmax ignores a shift that is the same for every key, so only s<sub>j</sub> − max s matters:
    ${runnerUp} at T = ${S.T.toFixed(2)}. Weights α = softmax(s / T)${S.T === 1 ? " (T = 1: the model itself)" : "; T = 1 is the model, T &lt; 1 sharpens, T &gt; 1 flattens"}.</p>
    <table><thead><tr><th>key (row, column)</th><th>s<sub>j</sub></th><th>s<sub>j</sub> − max</th><th>α<sub>j</sub> at T</th><th>α<sub>j</sub> at T = 1</th><th>α<sub>j</sub> ‖W<sub>O</sub> v<sub>j</sub>‖</th></tr></thead>
    <tbody>${rows}</tbody></table>
    <p>α<sub>j</sub> ‖W<sub>O</sub> v<sub>j</sub>‖: what key j really passes on, its weight times the size of its value
    after this head's slice of the output projection (Kobayashi et al. 2020).</p>`;
}

// ---- controls
function setLayer(l) {
  if (!S.meta || !S.meta.tokens) throw new Error("no photo analysed yet");
  S.layer = Math.max(0, Math.min(S.meta.layers - 1, l));
  ui.layer.value = String(S.layer); ui.layerOut.textContent = S.layer;
  want(S.layer, true);
  schedule();
}

function setView(v) {
  S.view = v; ui.view.value = v;
  ui.model.hidden = v !== "model";
  ui.tiles.hidden = v === "model";
  schedule();
}

ui.layer.addEventListener("input", () => setLayer(+ui.layer.value));
ui.head.addEventListener("change", () => { S.head = +ui.head.value; schedule(); });
ui.measure.addEventListener("change", () => { S.measure = ui.measure.value; schedule(); });
ui.view.addEventListener("change", () => setView(ui.view.value));
ui.scale.addEventListener("change", () => { S.scale = ui.scale.value; schedule(); });
ui.temp.addEventListener("input", () => setTemperature(Math.pow(2, +ui.temp.value)));
ui.readout.addEventListener("click", () => {
  if (S.probe) setView("heads");
  S.pending = readoutQuery(); S.pinned = true; schedule();
});
attachPointer(ui.big);
root.tabIndex = 0;
root.addEventListener("keydown", (e) => {
  if (!S.meta || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
  if (e.key === "ArrowLeft" || e.key === "ArrowRight") { setLayer(S.layer + (e.key === "ArrowRight" ? 1 : -1)); e.preventDefault(); }
  if (e.key === "ArrowUp" || e.key === "ArrowDown") {
    S.head = (S.head + (e.key === "ArrowDown" ? 1 : S.meta.heads - 1)) % S.meta.heads; ui.head.value = String(S.head); schedule(); e.preventDefault();
  }
});

function setTemperature(t) {
  if (!(t > 0) || !Number.isFinite(t)) throw new Error(`temperature must be a positive number, got ${t}`);
  S.T = t;
  ui.temp.value = String(Math.log2(t));
  ui.tempOut.textContent = `T = ${t.toFixed(2)}${t === 1 ? " (the model)" : ""}`;
  schedule();
}

new ResizeObserver(() => schedule()).observe(root);
document.addEventListener("vitviz-highlight", (e) => {
  const patches = e.detail && e.detail.patches;
  S.highlight = Array.isArray(patches) ? patches.map(Number) : null;
  schedule();
});

// ---- the test handle: what the page computed and drew, for the browser tests and anyone checking the numbers
function checkedIndex(name, value, size) {
  if (!Number.isInteger(value) || value < 0 || value >= size) throw new Error(`${name} must be an integer in [0, ${size}), got ${value}`);
}

const handle = {
  hover(layer, head, patch) {
    if (!S.meta || !S.meta.tokens) throw new Error("no photo analysed yet");
    const [gh, gw] = S.meta.grid;
    checkedIndex("layer", layer, S.meta.layers);
    checkedIndex("head", head, S.meta.heads);
    if (patch !== -1) checkedIndex("patch", patch, gh * gw);
    const go = () => {
      S.head = head; ui.head.value = String(head);
      if (S.layer !== layer) setLayer(layer);
      S.pending = patch === -1 ? readoutQuery() : S.meta.prefix.length + patch;
      return paint();
    };
    return S.layers.has(layer) ? go() : whenLoaded(layer).then(go);
  },
  temperature(t) { setTemperature(t); return paint(); },
  layer(l) {
    checkedIndex("layer", l, S.meta ? S.meta.layers : 0);
    const t0 = performance.now(), cached = S.layers.has(l);
    setLayer(l);
    return whenLoaded(l).then(() => { paint(); return { ms: performance.now() - t0, cached }; });
  },
  view(v) { setView(v); return paint(); },
  state() {
    return { layer: S.layer, head: S.head, query: S.query, pinned: S.pinned, T: S.T, loaded: [...S.layers.keys()],
             bytes: S.layers.size ? S.layers.values().next().value.bytes : 0, key: S.meta && S.meta.key, session: S.meta && S.meta.session,
             fetchMs: [...S.layers.values()].map((d) => d.fetchMs), latencies: S.latencies.slice(),
             highlight: S.highlight && S.highlight.slice() };
  },
};
window.vitviz[INSIDE ? "inside" : "explorer"] = handle;
if (INSIDE) {
  for (const control of [ui.view, ui.measure, ui.scale]) control.closest("label").hidden = true;
}

function apply(value) {
  const meta = value && typeof value === "object" ? value : null;
  if (meta && S.meta && meta.key === S.meta.key && meta.session === S.meta.session) {
    for (const k of ["cmap", "alpha", "colourScale", "scaleRule", "scaleName"]) S.meta[k] = meta[k];
    colourRamp(); schedule(); // a display setting, or the same photo picked again:
    for (const [layer] of S.failed) want(layer, layer === S.layer); // what failed (say, evicted) is asked again
    S.failed.clear();
    return;
  }
  start(meta);
  if (meta) colourRamp();
}
watch("value", () => apply(props.value));
apply(props.value);
