// The Positions view: how alike one learned position embedding is to every other, on the diverging scale.

// ---- Positions: the cosine similarity of one learned position embedding with every other (ViT paper, Fig. 7)
function vitvizPositionsView(el, cfg, row, col) {
  const [g0, g1] = cfg.positions.grid,
    sim = vitvizPositionSimilarity(cfg, row, col);
  vitvizPositionsPicture(el.querySelector("canvas"), cfg, sim, row * g1 + col);
  vitvizColourBar(el.querySelector(".site-colourbar"), vitvizPositionsBar(cfg));
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

// The bar of the positions' picture: cosine similarity, −1 to +1, on the diverging scale
function vitvizPositionsBar(cfg) {
  return {
    colours: { colormaps: { diverging: cfg.diverging }, cmap: "diverging" },
    ends: [-1, 1],
    label: (x) => (x < 0 ? "−1 (unlike)" : "+1 (alike)"),
    note: "Colour: cosine similarity, linear from −1 through 0 (white, unrelated) to +1.",
  };
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
