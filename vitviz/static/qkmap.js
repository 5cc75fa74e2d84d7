// The Q·K view's maps: each photo's layers (kept in window.vitviz.layerStore, shared with the Explorer), the map of
// one head over the shown photos (normalised jointly, one PCA, or the server's UMAP), kept by photos, layer and
// head, and what a point attends to. vitvizQkMaps(Q) gives them, bound to one view's state Q (qk.js).

function vitvizQkMaps(Q) {
  window.vitviz ||= {};
  window.vitviz.layerStore ||= new Map();
  window.vitviz.layerFetches ||= new Map();
  const QK = window.vitviz.layerStore;
  const QK_FETCHES = window.vitviz.layerFetches;

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
      .slice(0, m.hoverKeys);
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

  // ---- a layer and head: every shown photo's layer, one map; the atlas after it
  function photoKeys(photos) {
    return photos.map((p) => `${p.session}|${p.key}`).join(",");
  }

  function mapOf(layer, head, photos, projected) {
    const key = `${projected ? "umap" : "pca"}|${layer}|${head}|${photoKeys(photos)}`;
    if (!Q.atlas.has(key)) Q.atlas.set(key, computeMap(layer, head, photos, projected));
    return Q.atlas.get(key);
  }

  return { loadLayer, computeMap, pointIndex, related, photoKeys, mapOf };
}
