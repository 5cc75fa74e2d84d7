// The photo under the site's pictures and the Tokens view: the model's input drawn on a canvas, and the photo cut
// into its patches. Each view draws from one forward's arrays (a "run": the graph's outputs, the input and the
// Explorer's meta) with no model and no server; text is HTML and SVG, so that it grows with the projector mode.

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
