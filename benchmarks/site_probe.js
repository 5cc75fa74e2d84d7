// The page of benchmarks/site_forward.py: each variant's forward graph in ONNX Runtime Web, as the site's model.js
// runs it (the WebAssembly backend, one thread per core up to 8 where the page is cross-origin isolated).
import * as ort from "./runtime/ort.wasm.min.mjs";

ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.min(navigator.hardwareConcurrency || 1, 8) : 1;
ort.env.wasm.wasmPaths = new URL("runtime/", location.href).href;
let sessions = [];

async function load(variants, profiling) {
  for (const s of sessions) await s.session.release();
  sessions = [];
  for (const v of variants) {
    const bytes = new Uint8Array(await (await fetch(v.url)).arrayBuffer());
    const options = { executionProviders: ["wasm"], ...v.options, enableProfiling: profiling };
    sessions.push({ label: v.label, session: await ort.InferenceSession.create(bytes, options) });
  }
  return ort.env.wasm.numThreads;
}

// every variant `count` times on the input feed {url, dims}, one after another: each one's times in ms
async function run(feed, count) {
  const pixels = new Float32Array(await (await fetch(feed.url)).arrayBuffer());
  const times = {};
  for (const { label, session } of sessions) {
    times[label] = [];
    for (let i = 0; i < count; i++) {
      const t = performance.now(),
        out = await session.run({ pixel_values: new ort.Tensor("float32", pixels, feed.dims) });
      for (const name of session.outputNames) {
        void out[name].data; // read out of the runtime's memory, as the page reads them
        out[name].dispose?.();
      }
      times[label].push(performance.now() - t);
    }
  }
  return times;
}

// the runtime's profile of every run so far, written to the console one event a line
function endProfiling() {
  for (const { session } of sessions) session.endProfiling();
}

window.probe = { load, run, endProfiling };
