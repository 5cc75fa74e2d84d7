// The Q·K view: one head's queries (filled dots) and keys (rings) in one 2-D map, AttentionViz's joint embedding,
// over the current photo and the last few. vitvizQkView(element) builds one in `element` and returns {apply, handle,
// destroy}; apply(source) gives it a photo, whose layers come from the source (source.js: the app's route, a
// notebook's kernel or bytes in a file), shared with the Explorer through window.vitviz.layerStore. A source with
// umap(photos, layer, head) (the app's) offers UMAP maps. Linked both ways: hovering a point sends
// "vitviz-highlight" {patches} (its patch and those it attends to); a "vitviz-hover" {layer, head, query} (the
// Explorer's query) marks that query and its keys here.

function vitvizQkView(element) {
  const MAX_PHOTOS = 5,
    TOP = 5;
  const KIND = ["#1b7f79", "#d6604d"]; // queries teal, keys vermilion: apart for colour-blind eyes too
  window.vitviz ||= {};
  window.vitviz.layerStore ||= new Map();
  window.vitviz.layerFetches ||= new Map();
  const QK = window.vitviz.layerStore;
  const QK_FETCHES = window.vitviz.layerFetches;
  const qroot = element.querySelector(".qk") || element;
  const q$ = (sel) => qroot.querySelector(sel);
  qroot.innerHTML = `
    <div class="qk-bar">
      <label>Layer <input class="qk-layer" type="range"
        min="0" max="0" value="0" step="1"><b class="qk-layer-out">0</b></label>
      <label>Head <select class="qk-head"></select></label>
      <label>Colour by <select class="qk-colour"><option value="kind">query or key</option>
        <option value="photo">photo</option><option value="row">row</option>
        <option value="column">column</option><option value="rgb">the patch's mean colour</option>
        <option value="norm">norm (distance from the centre)</option></select></label>
      <label>Photos <select class="qk-photos"><option value="one">this photo</option>
        <option value="all">your last photos</option></select></label>
      <label class="qk-method-label" hidden>Map <select class="qk-method"><option value="pca">PCA (instant)</option>
        <option value="umap">UMAP (server, seconds)</option></select></label>
      <span class="qk-method-note" hidden></span>
    </div>
    <div class="qk-status" role="status"></div>
    <div class="qk-main">
      <figure class="qk-plot"><canvas class="qk-base"></canvas><canvas class="qk-over"></canvas>
        <figcaption class="qk-cap"></figcaption></figure>
      <div class="qk-side">
        <figure class="qk-photo"><canvas class="qk-photo-canvas"></canvas><figcaption>This photo: the hovered
          patch in white, the patches it attends to (or that attend to it) in cyan, brushed patches in yellow. Point
          at a patch here (or touch it) to pick it as the query.</figcaption></figure>
        <div class="qk-strip"></div>
        <div class="qk-legend"></div>
        <p class="qk-sorts"></p><p class="qk-recall"></p><p class="qk-norm"></p>
      </div>
    </div>
    <h4 class="qk-atlas-title">Every head of this layer, on this photo (click one to show it above)</h4>
    <div class="qk-atlas"></div>`;
  const el = {
    layer: q$(".qk-layer"),
    layerOut: q$(".qk-layer-out"),
    head: q$(".qk-head"),
    colour: q$(".qk-colour"),
    photos: q$(".qk-photos"),
    status: q$(".qk-status"),
    base: q$(".qk-base"),
    over: q$(".qk-over"),
    cap: q$(".qk-cap"),
    photo: q$(".qk-photo-canvas"),
    strip: q$(".qk-strip"),
    legend: q$(".qk-legend"),
    sorts: q$(".qk-sorts"),
    norm: q$(".qk-norm"),
    atlas: q$(".qk-atlas"),
    method: q$(".qk-method"),
    methodLabel: q$(".qk-method-label"),
    methodNote: q$(".qk-method-note"),
    recall: q$(".qk-recall"),
  };
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
  const { pct, legend, strip, recallLater, sorts } = vitvizQkText(Q, el, KIND, TOP);

  function loadLayer(photo, layer) {
    if (photo.layers.has(layer)) return Promise.resolve(photo.layers.get(layer));
    const key = `${photo.session}|${photo.key}|${layer}`,
      kept = QK.get(key);
    if (kept) {
      photo.layers.set(layer, kept);
      return Promise.resolve(kept);
    }
    let fetching = QK_FETCHES.get(key);
    if (!fetching) {
      const m = photo.meta;
      fetching = Promise.resolve()
        .then(() => photo.source.layer(layer))
        .then((buffer) => {
          const data = vitvizLayer(buffer, m.tokens, m.heads, m.headWidth);
          QK.set(key, data);
          return data;
        })
        .finally(() => QK_FETCHES.delete(key));
      QK_FETCHES.set(key, fetching);
    }
    return fetching.then(
      (data) => {
        photo.layers.set(layer, data);
        return data;
      },
      (e) =>
        e.status === 503 && !Q.closed
          ? new Promise((ok) => setTimeout(ok, 300)).then(() => loadLayer(photo, layer))
          : Promise.reject(e),
    );
  }

  function shown() {
    return Q.mode === "all" ? Q.photos : Q.photos.slice(0, 1);
  }

  // ---- the map of (layer, head) over the shown photos: normalised jointly, one PCA
  function computeMap(layer, head, photos, projected) {
    // projected: the server's UMAP [2N*2], else PCA here
    const t0 = performance.now(),
      dh = photos[0].meta.headWidth;
    const qs = photos.map((p) => vitvizQkHead(p.layers.get(layer), p.meta, head, "q"));
    const ks = photos.map((p) => vitvizQkHead(p.layers.get(layer), p.meta, head, "k"));
    const cat = (parts) => {
      const out = new Float64Array(parts.reduce((s, a) => s + a.length, 0));
      let o = 0;
      for (const a of parts) {
        out.set(a, o);
        o += a.length;
      }
      return out;
    };
    const t1 = performance.now(),
      n = vitvizQkNormalise(cat(qs), cat(ks), dh),
      t2 = performance.now();
    const joint = new Float64Array(n.q.length + n.k.length);
    joint.set(n.q);
    joint.set(n.k, n.q.length);
    const pca = projected ? { xy: projected, variance: null, spectrum: null } : vitvizPca2(joint, dh);
    const nq = n.q.length / dh,
      M = 2 * nq,
      t3 = performance.now();
    const photo = new Uint8Array(M),
      token = new Int32Array(M),
      norm = new Float32Array(M);
    let o = 0;
    for (const [i, p] of photos.entries())
      for (let t = 0; t < p.meta.tokens; t++, o++) {
        photo[o] = photo[o + nq] = i;
        token[o] = token[o + nq] = t;
      }
    for (let i = 0; i < M; i++) {
      let s = 0;
      const src = i < nq ? n.q : n.k,
        r = (i % nq) * dh;
      for (let d = 0; d < dh; d++) s += src[r + d] * src[r + d];
      norm[i] = Math.sqrt(s);
    }
    return {
      layer,
      head,
      photos,
      xy: pca.xy,
      nq,
      M,
      photo,
      token,
      norm,
      c: n.c,
      variance: pca.variance,
      spectrum: pca.spectrum,
      method: projected ? "umap" : "pca",
      lse: [],
      vectors: [], // per photo: for a hover, made once
      parts: { gather: t1 - t0, normalise: t2 - t1, pca: t3 - t2 },
    };
  }

  function pointIndex(map, photoIndex, kind, t) {
    // kind 0: query, 1: key
    let o = 0;
    for (let i = 0; i < photoIndex; i++) o += map.photos[i].meta.tokens;
    return o + t + (kind ? map.nq : 0);
  }

  // ---- what a point attends to: a query's top keys by weight (its row's order is its scores'), or for a key the
  // queries that give it the most weight (its column of the attention matrix: each query's softmax over its own row)
  function related(i) {
    const map = Q.map,
      pi = map.photo[i],
      p = map.photos[pi],
      m = p.meta,
      data = p.layers.get(map.layer),
      t = map.token[i],
      isQuery = i < map.nq;
    map.vectors[pi] ||= { q: vitvizQkHead(data, m, map.head, "q"), k: vitvizQkHead(data, m, map.head, "k") };
    const { q, k } = map.vectors[pi],
      dh = m.headWidth;
    if (!isQuery) map.lse[pi] ||= vitvizQkRowLse(q, k, dh, m.scale);
    const values = isQuery ? vitvizQkScoresOf(q, k, dh, t) : vitvizQkColumn(q, k, dh, m.scale, map.lse[pi], t);
    const top = Array.from({ length: m.tokens }, (_, j) => j)
      .sort((a, b) => values[b] - values[a])
      .slice(0, TOP);
    return {
      point: i,
      photo: pi,
      token: t,
      isQuery,
      tokens: top,
      weights: top.map((j) => values[j]),
      points: top.map((j) => pointIndex(map, pi, isQuery ? 1 : 0, j)),
    };
  }

  function highlight(i, tell) {
    // a point hovered (tell: say so to the Explorer), or -1
    Q.hl = i < 0 ? null : related(i);
    if (tell && (!Q.hl || Q.hl.photo === 0)) {
      const patches = Q.hl ? [Q.hl.token, ...Q.hl.tokens] : null;
      document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches } }));
    }
  }

  function brushed(x0, y0, x1, y1) {
    const [ax, bx, ay, by] = [Math.min(x0, x1), Math.max(x0, x1), Math.min(y0, y1), Math.max(y0, y1)],
      sets = Q.map.photos.map(() => new Set());
    for (let i = 0; i < Q.map.M; i++)
      if (Q.pos.sx[i] >= ax && Q.pos.sx[i] <= bx && Q.pos.sy[i] >= ay && Q.pos.sy[i] <= by)
        sets[Q.map.photo[i]].add(Q.map.token[i]);
    Q.brush = { rect: [ax, ay, bx, by], tokens: sets.map((s) => [...s].sort((a, b) => a - b)) };
    document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches: Q.brush.tokens[0] } }));
  }

  function paintOver() {
    const t0 = performance.now(),
      ctx = el.over.getContext("2d"),
      s = Q.scale || 1;
    ctx.clearRect(0, 0, el.over.width, el.over.height);
    if (Q.brush) {
      const [ax, ay, bx, by] = Q.brush.rect;
      ctx.fillStyle = "rgba(255,210,0,0.15)";
      ctx.strokeStyle = "#b08000";
      ctx.lineWidth = 2 * s;
      ctx.fillRect(ax * s, ay * s, (bx - ax) * s, (by - ay) * s);
      ctx.strokeRect(ax * s, ay * s, (bx - ax) * s, (by - ay) * s);
    }
    if (Q.hl && Q.pos) {
      const mark = (i, colour, r) => {
        ctx.beginPath();
        ctx.arc(Q.pos.sx[i] * s, Q.pos.sy[i] * s, r * s, 0, 2 * Math.PI);
        ctx.lineWidth = 5 * s;
        ctx.strokeStyle = "#000";
        ctx.stroke();
        ctx.lineWidth = 3 * s;
        ctx.strokeStyle = colour;
        ctx.stroke();
      };
      for (const j of Q.hl.points) mark(j, "#00e5ff", 7);
      mark(Q.hl.point, "#fff", 9);
    }
    paintPhotos();
    return performance.now() - t0;
  }

  function paintPhoto(canvas, index) {
    const p = Q.photos[index];
    if (!p?.img || !canvas.clientWidth) return;
    const [pw, ph] = p.meta.photoSize,
      dpr = fitCanvas(canvas, canvas.clientWidth, (canvas.clientWidth * ph) / pw),
      ctx = canvas.getContext("2d");
    ctx.drawImage(p.img, 0, 0, canvas.width, canvas.height);
    const thick = Math.max(2, Math.round(2 * dpr)),
      shownAt = shown().indexOf(p);
    if (Q.brush && shownAt >= 0 && Q.map && Q.map.photos[shownAt] === p)
      outline(ctx, p.meta, Q.brush.tokens[shownAt], "#ffd200", canvas.width, canvas.height, thick);
    if (Q.hl && Q.map && Q.map.photos[Q.hl.photo] === p) {
      outline(ctx, p.meta, Q.hl.tokens, "#00e5ff", canvas.width, canvas.height, thick);
      outline(ctx, p.meta, [Q.hl.token], "#fff", canvas.width, canvas.height, thick + 1);
    }
  }

  function paintPhotos() {
    paintPhoto(el.photo, 0);
    for (const c of el.strip.querySelectorAll("canvas")) paintPhoto(c, +c.dataset.photo);
  }

  function frame() {
    if (!Q.frame)
      Q.frame = requestAnimationFrame(() => {
        Q.frame = 0;
        const work = paintOver();
        if (Q.stamp) {
          Q.latencies.push(performance.now() - Q.stamp.at);
          Q.handlerMs.push(Q.stamp.work + work);
          Q.stamp = null;
        }
        if (Q.latencies.length > 2000) {
          Q.latencies.splice(0, 1000);
          Q.handlerMs.splice(0, 1000);
        }
      });
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
    const m = map.photos[0].meta,
      sort = sorts(map);
    el.cap.innerHTML =
      `Layer ${map.layer}, <span class="qk-chip" ` +
      `style="background:${m.headColours[map.head % m.headColours.length]}"></span><b>head ${map.head}</b>: ` +
      `${map.nq} queries and ${map.nq} keys of ` +
      `${map.photos.length === 1 ? "this photo" : `your last ${map.photos.length} photos`}. ` +
      (map.method === "umap"
        ? "UMAP (umap-learn, seed 0) of them, made by the server: near means near, but across and down mean nothing."
        : `A principal component analysis: across holds ${pct(map.variance[0], map.spectrum)} of their spread, ` +
          `down ${pct(map.variance[1], map.spectrum)}.`);
    const exact = "R = 1 would mean the map is laid out exactly by that feature.";
    el.sorts.textContent = `${sort.sentence} (This map: ${sort.which}. ${exact})`;
    Q.sorts = sort;
    el.norm.textContent =
      `Distance here stands for attention, as in AttentionViz (Yeh et al. 2023): the keys are moved so that their ` +
      `centre is the queries' centre, ` +
      `then the queries are scaled by ${vitvizFixed(map.c, 3)} and the keys by 1/${vitvizFixed(map.c, 3)}, so ` +
      `that both have the same mean length. Neither changes any attention weight.`;
    legend(map);
    strip();
    paintOver();
  }

  // ---- a layer and head: every shown photo's layer, one map; the atlas after it
  function photoKeys(photos) {
    return photos.map((p) => `${p.session}|${p.key}`).join(",");
  }

  function mapOf(layer, head, photos, projected) {
    const key = `${projected ? "umap" : "pca"}|${layer}|${head}|${photoKeys(photos)}`;
    if (!Q.atlas.has(key)) Q.atlas.set(key, computeMap(layer, head, photos, projected));
    return Q.atlas.get(key);
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

  function atlas(generation) {
    const map = Q.map,
      m = map.photos[0].meta;
    if (el.atlas.childElementCount !== m.heads) {
      el.atlas.innerHTML = Array.from(
        { length: m.heads },
        (_, h) =>
          `<figure class="qk-tile" data-head="${h}" ` +
          `style="border-color:${m.headColours[h % m.headColours.length]}"><canvas></canvas>` +
          "<figcaption></figcaption></figure>",
      ).join("");
      for (const f of el.atlas.querySelectorAll(".qk-tile"))
        f.addEventListener("click", () => show(Q.layer, +f.dataset.head));
    }
    let h = 0;
    const next = () => {
      if (generation !== Q.generation || h >= m.heads) return;
      const fig = el.atlas.children[h],
        tile = fig.querySelector("canvas");
      const tm = mapOf(map.layer, h, map.photos.slice(0, 1)),
        w = tile.clientWidth; // this photo: ~15 ms a tile
      const sort = m.sorts ? m.sorts[map.layer][h] : sorts(tm); // Python's where it sent them; the same rule here
      fig.classList.toggle("qk-current", h === map.head);
      fig.querySelector("figcaption").textContent =
        `head ${h}: ` +
        `${{ position: "position", colour: "colour", both: "position and colour", neither: "neither" }[sort.verdict]}`;
      if (w) {
        const dpr = fitCanvas(tile, w, w);
        drawPoints(tile, tm, layout(tm, w, w, 4), dpr, dpr);
      }
      h += 1;
      setTimeout(next, 0); // one head per task: a hover meanwhile is answered at once
    };
    setTimeout(next, 0);
  }

  // ---- pointer: hover a point, drag a rectangle; a finger taps a point or drags
  function local(clientX, clientY) {
    const r = el.over.getBoundingClientRect();
    return [clientX - r.left, clientY - r.top];
  }

  function pending(at, t0) {
    // the first event not yet shown is the one that waits longest; its handlers' work adds up
    const work = performance.now() - t0;
    if (Q.stamp) Q.stamp.work += work;
    else Q.stamp = { at, work };
    frame();
  }

  function onHover(clientX, clientY, at) {
    const t0 = performance.now(),
      [x, y] = local(clientX, clientY),
      i = nearest(x, y);
    if (i === (Q.hl ? Q.hl.point : -1)) return Q.hl;
    highlight(i, true);
    pending(at, t0);
    return Q.hl;
  }

  function onBrush(x0, y0, clientX, clientY, at) {
    const t0 = performance.now(),
      [x, y] = local(clientX, clientY);
    brushed(x0, y0, x, y);
    pending(at, t0);
    return Q.brush;
  }

  el.over.addEventListener("pointermove", (e) => {
    if (!Q.map) return;
    const d = Q.drag;
    if (d && d.id === e.pointerId) {
      const [x, y] = local(e.clientX, e.clientY);
      d.moved ||= Math.hypot(x - d.x, y - d.y) > 4;
      if (d.moved) onBrush(d.x, d.y, e.clientX, e.clientY, e.timeStamp);
    } else if (e.pointerType === "mouse" && !e.buttons) onHover(e.clientX, e.clientY, e.timeStamp);
  });
  el.over.addEventListener("pointerdown", (e) => {
    const [x, y] = local(e.clientX, e.clientY);
    Q.drag = { id: e.pointerId, x, y, moved: false };
    el.over.setPointerCapture?.(e.pointerId);
  });
  el.over.addEventListener("pointerup", (e) => {
    const d = Q.drag;
    Q.drag = null;
    if (!d || d.moved || !Q.map) return;
    if (e.pointerType !== "mouse")
      onHover(e.clientX, e.clientY, e.timeStamp); // a tap picks a point
    else if (Q.brush) {
      Q.brush = null;
      document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches: null } }));
      frame();
    }
  });
  el.over.addEventListener("pointercancel", () => {
    Q.drag = null;
  });
  el.photo.addEventListener("pointermove", (e) => {
    // a patch of this photo: the same path as the Explorer's query
    const p = Q.photos[0],
      r = el.photo.getBoundingClientRect();
    if (!p || !Q.map) return;
    const [gh, gw] = p.meta.grid,
      x = (e.clientX - r.left) / r.width,
      y = (e.clientY - r.top) / r.height;
    if (!(x >= 0 && x < 1 && y >= 0 && y < 1)) return;
    const query = p.meta.prefix.length + Math.floor(y * gh) * gw + Math.floor(x * gw);
    document.dispatchEvent(
      new CustomEvent("vitviz-hover", { detail: { layer: Q.layer, head: Q.head, query, mode: "qk" } }),
    );
  });

  function onTold(e) {
    // the Explorer's query (or this photo's patch): its point and keys here
    const d = e.detail || {},
      m = Q.photos.length && Q.photos[0].meta;
    if (!m) return;
    const mark = () => {
      if (!Q.map || Q.map.photos[0] !== Q.photos[0]) return;
      highlight(
        Number.isInteger(d.query) && d.query >= 0 && d.query < m.tokens ? pointIndex(Q.map, 0, 0, d.query) : -1,
        false,
      );
      Q.told = { ...d };
      frame();
    };
    const follow =
      d.mode !== "qk" &&
      Number.isInteger(d.layer) &&
      Number.isInteger(d.head) &&
      d.layer < m.layers &&
      d.head < m.heads &&
      (d.layer !== Q.layer || d.head !== Q.head);
    if (follow) show(d.layer, d.head).then(mark);
    else mark();
  }
  document.addEventListener("vitviz-hover", onTold);

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
    const most = meta.session === "standalone" ? 1 : MAX_PHOTOS; // a notebook's, a file's or the site's: its one photo
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

// The view under an Explorer outside the app (a notebook, a file): a heading and the view in `parent`, given one
// photo's source; close() takes both down.
function vitvizQkBelow(parent, source) {
  const box = document.createElement("div");
  box.className = "qk-below";
  box.innerHTML =
    `<h3 class="qk-title">Queries &amp; keys: what a head matches on</h3><p class="qk-help">Every ` +
    `query of one head is a <b>filled dot</b> and every key a <b>ring</b>, in one map where a query lies near the ` +
    `keys it attends to. <b>Hover a point</b> to see its patch and the patches it attends to; <b>drag a ` +
    `rectangle</b> to light up patches. Hovering the Explorer's photo marks its query here.</p><div class="qk"></div>`;
  parent.appendChild(box);
  const view = vitvizQkView(box.querySelector(".qk"));
  view.apply(source);
  return {
    view,
    close() {
      view.destroy();
      if (source.close) source.close();
      box.remove();
    },
  };
}
