// One row of a head's attention, computed in the browser from the layer's shipped queries and keys.
// A layer's bytes (vitviz/explorer.py): q [N, H*dh] | k [N, H*dh] | valueNorms [H, N], float32, heads side by
// side. Sums run in float64 (JavaScript numbers) and are stored as float32.

function vitvizLayer(buffer, tokens, heads, dh) {
  const n = tokens * heads * dh;
  const expected = 4 * (2 * n + heads * tokens);
  if (!(buffer instanceof ArrayBuffer)) {
    // a source that holds the arrays already (the site's forward): no copy
    const { q, k, valueNorms } = buffer;
    if (q.length !== n || k.length !== n || valueNorms.length !== heads * tokens) {
      throw new Error(`a layer should hold ${n} queries' and keys' numbers and ${heads * tokens} value norms`);
    }
    return { q, k, valueNorms, bytes: expected };
  }
  if (buffer.byteLength !== expected) {
    throw new Error(`a layer should be ${expected} bytes, got ${buffer.byteLength}`);
  }
  return {
    q: new Float32Array(buffer, 0, n),
    k: new Float32Array(buffer, 4 * n, n),
    valueNorms: new Float32Array(buffer, 8 * n, heads * tokens),
    bytes: buffer.byteLength,
  };
}

// scores[j] = q_query · k_j * scale in one head: the model's scaled dot products, before softmax.
function vitvizScores(out, layer, head, query, shape) {
  const { tokens, heads, dh, scale } = shape;
  const width = heads * dh;
  const q = layer.q,
    k = layer.k;
  const qo = query * width + head * dh;
  for (let j = 0; j < tokens; j++) {
    const ko = j * width + head * dh;
    let s = 0;
    for (let d = 0; d < dh; d++) s += q[qo + d] * k[ko + d];
    out[j] = s * scale;
  }
  return out;
}

// weights = softmax(scores / T) over the keys; T = 1 is the model. Returns the entropy in nats.
function vitvizSoftmax(out, scores, temperature) {
  let max = -Infinity;
  for (let j = 0; j < scores.length; j++) if (scores[j] > max) max = scores[j];
  let sum = 0;
  for (let j = 0; j < scores.length; j++) {
    const e = Math.exp((scores[j] - max) / temperature);
    out[j] = e;
    sum += e;
  }
  let entropy = 0;
  for (let j = 0; j < scores.length; j++) {
    const w = out[j] / sum;
    out[j] = w;
    if (w > 0) entropy -= w * Math.log(w);
  }
  return entropy;
}

// Queries that are no single token: an attention-pool's probe (SigLIP's readout), and the readout of several
// tokens (a distilled DeiT's two), whose rows are averaged as the model averages what it reads from them.
const VITVIZ_PROBE = -1;
const VITVIZ_READOUT = -2;

// weights [H*N] = every head's row for the mean of `queries`' rows; scores [N] end as head `head`'s scores for
// the first query, work [N] is scratch. Returns head `head`'s entropy in nats.
function vitvizRows(weights, scores, work, layer, queries, head, temperature, shape) {
  const { tokens, heads } = shape;
  let entropy = 0;
  for (let h = 0; h < heads; h++) {
    const row = weights.subarray(h * tokens, (h + 1) * tokens);
    for (const [i, query] of queries.entries()) {
      vitvizScores(scores, layer, h, query, shape);
      if (i === 0) {
        vitvizSoftmax(row, scores, temperature);
        continue;
      }
      vitvizSoftmax(work, scores, temperature);
      for (let j = 0; j < tokens; j++) row[j] = (row[j] * i + work[j]) / (i + 1);
    }
    if (h === head) {
      entropy = 0;
      for (let j = 0; j < tokens; j++) if (row[j] > 0) entropy -= row[j] * Math.log(row[j]);
    }
  }
  vitvizScores(scores, layer, head, queries[0], shape);
  return entropy;
}
