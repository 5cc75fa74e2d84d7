// Where the Explorer's data comes from. A source is one small interface:
//   meta()     the analysis' meta (vitviz/explorer.py: sizes, token names, the photo, the page's settings);
//              meta.session + meta.key name the analysis, so that two Explorers of one page share its layers;
//   layer(l)   a Promise of layer l's bytes, an ArrayBuffer of float32 q | k | valueNorms (see attention.js), or of
//              the three Float32Arrays {q, k, valueNorms} where the source holds them (the static site's forward);
//              a failure is an Error whose .status 503 means "busy: ask again soon".
// Three sources: the app's route, a notebook widget's kernel, and layers embedded in one HTML file.

function vitvizRouteAsk(meta) {
  // how a page asks the app's routes: on its own origin, with its session's token in a header (meta.tokenHeader),
  // never in the URL
  return { credentials: "same-origin", headers: { [meta.tokenHeader]: meta.token } };
}

function vitvizRouteSource(meta) {
  // GET /vitviz/explorer/layer of the app that served the page
  const base = (window.gradio_config?.root || location.origin).replace(/\/$/, "");
  return {
    meta: () => meta,
    async layer(l) {
      const q = new URLSearchParams({ session: meta.session, key: meta.key, layer: String(l) });
      const r = await fetch(`${base}/vitviz/explorer/layer?${q}`, vitvizRouteAsk(meta));
      if (!r.ok) throw Object.assign(new Error((await r.text()) || `HTTP ${r.status}`), { status: r.status });
      return r.arrayBuffer();
    },
  };
}

function vitvizWidgetSource(model, extras) {
  // an anywidget's model: the page sends {want: l}, the kernel answers {layer: l} with the bytes as its one
  // binary buffer (or {layer: l, error}); the meta is the model's "meta" trait with `extras` (vitvizWidgetExtras)
  const waiting = new Map();
  const answer = (msg, buffers) => {
    if (!msg || !waiting.has(msg.layer)) return;
    const { resolve, reject } = waiting.get(msg.layer);
    waiting.delete(msg.layer);
    if (msg.error) {
      reject(new Error(msg.error));
      return;
    }
    const view = buffers[0]; // a DataView on the message: copied, so that Float32Array sees it aligned
    resolve(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
  };
  model.on("msg:custom", answer);
  return {
    meta: () => ({ ...model.get("meta"), ...extras }),
    layer(l) {
      if (waiting.has(l)) return waiting.get(l).promise;
      const entry = {};
      entry.promise = new Promise((resolve, reject) => Object.assign(entry, { resolve, reject }));
      waiting.set(l, entry);
      model.send({ want: l });
      return entry.promise;
    },
    close() {
      model.off("msg:custom", answer);
    },
  };
}

const VITVIZ_EXTRAS_WAIT_MS = 60000; // no answer by then: the kernel is gone (a saved page, a restart)

function vitvizWidgetExtras(model) {
  // the meta's large parts (the photo, the Q·K view's part: about 100 KB), asked of the kernel once a view: {want:
  // "extras"} is answered {extras: true} with their JSON as its one buffer. They are not in the model's state,
  // which a host keeps as long as a closed widget's comm (JupyterLab), so ten Explorers in a row keep no photo.
  return new Promise((resolve, reject) => {
    const got = (msg, buffers) => {
      if (!msg || !("extras" in msg)) return;
      model.off("msg:custom", got);
      clearTimeout(late);
      if (msg.error) reject(new Error(msg.error));
      else resolve(JSON.parse(new TextDecoder().decode(buffers[0])));
    };
    const late = setTimeout(() => {
      model.off("msg:custom", got);
      reject(new Error("the kernel did not answer: run the cell again"));
    }, VITVIZ_EXTRAS_WAIT_MS);
    model.on("msg:custom", got);
    model.send({ want: "extras" });
  });
}

function vitvizEmbeddedSource(meta, layers) {
  // layers: {l: base64 of the layer's bytes}, written into the page by vitviz.export_html; meta.only lists them
  return {
    meta: () => meta,
    async layer(l) {
      if (!(l in layers)) throw new Error(`layer ${l} is not in this file: export it with --layers`);
      return vitvizBase64(layers[l]);
    },
  };
}

// A colormap from Python (explorer.lut): 256 RGB triples in base64, decoded once a page
const VITVIZ_LUTS = new Map();
function vitvizLutBytes(text) {
  if (!VITVIZ_LUTS.has(text)) VITVIZ_LUTS.set(text, new Uint8Array(vitvizBase64(text)));
  return VITVIZ_LUTS.get(text);
}

function vitvizBase64(text) {
  const raw = atob(text),
    bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes.buffer; // the bytes Python wrote: little-endian float32 for a layer
}

// The layers of one analysis in this page: one request at a time, those asked `first` before the rest. Parsed
// layers and those on their way are kept on window.vitviz, shared with another Explorer of the same analysis.
// onArrive(l) and onFail(l, message) are called while the store is open. While hidden() (its tab is not shown),
// the layers asked for later wait: a page that has moved on to another photo does not fetch the last one's.
const VITVIZ_HIDDEN_RECHECK_MS = 500;
function vitvizLayerStore(source, shape, onArrive, onFail, hidden = () => false) {
  const meta = source.meta(),
    prefix = `${meta.session}|${meta.key}|`;
  window.vitviz ||= {};
  const shared = window.vitviz;
  shared.layerStore ||= new Map();
  shared.layerFetches ||= new Map();
  const kept = shared.layerStore,
    fetches = shared.layerFetches;
  for (const k of [...kept.keys()]) if (!k.startsWith(prefix)) kept.delete(k); // one photo's layers at a time
  const layers = new Map(),
    failed = new Map();
  let wanted = [],
    inflight = null,
    waiters = [],
    open = true;

  const arrived = (l, data) => {
    layers.set(l, data);
    failed.delete(l);
    onArrive(l);
    for (const w of waiters) if (layers.has(w.layer)) w.resolve();
    waiters = waiters.filter((w) => !layers.has(w.layer));
  };
  const want = (l, first) => {
    if (!open || l < 0 || l >= meta.layers || layers.has(l) || inflight === l) return;
    if (!first && meta.only && !meta.only.includes(l)) return; // a file with some layers: only asked ones fail
    if (kept.has(prefix + l)) {
      arrived(l, kept.get(prefix + l));
      return;
    } // the other Explorer has it
    wanted = wanted.filter((x) => x !== l);
    if (first) wanted.unshift(l);
    else wanted.push(l);
    pump();
  };
  let recheck = null;
  const pump = () => {
    while (wanted.length && layers.has(wanted[0])) wanted.shift();
    if (inflight !== null || !wanted.length || !open) return;
    if (wanted[0] !== store.current && hidden()) {
      recheck ||= setTimeout(() => {
        recheck = null;
        pump();
      }, VITVIZ_HIDDEN_RECHECK_MS);
      return;
    }
    const l = wanted.shift(),
      key = prefix + l,
      started = performance.now();
    inflight = l;
    let fetching = fetches.get(key);
    if (!fetching) {
      fetching = source
        .layer(l)
        .then((buffer) => {
          const data = vitvizLayer(buffer, shape.tokens, shape.heads, shape.dh);
          data.fetchMs = performance.now() - started;
          kept.set(key, data);
          return data;
        })
        .finally(() => fetches.delete(key));
      fetches.set(key, fetching);
    }
    fetching
      .then((data) => {
        if (open) arrived(l, data);
      })
      .catch((e) => {
        if (!open) return;
        if (e.status === 503) {
          setTimeout(() => want(l, l === store.current), 300);
          return;
        } // busy: again soon
        failed.set(l, e.message);
        onFail(l, e.message);
        for (const w of waiters) if (w.layer === l) w.reject(e);
        waiters = waiters.filter((w) => w.layer !== l);
      })
      .finally(() => {
        if (open) {
          inflight = null;
          pump();
        }
      });
  };
  const store = {
    layers,
    failed,
    current: 0,
    want,
    whenLoaded(l) {
      if (layers.has(l)) return Promise.resolve();
      const waiting = new Promise((resolve, reject) => waiters.push({ layer: l, resolve, reject }));
      want(l, true); // after the waiter: a layer the other Explorer already holds arrives at once
      return waiting;
    },
    retry() {
      // what failed (say, evicted by the server) is asked again
      const again = [...failed.keys()];
      failed.clear();
      for (const l of again) want(l, l === store.current);
    },
    close() {
      open = false;
      waiters = [];
      clearTimeout(recheck);
      if (source.close) source.close();
    },
  };
  return store;
}
