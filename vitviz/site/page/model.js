// The model in the browser: its ONNX file (vitviz/site/graph.py) fetched once and kept in the Cache API, then run by
// ONNX Runtime Web's WebAssembly backend, on every core where the page is cross-origin isolated (threads need
// SharedArrayBuffer), else on one.

// The model's graphs are kept apart from the service worker's cache of the site's files (sw.js), which a new build
// replaces: a new build whose graphs did not change keeps them. Each URL's ?v= is its graph's digest.
const VITVIZ_MODEL_CACHE = "vitviz-model";

// The model file's bytes, from this browser's cache, else from the site with progress(done, total) in bytes
async function vitvizModelBytes(url, expected, progress) {
  // blocked storage: no cache
  const cache = "caches" in self ? await caches.open(VITVIZ_MODEL_CACHE).catch(() => null) : null;
  const kept = cache && (await cache.match(url).catch(() => null));
  if (kept) {
    const bytes = await kept.arrayBuffer();
    if (bytes.byteLength === expected) return { bytes, cached: true };
  }
  const response = await fetch(url);
  if (!response.ok) throw new Error(`the model could not be fetched: HTTP ${response.status} for ${url}`);
  const total = expected || Number(response.headers.get("content-length")) || 0,
    reader = response.body.getReader();
  const parts = [];
  let done = 0;
  for (;;) {
    const { done: end, value } = await reader.read();
    if (end) break;
    parts.push(value);
    done += value.byteLength;
    progress(done, total);
  }
  const bytes = await new Blob(parts).arrayBuffer();
  if (expected && bytes.byteLength !== expected)
    throw new Error(`the model arrived cut short: ${bytes.byteLength} of ${expected} bytes`);
  if (cache) {
    const copy = new Response(bytes.slice(0), { headers: { "content-type": "application/octet-stream" } });
    await cache
      .put(url, copy)
      .catch((e) => console.warn(`vitviz: the model is not kept (${e.message}): a full quota?`));
    const href = new URL(url, location.href); // another build's copy of this graph is let go
    for (const key of await cache.keys())
      if (new URL(key.url).pathname === href.pathname && key.url !== href.href) await cache.delete(key);
  }
  return { bytes, cached: false };
}

// The sessions of the model's three graphs (vitviz/site/graph.py): {run(input), layer(q, k, distances), dense(tokens,
// grid, prefix), threads, isolated, createMs, cached}. The layer and dense graphs are small and come first: early(api)
// is called with them (run not there yet), so that the page can draw the precomputed example while the forward's
// graph is fetched with progress(done, total).
async function vitvizSession(ort, config, progress, early = () => {}) {
  const isolated = Boolean(self.crossOriginIsolated);
  ort.env.wasm.numThreads = isolated ? Math.min(navigator.hardwareConcurrency || 1, 8) : 1;
  ort.env.wasm.wasmPaths = config.runtime;
  // the runtime's .wasm kept with the graphs: a service worker's install would fetch it a second time, since a 14 MB
  // answer may not stay in the browser's HTTP cache (a fresh profile's memory cache drops it)
  const wasm = config.runtimeWasm;
  ort.env.wasm.wasmBinary = (await vitvizModelBytes(wasm.url, wasm.bytes, () => {})).bytes;
  const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
  let createMs = 0;
  const create = async (bytes) => {
    const t = performance.now(),
      session = await ort.InferenceSession.create(new Uint8Array(bytes), options);
    createMs += performance.now() - t;
    return session;
  };
  const layerSession = await create((await vitvizModelBytes(config.layerUrl, config.layerBytes, () => {})).bytes);
  const denseSession = await create((await vitvizModelBytes(config.denseUrl, config.denseBytes, () => {})).bytes);
  let queue = Promise.resolve(); // one run at a time on the runtime, whichever graph asks
  const outputs = (start, names) =>
    (queue = queue
      .catch(() => {})
      .then(async () => {
        const out = await start(),
          result = {};
        for (const name of names) {
          result[name] = { data: out[name].data, dims: out[name].dims };
          out[name].dispose?.();
        }
        return result;
      }));
  const api = {
    threads: ort.env.wasm.numThreads,
    isolated,
    createMs: null,
    cached: null,
    run: null,
    // one layer's fused heads and statistics from its q and k [N*H*dh] (Float32Array) and the patches' distances
    layer(q, k, distances) {
      const wide = config.meta.heads * config.meta.headWidth,
        n = q.length / wide,
        patches = Math.sqrt(distances.length);
      const feeds = {
        q: new ort.Tensor("float32", q, [n, wide]),
        k: new ort.Tensor("float32", k, [n, wide]),
        distances: new ort.Tensor("float32", distances, [patches, patches]),
      };
      return outputs(() => layerSession.run(feeds), config.layerOutputs);
    },
    // the dense head's map [h*w] on the final tokens [N*D] (Float32Array) of a grid [gh, gw] after `prefix` tokens
    async dense(tokens, grid, prefix) {
      const [gh, gw] = grid,
        d = tokens.length / (prefix + gh * gw),
        map = new Float32Array(d * gh * gw);
      for (let p = 0; p < gh * gw; p++) for (let c = 0; c < d; c++) map[c * gh * gw + p] = tokens[(prefix + p) * d + c];
      const feeds = { patches: new ort.Tensor("float32", map, [1, d, gh, gw]) };
      return (await outputs(() => denseSession.run(feeds), ["dense"])).dense;
    },
  };
  early(api);
  const { bytes, cached } = await vitvizModelBytes(config.modelUrl, config.modelBytes, progress);
  const session = await create(bytes);
  // one forward of input (vitvizModelInput): the forward's outputs as {name: {data, dims}}, and its time
  api.run = async (input) => {
    const { height: h, width: w } = input,
      t = performance.now(); // from the ask: a layer's summary may run first
    const feeds = { pixel_values: new ort.Tensor("float32", input.pixels, [1, 3, h, w]) };
    const result = await outputs(() => session.run(feeds), config.outputs);
    result.forwardMs = performance.now() - t;
    return result;
  };
  Object.assign(api, { createMs, cached });
  return api;
}

// The precomputed example's forward outputs (vitviz/site/build.py `preview`): float16 arrays one after another in
// the graph's output order, as {name: {data: Float32Array, dims}}, as a forward gives them
async function vitvizPreviewOutputs(preview, names) {
  const response = await fetch(preview.url);
  if (!response.ok) throw new Error(`HTTP ${response.status} for ${preview.url}`);
  const half = new Uint16Array(await response.arrayBuffer()),
    out = { forwardMs: null };
  let at = 0;
  for (const name of names) {
    const dims = preview.dims[name],
      count = dims.reduce((a, b) => a * b, 1),
      data = new Float32Array(count);
    for (let i = 0; i < count; i++) data[i] = VITVIZ_HALF[half[at + i]];
    out[name] = { data, dims };
    at += count;
  }
  return out;
}

// [P*P] float32 pixel distances between patch centres (vitviz.maps.patch_distances), computed in float64
function vitvizPatchDistances(gh, gw, p) {
  const n = gh * gw,
    out = new Float32Array(n * n);
  for (let a = 0; a < n; a++) {
    const ya = (Math.floor(a / gw) + 0.5) * p,
      xa = ((a % gw) + 0.5) * p;
    for (let b = 0; b < n; b++) {
      const dy = ya - (Math.floor(b / gw) + 0.5) * p,
        dx = xa - ((b % gw) + 0.5) * p;
      out[a * n + b] = Math.sqrt(dy * dy + dx * dx);
    }
  }
  return out;
}
