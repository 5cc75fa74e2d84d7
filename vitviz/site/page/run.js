// One forward in the browser and what the views read from it: the Explorer's meta and layer source (the same engine
// as the app's, the notebook widget's and the offline file's), the sorted weights that rollout's discard needs, the
// token norms and the PCA of the final tokens. Made by vitvizRun(config, session, photo, longest, name), from the
// forward's outputs `given` where they are precomputed (the example shown while the model loads), else from a forward.

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

// [P*3] in [0, 1]: the first three principal components of the patch tokens (tokens [N*D]) as RGB, each min-max
// scaled, each axis' largest loading positive (vitviz.maps.pca_rgb). The top three eigenvectors of the covariance by
// subspace iteration, then ordered by a 3×3 eigenproblem within it (vitvizEigen, qkmath.js).
function vitvizPcaRgb(tokens, prefix, patches, d) {
  const x = new Float64Array(patches * d),
    mean = new Float64Array(d);
  for (let p = 0; p < patches; p++) for (let j = 0; j < d; j++) mean[j] += tokens[(prefix + p) * d + j] / patches;
  for (let p = 0; p < patches; p++) for (let j = 0; j < d; j++) x[p * d + j] = tokens[(prefix + p) * d + j] - mean[j];
  const cov = new Float64Array(d * d);
  for (let p = 0; p < patches; p++) {
    const row = x.subarray(p * d, (p + 1) * d);
    for (let a = 0; a < d; a++) {
      const v = row[a];
      if (v) for (let b = a; b < d; b++) cov[a * d + b] += v * row[b];
    }
  }
  for (let a = 0; a < d; a++) for (let b = 0; b < a; b++) cov[a * d + b] = cov[b * d + a];
  const k = Math.min(3, d),
    basis = Array.from({ length: k }, (_, i) =>
      Float64Array.from({ length: d }, (_, j) => Math.sin(1 + i * 7.3 + j * 0.61)),
    );
  const orthonormal = () => {
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < i; j++) {
        let s = 0;
        for (let t = 0; t < d; t++) s += basis[i][t] * basis[j][t];
        for (let t = 0; t < d; t++) basis[i][t] -= s * basis[j][t];
      }
      let s = 0;
      for (let t = 0; t < d; t++) s += basis[i][t] ** 2;
      s = Math.sqrt(s) || 1;
      for (let t = 0; t < d; t++) basis[i][t] /= s;
    }
  };
  const times = (v) => {
    const o = new Float64Array(d);
    for (let a = 0; a < d; a++) {
      let s = 0;
      for (let b = 0; b < d; b++) s += cov[a * d + b] * v[b];
      o[a] = s;
    }
    return o;
  };
  orthonormal();
  for (let it = 0; it < 300; it++) {
    for (let i = 0; i < k; i++) basis[i] = times(basis[i]);
    orthonormal();
  }
  const cb = basis.map(times),
    small = new Float64Array(k * k);
  for (let i = 0; i < k; i++)
    for (let j = 0; j < k; j++) {
      let s = 0;
      for (let t = 0; t < d; t++) s += basis[i][t] * cb[j][t];
      small[i * k + j] = s;
    }
  const { values, vectors } = vitvizEigen(small, k),
    order = values.map((_, i) => i).sort((i, j) => values[j] - values[i]);
  const axes = order.map((col) => {
    const axis = new Float64Array(d);
    for (let i = 0; i < k; i++) for (let t = 0; t < d; t++) axis[t] += vectors[i * k + col] * basis[i][t];
    let big = 0;
    for (let t = 0; t < d; t++) if (Math.abs(axis[t]) > Math.abs(big)) big = axis[t];
    if (big < 0) for (let t = 0; t < d; t++) axis[t] = -axis[t];
    return axis;
  });
  const rgb = new Float32Array(patches * 3);
  for (let a = 0; a < k; a++) {
    const comp = new Float64Array(patches);
    for (let p = 0; p < patches; p++) {
      let s = 0;
      for (let t = 0; t < d; t++) s += x[p * d + t] * axes[a][t];
      comp[p] = s;
    }
    let lo = Infinity,
      hi = -Infinity;
    for (const v of comp) {
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
    for (let p = 0; p < patches; p++) rgb[3 * p + a] = (comp[p] - lo) / Math.max(hi - lo, 1e-12);
  }
  return rgb;
}
