// The Explorer: attention computed (attention.js) and drawn (paint.js) in the browser, from a source's layers
// (source.js). vitvizExplorer(root, mode) builds one in `root` and returns {apply, handle, destroy}; a boot file
// (boot_gradio.js, boot_widget.js, boot_file.js) gives it its source. mode "attention": every head of a layer;
// "inside": one head, step by step (the Inside a head tab). Text is HTML, so it grows with the projector mode.
//
// Events for other views on the page (the Q·K scatter, say), on `document`:
// - it dispatches "vitviz-hover", detail {layer, head, query, mode}, whenever the query, layer or head it shows
//   changes; query is a token index (prefix tokens first), or VITVIZ_PROBE (-1) or VITVIZ_READOUT (-2) of
//   attention.js; mode is "attention" or "inside";
// - it listens for "vitviz-highlight", detail {patches: [token indices] | null}: those tokens' patches are
//   outlined on its large canvas (prefix tokens have no place there); null clears the outline.

function vitvizExplorer(root, mode) {
  const INSIDE = mode === "inside";
  const ui = vitvizControls(root, INSIDE);
  const S = {
    meta: null,
    shape: null,
    store: null,
    photo: null,
    layer: -1,
    head: 0,
    query: 0,
    pinned: false,
    T: 1,
    measure: "w",
    view: "heads",
    scale: "own",
    scores: null,
    weights: null,
    work: null,
    probe: null,
    tileCanvases: [],
    modelCanvases: [],
    pending: null,
    frame: 0,
    drag: null,
    pendingStamp: null,
    latencies: [], // latencies: pointer event -> its maps painted, ms
    highlight: null,
    told: "", // the tokens outlined at another view's request; the last vitviz-hover sent
  };
  const loaded = () => (S.store ? S.store.layers : new Map());

  function showStatus() {
    if (!S.meta) return;
    const layers = loaded(),
      first = layers.values().next().value;
    ui.status.textContent = vitvizStatus(layers.size, S.meta.only ? S.meta.only.length : S.meta.layers, first?.bytes);
  }

  // ---- a new analysis, or none
  function start(source) {
    if (S.store) S.store.close();
    S.store = null;
    const meta = source?.meta();
    S.meta = meta?.tokens ? meta : null;
    if (!S.meta) {
      // no photo: nothing of the last one stays on screen
      for (const el of [ui.tiles, ui.model, ui.mech, ui.bigCap]) el.innerHTML = "";
      ui.big.getContext("2d").clearRect(0, 0, ui.big.width, ui.big.height);
      ui.status.textContent = "Upload a photo or click an example.";
      return;
    }
    S.shape = { tokens: meta.tokens, heads: meta.heads, dh: meta.headWidth, scale: meta.scale };
    S.scores = new Float32Array(meta.tokens);
    S.weights = new Float32Array(meta.heads * meta.tokens);
    S.work = new Float32Array(meta.tokens);
    S.layer =
      S.layer < 0 ? Math.min(meta.start ?? meta.layers - 1, meta.layers - 1) : Math.min(S.layer, meta.layers - 1);
    S.head = Math.min(S.head, meta.heads - 1);
    S.query = 0;
    S.pinned = false;
    S.told = "";
    ui.layer.max = String(meta.layers - 1);
    ui.layer.value = String(S.layer);
    ui.layerOut.textContent = S.layer;
    ui.head.innerHTML = Array.from({ length: meta.heads }, (_, h) => `<option value="${h}">head ${h}</option>`).join(
      "",
    );
    ui.head.value = String(S.head);
    const floats = (b64) => new Float32Array(vitvizBase64(b64));
    S.probe = meta.probe
      ? { q: floats(meta.probe.q), k: floats(meta.probe.k), valueNorms: floats(meta.probe.valueNorms) }
      : null;
    ui.readout.hidden = !S.probe && !meta.readout.tokens.length;
    ui.readout.textContent = S.probe
      ? "Query: readout (the pooling probe)"
      : `Query: readout (${meta.readout.tokens.map((i) => meta.prefix[i]).join(" + ")})`;
    S.tileCanvases = vitvizTiles(ui.tiles, meta, INSIDE);
    for (const [h, canvas] of S.tileCanvases.entries()) attachPointer(canvas, INSIDE ? undefined : h);
    S.modelCanvases = vitvizModelGrid(ui.model, meta.layers, meta.heads);
    for (const c of S.modelCanvases)
      c.addEventListener("click", () => {
        setLayer(+c.dataset.layer);
        setHead(+c.dataset.head);
        setView("heads");
      });
    vitvizRamp(ui.ramp, meta);
    const img = new Image();
    img.onload = () => {
      if (S.meta === meta) {
        S.photo = img;
        schedule();
      }
    };
    img.src = meta.photo;
    S.store = vitvizLayerStore(
      source,
      S.shape,
      (l) => {
        showStatus();
        if (l === S.layer || S.view === "model") schedule();
      },
      (l, message) => {
        ui.status.textContent = `Layer ${l} could not be loaded: ${message}`;
        if (l === S.layer) ui.bigCap.textContent = `Layer ${l} could not be loaded: ${message}`;
      },
      () => root.offsetParent === null,
    );
    S.store.current = S.layer;
    S.store.want(S.layer, true);
    for (let d = 1; d < meta.layers; d++) {
      S.store.want(S.layer + d, false);
      S.store.want(S.layer - d, false);
    }
    showStatus();
  }

  // ---- pointer (pointer.js): the last position wins; one computation and paint per animation frame
  const attachPointer = (canvas, head) =>
    vitvizPointer(canvas, S, { ask, setHead: head === undefined ? null : () => setHead(head) });

  function schedule() {
    if (!S.frame)
      S.frame = requestAnimationFrame(() => {
        S.frame = 0;
        paint();
      });
  }

  // ---- what every pointer, key, button and the test handle call
  function ask(query, pinned, stamp = null) {
    // the query shown from the next frame on: a token index, VITVIZ_PROBE or VITVIZ_READOUT
    S.pending = query;
    S.pinned = pinned;
    if (stamp !== null) S.pendingStamp = stamp;
    schedule();
  }

  function readoutQuery() {
    // the query that the readout button and hover(l, h, -1) ask: the probe, the readout's one token, or its tokens
    if (S.probe) return VITVIZ_PROBE;
    const { tokens } = S.meta.readout;
    return tokens.length === 1 ? tokens[0] : VITVIZ_READOUT;
  }

  function askReadout() {
    if (S.probe) setView("heads");
    ask(readoutQuery(), true);
  }

  function setLayer(l) {
    if (!S.meta) throw new Error("no photo analysed yet");
    S.layer = Math.max(0, Math.min(S.meta.layers - 1, l));
    ui.layer.value = String(S.layer);
    ui.layerOut.textContent = S.layer;
    S.store.current = S.layer;
    S.store.want(S.layer, true);
    schedule();
  }

  function setHead(h) {
    S.head = ((h % S.meta.heads) + S.meta.heads) % S.meta.heads;
    ui.head.value = String(S.head);
    schedule();
  }

  function setView(v) {
    S.view = v;
    ui.view.value = v;
    ui.model.hidden = v !== "model";
    ui.tiles.hidden = v === "model";
    schedule();
  }

  function setTemperature(t) {
    if (!(t > 0) || !Number.isFinite(t)) throw new Error(`temperature must be a positive number, got ${t}`);
    S.T = t;
    ui.temp.value = String(Math.log2(t));
    ui.tempOut.textContent = `T = ${vitvizFixed(t, 2)}${t === 1 ? " (the model)" : ""}`;
    schedule();
  }

  // ---- computing and painting
  function rowData(layer) {
    // the probe attends once, after the last layer, with its own query, keys and values: the same for every layer
    return S.query === VITVIZ_PROBE ? S.probe : loaded().get(layer);
  }

  function computeLayer(layer) {
    const queries = S.query === VITVIZ_READOUT ? S.meta.readout.tokens : [S.query === VITVIZ_PROBE ? 0 : S.query];
    return vitvizRows(S.weights, S.scores, S.work, rowData(layer), queries, S.head, S.T, S.shape);
  }

  function shown(layer, h) {
    // what a map paints for head h: α_j, or α_j ||W_O,h v_j||, over the patches
    const { tokens } = S.shape,
      n = S.meta.prefix.length;
    const row = S.weights.subarray(h * tokens, (h + 1) * tokens);
    if (S.measure === "w") return row.subarray(n);
    const norms = rowData(layer).valueNorms.subarray(h * tokens, (h + 1) * tokens);
    for (let j = n; j < tokens; j++) S.work[j] = row[j] * norms[j];
    return S.work.subarray(n);
  }

  const scaleOf = (maps) => vitvizScale(maps, S.meta.colourScale, S.meta.scaleRule);
  function draw(canvas, values, sc) {
    const n = S.meta.prefix.length,
      marker = S.query >= n ? S.query - n : null; // a prefix token has no place
    const outlined =
      canvas === ui.big && S.highlight
        ? S.highlight.filter((t) => t >= n && t < S.meta.tokens).map((t) => t - n)
        : null;
    vitvizDrawMap(canvas, values, sc, S.meta, S.photo, marker, outlined);
  }

  function paint() {
    if (!S.meta) return null;
    if (S.pending !== null) {
      S.query = S.pending;
      S.pending = null;
    }
    // the probe has no layers to tile
    if (S.query === VITVIZ_PROBE && S.view === "model") S.query = S.meta.prefix.length;
    if (!loaded().has(S.layer) && S.query !== VITVIZ_PROBE) {
      const failed = S.store.failed;
      ui.bigCap.textContent = failed.has(S.layer)
        ? `Layer ${S.layer} could not be loaded: ${failed.get(S.layer)}`
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
    const { tokens } = S.shape,
      row = S.weights.subarray(S.head * tokens, (S.head + 1) * tokens);
    const norms = rowData(S.layer).valueNorms.subarray(S.head * tokens, (S.head + 1) * tokens);
    if (INSIDE) {
      const ranges = ui.tiles.querySelectorAll(".vx-range");
      vitvizPaintSteps(S.tileCanvases, ranges, { meta: S.meta, scores: S.scores, row, norms }, draw, scaleOf);
    } else if (S.view === "model") paintModel();
    else for (const [h, v] of maps.entries()) draw(S.tileCanvases[h], v, scaleFor(v));
    const big = maps[S.head],
      bigScale = scaleFor(big);
    draw(ui.big, big, bigScale);
    const label = (x) => (S.measure === "w" ? vitvizPct(x) : x.toPrecision(3));
    const end = (x) => label(bigScale.log ? 10 ** x : x);
    ui.lo.textContent = end(bigScale.lo);
    ui.hi.textContent = end(bigScale.hi);
    const whose =
      S.scale === "own"
        ? `each map on its own (the large one: ${end(bigScale.lo)} to ${end(bigScale.hi)})`
        : `one scale for the layer's ${S.meta.heads} heads`;
    ui.scaleNote.textContent = `Colour: ${S.meta.scaleName}, as the page's colour scale sets it; ${whose}.`;
    const words = { meta: S.meta, layer: S.layer, head: S.head, query: S.query, pinned: S.pinned, T: S.T };
    ui.bigCap.innerHTML = vitvizCaption({ ...words, row, entropy, inside: INSIDE });
    ui.mech.innerHTML = vitvizMechanism({ ...words, dh: S.shape.dh, scores: S.scores, row, norms });
    tell();
    const paintMs = performance.now() - t0;
    if (S.pendingStamp !== null) {
      S.latencies.push(performance.now() - S.pendingStamp);
      S.pendingStamp = null;
    }
    if (S.latencies.length > 1000) S.latencies.splice(0, 500);
    return { weights: row.slice(), paintMs };
  }

  function tell() {
    // vitviz-hover, once per change of what is shown
    const told = `${S.layer}|${S.head}|${S.query}`;
    if (told === S.told) return;
    S.told = told;
    const detail = { layer: S.layer, head: S.head, query: S.query, mode: INSIDE ? "inside" : "attention" };
    document.dispatchEvent(new CustomEvent("vitviz-hover", { detail }));
  }

  function paintModel() {
    // every loaded layer's heads for this query: layer by layer, rows of the grid
    const keep = S.layer,
      { heads } = S.meta;
    for (const c of S.modelCanvases)
      if (!loaded().has(+c.dataset.layer)) c.getContext("2d").clearRect(0, 0, c.width, c.height);
    for (const [l] of loaded()) {
      computeLayer(l);
      const vs = [];
      for (let h = 0; h < heads; h++) vs.push(shown(l, h).slice());
      const shared = S.scale === "own" ? null : scaleOf(vs);
      for (let h = 0; h < heads; h++) draw(S.modelCanvases[l * heads + h], vs[h], shared || scaleOf([vs[h]]));
    }
    computeLayer(keep);
  }

  // ---- controls and keys
  ui.layer.addEventListener("input", () => setLayer(+ui.layer.value));
  ui.head.addEventListener("change", () => setHead(+ui.head.value));
  ui.measure.addEventListener("change", () => {
    S.measure = ui.measure.value;
    schedule();
  });
  ui.view.addEventListener("change", () => setView(ui.view.value));
  ui.scale.addEventListener("change", () => {
    S.scale = ui.scale.value;
    schedule();
  });
  ui.temp.addEventListener("input", () => setTemperature(2 ** +ui.temp.value));
  ui.readout.addEventListener("click", askReadout);
  attachPointer(ui.big);
  root.addEventListener("keydown", (e) => {
    if (!S.meta || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
    if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      setLayer(S.layer + (e.key === "ArrowRight" ? 1 : -1));
      e.preventDefault();
    }
    if (e.key === "ArrowUp" || e.key === "ArrowDown") {
      setHead(S.head + (e.key === "ArrowDown" ? 1 : -1));
      e.preventDefault();
    }
  });
  const resized = new ResizeObserver(() => schedule());
  resized.observe(root);
  const highlight = (e) => {
    const patches = e.detail?.patches;
    S.highlight = Array.isArray(patches) ? patches.map(Number) : null;
    schedule();
  };
  document.addEventListener("vitviz-highlight", highlight);

  const engine = {
    S,
    paint,
    ask,
    askReadout,
    readoutQuery,
    setLayer,
    setHead,
    setView,
    setTemperature,
    whenLoaded: (l) => S.store.whenLoaded(l),
    apply(source) {
      // a meta from the page: the same analysis restyled (colormap, opacity, colour scale), or a new one
      const meta = source?.meta();
      if (meta && S.meta && meta.key === S.meta.key && meta.session === S.meta.session) {
        for (const k of ["cmap", "alpha", "colourScale", "scaleRule", "scaleName"]) S.meta[k] = meta[k];
        if (source.close) source.close(); // the store keeps its own
        vitvizRamp(ui.ramp, S.meta);
        schedule();
        S.store.retry();
        return;
      }
      start(source);
    },
    destroy() {
      // A host may keep a replaced view's element and what reaches it (JupyterLab keeps every view of a widget
      // that the kernel still holds): the Explorer leaves it empty, and lets go of its layers and canvases.
      if (S.store) S.store.close();
      if (S.frame) cancelAnimationFrame(S.frame);
      resized.disconnect();
      document.removeEventListener("vitviz-highlight", highlight);
      root.replaceChildren();
      Object.assign(S, { meta: null, store: null, photo: null, probe: null, tileCanvases: [], modelCanvases: [] });
    },
  };
  engine.handle = vitvizHandle(engine);
  return engine;
}
