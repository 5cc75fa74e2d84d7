// The Heads view's PCA picture, computed in the browser from the final tokens.

// [P*3] in [0, 1]: the first three principal components of the patch tokens (tokens [N*D]) as RGB, each min-max
// scaled, each axis' largest loading positive (vitviz.maps.pca_rgb). The top three eigenvectors of the covariance by
// subspace iteration, then ordered by a 3×3 eigenproblem within it (vitvizEigen, qkproject.js).
function vitvizPcaRgb(tokens, prefix, patches, d) {
  const x = new Float64Array(patches * d),
    mean = new Float64Array(d);
  for (let p = 0; p < patches; p++) for (let j = 0; j < d; j++) mean[j] += tokens[(prefix + p) * d + j] / patches;
  for (let p = 0; p < patches; p++) for (let j = 0; j < d; j++) x[p * d + j] = tokens[(prefix + p) * d + j] - mean[j];
  const cov = new Float64Array(d * d);
  for (let p = 0; p < patches; p++) {
    const row = x.subarray(p * d, (p + 1) * d);
    for (let a = 0; a < d; a++) {
      const v = row[a];
      if (v) for (let b = a; b < d; b++) cov[a * d + b] += v * row[b];
    }
  }
  for (let a = 0; a < d; a++) for (let b = 0; b < a; b++) cov[a * d + b] = cov[b * d + a];
  const k = Math.min(3, d),
    basis = Array.from({ length: k }, (_, i) =>
      Float64Array.from({ length: d }, (_, j) => Math.sin(1 + i * 7.3 + j * 0.61)),
    );
  const orthonormal = () => {
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < i; j++) {
        let s = 0;
        for (let t = 0; t < d; t++) s += basis[i][t] * basis[j][t];
        for (let t = 0; t < d; t++) basis[i][t] -= s * basis[j][t];
      }
      let s = 0;
      for (let t = 0; t < d; t++) s += basis[i][t] ** 2;
      s = Math.sqrt(s) || 1;
      for (let t = 0; t < d; t++) basis[i][t] /= s;
    }
  };
  const times = (v) => {
    const o = new Float64Array(d);
    for (let a = 0; a < d; a++) {
      let s = 0;
      for (let b = 0; b < d; b++) s += cov[a * d + b] * v[b];
      o[a] = s;
    }
    return o;
  };
  orthonormal();
  for (let it = 0; it < 300; it++) {
    for (let i = 0; i < k; i++) basis[i] = times(basis[i]);
    orthonormal();
  }
  const cb = basis.map(times),
    small = new Float64Array(k * k);
  for (let i = 0; i < k; i++)
    for (let j = 0; j < k; j++) {
      let s = 0;
      for (let t = 0; t < d; t++) s += basis[i][t] * cb[j][t];
      small[i * k + j] = s;
    }
  const { values, vectors } = vitvizEigen(small, k),
    order = values.map((_, i) => i).sort((i, j) => values[j] - values[i]);
  const axes = order.map((col) => {
    const axis = new Float64Array(d);
    for (let i = 0; i < k; i++) for (let t = 0; t < d; t++) axis[t] += vectors[i * k + col] * basis[i][t];
    let big = 0;
    for (let t = 0; t < d; t++) if (Math.abs(axis[t]) > Math.abs(big)) big = axis[t];
    if (big < 0) for (let t = 0; t < d; t++) axis[t] = -axis[t];
    return axis;
  });
  const rgb = new Float32Array(patches * 3);
  for (let a = 0; a < k; a++) {
    const comp = new Float64Array(patches);
    for (let p = 0; p < patches; p++) {
      let s = 0;
      for (let t = 0; t < d; t++) s += x[p * d + t] * axes[a][t];
      comp[p] = s;
    }
    let lo = Infinity,
      hi = -Infinity;
    for (const v of comp) {
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
    for (let p = 0; p < patches; p++) rgb[3 * p + a] = (comp[p] - lo) / Math.max(hi - lo, 1e-12);
  }
  return rgb;
}
