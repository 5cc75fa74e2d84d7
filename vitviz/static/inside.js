// Inside a head (the Explorer's "inside" mode): steps 2 and 4 of one head's row beside step 3, its weights.
// `draw(canvas, values, scale)` and `scaleOf(maps)` are the engine's, so that the steps paint as its maps do.

const VITVIZ_STEPS = ["2 · Scores minus the top score, s − max s", "4 · Weight × value norm, α ‖W<sub>O</sub> v‖"];

// canvases, ranges: the two steps' canvases and their range lines; v: {meta, scores [N] (the first query's),
// row [N] (the head's weights), norms [N] (its value norms)}
function vitvizPaintSteps(canvases, ranges, v, draw, scaleOf) {
  // the scores as s - max s (softmax ignores a shift), and the weight x value norms
  const { meta, scores: s, row, norms } = v,
    n = meta.prefix.length,
    tokens = s.length;
  let best = 0;
  for (let j = 1; j < tokens; j++) if (s[j] > s[best]) best = j;
  const hi = s[best];
  let lo = 0,
    patchTop = -Infinity;
  for (let j = n; j < tokens; j++) {
    lo = Math.min(lo, s[j] - hi);
    patchTop = Math.max(patchTop, s[j] - hi);
  }
  const shifted = new Float32Array(tokens - n);
  for (let j = n; j < tokens; j++) shifted[j - n] = s[j] - hi - lo; // from 0 (the lowest patch) up
  draw(canvases[0], shifted, { log: false, lo: 0, hi: patchTop - lo }); // scores: always linear
  const wv = new Float32Array(tokens - n);
  for (let j = n; j < tokens; j++) wv[j - n] = row[j] * norms[j];
  const wvScale = scaleOf([wv]),
    wvEnd = (x) => (wvScale.log ? 10 ** x : x).toPrecision(3);
  draw(canvases[1], wv, wvScale);
  // a prefix token on top and a patch within the tie threshold of it: the bright end is that tie, not "0.00" alone
  const tied = best < n && Math.abs(patchTop) < VITVIZ_TIE ? ", the top patch tied with the top key" : "";
  ranges[0].textContent =
    `colour: ${vitvizFixed(lo, 2)} (dark) to ${vitvizFixed(patchTop, 2)} (bright${tied}); 0 is the top key, ` +
    `${best < n ? `${meta.prefix[best]}, not on the photo` : vitvizShortName(meta, best)}`;
  ranges[1].textContent = `colour: ${meta.scaleName}, ${wvEnd(wvScale.lo)} to ${wvEnd(wvScale.hi)}`;
}
