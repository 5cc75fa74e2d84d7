// The Rollout view: each patch's share of the flow through every layer's attention (rollout.js computes it), drawn on
// the page's colour scale with its bar, and what the map can tell on this photo.

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
  vitvizColourBar(el.querySelector(".site-colourbar"), vitvizRolloutBar(m, sc));
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

// The bar of a rollout drawn on scale `sc`: its ends in % of the flow
const vitvizRolloutBar = (meta, sc) =>
  vitvizScaleBar(meta, sc, (x) => `${vitvizSignificant(x)} %`, "the patches' shares of the flow");

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
