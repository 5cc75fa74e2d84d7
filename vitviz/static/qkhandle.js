// The Q·K view's test handle, window.vitviz.qk: what the view computed and drew, through the same functions as the
// pointer's (qk.js gives them).

function vitvizQkHandle({ Q, el, show, onHover, onBrush, local, pointIndex }) {
  return {
    show,
    ready() {
      return Q.map && Q.map.photos[0] === Q.photos[0] ? Promise.resolve() : new Promise((ok) => Q.waiting.push(ok));
    },
    coords() {
      const map = Q.map,
        photos = map.photos.map((p) => ({ key: p.key, tokens: p.meta.tokens }));
      return {
        layer: map.layer,
        head: map.head,
        c: map.c,
        nq: map.nq,
        method: map.method,
        photos,
        xy: Array.from(map.xy),
        photo: Array.from(map.photo),
        token: Array.from(map.token),
      };
    },
    pointAt(photo, kind, token) {
      const i = pointIndex(Q.map, photo, kind === "key" ? 1 : 0, token),
        r = el.over.getBoundingClientRect();
      return { x: r.left + Q.pos.sx[i], y: r.top + Q.pos.sy[i], point: i };
    },
    hover(clientX, clientY) {
      const hl = onHover(clientX, clientY, performance.now());
      return hl && { ...hl };
    },
    brush(x0, y0, x1, y1) {
      const [a, b] = local(x0, y0);
      return onBrush(a, b, x1, y1, performance.now());
    },
    colour(mode) {
      el.colour.value = mode;
      el.colour.dispatchEvent(new Event("change"));
    },
    photos(mode) {
      Q.mode = mode;
      el.photos.value = mode;
      return show(Q.layer, Q.head);
    },
    method(name) {
      Q.method = name;
      el.method.value = name;
      return show(Q.layer, Q.head);
    },
    recall() {
      return Q.recall;
    },
    sorts() {
      return Q.sorts && { ...Q.sorts, text: el.sorts.textContent };
    },
    state() {
      return {
        layer: Q.layer,
        head: Q.head,
        photos: Q.photos.map((p) => p.key),
        shown: Q.map ? Q.map.photos.length : 0,
        points: Q.map ? Q.map.M : 0,
        highlight: Q.hl && { ...Q.hl },
        brush: Q.brush && { ...Q.brush },
        told: Q.told,
        latencies: Q.latencies.slice(),
        handlerMs: Q.handlerMs.slice(),
        buildMs: Q.buildMs.slice(),
        recallMs: Q.recallMs.slice(),
      };
    },
  };
}
