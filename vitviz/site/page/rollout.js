// Attention rollout in the browser, as vitviz.maps.rollouts computes it for one image and one discard ratio, from the
// graph's fused heads (vitviz/site/graph.py: mean, max and min of the float16-rounded weights, [L,N,N]).
// Per layer: weights at or below the ratio's threshold are zeroed (never the kept columns: the readout's tokens),
// the identity is added for the skip connection and rows are renormalised: Â_l. The rollout is start · Â_L ... Â_1,
// a vector times each layer from the last down. Sums run in float64.

// The discard threshold of one layer [N*N]: its k-th smallest weight, k = max(1, floor(N²·ratio)) (maps.discard_thresholds)
function vitvizThreshold(layer, ratio, sorted) {
  const k = Math.max(1, Math.floor(layer.length * ratio));
  return sorted(layer)[k - 1];
}

// The rollout [N] that starts from `start` [N] (summing to 1), through `fused` (one Float32Array [L*N*N]) at `ratio`
// in [0, 1), the columns in `keep` never dropped; sortedOf(l) gives layer l's weights sorted (kept by the caller)
function vitvizRollout(fused, layers, n, start, ratio, keep, sortedOf) {
  if (!(ratio >= 0 && ratio < 1)) throw new Error(`the discard ratio must be in [0, 1), got ${ratio}`);
  let rows = Float64Array.from(start);
  const next = new Float64Array(n), kept = new Uint8Array(n);
  for (const t of keep) kept[t] = 1;
  for (let l = layers - 1; l >= 0; l--) {
    const a = fused.subarray(l * n * n, (l + 1) * n * n);
    const th = ratio > 0 ? vitvizThreshold(a, ratio, () => sortedOf(l)) : -Infinity;
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
  const [gh, gw] = grid, ph = h / gh, pw = w / gw;
  let total = 0;
  for (let r = 0; r < gh; r++) for (let c = 0; c < gw; c++) {
    let s = 0;
    for (let y = r * ph; y < (r + 1) * ph; y++) for (let x = c * pw; x < (c + 1) * pw; x++) s += dense[y * w + x];
    row[prefix + r * gw + c] = Math.fround(s / (ph * pw));
    total += row[prefix + r * gw + c];
  }
  for (let i = 0; i < n; i++) row[i] /= total;
  return row;
}

// The rank correlation (Spearman's rho, ties given their mean rank) of two arrays of one length
function vitvizSpearman(a, b) {
  const ranks = (v) => {
    const order = Array.from(v.keys()).sort((i, j) => v[i] - v[j]), r = new Float64Array(v.length);
    for (let i = 0; i < order.length; ) {
      let j = i;
      while (j + 1 < order.length && v[order[j + 1]] === v[order[i]]) j++;
      for (let k = i; k <= j; k++) r[order[k]] = (i + j) / 2;
      i = j + 1;
    }
    return r;
  };
  const ra = ranks(a), rb = ranks(b), m = (ra.length - 1) / 2;
  let num = 0, da = 0, db = 0;
  for (let i = 0; i < ra.length; i++) { num += (ra[i] - m) * (rb[i] - m); da += (ra[i] - m) ** 2; db += (rb[i] - m) ** 2; }
  return da && db ? num / Math.sqrt(da * db) : 0;
}
