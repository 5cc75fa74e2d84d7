// The test handle, window.vitviz.explorer (window.vitviz.inside in "inside" mode): what the page computed and
// drew, for the browser tests and anyone checking the numbers. It calls the engine's own functions, the ones
// that the pointer, the keys and the buttons call, and paints at once instead of at the next frame.

function vitvizHandle(engine) {
  const { S } = engine;
  const checked = (name, value, size) => {
    if (!Number.isInteger(value) || value < 0 || value >= size)
      throw new Error(`${name} must be an integer in [0, ${size}), got ${value}`);
  };
  const analysed = () => {
    if (!S.meta) throw new Error("no photo analysed yet");
  };
  return {
    // head `head`'s row at layer `layer` for patch `patch` (-1: the readout, as its button asks it)
    hover(layer, head, patch) {
      analysed();
      const [gh, gw] = S.meta.grid;
      checked("layer", layer, S.meta.layers);
      checked("head", head, S.meta.heads);
      if (patch !== -1) checked("patch", patch, gh * gw);
      const go = () => {
        engine.setHead(head);
        if (S.layer !== layer) engine.setLayer(layer);
        if (patch === -1) engine.ask(engine.readoutQuery(), S.pinned);
        else engine.ask(S.meta.prefix.length + patch, S.pinned);
        return engine.paint();
      };
      return S.store.layers.has(layer) ? go() : engine.whenLoaded(layer).then(go);
    },
    temperature(t) {
      engine.setTemperature(t);
      return engine.paint();
    },
    layer(l) {
      checked("layer", l, S.meta ? S.meta.layers : 0);
      const t0 = performance.now(),
        cached = S.store.layers.has(l);
      engine.setLayer(l);
      return engine.whenLoaded(l).then(() => {
        engine.paint();
        return { ms: performance.now() - t0, cached };
      });
    },
    view(v) {
      engine.setView(v);
      return engine.paint();
    },
    state() {
      const layers = S.store ? S.store.layers : new Map();
      return {
        layer: S.layer,
        head: S.head,
        query: S.query,
        pinned: S.pinned,
        T: S.T,
        loaded: [...layers.keys()],
        bytes: layers.size ? layers.values().next().value.bytes : 0,
        key: S.meta?.key,
        session: S.meta?.session,
        fetchMs: [...layers.values()].map((d) => d.fetchMs),
        latencies: S.latencies.slice(),
        highlight: S.highlight?.slice(),
        photo: S.photo && [S.photo.naturalWidth, S.photo.naturalHeight],
      }; // the photo drawn under the maps
    },
  };
}
