// The model's input from a photo, made in the browser as vitviz/preprocess.py makes it in Python: the input size
// (`input_size`), the resize (OpenCV's INTER_AREA where the photo shrinks, ported below to the float32 operation, so
// that the browser's input equals the Python app's) and the normalisation (`prepare_input`). The photo is decoded
// by the browser and never leaves it.

// Python's round(): halves go to the even neighbour
function vitvizRoundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

// (h, w): aspect ratio kept, longest side about `longest`, multiples of `patch` (vitviz.preprocess.input_size)
function vitvizInputSize(height, width, patch, longest) {
  const scale = longest / Math.max(height, width);
  const side = (n) => Math.max(patch, vitvizRoundHalfEven((n * scale) / patch) * patch);
  return [side(height), side(width)];
}

// OpenCV's computeResizeAreaTab: for each output index, the source indices it averages and their float32 weights
function vitvizAreaTable(ssize, dsize, scale) {
  const tab = [];
  for (let dx = 0; dx < dsize; dx++) {
    const fsx1 = dx * scale,
      fsx2 = fsx1 + scale,
      cell = Math.min(scale, ssize - fsx1);
    let sx1 = Math.ceil(fsx1),
      sx2 = Math.floor(fsx2);
    sx2 = Math.min(sx2, ssize - 1);
    sx1 = Math.min(sx1, sx2);
    if (sx1 - fsx1 > 1e-3) tab.push([dx, sx1 - 1, Math.fround((sx1 - fsx1) / cell)]);
    for (let sx = sx1; sx < sx2; sx++) tab.push([dx, sx, Math.fround(1.0 / cell)]);
    if (fsx2 - sx2 > 1e-3) tab.push([dx, sx2, Math.fround(Math.min(Math.min(fsx2 - sx2, 1), cell) / cell)]);
  }
  return tab;
}

const vitvizRoundEven = (v) => {
  // cvRound of a float: to nearest, halves to even; then saturated to 0..255
  const f = Math.floor(v),
    d = v - f;
  const r = d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  return Math.min(255, Math.max(0, r));
};

// OpenCV's resize with INTER_AREA of RGB uint8 rgb [H*W*3] to [h*w*3], where both sides shrink or stay: its integer
// fast path where the factors are whole numbers, else its area-weighted sums in float32
function vitvizResizeArea(rgb, H, W, h, w) {
  const fx = 1 / (w / W),
    fy = 1 / (h / H),
    ix = Math.round(fx),
    iy = Math.round(fy),
    out = new Uint8Array(h * w * 3);
  if (Math.abs(fx - ix) < Number.EPSILON && Math.abs(fy - iy) < Number.EPSILON) {
    const area = ix * iy,
      scale = Math.fround(1 / area);
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++)
        for (let c = 0; c < 3; c++) {
          let sum = 0;
          for (let dy = 0; dy < iy; dy++)
            for (let dx = 0; dx < ix; dx++) sum += rgb[((y * iy + dy) * W + x * ix + dx) * 3 + c];
          // OpenCV's SIMD kernel for 2×2 rounds halves up; its generic loop rounds sum·(1/area) in float32,
          // halves to even
          out[(y * w + x) * 3 + c] =
            area === 4 && ix === 2 ? (sum + 2) >> 2 : vitvizRoundEven(Math.fround(sum * scale));
        }
    return out;
  }
  const xtab = vitvizAreaTable(W, w, fx),
    ytab = vitvizAreaTable(H, h, fy);
  const buf = new Float32Array(w * 3),
    sum = new Float32Array(w * 3);
  const flush = (dy) => {
    for (let i = 0; i < w * 3; i++) out[dy * w * 3 + i] = vitvizRoundEven(sum[i]);
  };
  let prev = ytab[0][0];
  for (const [dy, sy, beta] of ytab) {
    buf.fill(0);
    const row = sy * W * 3;
    for (const [dx, sx, alpha] of xtab) {
      for (let c = 0; c < 3; c++)
        buf[dx * 3 + c] = Math.fround(buf[dx * 3 + c] + Math.fround(rgb[row + sx * 3 + c] * alpha));
    }
    if (dy !== prev) {
      flush(prev);
      for (let i = 0; i < w * 3; i++) sum[i] = Math.fround(beta * buf[i]);
      prev = dy;
    } else {
      for (let i = 0; i < w * 3; i++) sum[i] = Math.fround(sum[i] + Math.fround(beta * buf[i]));
    }
  }
  flush(prev);
  return out;
}

// A decoded photo's RGB uint8 [H*W*3] from its RGBA pixels, transparency composited on white as Python does
function vitvizRgbOf(rgba, count) {
  const rgb = new Uint8Array(count * 3);
  for (let i = 0; i < count; i++) {
    const a = Math.fround(rgba[4 * i + 3] / 255);
    for (let c = 0; c < 3; c++) {
      const v = rgba[4 * i + c];
      rgb[3 * i + c] =
        a === 1 ? v : vitvizRoundEven(Math.fround(Math.fround(v * a) + Math.fround(255 * Math.fround(1 - a))));
    }
  }
  return rgb;
}

// A photo's pixels, decoded by the browser with its EXIF orientation: {rgb [H*W*3], width, height, bitmap}
async function vitvizDecode(blob, maxPixels) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(blob, {
      imageOrientation: "from-image",
      premultiplyAlpha: "none",
      colorSpaceConversion: "none",
    });
  } catch {
    throw new Error("this file is not an image that the browser can read (try a JPEG or PNG)");
  }
  const { width, height } = bitmap;
  if (width * height > maxPixels) {
    bitmap.close();
    throw new Error(
      `the image is too large: ${height} px high × ${width} px wide, over the limit of ` +
        `${maxPixels.toLocaleString("en")} pixels`,
    );
  }
  const canvas = new OffscreenCanvas(width, height),
    ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(bitmap, 0, 0);
  return { rgb: vitvizRgbOf(ctx.getImageData(0, 0, width, height).data, width * height), width, height, bitmap };
}

// The model's input [1,3,h,w] float32 from the photo: resized as Python resizes it where the photo shrinks (exact:
// true); where it grows, the browser's own smoothing, which differs from OpenCV's cubic (exact: false)
function vitvizModelInput(photo, model, longest) {
  const { rgb, width: W, height: H } = photo,
    p = model.patch;
  if (H < p || W < p)
    throw new Error(`the image is too small: ${H} px high × ${W} px wide is smaller than one ${p}×${p} px patch`);
  const [h, w] = vitvizInputSize(H, W, p, longest);
  let resized,
    exact = true;
  if (h === H && w === W) resized = rgb;
  else if (h * w < H * W && h <= H && w <= W) resized = vitvizResizeArea(rgb, H, W, h, w);
  else {
    const canvas = new OffscreenCanvas(w, h),
      ctx = canvas.getContext("2d", { willReadFrequently: true });
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(photo.bitmap, 0, 0, w, h);
    resized = vitvizRgbOf(ctx.getImageData(0, 0, w, h).data, w * h);
    exact = false;
  }
  const x = new Float32Array(3 * h * w),
    mean = model.mean.map(Math.fround),
    std = model.std.map(Math.fround);
  for (let i = 0; i < h * w; i++) {
    for (let c = 0; c < 3; c++)
      x[c * h * w + i] = Math.fround(Math.fround(Math.fround(resized[3 * i + c] / 255) - mean[c]) / std[c]);
  }
  return { pixels: x, resized, height: h, width: w, exact };
}
