// One frame of the Explorer: the attention rows of the query computed (attention.js) and every map painted (paint.js)
// with its colour scale and words, and "vitviz-hover" told to the other views when what is shown changed.
// vitvizExplorerFrame(S, ui, inside) gives paint(), bound to one Explorer's state S and elements ui (explorer.js).

function vitvizExplorerFrame(S, ui, INSIDE) {
  const loaded = () => (S.store ? S.store.layers : new Map());

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

  return paint;
}
