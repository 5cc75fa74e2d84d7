// Drawing on a canvas: a map of patches over the photo, the query's marker and the outlines another view asks
// for. Pure of the Explorer's state: each function takes what it draws.

const VITVIZ_HIGHLIGHT = "#00e5ff"; // cyan: apart from the query's white marker and from every colormap's ends
let vitvizCells = null; // one offscreen canvas of gh x gw pixels, one per patch, scaled up without smoothing

function vitvizSizeCanvas(canvas, photoSize) {
  // as many pixels as the canvas shows, in the photo's proportions
  const ratio = photoSize[1] / photoSize[0];
  const w = Math.max(1, Math.round(canvas.clientWidth * (window.devicePixelRatio || 1)));
  const h = Math.max(1, Math.round(w * ratio));
  if (canvas.width !== w || canvas.height !== h) {
    canvas.width = w;
    canvas.height = h;
  }
}

function vitvizLut(meta) {
  return vitvizLutBytes(meta.colormaps[meta.cmap] || meta.colormaps.inferno);
}

// values [gh*gw] on scale sc, coloured with the meta's colormap and opacity over `photo`; `marker`: the query's
// patch index or null; `outlined`: patch indices or null
function vitvizDrawMap(canvas, values, sc, meta, photo, marker, outlined) {
  vitvizSizeCanvas(canvas, meta.photoSize);
  const ctx = canvas.getContext("2d"),
    [gh, gw] = meta.grid,
    lut = vitvizLut(meta);
  vitvizCells ||= document.createElement("canvas");
  if (vitvizCells.width !== gw || vitvizCells.height !== gh) {
    vitvizCells.width = gw;
    vitvizCells.height = gh;
  }
  const cctx = vitvizCells.getContext("2d"),
    img = cctx.createImageData(gw, gh),
    px = img.data;
  const span = Math.max(sc.hi - sc.lo, 1e-12),
    alpha = Math.round(255 * meta.alpha);
  for (let i = 0; i < gh * gw; i++) {
    const t = Math.min(1, Math.max(0, (vitvizAtScale(values[i], sc) - sc.lo) / span));
    const c = 3 * Math.round(t * 255);
    px[4 * i] = lut[c];
    px[4 * i + 1] = lut[c + 1];
    px[4 * i + 2] = lut[c + 2];
    px[4 * i + 3] = alpha;
  }
  cctx.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = true;
  if (photo) ctx.drawImage(photo, 0, 0, canvas.width, canvas.height);
  else ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false; // one square per patch, no smoothing
  ctx.drawImage(vitvizCells, 0, 0, canvas.width, canvas.height);
  if (marker !== null) vitvizDrawMarker(ctx, canvas, meta.grid, marker);
  if (outlined) vitvizDrawOutlines(ctx, canvas, meta.grid, outlined);
}

function vitvizDrawMarker(ctx, canvas, grid, p) {
  // white with a black border, around the patch: seen on a dark map and on a bright one
  const [gh, gw] = grid,
    cw = canvas.width / gw,
    ch = canvas.height / gh;
  const x = (p % gw) * cw,
    y = Math.floor(p / gw) * ch;
  const thick = Math.max(3, Math.round(Math.min(canvas.width, 900) / 150));
  ctx.lineWidth = thick + 4;
  ctx.strokeStyle = "#000";
  ctx.strokeRect(x - thick / 2, y - thick / 2, cw + thick, ch + thick);
  ctx.lineWidth = thick;
  ctx.strokeStyle = "#fff";
  ctx.strokeRect(x - thick / 2, y - thick / 2, cw + thick, ch + thick);
}

function vitvizDrawOutlines(ctx, canvas, grid, patches) {
  // inside each patch, so that neighbours' outlines never overlap
  const [gh, gw] = grid,
    cw = canvas.width / gw,
    ch = canvas.height / gh;
  const thick = Math.max(2, Math.round(Math.min(canvas.width, 900) / 300));
  for (const p of patches) {
    const x = (p % gw) * cw,
      y = Math.floor(p / gw) * ch;
    ctx.lineWidth = thick + 2;
    ctx.strokeStyle = "#000";
    ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
    ctx.lineWidth = thick;
    ctx.strokeStyle = VITVIZ_HIGHLIGHT;
    ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
  }
}

function vitvizRamp(el, meta) {
  const lut = vitvizLut(meta);
  const stops = [0, 64, 128, 192, 255].map(
    (i) => `rgb(${lut[3 * i]},${lut[3 * i + 1]},${lut[3 * i + 2]}) ${vitvizFixed(i / 2.55, 0)}%`,
  );
  el.style.background = `linear-gradient(to right, ${stops.join(",")})`;
}
