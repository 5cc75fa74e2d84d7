// One forward in the browser and what the views read from it: the Explorer's meta and layer source (the same engine
// as the app's, the notebook widget's and the offline file's), the sorted weights that rollout's discard needs, the
// token norms and the PCA of the final tokens (pca.js). Made by vitvizRun(config, session, photo, longest, name),
// from the forward's outputs `given` where they are precomputed (the example shown while the model loads), else from
// a forward.

let vitvizRunCount = 0;

async function vitvizRun(cfg, session, photo, longest, name, given = null) {
  const model = cfg.model,
    input = vitvizModelInput(photo, model, longest);
  const out = given || (await session.run(input));
  const [, n, width] = [0, ...out.tokens.dims];
  const grid = [input.height / model.patch, input.width / model.patch];
  const display = vitvizDisplayPhoto(photo.bitmap, cfg.displaySide);
  const meta = {
    ...cfg.meta,
    tokens: n,
    grid,
    input: [input.width, input.height],
    photo: display.url,
    photoSize: display.size,
    session: "standalone",
    key: `${name}|${input.width}x${input.height}|${++vitvizRunCount}`,
    start: cfg.meta.layers - 1,
  };
  const patches = grid[0] * grid[1];
  meta.qk = { ...cfg.qk, rgb: vitvizPatchColours(input, model, grid) };
  const thresholds = new Map();
  const run = {
    name,
    meta,
    input,
    out,
    width,
    forwardMs: out.forwardMs,
    preview: Boolean(given),
    source: vitvizRunSource(meta, out),
    // the dense head's map (out.dense [h*w]) and every layer's fused heads and statistics, from the layer graph, once
    // (out.mean, .max, .min [L*N*N], .distance, .entropy [L*H]); the views that need them wait for it
    denseMap() {
      // the dense head's map alone (out.dense), once: all the Output tab needs
      const t = performance.now();
      run.densing ||= session
        .dense(out.tokens.data, grid, meta.prefix.length)
        .then((dense) => {
          out.dense = dense;
          run.denseMs = performance.now() - t;
          return out;
        })
        .catch((e) => {
          run.densing = null;
          throw e;
        });
      return run.densing;
    },
    summaries() {
      run.summarising ||= run
        .denseMap()
        .then(() => vitvizSummaries(session, out, meta, grid, () => run.cancelled))
        .then((ms) => {
          run.summaryMs = ms;
          run.summarised = true;
          return out;
        })
        .catch((e) => {
          run.summarising = null;
          throw e;
        }); // asked again next time
      return run.summarising;
    },
    cancel() {
      run.cancelled = true;
    }, // a newer photo is shown: its summaries stop between two layers
    threshold(fusion, l, ratio) {
      // layer l's discard threshold: the slider's ratios counted once a fusion
      if (!thresholds.has(fusion)) thresholds.set(fusion, vitvizThresholds(out[fusion].data, meta.layers, n * n));
      const kept = thresholds.get(fusion)[l];
      return kept.has(ratio)
        ? kept.get(ratio)
        : vitvizThresholds(out[fusion].data, meta.layers, n * n, [ratio])[l].get(ratio);
    },
    tokenNorms() {
      // [P] the length of each patch's output token before the final norm (maps.token_norms)
      const last = out.last.data,
        norms = new Float32Array(patches),
        prefix = meta.prefix.length;
      for (let p = 0; p < patches; p++) {
        let s = 0;
        for (let d = 0; d < width; d++) s += last[(prefix + p) * width + d] ** 2;
        norms[p] = Math.sqrt(s);
      }
      return norms;
    },
    pca() {
      return vitvizPcaRgb(out.tokens.data, meta.prefix.length, patches, width);
    },
    photo: null,
  };
  await new Promise((resolve) => {
    const img = new Image();
    img.onload = () => {
      run.photo = img;
      resolve();
    };
    img.onerror = resolve;
    img.src = display.url;
  });
  return run;
}

// Every layer through the layer graph, one after another, into one array per output. Returns the milliseconds taken.
// They are put on `out` whole, once every layer is in; cancelled() stops it between two layers.
async function vitvizSummaries(session, out, meta, grid, cancelled) {
  const t = performance.now(),
    n = meta.tokens,
    wide = meta.heads * meta.headWidth,
    L = meta.layers,
    made = {};
  const distances = vitvizPatchDistances(grid[0], grid[1], meta.patch);
  for (let l = 0; l < L; l++) {
    if (cancelled()) throw new Error("a newer photo is shown");
    const rows = (name) => out[name].data.subarray(l * n * wide, (l + 1) * n * wide);
    const part = await session.layer(rows("q"), rows("k"), distances);
    for (const [name, { data, dims }] of Object.entries(part)) {
      made[name] ||= { data: new data.constructor(L * data.length), dims: [L, ...dims] };
      made[name].data.set(data, l * data.length);
    }
  }
  Object.assign(out, made);
  return performance.now() - t;
}

// The engine's source (static/source.js) for one run: layer l's q, k and value norms, views of the forward's outputs
// (the Explorer, Inside a head and Queries & keys share them: no copy)
function vitvizRunSource(meta, out) {
  const n = meta.tokens,
    wide = meta.heads * meta.headWidth,
    h = meta.heads,
    q = out.q.data,
    k = out.k.data,
    v = out.value_norms.data;
  return {
    meta: () => meta,
    async layer(l) {
      const rows = (a, width) => a.subarray(l * n * width, (l + 1) * n * width);
      return { q: rows(q, wide), k: rows(k, wide), valueNorms: rows(v, h) };
    },
  };
}

// The photo at display size (longest side `side`, as vitviz.render.fit), as a JPEG data URL
function vitvizDisplayPhoto(bitmap, side) {
  const s = Math.min(1, side / Math.max(bitmap.width, bitmap.height));
  const w = Math.max(1, Math.round(bitmap.width * s)),
    h = Math.max(1, Math.round(bitmap.height * s));
  const canvas = document.createElement("canvas");
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(bitmap, 0, 0, w, h);
  return { url: canvas.toDataURL("image/jpeg", 0.88), size: [w, h] };
}

// [P*3] each patch's mean RGB in [0, 1] from the model's input, its mean and std undone (vitviz.qk.patch_colours)
function vitvizPatchColours(input, model, grid) {
  const { pixels, height: h, width: w } = input,
    p = model.patch,
    [gh, gw] = grid,
    out = new Array(gh * gw * 3).fill(0);
  for (let c = 0; c < 3; c++)
    for (let y = 0; y < gh * p; y++)
      for (let x = 0; x < gw * p; x++) {
        out[3 * (Math.floor(y / p) * gw + Math.floor(x / p)) + c] +=
          pixels[c * h * w + y * w + x] * model.std[c] + model.mean[c];
      }
  return out.map((v) => Math.min(1, Math.max(0, v / (p * p))));
}
