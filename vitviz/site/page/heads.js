// The Heads view and the lesson's table: every head's mean attention distance and entropy against depth (SVG
// charts), the output tokens' norms and a PCA of the final tokens, and a layer × head table of numbers.

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
  const look = { ...m, alpha: 0.85, cmap: "viridis" };
  vitvizDrawMap(el.querySelector(".site-norms"), norms, sc, look, run.photo, null, null);
  vitvizColourBar(
    el.querySelector(".site-colourbar"),
    vitvizScaleBar(look, sc, vitvizSignificant, "the tokens' lengths"),
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

// The layer × head table of values [L*H] in a colormap (lut: its 256 RGB triples), each cell's number written in it
// at `font` px (the canvas is drawn at the size it is shown, so the projector's larger type stays large)
function vitvizLayerHeadGrid(canvas, values, L, H, lut, font = 15) {
  const rowH = Math.round(font * 1.6),
    cell = Math.round(font * 3.7),
    left = Math.round(font * 5.4),
    topPad = 2 * font,
    bytes = vitvizLutBytes(lut);
  canvas.width = left + H * cell;
  canvas.height = topPad + L * rowH;
  const ctx = canvas.getContext("2d");
  let lo = Infinity,
    hi = -Infinity;
  for (const v of values) {
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
  }
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = `${font}px system-ui, sans-serif`;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  ctx.fillStyle = "#000";
  for (let h = 0; h < H; h++) ctx.fillText(`head ${h}`, left + (h + 0.5) * cell, topPad / 2);
  for (let l = 0; l < L; l++) {
    ctx.fillStyle = "#000";
    ctx.textAlign = "right";
    ctx.fillText(`layer ${l}`, left - 8, topPad + (l + 0.5) * rowH);
    ctx.textAlign = "center";
    for (let h = 0; h < H; h++) {
      const v = values[l * H + h],
        t = Math.round(((v - lo) / Math.max(hi - lo, 1e-12)) * 255) * 3;
      ctx.fillStyle = `rgb(${bytes[t]},${bytes[t + 1]},${bytes[t + 2]})`;
      ctx.fillRect(left + h * cell, topPad + l * rowH, cell - 1, rowH - 1);
      ctx.fillStyle = t > 128 * 3 ? "#000" : "#fff";
      ctx.fillText(vitvizFixed(v, 0), left + (h + 0.5) * cell, topPad + (l + 0.5) * rowH);
    }
  }
}
