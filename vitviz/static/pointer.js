// A pointer on one of the Explorer's canvases. A mouse: hover moves the query, a click pins it (a second click on
// it unpins). A finger or a pen: the query follows it while it is down, and stays pinned where it lifts.
// S: the engine's state (meta, pinned, drag, pending, query); on: {ask(query, pinned, stamp), setHead | null}.

function vitvizPointer(canvas, S, on) {
  canvas.addEventListener("pointermove", (e) => {
    if (S.pinned && S.drag !== e.pointerId) return;
    const t = vitvizTokenAt(canvas, e, S.meta);
    if (t !== null) on.ask(t, S.pinned, e.timeStamp); // timed from the event, for the latencies
  });
  canvas.addEventListener("pointerdown", (e) => {
    const t = vitvizTokenAt(canvas, e, S.meta);
    if (t === null) return;
    if (on.setHead) on.setHead(); // a head's small map: that head becomes the large one
    if (e.pointerType === "mouse") on.ask(t, !(S.pinned && t === (S.pending ?? S.query)));
    else {
      S.drag = e.pointerId;
      on.ask(t, true);
    }
  });
  const lift = (e) => {
    if (S.drag === e.pointerId) S.drag = null;
  };
  canvas.addEventListener("pointerup", lift);
  canvas.addEventListener("pointercancel", lift);
}

// The token index of the patch under the event (prefix tokens first), or null off the photo or with no photo.
function vitvizTokenAt(canvas, e, meta) {
  if (!meta) return null;
  const r = canvas.getBoundingClientRect(),
    [gh, gw] = meta.grid;
  const x = (e.clientX - r.left) / r.width,
    y = (e.clientY - r.top) / r.height;
  if (!(x >= 0 && x < 1 && y >= 0 && y < 1)) return null;
  return meta.prefix.length + Math.floor(y * gh) * gw + Math.floor(x * gw);
}
