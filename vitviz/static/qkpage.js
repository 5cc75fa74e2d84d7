// The Q·K view's page: its controls, canvases and words as HTML in `qroot`, and the elements by name
// (vitvizQkPage); and the view under an Explorer outside the app, with its heading (vitvizQkBelow).

function vitvizQkPage(qroot) {
  const q$ = (sel) => qroot.querySelector(sel);
  qroot.innerHTML = `
    <div class="qk-bar">
      <label>Layer <input class="qk-layer" type="range"
        min="0" max="0" value="0" step="1"><b class="qk-layer-out">0</b></label>
      <label>Head <select class="qk-head"></select></label>
      <label>Colour by <select class="qk-colour"><option value="kind">query or key</option>
        <option value="photo">photo</option><option value="row">row</option>
        <option value="column">column</option><option value="rgb">the patch's mean colour</option>
        <option value="norm">norm (distance from the centre)</option></select></label>
      <label>Photos <select class="qk-photos"><option value="one">this photo</option>
        <option value="all">your last photos</option></select></label>
      <label class="qk-method-label" hidden>Map <select class="qk-method"><option value="pca">PCA (instant)</option>
        <option value="umap">UMAP (server, seconds)</option></select></label>
      <span class="qk-method-note" hidden></span>
    </div>
    <div class="qk-status" role="status"></div>
    <div class="qk-main">
      <figure class="qk-plot"><canvas class="qk-base"></canvas><canvas class="qk-over"></canvas>
        <figcaption class="qk-cap"></figcaption></figure>
      <div class="qk-side">
        <figure class="qk-photo"><canvas class="qk-photo-canvas"></canvas><figcaption>This photo: the hovered
          patch in white, the patches it attends to (or that attend to it) in cyan, brushed patches in yellow. Point
          at a patch here (or touch it) to pick it as the query.</figcaption></figure>
        <div class="qk-strip"></div>
        <div class="qk-legend"></div>
        <p class="qk-sorts"></p><p class="qk-recall"></p><p class="qk-norm"></p>
      </div>
    </div>
    <h4 class="qk-atlas-title">Every head of this layer, on this photo (click one to show it above)</h4>
    <div class="qk-atlas"></div>`;
  return {
    layer: q$(".qk-layer"),
    layerOut: q$(".qk-layer-out"),
    head: q$(".qk-head"),
    colour: q$(".qk-colour"),
    photos: q$(".qk-photos"),
    status: q$(".qk-status"),
    base: q$(".qk-base"),
    over: q$(".qk-over"),
    cap: q$(".qk-cap"),
    photo: q$(".qk-photo-canvas"),
    strip: q$(".qk-strip"),
    legend: q$(".qk-legend"),
    sorts: q$(".qk-sorts"),
    norm: q$(".qk-norm"),
    atlas: q$(".qk-atlas"),
    method: q$(".qk-method"),
    methodLabel: q$(".qk-method-label"),
    methodNote: q$(".qk-method-note"),
    recall: q$(".qk-recall"),
  };
}

// The view under an Explorer outside the app (a notebook, a file): a heading and the view in `parent`, given one
// photo's source; close() takes both down.
function vitvizQkBelow(parent, source) {
  const box = document.createElement("div");
  box.className = "qk-below";
  box.innerHTML =
    `<h3 class="qk-title">Queries &amp; keys: what a head matches on</h3><p class="qk-help">Every ` +
    `query of one head is a <b>filled dot</b> and every key a <b>ring</b>, in one map where a query lies near the ` +
    `keys it attends to. <b>Hover a point</b> to see its patch and the patches it attends to; <b>drag a ` +
    `rectangle</b> to light up patches. Hovering the Explorer's photo marks its query here.</p><div class="qk"></div>`;
  parent.appendChild(box);
  const view = vitvizQkView(box.querySelector(".qk"));
  view.apply(source);
  return {
    view,
    close() {
      view.destroy();
      if (source.close) source.close();
      box.remove();
    },
  };
}
