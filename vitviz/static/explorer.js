// The Explorer: attention computed (attention.js) and drawn (paint.js) in the browser, a frame at a time
// (frame.js), from a source's layers (source.js). vitvizExplorer(root, mode) builds one in `root` and returns
// {apply, handle, destroy}; a boot file (boot_gradio.js, boot_widget.js, boot_file.js) gives it its source. mode
// "attention": every head of a layer; "inside": one head, step by step (the Inside a head tab). Text is HTML, so it
// grows with the projector mode.
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

  const paint = vitvizExplorerFrame(S, ui, INSIDE);

  vitvizControlKeys(root, ui, S, { setLayer, setHead, setView, setTemperature, askReadout, schedule });
  attachPointer(ui.big);
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
