// The Q·K view's painting: the hovered point and the brushed rectangle over the map, the photos with the patches
// they stand for, one animation frame for a pointer's events (with their latency), and the atlas of every head of the
// layer. vitvizQkPaint(Q, el, view) gives them, bound to one view's state Q and elements el, with the view's drawing
// (qkdraw.js), `shown`, `sorts`, `mapOf` and `show`.

function vitvizQkPaint(Q, el, { fitCanvas, layout, drawPoints, outline, shown, sorts, mapOf, show }) {
  function paintOver() {
    const t0 = performance.now(),
      ctx = el.over.getContext("2d"),
      s = Q.scale || 1;
    ctx.clearRect(0, 0, el.over.width, el.over.height);
    if (Q.brush) {
      const [ax, ay, bx, by] = Q.brush.rect;
      ctx.fillStyle = "rgba(255,210,0,0.15)";
      ctx.strokeStyle = "#b08000";
      ctx.lineWidth = 2 * s;
      ctx.fillRect(ax * s, ay * s, (bx - ax) * s, (by - ay) * s);
      ctx.strokeRect(ax * s, ay * s, (bx - ax) * s, (by - ay) * s);
    }
    if (Q.hl && Q.pos) {
      const mark = (i, colour, r) => {
        ctx.beginPath();
        ctx.arc(Q.pos.sx[i] * s, Q.pos.sy[i] * s, r * s, 0, 2 * Math.PI);
        ctx.lineWidth = 5 * s;
        ctx.strokeStyle = "#000";
        ctx.stroke();
        ctx.lineWidth = 3 * s;
        ctx.strokeStyle = colour;
        ctx.stroke();
      };
      for (const j of Q.hl.points) mark(j, "#00e5ff", 7);
      mark(Q.hl.point, "#fff", 9);
    }
    paintPhotos();
    return performance.now() - t0;
  }

  function paintPhoto(canvas, index) {
    const p = Q.photos[index];
    if (!p?.img || !canvas.clientWidth) return;
    const [pw, ph] = p.meta.photoSize,
      dpr = fitCanvas(canvas, canvas.clientWidth, (canvas.clientWidth * ph) / pw),
      ctx = canvas.getContext("2d");
    ctx.drawImage(p.img, 0, 0, canvas.width, canvas.height);
    const thick = Math.max(2, Math.round(2 * dpr)),
      shownAt = shown().indexOf(p);
    if (Q.brush && shownAt >= 0 && Q.map && Q.map.photos[shownAt] === p)
      outline(ctx, p.meta, Q.brush.tokens[shownAt], "#ffd200", canvas.width, canvas.height, thick);
    if (Q.hl && Q.map && Q.map.photos[Q.hl.photo] === p) {
      outline(ctx, p.meta, Q.hl.tokens, "#00e5ff", canvas.width, canvas.height, thick);
      outline(ctx, p.meta, [Q.hl.token], "#fff", canvas.width, canvas.height, thick + 1);
    }
  }

  function paintPhotos() {
    paintPhoto(el.photo, 0);
    for (const c of el.strip.querySelectorAll("canvas")) paintPhoto(c, +c.dataset.photo);
  }

  function frame() {
    if (!Q.frame)
      Q.frame = requestAnimationFrame(() => {
        Q.frame = 0;
        const work = paintOver();
        if (Q.stamp) {
          Q.latencies.push(performance.now() - Q.stamp.at);
          Q.handlerMs.push(Q.stamp.work + work);
          Q.stamp = null;
        }
        if (Q.latencies.length > 2000) {
          Q.latencies.splice(0, 1000);
          Q.handlerMs.splice(0, 1000);
        }
      });
  }

  function atlas(generation) {
    const map = Q.map,
      m = map.photos[0].meta;
    if (el.atlas.childElementCount !== m.heads) {
      el.atlas.innerHTML = Array.from(
        { length: m.heads },
        (_, h) =>
          `<figure class="qk-tile" data-head="${h}" ` +
          `style="border-color:${m.headColours[h % m.headColours.length]}"><canvas></canvas>` +
          "<figcaption></figcaption></figure>",
      ).join("");
      for (const f of el.atlas.querySelectorAll(".qk-tile"))
        f.addEventListener("click", () => show(Q.layer, +f.dataset.head));
    }
    let h = 0;
    const next = () => {
      if (generation !== Q.generation || h >= m.heads) return;
      const fig = el.atlas.children[h],
        tile = fig.querySelector("canvas");
      const tm = mapOf(map.layer, h, map.photos.slice(0, 1)),
        w = tile.clientWidth; // this photo: ~15 ms a tile
      const sort = m.sorts ? m.sorts[map.layer][h] : sorts(tm); // Python's where it sent them; the same rule here
      fig.classList.toggle("qk-current", h === map.head);
      fig.querySelector("figcaption").textContent =
        `head ${h}: ` +
        `${{ position: "position", colour: "colour", both: "position and colour", neither: "neither" }[sort.verdict]}`;
      if (w) {
        const dpr = fitCanvas(tile, w, w);
        drawPoints(tile, tm, layout(tm, w, w, 4), dpr, dpr);
      }
      h += 1;
      setTimeout(next, 0); // one head per task: a hover meanwhile is answered at once
    };
    setTimeout(next, 0);
  }

  return { paintOver, paintPhotos, frame, atlas };
}
