// The Q·K view: one head's queries (filled dots) and keys (rings) in one 2-D map, AttentionViz's joint embedding,
// over the current photo and the last few. vitvizQkView(element) builds one in `element` and returns {apply, handle,
// destroy}; apply(source) gives it a photo, whose layers come from the source (source.js: the app's route, a
// notebook's kernel or bytes in a file), shared with the Explorer through window.vitviz.layerStore. A source with
// umap(photos, layer, head) (the app's) offers UMAP maps. Linked both ways: hovering a point sends
// "vitviz-highlight" {patches} (its patch and those it attends to); a "vitviz-hover" {layer, head, query} (the
// Explorer's query) marks that query and its keys here.

function vitvizQkView(element) {
  const KIND = ["#1b7f79", "#d6604d"]; // queries teal, keys vermilion: apart for colour-blind eyes too
  const qroot = element.querySelector(".qk") || element;
  const el = vitvizQkPage(qroot);
  const Q = {
    photos: [],
    layer: 0,
    head: 0,
    colour: "kind",
    mode: "one",
    method: "pca",
    recall: null,
    map: null,
    atlas: new Map(),
    hl: null,
    brush: null,
    drag: null,
    frame: 0,
    latencies: [],
    handlerMs: [],
    buildMs: [],
    recallMs: [],
    generation: 0,
    waiting: [],
    told: null,
    stamp: null, // the first pointer event not yet painted: {at: its timeStamp, work: its handlers' ms so far}
    closed: false,
  };
  const { fitCanvas, layout, drawPoints, buildGrid, nearest, outline } = vitvizQkDraw(Q, KIND);
  const { caption, legend, strip, recallLater, sorts } = vitvizQkText(Q, el, KIND);
  const { loadLayer, pointIndex, related, photoKeys, mapOf } = vitvizQkMaps(Q);
  const { paintOver, paintPhotos, frame, atlas } = vitvizQkPaint(Q, el, {
    fitCanvas,
    layout,
    drawPoints,
    outline,
    shown,
    sorts,
    mapOf,
    show,
  });
  const { local, onHover, onBrush, onTold } = vitvizQkPointer(Q, el, { nearest, related, pointIndex, frame, show });

  function shown() {
    return Q.mode === "all" ? Q.photos : Q.photos.slice(0, 1);
  }

  // ---- showing a map
  function draw() {
    const map = Q.map;
    if (!map || !el.base.clientWidth) return;
    const w = el.base.clientWidth,
      h = w,
      dpr = fitCanvas(el.base, w, h);
    fitCanvas(el.over, w, h);
    Q.scale = dpr;
    Q.pos = layout(map, w, h, 12);
    Q.grid = buildGrid(map, Q.pos, w, h);
    drawPoints(el.base, map, Q.pos, dpr, map.M > 4000 ? 2 * dpr : 3 * dpr);
    caption(map);
    legend(map);
    strip();
    paintOver();
  }

  function fetchUmap(photos, layer, head) {
    // once per photos, layer and head: the server takes seconds
    if (Q.atlas.has(`umap|${layer}|${head}|${photoKeys(photos)}`)) return Promise.resolve(null);
    el.status.textContent =
      `UMAP of layer ${layer}, head ${head} over ` +
      `${photos.length === 1 ? "this photo" : `${photos.length} photos`}: the server is computing it ` +
      "(a few seconds)…";
    return photos[0].source
      .umap(
        photos.map((p) => p.key),
        layer,
        head,
      )
      .then((buffer) => Float64Array.from(new Float32Array(buffer)));
  }

  function show(layer, head) {
    const umap = Q.method === "umap" && Q.umap,
      photos = shown(),
      generation = ++Q.generation;
    const m = photos.length && photos[0].meta;
    if (!m) return Promise.resolve(null);
    Q.layer = Math.max(0, Math.min(m.layers - 1, layer));
    Q.head = Math.max(0, Math.min(m.heads - 1, head));
    el.layer.value = String(Q.layer);
    el.layerOut.textContent = Q.layer;
    el.head.value = String(Q.head);
    const t0 = performance.now();
    return Promise.all(
      photos.map((p) =>
        loadLayer(p, Q.layer).catch((e) => {
          el.status.textContent = `A photo's layer ${Q.layer} could not be loaded (${e.message}): it is left out.`;
          return null;
        }),
      ),
    )
      .then((datas) => Promise.all([datas, umap && datas.every(Boolean) ? fetchUmap(photos, Q.layer, Q.head) : null]))
      .then(([datas, projected]) => {
        if (generation !== Q.generation) return null;
        const kept = photos.filter((_, i) => datas[i]);
        if (!kept.length || kept[0] !== Q.photos[0]) return null;
        const t1 = performance.now(),
          cached = Q.atlas.has(`${umap ? "umap" : "pca"}|${Q.layer}|${Q.head}|${photoKeys(kept)}`);
        Q.map = mapOf(Q.layer, Q.head, kept, projected);
        Q.hl = null;
        Q.brush = null;
        draw();
        const ms = performance.now() - t1;
        Q.buildMs.push(ms);
        if (umap && !datas.every(Boolean)) el.status.textContent += " UMAP needs every photo's layer: this is PCA.";
        else if (datas.every(Boolean))
          el.status.textContent = umap
            ? `UMAP from the server (seconds, once a head); ${Q.map.M} points.`
            : `Computed in this browser from the layer's queries and keys: ${Math.round(ms)} ` +
              `ms${cached ? " (kept from before)" : ""} for ${Q.map.M} points.`;
        recallLater(generation);
        atlas(generation);
        for (const ok of Q.waiting.splice(0)) ok();
        return { ms, cached, fetchMs: t1 - t0, points: Q.map.M, parts: Q.map.parts };
      })
      .catch((e) => {
        if (generation === Q.generation)
          el.status.textContent = `The ${umap ? "UMAP" : "map"} could not be made: ${e.message}`;
        return null;
      });
  }

  el.layer.addEventListener("input", () => show(+el.layer.value, Q.head));
  el.head.addEventListener("change", () => show(Q.layer, +el.head.value));
  el.colour.addEventListener("change", () => {
    Q.colour = el.colour.value;
    draw();
    if (Q.map) atlas(Q.generation);
  });
  el.photos.addEventListener("change", () => {
    Q.mode = el.photos.value;
    show(Q.layer, Q.head);
  });
  el.method.addEventListener("change", () => {
    Q.method = el.method.value;
    show(Q.layer, Q.head);
  });
  let qkWidth = 0;
  const resized = new ResizeObserver(() => {
    if (qroot.clientWidth !== qkWidth) {
      qkWidth = qroot.clientWidth;
      draw();
      if (Q.map) atlas(Q.generation);
    }
  });
  resized.observe(qroot);

  // ---- a new photo: it joins the session's last photos (same model), and its layers are kept here
  function prefetch(photo) {
    const layers = [...Array(photo.meta.layers).keys()].filter((l) => !photo.layers.has(l));
    const next = () => {
      if (layers.length && Q.photos.includes(photo)) loadLayer(photo, layers.shift()).then(next, next);
    };
    next();
  }

  function apply(source) {
    // a source of one photo (source.js), or null: no photo
    const given = source?.meta(),
      meta = given?.tokens ? { ...given, ...given.qk } : null;
    if (!meta) {
      Q.photos = [];
      Q.map = null;
      Q.hl = null;
      Q.brush = null;
      ++Q.generation;
      for (const c of [el.base, el.over, el.photo]) c.getContext("2d").clearRect(0, 0, c.width, c.height);
      for (const e of [el.cap, el.sorts, el.norm, el.legend, el.strip, el.atlas]) e.innerHTML = "";
      el.status.textContent = "Upload a photo or click an example.";
      return;
    }
    if (Q.photos.length && Q.photos[0].key === meta.key && Q.photos[0].session === meta.session) return;
    const first = Q.photos[0]?.meta,
      same = (k) => first[k] === meta[k];
    if (first && !(Q.photos[0].session === meta.session && ["model", "layers", "heads", "headWidth"].every(same)))
      Q.photos = [];
    const photo = { meta, session: meta.session, key: meta.key, layers: new Map(), img: null, source };
    const most = meta.session === "standalone" ? 1 : meta.maxPhotos; // a notebook's, a file's or the site's: one photo
    Q.photos = [photo, ...Q.photos.filter((p) => p.key !== meta.key)].slice(0, most);
    Q.atlas = new Map();
    const img = new Image();
    img.onload = () => {
      photo.img = img;
      paintPhotos();
    };
    img.src = meta.photo;
    el.layer.max = String(meta.layers - 1);
    el.head.innerHTML = Array.from({ length: meta.heads }, (_, h) => `<option value="${h}">head ${h}</option>`).join(
      "",
    );
    el.photos.options[1].textContent = `your last ${Q.photos.length} photos`;
    el.photos.options[1].disabled = Q.photos.length < 2;
    el.photos.parentElement.hidden = meta.session === "standalone"; // a notebook's or a file's view has one photo
    // UMAP where the source can make it (the app's server, with umap-learn); where the server lacks umap-learn, the
    // option says how to get it rather than failing
    Q.umap = Boolean(meta.umap && source.umap);
    el.methodLabel.hidden = !source.umap;
    el.method.options[1].disabled = !Q.umap;
    el.method.options[1].textContent = Q.umap ? "UMAP (server, seconds)" : "UMAP (not installed)";
    el.methodNote.hidden = !source.umap || Q.umap;
    el.methodNote.textContent = `UMAP needs umap-learn on the server: ${meta.umapInstall}, then restart the app.`;
    show(first ? Q.layer : Math.floor(meta.layers / 2), Q.head).then(() => prefetch(photo));
  }

  const handle = vitvizQkHandle({ Q, el, show, onHover, onBrush, local, pointIndex });
  return {
    apply,
    handle,
    destroy() {
      // the view goes: its listener on the page and its observer with it, and nothing left running
      Q.closed = true;
      ++Q.generation;
      Q.photos = [];
      Q.map = null;
      Q.atlas = new Map();
      document.removeEventListener("vitviz-hover", onTold);
      resized.disconnect();
      if (Q.frame) cancelAnimationFrame(Q.frame);
      qroot.innerHTML = "";
    },
  };
}
