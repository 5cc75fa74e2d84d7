// One row of a head's attention, computed in the browser from the layer's shipped queries and keys.
// A layer's bytes (vitviz/explorer.py): q [N, H*dh] | k [N, H*dh] | valueNorms [H, N], float32, heads side by
// side. Sums run in float64 (JavaScript numbers) and are stored as float32.

function vitvizLayer(buffer, tokens, heads, dh) {
  const n = tokens * heads * dh;
  const expected = 4 * (2 * n + heads * tokens);
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
  const q = layer.q, k = layer.k;
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
