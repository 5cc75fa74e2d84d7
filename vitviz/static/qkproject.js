// The Q·K view's map: AttentionViz's normalisation of one head and the joint PCA of its queries and keys, in
// float64 (JavaScript numbers). vitviz/qk.py is the reference that the browser tests compare with.

// q [nq*dh], k [nk*dh] (Float64Array) -> {q: c·q, k: (k - mean k)/c + c·mean q, c}: the keys' centroid is the
// queries', both have the same mean norm, and every row of softmax(q·k) is unchanged (a shift per row, c·1/c).
function vitvizQkNormalise(q, k, dh) {
  const nq = q.length / dh,
    nk = k.length / dh;
  if (!nq || !nk || !Number.isInteger(nq) || !Number.isInteger(nk))
    throw new Error(`queries and keys must be [N, ${dh}]`);
  const muQ = new Float64Array(dh),
    muK = new Float64Array(dh);
  let mq = 0;
  for (let i = 0; i < nq; i++) {
    let s = 0;
    for (let d = 0; d < dh; d++) {
      const v = q[i * dh + d];
      muQ[d] += v;
      s += v * v;
    }
    mq += Math.sqrt(s);
  }
  mq /= nq;
  for (let d = 0; d < dh; d++) muQ[d] /= nq;
  for (let i = 0; i < nk; i++) for (let d = 0; d < dh; d++) muK[d] += k[i * dh + d];
  for (let d = 0; d < dh; d++) muK[d] /= nk;
  // With a_j = k_j − μk and u = 1/c², mean ||k'|| = mean ||q'|| reads h(u) = mean ||u·a_j + μq|| − mean ||q|| = 0:
  // h is convex, h(0) = ||μq|| − mean ||q|| <= 0, so Newton from the right falls to its one root. ||u·a + μq||²
  // = u²||a||² + 2u a·μq + ||μq||²: each step costs O(N), not O(N·dh).
  const spread = new Float64Array(k.length),
    aa = new Float64Array(nk),
    ab = new Float64Array(nk);
  let bb = 0,
    ma = 0;
  for (let d = 0; d < dh; d++) bb += muQ[d] * muQ[d];
  for (let i = 0; i < nk; i++) {
    let s2 = 0,
      sb = 0;
    for (let d = 0; d < dh; d++) {
      const v = k[i * dh + d] - muK[d];
      spread[i * dh + d] = v;
      s2 += v * v;
      sb += v * muQ[d];
    }
    aa[i] = s2;
    ab[i] = sb;
    ma += Math.sqrt(s2);
  }
  ma /= nk;
  if (!(Math.sqrt(bb) < mq * (1 - 1e-12) && ma > 0))
    throw new Error("the queries or keys are all equal: no scale gives them the same mean norm");
  let u = (2 * (mq + Math.sqrt(bb))) / ma; // h(u) >= u·mean||a|| − ||μq|| − mean||q|| > 0 here
  for (let it = 0; it < 100; it++) {
    let h = 0,
      slope = 0;
    for (let i = 0; i < nk; i++) {
      const n = Math.sqrt(u * u * aa[i] + 2 * u * ab[i] + bb);
      h += n;
      slope += (u * aa[i] + ab[i]) / n;
    }
    const step = (h / nk - mq) / (slope / nk);
    u -= step;
    if (Math.abs(step) <= 1e-14 * u) break;
  }
  const c = 1 / Math.sqrt(u);
  const qn = new Float64Array(q.length),
    kn = new Float64Array(k.length);
  for (let i = 0; i < q.length; i++) qn[i] = q[i] * c;
  for (let i = 0; i < nk; i++) for (let d = 0; d < dh; d++) kn[i * dh + d] = spread[i * dh + d] / c + c * muQ[d];
  return { q: qn, k: kn, c };
}

// Eigenvalues and eigenvectors of a symmetric n×n matrix (cyclic Jacobi): {values [n], vectors [n*n], column j}.
function vitvizEigen(matrix, n) {
  const a = Float64Array.from(matrix),
    v = new Float64Array(n * n);
  for (let i = 0; i < n; i++) v[i * n + i] = 1;
  let total = 0;
  for (let i = 0; i < n * n; i++) total += a[i] * a[i];
  for (let sweep = 0; sweep < 60; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
    if (off <= 1e-30 * total) break;
    for (let p = 0; p < n - 1; p++) {
      for (let q = p + 1; q < n; q++) {
        const apq = a[p * n + q];
        if (apq === 0) continue;
        const theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const t = (theta >= 0 ? 1 : -1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1),
          s = t * c;
        for (let k = 0; k < n; k++) {
          // columns p and q: A P
          const akp = a[k * n + p],
            akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) {
          // rows p and q: P^T A
          const apk = a[p * n + k],
            aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k * n + p],
            vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  return { values: Array.from({ length: n }, (_, i) => a[i * n + i]), vectors: v };
}

// x [m*d] (Float64Array) -> [m*2] on the first two principal axes; each axis' largest loading positive, as
// vitviz.qk.pca2 does.
function vitvizPca2(x, d) {
  const m = x.length / d,
    mean = new Float64Array(d),
    cov = new Float64Array(d * d);
  for (let i = 0; i < m; i++) for (let j = 0; j < d; j++) mean[j] += x[i * d + j];
  for (let j = 0; j < d; j++) mean[j] /= m;
  const c = new Float64Array(4 * d);
  for (let i = 0; i < m; i += 4) {
    // four points a pass over cov: a quarter of its traffic
    for (let p = 0; p < 4; p++) for (let j = 0; j < d; j++) c[p * d + j] = i + p < m ? x[(i + p) * d + j] - mean[j] : 0;
    for (let a = 0; a < d; a++) {
      const a0 = c[a],
        a1 = c[d + a],
        a2 = c[2 * d + a],
        a3 = c[3 * d + a],
        row = a * d;
      for (let b = a; b < d; b++) cov[row + b] += a0 * c[b] + a1 * c[d + b] + a2 * c[2 * d + b] + a3 * c[3 * d + b];
    }
  }
  for (let a = 0; a < d; a++) for (let b = 0; b < a; b++) cov[a * d + b] = cov[b * d + a];
  const { values, vectors } = vitvizEigen(cov, d);
  const order = values
    .map((_, i) => i)
    .sort((i, j) => values[j] - values[i])
    .slice(0, 2);
  const axes = order.map((col) => {
    const axis = new Float64Array(d);
    let big = 0;
    for (let j = 0; j < d; j++) {
      axis[j] = vectors[j * d + col];
      if (Math.abs(axis[j]) > Math.abs(big)) big = axis[j];
    }
    if (big < 0) for (let j = 0; j < d; j++) axis[j] = -axis[j];
    return axis;
  });
  const out = new Float64Array(2 * m);
  for (let i = 0; i < m; i++) {
    for (let a = 0; a < 2; a++) {
      let s = 0;
      for (let j = 0; j < d; j++) s += (x[i * d + j] - mean[j]) * axes[a][j];
      out[2 * i + a] = s;
    }
  }
  return { xy: out, variance: order.map((i) => values[i] / m), spectrum: values.slice().sort((p, q) => q - p) };
}
