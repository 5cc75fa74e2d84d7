// One head's attention from its queries and keys, in float64: its rows of a layer, the scores, each query's
// softmax denominator, a key's column, and how well a map keeps each query's top keys. vitviz/qk.py is the
// reference that the browser tests compare with.

// One head's rows [tokens*dh] (Float64Array) of a layer's "q" or "k" [tokens, heads*dh] (heads side by side).
function vitvizQkHead(data, m, head, which) {
  const { tokens, heads, headWidth: dh } = m,
    out = new Float64Array(tokens * dh),
    src = data[which];
  for (let t = 0; t < tokens; t++) for (let d = 0; d < dh; d++) out[t * dh + d] = src[t * heads * dh + head * dh + d];
  return out;
}

// The log of each query's softmax denominator [tokens]: lse_i = log Σ_j exp(scale·q_i·k_j), so that the weight
// query i gives key j is exp(scale·q_i·k_j − lse_i). q, k [tokens*dh] of one head.
function vitvizQkRowLse(q, k, dh, scale) {
  const n = q.length / dh,
    out = new Float64Array(n),
    s = new Float64Array(k.length / dh);
  for (let i = 0; i < n; i++) {
    let top = -Infinity,
      sum = 0;
    for (let j = 0; j < s.length; j++) {
      let v = 0;
      for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
      s[j] = v * scale;
      if (s[j] > top) top = s[j];
    }
    for (let j = 0; j < s.length; j++) sum += Math.exp(s[j] - top);
    out[i] = top + Math.log(sum);
  }
  return out;
}

// Key j's column of the attention matrix [tokens]: the weight each query gives it, exp(scale·q_i·k_j − lse_i).
function vitvizQkColumn(q, k, dh, scale, lse, j) {
  const n = q.length / dh,
    out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let v = 0;
    for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
    out[i] = Math.exp(v * scale - lse[i]);
  }
  return out;
}

// Query i's raw scores [tokens]: q_i·k_j for every key j of one head (q, k [tokens*dh]).
function vitvizQkScoresOf(q, k, dh, i) {
  const n = k.length / dh,
    out = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    let v = 0;
    for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
    out[j] = v;
  }
  return out;
}

// The `top` indices of the smallest of values [n] into out [top], smallest first: a small sorted buffer, O(n·top).
function vitvizSmallest(values, top, out, best) {
  let count = 0;
  for (let j = 0; j < values.length; j++) {
    const v = values[j];
    if (count === top && !(v < best[top - 1])) continue;
    let p = count < top ? count++ : top - 1;
    while (p > 0 && best[p - 1] > v) {
      best[p] = best[p - 1];
      out[p] = out[p - 1];
      p--;
    }
    best[p] = v;
    out[p] = j;
  }
  return out;
}

// How well a map keeps attention order, for query i: how many of its `top` keys by score (q, k [n*dh]; softmax
// keeps the order) are among its `top` nearest keys in the map (q2, k2 [n*2]). vitviz.qk.top_key_recall, summed
// over the queries and divided by n·top, is the share.
function vitvizRecallHits(i, q, k, dh, q2, k2, top, scratch) {
  const n = k.length / dh,
    { scores, dist, byScore, byDistance, best } = scratch;
  for (let j = 0; j < n; j++) {
    let s = 0;
    for (let d = 0; d < dh; d++) s += q[i * dh + d] * k[j * dh + d];
    scores[j] = -s;
    const x = k2[2 * j] - q2[2 * i],
      y = k2[2 * j + 1] - q2[2 * i + 1];
    dist[j] = x * x + y * y;
  }
  vitvizSmallest(scores, top, byScore, best);
  vitvizSmallest(dist, top, byDistance, best);
  let hits = 0;
  for (let a = 0; a < top; a++) for (let b = 0; b < top; b++) if (byScore[a] === byDistance[b]) hits++;
  return hits;
}
