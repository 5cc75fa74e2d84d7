// The Q·K view's words and keys: the map's caption (the share of spread an axis holds, what the map sorts by, what
// its normalisation did), the legend of marks and colours, the strip of the session's other photos, and how well
// the map keeps attention order. vitvizQkText(Q, el, kind) gives them, bound to one view's state Q and elements el
// (qk.js); text is HTML.

function vitvizQkText(Q, el, KIND) {
  function pct(v, spectrum) {
    const total = spectrum.reduce((s, x) => s + x, 0) / Q.map.M;
    return `${Math.round((100 * v) / total)}%`;
  }

  // the map's caption, what it sorts by, and what its normalisation did
  function caption(map) {
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
  }

  function legend(map) {
    const m = map.photos[0].meta,
      lut = vitvizLutBytes(m.colormap),
      ramp = [0, 64, 128, 192, 255]
        .map((i) => `rgb(${lut[3 * i]},${lut[3 * i + 1]},${lut[3 * i + 2]}) ${vitvizFixed(i / 2.55, 0)}%`)
        .join(",");
    const bar = (lo, hi) =>
      `<div class="qk-ramp-row"><span>${lo}</span><span class="qk-ramp" style="background:linear-gradient(to ` +
      `right,${ramp})"></span><span>${hi}</span></div>`;
    const [gh, gw] = m.grid;
    const by = {
      kind:
        `<span class="qk-chip" style="background:${KIND[0]}"></span>queries <span class="qk-chip" ` +
        `style="background:${KIND[1]}"></span>keys`,
      photo: map.photos
        .map(
          (_, i) =>
            `<span class="qk-chip" ` +
            `style="background:${m.headColours[i % m.headColours.length]}"></span>` +
            `${i ? `photo ${i + 1} back` : "this photo"}`,
        )
        .join(" "),
      row: bar("row 0 (top)", `row ${gh - 1}`),
      column: bar("column 0 (left)", `column ${gw - 1}`),
      rgb: "each point in its patch's mean colour",
      norm: bar("near the centre", "far from it"),
    }[Q.colour];
    const grey =
      m.prefix.length && ["row", "column", "rgb"].includes(Q.colour) ? ` &nbsp; grey: ${m.prefix.join(", ")}` : "";
    el.legend.innerHTML =
      `<div><span class="qk-dot"></span> a query (filled) &nbsp; <span class="qk-ring"></span> a key (ring)` +
      `${grey}</div><div>${by}</div>` +
      `<div>Hover a point: white, its patch; cyan, the ${m.hoverKeys} keys a query attends to most (or the ` +
      `${m.hoverKeys} queries that give a key the most attention weight). Drag a rectangle to light up its ` +
      "patches.</div>";
  }

  function strip() {
    const others = Q.mode === "all" ? Q.photos.slice(1) : [];
    if (el.strip.childElementCount !== others.length) {
      el.strip.innerHTML = others
        .map(
          (_, i) =>
            `<figure><canvas data-photo="${i + 1}"></canvas><figcaption>photo ${i + 2} back</figcaption></figure>`,
        )
        .join("");
    }
  }

  // ---- what the map shown sorts by: R of each patch feature over every patch point of every photo in it, by Python's
  // rule and words (meta.rule); vitviz.qk.sorts_by is the same for one photo
  function sorts(map) {
    const rule = map.photos[0].meta.rule,
      f = { row: [], column: [], brightness: [], red: [], green: [], blue: [] },
      xy = [];
    for (let i = 0; i < map.M; i++) {
      const pm = map.photos[map.photo[i]].meta,
        t = map.token[i] - pm.prefix.length,
        gw = pm.grid[1],
        c = pm.rgb;
      if (t < 0) continue; // a prefix token has no place on the photo
      xy.push(map.xy[2 * i], map.xy[2 * i + 1]);
      f.row.push(Math.floor(t / gw));
      f.column.push(t % gw);
      f.brightness.push((c[3 * t] + c[3 * t + 1] + c[3 * t + 2]) / 3);
      f.red.push(c[3 * t]);
      f.green.push(c[3 * t + 1]);
      f.blue.push(c[3 * t + 2]);
    }
    const r = Object.fromEntries(Object.entries(f).map(([name, v]) => [name, vitvizMultipleR(xy, v)]));
    const which =
      `${map.method === "umap" ? "UMAP" : "PCA"} of ` +
      `${map.photos.length === 1 ? "this photo" : `your last ${map.photos.length} photos`}`;
    return { r, ...vitvizSortsBy(r, f, rule, map.layer, map.head), which };
  }

  // ---- how well this map keeps attention order, on every photo in it: of each query's meta.recallTop most-attended
  // keys of its own photo, the share among its meta.recallTop nearest keys of that photo in the map
  // (vitviz.qk.top_key_recall; benchmarks/qk.py compares maps). On the way, each query's softmax denominator for a
  // key's hover (map.lse).
  const RECALL_CHUNK = 32; // queries a task: a few ms, so that a hover meanwhile is not kept waiting
  function recallLater(generation) {
    Q.recall = null;
    el.recall.textContent = "";
    const map = Q.map,
      dh = map.photos[0].meta.headWidth,
      scale = map.photos[0].meta.scale;
    let pi = -1,
      i = 0,
      n = 0,
      o = 0,
      hits = 0,
      asked = 0,
      queries = 0,
      chance = 0,
      spent = 0,
      q,
      k,
      q2,
      k2,
      top,
      lse,
      scratch;
    const next = () => {
      // the next photo of the map
      o += n;
      pi += 1;
      i = 0;
      const p = map.photos[pi],
        data = p.layers.get(map.layer);
      n = p.meta.tokens;
      top = Math.min(p.meta.recallTop, n);
      q = vitvizQkHead(data, p.meta, map.head, "q");
      k = vitvizQkHead(data, p.meta, map.head, "k");
      q2 = map.xy.subarray(2 * o, 2 * (o + n));
      k2 = map.xy.subarray(2 * (map.nq + o), 2 * (map.nq + o + n));
      scratch = {
        scores: new Float64Array(n),
        dist: new Float64Array(n),
        byScore: new Int32Array(top),
        byDistance: new Int32Array(top),
        best: new Float64Array(top),
      };
      lse = new Float64Array(n);
    };
    const step = () => {
      if (generation !== Q.generation || Q.map !== map) return;
      const t0 = performance.now();
      for (const end = Math.min(n, i + RECALL_CHUNK); i < end; i++) {
        hits += vitvizRecallHits(i, q, k, dh, q2, k2, top, scratch);
        let big = -Infinity,
          sum = 0; // scratch.scores holds −q_i·k_j
        for (let j = 0; j < n; j++) big = Math.max(big, -scratch.scores[j] * scale);
        for (let j = 0; j < n; j++) sum += Math.exp(-scratch.scores[j] * scale - big);
        lse[i] = big + Math.log(sum);
      }
      spent += performance.now() - t0;
      if (i < n) {
        setTimeout(step, 0);
        return;
      }
      map.lse[pi] ||= lse;
      asked += n * top;
      queries += n;
      chance += top;
      if (pi + 1 < map.photos.length) {
        next();
        setTimeout(step, 0);
        return;
      }
      Q.recall = hits / asked;
      Q.recallMs.push(spent);
      const where =
        map.photos.length === 1
          ? ""
          : ` (each query among the keys of its own photo, over the ${map.photos.length} photos)`;
      el.recall.textContent =
        `How well this map keeps attention: ${Math.round(100 * Q.recall)}% of each query's ${top} most-attended ` +
        `keys are among its ${top} nearest keys here${where} (${Math.round((100 * chance) / queries)}% by chance).` +
        (map.method === "pca" && map.photos[0].meta.umap
          ? " On the bundled photos UMAP keeps about twice as many as PCA (docs/benchmarks.md): choose it under Map."
          : "");
    };
    next();
    setTimeout(step, 0);
  }
  return { caption, legend, strip, recallLater, sorts };
}
