// The Q·K view's pointer: hover a point, drag a rectangle, a finger taps a point or drags, a patch of the photo
// hovered; each lights up a point and what it attends to, or the brushed patches, and says so to the Explorer
// ("vitviz-highlight"), whose query ("vitviz-hover") marks its point here. vitvizQkPointer(Q, el, view) wires them,
// bound to one view's state Q and elements el, with the view's {nearest, related, pointIndex, frame, show}; it
// returns what the test handle calls and `onTold`, the page's listener, for destroy().

function vitvizQkPointer(Q, el, { nearest, related, pointIndex, frame, show }) {
  function highlight(i, tell) {
    // a point hovered (tell: say so to the Explorer), or -1
    Q.hl = i < 0 ? null : related(i);
    if (tell && (!Q.hl || Q.hl.photo === 0)) {
      const patches = Q.hl ? [Q.hl.token, ...Q.hl.tokens] : null;
      document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches } }));
    }
  }

  function brushed(x0, y0, x1, y1) {
    const [ax, bx, ay, by] = [Math.min(x0, x1), Math.max(x0, x1), Math.min(y0, y1), Math.max(y0, y1)],
      sets = Q.map.photos.map(() => new Set());
    for (let i = 0; i < Q.map.M; i++)
      if (Q.pos.sx[i] >= ax && Q.pos.sx[i] <= bx && Q.pos.sy[i] >= ay && Q.pos.sy[i] <= by)
        sets[Q.map.photo[i]].add(Q.map.token[i]);
    Q.brush = { rect: [ax, ay, bx, by], tokens: sets.map((s) => [...s].sort((a, b) => a - b)) };
    document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches: Q.brush.tokens[0] } }));
  }

  // ---- pointer: hover a point, drag a rectangle; a finger taps a point or drags
  function local(clientX, clientY) {
    const r = el.over.getBoundingClientRect();
    return [clientX - r.left, clientY - r.top];
  }

  function pending(at, t0) {
    // the first event not yet shown is the one that waits longest; its handlers' work adds up
    const work = performance.now() - t0;
    if (Q.stamp) Q.stamp.work += work;
    else Q.stamp = { at, work };
    frame();
  }

  function onHover(clientX, clientY, at) {
    const t0 = performance.now(),
      [x, y] = local(clientX, clientY),
      i = nearest(x, y);
    if (i === (Q.hl ? Q.hl.point : -1)) return Q.hl;
    highlight(i, true);
    pending(at, t0);
    return Q.hl;
  }

  function onBrush(x0, y0, clientX, clientY, at) {
    const t0 = performance.now(),
      [x, y] = local(clientX, clientY);
    brushed(x0, y0, x, y);
    pending(at, t0);
    return Q.brush;
  }

  el.over.addEventListener("pointermove", (e) => {
    if (!Q.map) return;
    const d = Q.drag;
    if (d && d.id === e.pointerId) {
      const [x, y] = local(e.clientX, e.clientY);
      d.moved ||= Math.hypot(x - d.x, y - d.y) > 4;
      if (d.moved) onBrush(d.x, d.y, e.clientX, e.clientY, e.timeStamp);
    } else if (e.pointerType === "mouse" && !e.buttons) onHover(e.clientX, e.clientY, e.timeStamp);
  });
  el.over.addEventListener("pointerdown", (e) => {
    const [x, y] = local(e.clientX, e.clientY);
    Q.drag = { id: e.pointerId, x, y, moved: false };
    el.over.setPointerCapture?.(e.pointerId);
  });
  el.over.addEventListener("pointerup", (e) => {
    const d = Q.drag;
    Q.drag = null;
    if (!d || d.moved || !Q.map) return;
    if (e.pointerType !== "mouse")
      onHover(e.clientX, e.clientY, e.timeStamp); // a tap picks a point
    else if (Q.brush) {
      Q.brush = null;
      document.dispatchEvent(new CustomEvent("vitviz-highlight", { detail: { patches: null } }));
      frame();
    }
  });
  el.over.addEventListener("pointercancel", () => {
    Q.drag = null;
  });
  el.photo.addEventListener("pointermove", (e) => {
    // a patch of this photo: the same path as the Explorer's query
    const p = Q.photos[0],
      r = el.photo.getBoundingClientRect();
    if (!p || !Q.map) return;
    const [gh, gw] = p.meta.grid,
      x = (e.clientX - r.left) / r.width,
      y = (e.clientY - r.top) / r.height;
    if (!(x >= 0 && x < 1 && y >= 0 && y < 1)) return;
    const query = p.meta.prefix.length + Math.floor(y * gh) * gw + Math.floor(x * gw);
    document.dispatchEvent(
      new CustomEvent("vitviz-hover", { detail: { layer: Q.layer, head: Q.head, query, mode: "qk" } }),
    );
  });

  function onTold(e) {
    // the Explorer's query (or this photo's patch): its point and keys here
    const d = e.detail || {},
      m = Q.photos.length && Q.photos[0].meta;
    if (!m) return;
    const mark = () => {
      if (!Q.map || Q.map.photos[0] !== Q.photos[0]) return;
      highlight(
        Number.isInteger(d.query) && d.query >= 0 && d.query < m.tokens ? pointIndex(Q.map, 0, 0, d.query) : -1,
        false,
      );
      Q.told = { ...d };
      frame();
    };
    const follow =
      d.mode !== "qk" &&
      Number.isInteger(d.layer) &&
      Number.isInteger(d.head) &&
      d.layer < m.layers &&
      d.head < m.heads &&
      (d.layer !== Q.layer || d.head !== Q.head);
    if (follow) show(d.layer, d.head).then(mark);
    else mark();
  }
  document.addEventListener("vitviz-hover", onTold);

  return { local, onHover, onBrush, onTold };
}
