// The Q·K view's drawing: points stamped into an ImageData (typed arrays, no path per point), the map fitted to
// the canvas at one scale on both axes, a grid of cells to find the point under the pointer in O(1), outlines of
// patches on a photo. vitvizQkDraw(Q, kind) gives them, bound to one view's state Q (qk.js).

function vitvizQkDraw(Q, KIND) {
  const CELL = 16,
    HIT_PX = 12; // css px: a hover's grid cell, and how near a point must be
  // ---- drawing: the points as stamps into an ImageData (typed arrays); highlights on a second canvas
  function fitCanvas(canvas, cssW, cssH) {
    const dpr = window.devicePixelRatio || 1,
      w = Math.max(1, Math.round(cssW * dpr)),
      h = Math.max(1, Math.round(cssH * dpr));
    if (canvas.width !== w || canvas.height !== h) {
      canvas.width = w;
      canvas.height = h;
    }
    return dpr;
  }

  function layout(map, w, h, margin) {
    // equal scale on both axes: distance is what the map means
    let x0 = Infinity,
      x1 = -Infinity,
      y0 = Infinity,
      y1 = -Infinity;
    for (let i = 0; i < map.M; i++) {
      const x = map.xy[2 * i],
        y = map.xy[2 * i + 1];
      x0 = Math.min(x0, x);
      x1 = Math.max(x1, x);
      y0 = Math.min(y0, y);
      y1 = Math.max(y1, y);
    }
    const s = Math.min((w - 2 * margin) / (x1 - x0 || 1), (h - 2 * margin) / (y1 - y0 || 1));
    const ox = (w - s * (x1 - x0)) / 2 - s * x0,
      oy = (h - s * (y1 - y0)) / 2 - s * y0;
    const sx = new Float32Array(map.M),
      sy = new Float32Array(map.M);
    for (let i = 0; i < map.M; i++) {
      sx[i] = ox + s * map.xy[2 * i];
      sy[i] = oy + s * map.xy[2 * i + 1];
    }
    return { sx, sy };
  }

  function colourOf(map, i, lut, normRange) {
    const p = map.photos[map.photo[i]].meta,
      t = map.token[i],
      n = p.prefix.length,
      [gh, gw] = p.grid;
    const ramp = (v) => {
      const j = 3 * Math.max(0, Math.min(255, Math.round(v * 255)));
      return [lut[j], lut[j + 1], lut[j + 2]];
    };
    const hex = (c) => [parseInt(c.slice(1, 3), 16), parseInt(c.slice(3, 5), 16), parseInt(c.slice(5, 7), 16)];
    if (Q.colour === "kind") return hex(KIND[i < map.nq ? 0 : 1]);
    if (Q.colour === "photo") return hex(p.headColours[map.photo[i] % p.headColours.length]);
    if (Q.colour === "norm") return ramp((map.norm[i] - normRange[0]) / (normRange[1] - normRange[0] || 1));
    if (t < n) return [128, 128, 128]; // a prefix token has no place on the photo
    const patch = t - n;
    if (Q.colour === "row") return ramp(Math.floor(patch / gw) / Math.max(1, gh - 1));
    if (Q.colour === "column") return ramp((patch % gw) / Math.max(1, gw - 1));
    return [0, 1, 2].map((c) => Math.round(255 * p.rgb[3 * patch + c]));
  }

  function stamp(r, ring) {
    const out = [];
    for (let dy = -Math.ceil(r); dy <= Math.ceil(r); dy++)
      for (let dx = -Math.ceil(r); dx <= Math.ceil(r); dx++) {
        const d = Math.hypot(dx, dy);
        if (ring ? d <= r && d >= r - Math.max(1.2, r / 2.5) : d <= r) out.push(dx, dy);
      }
    return out;
  }

  function drawPoints(canvas, map, pos, scale, radius) {
    const ctx = canvas.getContext("2d"),
      img = ctx.createImageData(canvas.width, canvas.height),
      px = img.data,
      W = canvas.width,
      H = canvas.height;
    px.fill(255);
    const lut = vitvizLutBytes(map.photos[0].meta.colormap);
    let lo = Infinity,
      hi = -Infinity;
    for (let i = 0; i < map.M; i++) {
      lo = Math.min(lo, map.norm[i]);
      hi = Math.max(hi, map.norm[i]);
    }
    const disc = stamp(radius, false),
      ring = stamp(radius + 0.5, true),
      edge = stamp(radius + 1, false);
    for (let pass = 0; pass < 2; pass++) {
      // keys first, queries on top
      for (let i = pass ? 0 : map.nq; i < (pass ? map.nq : map.M); i++) {
        const [r, g, b] = colourOf(map, i, lut, [lo, hi]),
          cx = Math.round(pos.sx[i] * scale),
          cy = Math.round(pos.sy[i] * scale);
        const put = (s, cr, cg, cb) => {
          for (let j = 0; j < s.length; j += 2) {
            const x = cx + s[j],
              y = cy + s[j + 1];
            if (x >= 0 && y >= 0 && x < W && y < H) {
              const o = 4 * (y * W + x);
              px[o] = cr;
              px[o + 1] = cg;
              px[o + 2] = cb;
            }
          }
        };
        if (pass) {
          put(edge, 40, 40, 40);
          put(disc, r, g, b);
        } else put(ring, r, g, b);
      }
    }
    ctx.putImageData(img, 0, 0);
  }

  function buildGrid(map, pos, w, h) {
    // points by cell of CELL css px, for a hover's nearest point in O(1)
    const cols = Math.ceil(w / CELL) + 1,
      rows = Math.ceil(h / CELL) + 1,
      count = new Int32Array(cols * rows + 1);
    const cell = (i) =>
      Math.min(rows - 1, Math.max(0, Math.floor(pos.sy[i] / CELL))) * cols +
      Math.min(cols - 1, Math.max(0, Math.floor(pos.sx[i] / CELL)));
    for (let i = 0; i < map.M; i++) count[cell(i) + 1]++;
    for (let c = 0; c < cols * rows; c++) count[c + 1] += count[c];
    const items = new Int32Array(map.M),
      fill = count.slice();
    for (let i = 0; i < map.M; i++) items[fill[cell(i)]++] = i;
    return { cols, rows, start: count, items };
  }

  function nearest(x, y) {
    const g = Q.grid,
      pos = Q.pos;
    if (!g) return -1;
    const cx = Math.floor(x / CELL),
      cy = Math.floor(y / CELL);
    let best = -1,
      bestD = HIT_PX * HIT_PX;
    for (let r = cy - 1; r <= cy + 1; r++)
      for (let c = cx - 1; c <= cx + 1; c++) {
        if (r < 0 || c < 0 || r >= g.rows || c >= g.cols) continue;
        for (let j = g.start[r * g.cols + c]; j < g.start[r * g.cols + c + 1]; j++) {
          const i = g.items[j],
            d = (pos.sx[i] - x) ** 2 + (pos.sy[i] - y) ** 2;
          if (d < bestD) {
            bestD = d;
            best = i;
          }
        }
      }
    return best;
  }

  function outline(ctx, m, tokens, colour, w, h, thick) {
    const n = m.prefix.length,
      [gh, gw] = m.grid,
      cw = w / gw,
      ch = h / gh;
    for (const t of tokens) {
      if (t < n) continue;
      const p = t - n,
        x = (p % gw) * cw,
        y = Math.floor(p / gw) * ch;
      ctx.lineWidth = thick + 2;
      ctx.strokeStyle = "#000";
      ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
      ctx.lineWidth = thick;
      ctx.strokeStyle = colour;
      ctx.strokeRect(x + thick / 2, y + thick / 2, cw - thick, ch - thick);
    }
  }
  return { fitCanvas, layout, drawPoints, buildGrid, nearest, outline };
}
