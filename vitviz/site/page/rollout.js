// Attention rollout in the browser, as vitviz.maps.rollouts computes it for one image and one discard ratio, from the
// graph's fused heads (vitviz/site/graph.py: mean, max and min of the float16-rounded weights, [L,N,N]).
// Per layer: weights at or below the ratio's threshold are zeroed (never the kept columns: the readout's tokens),
// the identity is added for the skip connection and rows are renormalised: Â_l. The rollout is start · Â_L ... Â_1,
// a vector times each layer from the last down. Sums run in float64.

// A fused layer as float32, whatever the graph gave: the mean's Float32Array as it is, max's and min's float16 (exact:
// each is one of the float16 weights; ONNX Runtime gives their bits as a Uint16Array, or a Float16Array where the
// browser has one) decoded into `into`
const VITVIZ_HALF = (() => {
  const lut = new Float32Array(65536);
  for (let b = 0; b < 65536; b++) {
    const e = (b >> 10) & 31,
      f = b & 1023,
      sign = b & 32768 ? -1 : 1;
    lut[b] = sign * (e === 0 ? f * 2 ** -24 : e === 31 ? (f ? NaN : Infinity) : (1 + f / 1024) * 2 ** (e - 15));
  }
  return lut;
})();
function vitvizFusedLayer(data, l, nn, into) {
  if (data instanceof Float32Array) return data.subarray(l * nn, (l + 1) * nn);
  if (data instanceof Uint16Array) for (let i = 0; i < nn; i++) into[i] = VITVIZ_HALF[data[l * nn + i]];
  else into.set(data.subarray(l * nn, (l + 1) * nn)); // a Float16Array, where the browser has one
  return into;
}

// Each layer's discard thresholds at the slider's ratios (5 % steps): the k-th smallest weight, k = max(1,
// floor(N²·ratio)), as maps.discard_thresholds; one sort of a scratch copy per layer, then only [L] numbers kept
const VITVIZ_RATIOS = Array.from({ length: 19 }, (_, i) => Math.round((i + 1) * 5) / 100);
function vitvizThresholds(data, layers, nn, ratios = VITVIZ_RATIOS) {
  const scratch = new Float32Array(nn),
    out = [];
  for (let l = 0; l < layers; l++) {
    scratch.set(vitvizFusedLayer(data, l, nn, scratch));
    scratch.sort();
    out.push(new Map(ratios.map((r) => [r, scratch[Math.max(1, Math.floor(nn * r)) - 1]])));
  }
  return out;
}

// The rollout [N] that starts from `start` [N] (summing to 1), through the fused layers `data` ([L*N*N], see
// vitvizFusedLayer) at `ratio` in [0, 1), the columns in `keep` never dropped; thresholdOf(l) gives layer l's
// threshold at that ratio
function vitvizRollout(data, layers, n, start, ratio, keep, thresholdOf) {
  if (!(ratio >= 0 && ratio < 1)) throw new Error(`the discard ratio must be in [0, 1), got ${ratio}`);
  let rows = Float64Array.from(start);
  const next = new Float64Array(n),
    kept = new Uint8Array(n),
    scratch = new Float32Array(n * n);
  for (const t of keep) kept[t] = 1;
  for (let l = layers - 1; l >= 0; l--) {
    const a = vitvizFusedLayer(data, l, n * n, scratch);
    const th = ratio > 0 ? thresholdOf(l) : -Infinity;
    next.fill(0);
    for (let i = 0; i < n; i++) {
      const row = a.subarray(i * n, (i + 1) * n);
      let sum = 0;
      for (let j = 0; j < n; j++) sum += row[j] > th || kept[j] ? row[j] : 0;
      const scaled = rows[i] / (sum + 1);
      if (scaled === 0) continue;
      for (let j = 0; j < n; j++) if (row[j] > th || kept[j]) next[j] += scaled * row[j];
      next[i] += scaled;
    }
    rows = Float64Array.from(next);
  }
  return rows;
}

// Where a rollout starts [N]: toward the readout, its tokens share 1 (Readout.start); toward the dense output, each
// patch weighted by the mean of its pixels' weights in the dense map [h*w] (outputs.patch_weights), summing to 1
function vitvizRolloutStart(toward, n, prefix, readoutTokens, dense, h, w, grid) {
  const row = new Float64Array(n);
  if (toward === "readout") {
    for (const t of readoutTokens) row[t] = 1 / readoutTokens.length;
    return row;
  }
  const [gh, gw] = grid,
    ph = h / gh,
    pw = w / gw;
  let total = 0;
  for (let r = 0; r < gh; r++)
    for (let c = 0; c < gw; c++) {
      let s = 0;
      for (let y = r * ph; y < (r + 1) * ph; y++) for (let x = c * pw; x < (c + 1) * pw; x++) s += dense[y * w + x];
      row[prefix + r * gw + c] = Math.fround(s / (ph * pw));
      total += row[prefix + r * gw + c];
    }
  for (let i = 0; i < n; i++) row[i] /= total;
  return row;
}

// What a rollout can tell on this photo, by Python's rule (vitviz.sentences.rollout_rule: thresholds, the rows'
// figure and the templates), as sentences.rollout_truth words it: `both` the rank correlation of the rollouts toward
// the output and toward the readout (`cls`, its name), `output` and `readout` each one's with the output's own map.
// Python's **bold** is HTML's <b>
function vitvizRolloutTruth(rule, layers, cls, both, output, readout) {
  const t = rule.templates,
    fill = (name, values) => t[name].replace(/\{(\w+)\}/g, (_, key) => values[key]);
  const alike = t[both >= rule.alike ? "alike" : both >= rule.partly ? "partly" : "different"];
  const values = {
    cls,
    layers,
    alike,
    both: vitvizFixed(both, 3),
    output: vitvizFixed(output),
    readout: vitvizFixed(readout),
    rows: vitvizFixed(rule.rows),
  };
  const text = fill("both", values) + fill(both >= rule.alike ? "pooled" : "apart", values);
  return text.replace(/\*\*(.+?)\*\*/g, "<b>$1</b>");
}

// The rank correlation (Spearman's rho, ties given their mean rank) of two arrays of one length
function vitvizSpearman(a, b) {
  const ranks = (v) => {
    const order = Array.from(v.keys()).sort((i, j) => v[i] - v[j]),
      r = new Float64Array(v.length);
    for (let i = 0; i < order.length; ) {
      let j = i;
      while (j + 1 < order.length && v[order[j + 1]] === v[order[i]]) j++;
      for (let k = i; k <= j; k++) r[order[k]] = (i + j) / 2;
      i = j + 1;
    }
    return r;
  };
  const ra = ranks(a),
    rb = ranks(b),
    m = (ra.length - 1) / 2;
  let num = 0,
    da = 0,
    db = 0;
  for (let i = 0; i < ra.length; i++) {
    num += (ra[i] - m) * (rb[i] - m);
    da += (ra[i] - m) ** 2;
    db += (rb[i] - m) ** 2;
  }
  return da && db ? num / Math.sqrt(da * db) : 0;
}
