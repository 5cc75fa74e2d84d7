// A notebook widget's module (vitviz.explore). The host imports it anew for each widget and never frees one, so
// it is small: it asks the kernel for the engine (the Explorer, the Q·K view and boot_widget.js, one module)
// once per page, imports that, and renders with it. A widget made while the first one waits shares its wait.
const KEY = "ENGINE_KEY";
const WAIT_MS = 60000; // no answer by then (its widget was closed first): the next widget asks again

function vitvizEngineModule(model) {
  globalThis.vitvizEngines ||= {};
  const engines = globalThis.vitvizEngines;
  engines[KEY] ||= new Promise((resolve, reject) => {
    const got = (msg, buffers) => {
      if (!msg || msg.engine !== KEY) return;
      model.off("msg:custom", got);
      clearTimeout(late);
      const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
      import(url).then((module) => resolve(module.default), reject).finally(() => URL.revokeObjectURL(url));
    };
    const late = setTimeout(() => {
      model.off("msg:custom", got);
      reject(new Error("the kernel sent no engine"));
    }, WAIT_MS);
    model.on("msg:custom", got);
    model.send({ want: "engine" });
  }).catch((error) => {
    delete engines[KEY];
    throw error;
  });
  return engines[KEY];
}

export default {
  async render({ model, el }) {
    return (await vitvizEngineModule(model)).render({ model, el });
  },
};
