// The Q·K view's words and keys: the legend of marks and colours, the share of spread an axis holds, the strip of
// the session's other photos, and how well the map keeps attention order. Shares the view's scope (qk.js follows it in the same script); text is HTML.

function pct(v, spectrum) { const total = spectrum.reduce((s, x) => s + x, 0) / Q.map.M; return `${Math.round((100 * v) / total)}%`; }

function legend(map) {
  const m = map.photos[0].meta, lut = m.colormap, ramp = [0, 64, 128, 192, 255].map((i) => `rgb(${lut[3 * i]},${lut[3 * i + 1]},${lut[3 * i + 2]}) ${(i / 2.55).toFixed(0)}%`).join(",");
  const bar = (lo, hi) => `<div class="qk-ramp-row"><span>${lo}</span><span class="qk-ramp" style="background:linear-gradient(to right,${ramp})"></span><span>${hi}</span></div>`;
  const [gh, gw] = m.grid;
  const by = {
    kind: `<span class="qk-chip" style="background:${KIND[0]}"></span>queries <span class="qk-chip" style="background:${KIND[1]}"></span>keys`,
    photo: map.photos.map((p, i) => `<span class="qk-chip" style="background:${m.headColours[i % m.headColours.length]}"></span>${i ? `photo ${i + 1} back` : "this photo"}`).join(" "),
    row: bar("row 0 (top)", `row ${gh - 1}`), column: bar("column 0 (left)", `column ${gw - 1}`),
    rgb: "each point in its patch's mean colour", norm: bar("near the centre", "far from it"),
  }[Q.colour];
  el.legend.innerHTML = `<div><span class="qk-dot"></span> a query (filled) &nbsp; <span class="qk-ring"></span> a key (ring)` +
    `${m.prefix.length && ["row", "column", "rgb"].includes(Q.colour) ? " &nbsp; grey: " + m.prefix.join(", ") : ""}</div><div>${by}</div>` +
    `<div>Hover a point: white, its patch; cyan, the ${TOP} keys a query attends to most (or the ${TOP} queries that score a key highest). Drag a rectangle to light up its patches.</div>`;
}

function strip() {
  const others = Q.mode === "all" ? Q.photos.slice(1) : [];
  if (el.strip.childElementCount !== others.length) {
    el.strip.innerHTML = others.map((_, i) => `<figure><canvas data-photo="${i + 1}"></canvas><figcaption>photo ${i + 2} back</figcaption></figure>`).join("");
  }
}

// ---- how well this map keeps attention order, on this photo: of each query's TOP_RECALL most-attended keys, the
// share among its TOP_RECALL nearest keys in the map (vitviz.qk.top_key_recall; benchmarks/qk.py compares maps)
const TOP_RECALL = 10, RECALL_CHUNK = 32; // queries a task: a few ms, so that a hover meanwhile is not kept waiting
function recallLater(generation) {
  Q.recall = null; el.recall.textContent = "";
  const map = Q.map, p = map.photos[0], { tokens: n, headWidth: dh } = p.meta, top = Math.min(TOP_RECALL, n);
  const q = headOf(p.layers.get(map.layer), p.meta, map.head, "q"), k = headOf(p.layers.get(map.layer), p.meta, map.head, "k");
  const q2 = map.xy.subarray(0, 2 * n), k2 = map.xy.subarray(2 * map.nq, 2 * (map.nq + n));
  const scratch = { scores: new Float64Array(n), dist: new Float64Array(n), byScore: new Int32Array(top), byDistance: new Int32Array(top), best: new Float64Array(top) };
  let i = 0, hits = 0, spent = 0;
  const step = () => {
    if (generation !== Q.generation || Q.map !== map) return;
    const t0 = performance.now();
    for (const end = Math.min(n, i + RECALL_CHUNK); i < end; i++) hits += vitvizRecallHits(i, q, k, dh, q2, k2, top, scratch);
    spent += performance.now() - t0;
    if (i < n) { setTimeout(step, 0); return; }
    Q.recall = hits / (n * top);
    Q.recallMs.push(spent);
    el.recall.textContent = `How well this map keeps attention: ${Math.round(100 * Q.recall)}% of each query's ${top} most-attended keys are among its ${top} nearest keys here (${Math.round((100 * top) / n)}% by chance).` +
      (p.meta.umap ? " On the bundled photos UMAP keeps about twice as many as PCA (docs/benchmarks.md): choose it under Map." : "");
  };
  setTimeout(step, 0);
}
