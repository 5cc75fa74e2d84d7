// The lesson (vitviz/lesson.py) in the browser: the chapter's eight steps on this run, each a title, a picture and
// the Python lesson's sentences string for string (tests/test_site.py holds them to lesson_step), then the site's
// exercise, guess where a head looks (guess.js: the app's, the head that matters most, needs ablations). The site
// runs the embedded model only (a CLS token that its dense head does not read), so each step has that model's
// branch. The phrases that depend on the model alone and the trend test's rule and orderings come from Python
// (build.py `lesson_facts`); the numbers are this run's.

// The steps on a run whose summaries are in: [{title, text, draw(canvas)}], text as the Python lesson's Markdown;
// draw returns the picture's colour bar (bar.js), or nothing where the picture has none. The exercise's step is
// {title, look, at(look)}: its text and picture follow the student's choice (guess.js)
function vitvizLessonSteps(run, cfg, orderings) {
  const m = run.meta,
    f = cfg.lesson,
    [gh, gw] = m.grid,
    L = m.layers,
    H = m.heads,
    n = m.tokens,
    prefix = m.prefix.length;
  const d = run.out.distance.data,
    at = (l, h) => d[l * H + h],
    centre = Math.floor(gh / 2) * gw + Math.floor(gw / 2);
  const where = (p) => `patch ${p} (row ${Math.floor(p / gw)}, column ${p % gw})`;
  const layerMean = (l) => {
    let s = 0;
    for (let h = 0; h < H; h++) s += at(l, h);
    return s / H;
  };
  const means = Array.from({ length: L }, (_, l) => layerMean(l));
  const arg = (xs, better) => xs.reduce((b, v, i) => (better(v, xs[b]) ? i : b), 0);
  const flat = Array.from(d),
    local = arg(flat, (a, b) => a < b),
    first = means[0];
  const headPicture = (layer, head) => (canvas) =>
    vitvizWeightsPicture(canvas, run, vitvizAttentionRow(run, layer, head, prefix + centre).subarray(prefix), centre);
  const trend = vitvizDepthTrend(means, f, orderings),
    verb = f.trendVerbs[trend.direction];
  const steps = [];

  steps.push({
    title: "Patches become tokens",
    text:
      `The ViT never sees pixels one by one. It cuts the image, resized to ${run.input.height} px high × ` +
      `${run.input.width} px wide, into **${gh} rows × ${gw} columns = ${gh * gw} patches** of ` +
      `${m.patch}×${m.patch} pixels, and a linear map turns each patch into a vector: a **patch token**. In front ` +
      `of them goes one learned token, ${f.prefix}. ${f.readout} So the transformer reads a sequence of **${n} ` +
      `tokens**, numbered in scan order as in the picture.`,
    draw: (canvas) => vitvizTokensPicture(canvas, run),
  });

  const [g0, g1] = cfg.positions.grid,
    r = Math.floor(g0 / 2),
    c = Math.floor(g1 / 2),
    sim = vitvizPositionSimilarity(cfg, r, c);
  steps.push({
    title: "Position embeddings",
    text:
      `A set of tokens has no order: attention would give the same answer if the patches were shuffled. So each ` +
      `patch token gets a learned **position embedding** added to it. The picture shows how similar the embedding ` +
      `of the centre position (row ${r}, column ${c} of the ${g0} rows × ${g1} columns grid the model was trained ` +
      `on) is to every other one, in red where alike, white where unrelated (cosine 0) and blue where opposite: ` +
      `cosine ${vitvizFixed(sim[r * g1 + c + 1])} with its right-hand neighbour, ${vitvizFixed(sim[0])} with ` +
      `the top-left corner. Nobody told the model about rows and columns; it learned that nearby patches ` +
      `belong together.`,
    draw: (canvas) => {
      vitvizPositionsPicture(canvas, cfg, sim, r * g1 + c);
      return vitvizPositionsBar(cfg);
    },
  });

  const [ll, lh] = [Math.floor(local / H), local % H];
  steps.push({
    title: "A local head",
    text:
      `Each layer runs **multi-head self-attention**: every token (the *query*) takes a weighted average of all ` +
      `tokens' *values*, with weights from its *query–key* dot products. Heads differ in how far they look. ` +
      `On this ` +
      `image the most local head is **layer ${ll}, head ${lh}**: its queries look ${vitvizPyFixed(at(ll, lh))} px ` +
      `away on average (one patch is ${m.patch} px). The picture is its attention from the centre patch, ` +
      `${where(centre)}, marked: the bright squares sit around it. Layer 0's heads look ` +
      `${vitvizPyFixed(first)} px away on average.`,
    draw: headPicture(ll, lh),
  });

  const deep = Math.floor((L * 2) / 3),
    far = deep * H + arg(flat.slice(deep * H), (a, b) => a > b),
    [gl, gh_] = [Math.floor(far / H), far % H];
  const late = flat.slice(deep * H).reduce((s, v) => s + v, 0) / ((L - deep) * H),
    tested = `the mean attention distance ${verb} (${vitvizTrendWords(trend)})`;
  const said =
    trend.direction === "grows"
      ? `As the ViT paper found, later layers look farther on this image: ${tested}. The last third of the layers ` +
        `looks ${vitvizPyFixed(late)} px away on average, layer 0 ${vitvizPyFixed(first)} px.`
      : `The ViT paper found that later layers look farther. On this image ${tested}: the last third of the layers ` +
        `looks ${vitvizPyFixed(late)} px away on average, layer 0 ${vitvizPyFixed(first)} px. Still, single heads ` +
        `late in the network look far.`;
  steps.push({
    title: trend.direction === "grows" ? "A global head" : "The farthest-looking late head",
    text:
      `${said} In the last third of the network the farthest-looking head is **layer ${gl}, head ${gh_}**: ` +
      `${vitvizPyFixed(at(gl, gh_))} px on average, against ${vitvizPyFixed(flat[local])} px for the most local ` +
      `head. Same query as before, the centre patch: bright squares can be anywhere the image has related ` +
      `content. A CNN needs many layers before one unit sees that far.`,
    draw: headPicture(gl, gh_),
  });

  const low = arg(means, (a, b) => a < b),
    high = arg(means, (a, b) => a > b);
  const spread = Array.from(
    { length: L },
    (_, l) => Math.max(...flat.slice(l * H, (l + 1) * H)) - Math.min(...flat.slice(l * H, (l + 1) * H)),
  );
  steps.push({
    title: "Attention distance over depth",
    text:
      `The table is the ViT paper's Figure 7 (right) on your image: the **mean attention distance** of every ` +
      `head in every layer, in pixels. Averaged over heads, it ` +
      `${verb}${trend.direction === "grows" ? ", as in the paper" : ", where the paper found that it grows"} ` +
      `(${vitvizTrendWords(trend)}). ${f.trendRule} It goes from ${vitvizPyFixed(means[0])} px in layer 0 to ` +
      `${vitvizPyFixed(means[L - 1])} px in layer ${L - 1}, lowest in layer ${low} ` +
      `(${vitvizPyFixed(means[low])} px) and highest in layer ${high} (${vitvizPyFixed(means[high])} px). ` +
      `The widest spread of heads is in layer ${arg(spread, (a, b) => a > b)}: some heads stay local ` +
      `while others look far, in the same layer. Each layer is a *pre-norm* layer: LayerNorm, ` +
      `attention, add; LayerNorm, MLP, add.`,
    draw: (canvas) =>
      vitvizLayerHeadGrid(
        canvas,
        flat,
        L,
        H,
        m.colormaps.viridis,
        document.body.classList.contains("site-big") ? 18 : 15,
      ),
  });

  const values = vitvizRolloutShares(run, "output", "mean", 0),
    toCls = vitvizRolloutShares(run, "readout", "mean", 0);
  const rho = vitvizSpearman(values, toCls),
    own = vitvizSpearman(values, vitvizDensePatchMeans(run)),
    best = arg(Array.from(values), (a, b) => a > b);
  const same = rho >= f.alike ? "nearly the same map" : rho >= f.partly ? "a similar map" : "a different map";
  steps.push({
    title: "The output and rollout",
    text:
      `${f.output} The picture is *attention rollout* toward that output: the attention of all layers multiplied ` +
      "(adding the residual path), starting from the patches the head reads, each weighted by its map. Its " +
      `brightest patch, ${where(best)}, gets **${vitvizPyPct(values[best] / 100, 1)}** of what the patches pass to ` +
      `the output. A classifier would be different: its head reads only the ${f.prefix} token's final vector, so ` +
      `its rollout starts from that one token. Here rollout toward the ${f.prefix} token gives ${same} (rank ` +
      `correlation ${vitvizFixed(rho, 3)} with the one shown), and the one shown has a rank correlation of ` +
      `${vitvizFixed(own)} with the output's own map (each patch's mean). With the skip connection in every layer, ` +
      `rollout from any start converges to nearly one map after ${L} layers (on the 20 photos of ` +
      "docs/benchmarks.md, two rows of the full rollout matrix, the rollouts from two tokens, have a median rank " +
      `correlation of ${vitvizFixed(f.rolloutRows)}): it shows where information pools, not what one output uses.`,
    draw: (canvas) => {
      const sc = vitvizScale([values], m.colourScale, m.scaleRule);
      vitvizDrawMap(canvas, Float32Array.from(values), sc, m, run.photo, best, null);
      return vitvizRolloutBar(m, sc);
    },
  });

  const w = vitvizAttentionRow(run, L - 1, 0, 0),
    sorted = Float64Array.from(w).sort(),
    k = Math.max(1, Math.ceil(0.01 * n));
  let top = 0,
    entropy = 0;
  for (let i = n - k; i < n; i++) top += sorted[i];
  for (const v of w) if (v > 0) entropy -= v * Math.log(v);
  steps.push({
    title: "Inside a head",
    text:
      `How one head makes its weights, for the query ${m.prefix[0]} in layer ${L - 1}, head 0: the *scores* ` +
      `q·k_j/√d (left, d = ${m.headWidth}) become *weights* by a softmax (right): positive, summing to 1, and ` +
      `exponential in the score. The largest weight is ${vitvizPyFixed(sorted[n - 1], 3)}, the top 1 % of keys ` +
      `hold ${vitvizPyPct(top)}, and the weights spread over about ${vitvizPyFixed(Math.exp(entropy))} of ${n} ` +
      `keys. The head's output is the weighted sum of the values. Tab ${f.insideTab} walks through every step.`,
    draw: (canvas) => vitvizWeightsPicture(canvas, run, w.subarray(prefix), null),
  });

  const dense = run.out.dense.data;
  let above = 0;
  for (const v of dense) if (v >= 0.5) above++;
  steps.push({
    title: "Dense decoding",
    text:
      `Dense prediction needs a value per pixel, not one per image. A *Dense Prediction Transformer* (DPT) ` +
      `*reassembles* the tokens of several layers into image-like maps at several scales and *fuses* them from ` +
      `coarse to fine into, for example, a depth map (the Python app's Depth tab). This model carries a small ` +
      `dense head of that kind on its final patch tokens: the picture is its map of where the photo's regions ` +
      `of interest lie (saliency), ${vitvizPyPct(above / dense.length)} of the pixels above 0.5. ` +
      `${vitvizDenseNote(run, f.dense)}`,
    draw: (canvas) => {
      vitvizDensePicture(canvas, run);
      return vitvizDenseBar(m);
    },
  });
  steps.push(vitvizLookStep(run)); // the exercise (guess.js)
  return steps;
}

// The Markdown the lesson's sentences carry (**bold**, *italic*) as HTML, the text escaped first
function vitvizLessonHtml(text) {
  const esc = text.replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[ch]);
  return esc.replace(/\*\*(.+?)\*\*/g, "<b>$1</b>").replace(/\*(.+?)\*/g, "<i>$1</i>");
}
