// The lesson's exercise in the browser: guess where a head looks. The student chooses a layer and a head, clicks
// the patch they think it attends to most from the centre patch, and the page draws the head's real attention and
// says how close the guess came, in vitviz.whatif_words.look_words' words (tests/test_site.py holds them string for
// string). The app's exercise, the head that matters most, switches heads off: the site's graph cannot.

// The head's attention row [N] of token `query` in `layer` (every key, the prefix tokens first), as the Explorer
// computes it
function vitvizAttentionRow(run, layer, head, query) {
  const m = run.meta,
    n = m.tokens,
    at = layer * n * m.heads * m.headWidth;
  const source = { q: run.out.q.data.subarray(at), k: run.out.k.data.subarray(at) };
  const scores = vitvizScores(new Float32Array(n), source, head, query, {
    tokens: n,
    heads: m.heads,
    dh: m.headWidth,
    scale: m.scale,
  });
  const w = new Float32Array(n);
  vitvizSoftmax(w, scores, 1);
  return w;
}

// A map of attention weights [P] on the page's scale over the photo, `marker` (a patch or null) marked and the
// patches `outlined` (or null) outlined; returns its colour bar, its ends in % of the query's attention
function vitvizWeightsPicture(canvas, run, w, marker, outlined = null) {
  const m = run.meta,
    sc = vitvizScale([w], m.colourScale, m.scaleRule);
  vitvizDrawMap(canvas, w, sc, m, run.photo, marker, outlined);
  return vitvizScaleBar(m, sc, (x) => `${vitvizSignificant(100 * x)} %`, "the query's weights on the patches");
}

// A share of a query's attention as vitviz.whatif_words.look_pct says it: "12 %", "3.4 %", "0.05 %", "under 0.01 %"
function vitvizLookPct(share) {
  const v = 100 * Math.abs(share);
  return v < 0.005 ? "under 0.01 %" : `${vitvizFixed(v, v >= 10 ? 0 : v >= 1 ? 1 : 2)} %`;
}

// How close a guess came: the head's row `weights` [N] of the query over every key (`prefix` prefix tokens first)
// and the patch `guessed` (from 0): its weight and rank among the keys (1 + the keys that get more), and the
// head's top patch (the first of equals) and its weight
function vitvizLookNumbers(weights, prefix, guessed) {
  const w = Array.from(weights),
    patches = w.slice(prefix);
  const top = patches.reduce((b, v, i) => (v > patches[b] ? i : b), 0),
    weight = patches[guessed];
  return { weight, rank: 1 + w.filter((v) => v > weight).length, keys: w.length, top, topWeight: patches[top] };
}

// The step's words (Markdown), vitviz.whatif_words.look_words' twin: what to do before a guess (`guessed` null); after
// it, the guess's weight and rank among the keys, the head's top patch, how far from the guess it lies, and the
// prefix tokens (their names) that get more than any patch. weights [N]: the head's row of the query patch `query`.
function vitvizLookWords(weights, prefix, grid, layer, head, query, guessed) {
  const gw = grid[1],
    patch = (p) => `patch ${p} (row ${Math.floor(p / gw)}, column ${p % gw})`;
  if (guessed === null)
    return (
      "A map shows where a head looks once it is drawn; before you see this one, guess. Take **layer " +
      `${layer}, head ${head}** (choose another above) and its query, ${patch(query)}, marked with a white ` +
      "square: which patch do you think this head attends to most from there? **Click it on the photo.** " +
      "Then the page draws the head's real attention and says how close you came."
    );
  const { weight, rank, keys, top, topWeight: best } = vitvizLookNumbers(weights, prefix.length, guessed);
  let said =
    `You clicked **${patch(guessed)}**. Layer ${layer}, head ${head} gives it **${vitvizLookPct(weight)}** of the ` +
    `query's attention: it ranks **${vitvizOrdinal(rank)} of the ${keys} keys**.`;
  if (top === guessed) said += " No patch gets more: you found the head's top patch.";
  else {
    const apart = [
      [Math.abs(Math.floor(top / gw) - Math.floor(guessed / gw)), "row"],
      [Math.abs((top % gw) - (guessed % gw)), "column"],
    ];
    const away = apart
      .filter(([k]) => k)
      .map(([k, unit]) => `${k} ${unit}${k === 1 ? "" : "s"}`)
      .join(" and ");
    const share = best > 0 ? `: yours gets ${vitvizLookPct(weight / best)} of its weight` : "";
    said += ` The head's top patch is **${patch(top)}**, with ${vitvizLookPct(best)}, ${away} from yours${share}.`;
  }
  const over = prefix.flatMap((name, i) => (weights[i] > best ? [`${name} (${vitvizLookPct(weights[i])})`] : []));
  if (over.length)
    said +=
      ` More goes to ${over.join(" and ")}, ${over.length === 1 ? "a token" : "tokens"} not on the photo, than ` +
      "to any patch.";
  const outlined = top === guessed ? "your guess" : "your guess and the top patch";
  return (
    `${said} The picture is the head's real attention from the query (the white square), ${outlined} outlined ` +
    "in cyan. Click another patch to compare it, or choose another head and guess again."
  );
}

// The lesson's guessing step on `run`: {title, look: true, at(look)}, where at(look), with the student's choice
// `look` ({layer, head, guessed, run}: a guess counts on the run it was made on), is the step as shown: {title,
// text, draw(canvas)} and what the test handle reads (row [N], query, guessed, numbers)
function vitvizLookStep(run) {
  const m = run.meta,
    [gh, gw] = m.grid,
    prefix = m.prefix.length,
    query = Math.floor(gh / 2) * gw + Math.floor(gw / 2);
  const title = "Guess where a head looks";
  const photo = (canvas) => {
    // the photo alone, the query marked: nothing to give the answer away
    vitvizSizeCanvas(canvas, m.photoSize);
    const ctx = canvas.getContext("2d");
    if (run.photo) ctx.drawImage(run.photo, 0, 0, canvas.width, canvas.height);
    vitvizDrawMarker(ctx, canvas, m.grid, query);
  };
  return {
    title,
    look: true,
    at(look) {
      const guessed = look.run === run ? look.guessed : null,
        row = vitvizAttentionRow(run, look.layer, look.head, prefix + query);
      const text = vitvizLookWords(row, m.prefix, m.grid, look.layer, look.head, query, guessed);
      if (guessed === null) return { title, text, draw: photo, row, query, guessed };
      const numbers = vitvizLookNumbers(row, prefix, guessed),
        outlined = numbers.top === guessed ? [guessed] : [guessed, numbers.top];
      const draw = (canvas) => vitvizWeightsPicture(canvas, run, row.subarray(prefix), query, outlined);
      return { title, text, draw, row, query, guessed, numbers };
    },
  };
}

// The step's controls: its layer and head (a change asks for a new guess) and a click on its photo (the guess).
// page.look(choice) sets the choice as they do, and draws it; the test handle calls it too.
function vitvizLookControls(page) {
  const { cfg, state } = page,
    panel = document.querySelector(".site-panel[data-tab=lesson]");
  state.look = { layer: Math.floor(cfg.meta.layers / 2), head: 0, guessed: null, run: null };
  const [layer, head] = [".site-look-layer", ".site-look-head"].map((sel) => panel.querySelector(sel));
  const options = (n) => Array.from({ length: n }, (_, i) => `<option value="${i}">${i}</option>`).join("");
  layer.innerHTML = options(cfg.meta.layers);
  head.innerHTML = options(cfg.meta.heads);
  page.look = (choice) => {
    if ("layer" in choice || "head" in choice) state.look.guessed = null;
    Object.assign(state.look, choice, { run: state.run });
    layer.value = String(state.look.layer);
    head.value = String(state.look.head);
    page.draw();
  };
  layer.value = String(state.look.layer);
  layer.addEventListener("change", (e) => page.look({ layer: Number(e.target.value) }));
  head.addEventListener("change", (e) => page.look({ head: Number(e.target.value) }));
  panel.querySelector("canvas").addEventListener("click", (e) => {
    if (!state.run?.lesson?.[state.step - 1]?.look) return;
    const r = e.target.getBoundingClientRect(),
      [gh, gw] = state.run.meta.grid,
      at = (t, n) => Math.min(n - 1, Math.max(0, Math.floor(t * n)));
    page.look({ guessed: at((e.clientY - r.top) / r.height, gh) * gw + at((e.clientX - r.left) / r.width, gw) });
  });
}
