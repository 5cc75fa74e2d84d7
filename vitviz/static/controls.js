// The Explorer's page: its controls, canvases and legend as HTML, in `root`; returns the elements by name
// (vitvizControls), and its controls and keys wired to the engine's actions (vitvizControlKeys). In "inside"
// mode (one head, step by step) the controls that choose among heads or views are hidden.

function vitvizControls(root, inside) {
  root.innerHTML = `
  <div class="vx-bar">
    <label>Layer <input class="vx-layer" type="range"
      min="0" max="0" value="0" step="1"><b class="vx-layer-out">0</b></label>
    <label>Head <select class="vx-head"></select></label>
    <label>Show <select class="vx-measure"><option value="w">weight α</option>
      <option value="wv">weight × value norm ‖α W_O v‖</option></select></label>
    <label>Temperature <input class="vx-temp" type="range"
      min="-2" max="2" value="0" step="0.05"><b class="vx-temp-out">T = 1.00 (the model)</b></label>
    <label>Colours <select class="vx-scale"><option value="own">each map to its own maximum</option>
      <option value="shared">shared by the layer's heads</option></select></label>
    <label>View <select class="vx-view"><option value="heads">this layer's heads</option>
      <option value="model">every layer × head</option></select></label>
    <button class="vx-readout" type="button">Query: readout (CLS)</button>
  </div>
  <div class="vx-status" role="status"></div>
  <div class="vx-main">
    <figure class="vx-big">
      <canvas class="vx-canvas vx-big-canvas"></canvas>
      <figcaption class="vx-big-cap"></figcaption>
    </figure>
    <div class="vx-side">
      <div class="vx-tiles"></div>
      <div class="vx-legend">
        <div class="vx-bar-row"><span class="vx-lo">0</span><span class="vx-ramp"></span><span
          class="vx-hi"></span></div>
        <div class="vx-scale-note"></div>
        <div><span class="vx-swatch"></span> the query patch (white, black border; none when the query is the readout).
          Hover to move it, click to pin it.</div>
      </div>
    </div>
  </div>
  <div class="vx-model" hidden></div>
  <div class="vx-mech"></div>`;
  root.tabIndex = 0;
  const $ = (sel) => root.querySelector(sel);
  const ui = {
    layer: $(".vx-layer"),
    layerOut: $(".vx-layer-out"),
    head: $(".vx-head"),
    measure: $(".vx-measure"),
    temp: $(".vx-temp"),
    tempOut: $(".vx-temp-out"),
    view: $(".vx-view"),
    readout: $(".vx-readout"),
    status: $(".vx-status"),
    big: $(".vx-big-canvas"),
    bigCap: $(".vx-big-cap"),
    tiles: $(".vx-tiles"),
    model: $(".vx-model"),
    mech: $(".vx-mech"),
    lo: $(".vx-lo"),
    hi: $(".vx-hi"),
    ramp: $(".vx-ramp"),
    scaleNote: $(".vx-scale-note"),
    scale: $(".vx-scale"),
  };
  if (inside) for (const control of [ui.view, ui.measure, ui.scale]) control.closest("label").hidden = true;
  return ui;
}

// The small maps beside the large one, in `container`: one per head (framed in its colour), or in "inside" mode
// the two steps with their range lines. Returns their canvases.
function vitvizTiles(container, meta, inside) {
  container.innerHTML = "";
  container.classList.toggle("vx-steps", inside);
  const add = (className, caption, head) => {
    const fig = document.createElement("figure");
    fig.className = className;
    fig.innerHTML =
      `<canvas class="vx-canvas"></canvas><figcaption>${caption}</figcaption>` +
      (inside ? '<div class="vx-range"></div>' : "");
    const canvas = fig.querySelector("canvas");
    if (head !== undefined) {
      fig.style.borderColor = vitvizHeadColour(meta, head);
      canvas.dataset.head = String(head);
    }
    container.appendChild(fig);
    return canvas;
  };
  if (inside) return VITVIZ_STEPS.map((step) => add("vx-tile vx-step", step));
  return Array.from({ length: meta.heads }, (_, h) => add("vx-tile", `head ${h}`, h));
}

// Every layer x head (bertviz's model view), in `container`: a canvas per (layer, head), its data-layer and
// data-head set, in layer-major order.
function vitvizModelGrid(container, layers, heads) {
  container.style.gridTemplateColumns = `auto repeat(${heads}, minmax(0, 1fr))`;
  const cells = ['<div class="vx-mh"></div>'];
  for (let h = 0; h < heads; h++) cells.push(`<div class="vx-mh">head ${h}</div>`);
  for (let l = 0; l < layers; l++) {
    cells.push(`<div class="vx-ml">layer ${l}</div>`);
    for (let h = 0; h < heads; h++)
      cells.push(`<canvas class="vx-canvas" data-layer="${l}" data-head="${h}"></canvas>`);
  }
  container.innerHTML = cells.join("");
  return Array.from(container.querySelectorAll("canvas"));
}

// The Explorer's controls and keys wired to its actions: the sliders and menus above the maps, the readout button,
// and the arrow keys (layer, head) while the Explorer has the focus.
function vitvizControlKeys(root, ui, S, { setLayer, setHead, setView, setTemperature, askReadout, schedule }) {
  ui.layer.addEventListener("input", () => setLayer(+ui.layer.value));
  ui.head.addEventListener("change", () => setHead(+ui.head.value));
  ui.measure.addEventListener("change", () => {
    S.measure = ui.measure.value;
    schedule();
  });
  ui.view.addEventListener("change", () => setView(ui.view.value));
  ui.scale.addEventListener("change", () => {
    S.scale = ui.scale.value;
    schedule();
  });
  ui.temp.addEventListener("input", () => setTemperature(2 ** +ui.temp.value));
  ui.readout.addEventListener("click", askReadout);
  root.addEventListener("keydown", (e) => {
    if (!S.meta || e.target.tagName === "INPUT" || e.target.tagName === "SELECT") return;
    if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
      setLayer(S.layer + (e.key === "ArrowRight" ? 1 : -1));
      e.preventDefault();
    }
    if (e.key === "ArrowUp" || e.key === "ArrowDown") {
      setHead(S.head + (e.key === "ArrowDown" ? 1 : -1));
      e.preventDefault();
    }
  });
}
