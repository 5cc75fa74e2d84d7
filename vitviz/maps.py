"""Maps: pure functions over arrays. No model, no drawing.

Notation: L layers, H heads, N tokens (prefix tokens first, then the patches in
row-major scan order), P = gh*gw patches, D the token width, p the patch size in pixels.

Every function takes tensors on any device. Where a GPU and a CPU are fastest by different means (the
thresholds and rollouts of a forward's fused heads), the function says which it takes, and why.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

HEAD_FUSIONS = ("mean", "max", "min")
COLOUR_SCALES = ("log", "robust", "min-max")  # log and robust clip at the 99th percentile
LOG_FLOOR = 1e-6  # the log scale leaves out values under this fraction of the largest (a ReLU's zeros)
CLIP_PERCENTILES = (1, 99)  # the log scale's span, of the values above the floor; robust clips at the top one
DEFAULT_SCALE = "log"  # the one that keeps every photo's attention and rollout off black (see the README)


def attention_map(rows: np.ndarray, grid: tuple[int, int], n_prefix: int, head: int | None) -> np.ndarray:
    """One query's attention over the patches.

    rows: [H,N] the query's attention row in every head of one layer. head=None averages the heads.
    Returns [gh,gw] float32; prefix keys are dropped.
    """
    kept = rows[:, n_prefix:] if head is None else rows[head, n_prefix:][None]
    return kept.astype(np.float32).mean(axis=0).reshape(grid)


def check_fusion(how: str) -> None:
    """A head fusion's name, or the ValueError that names the ones there are."""
    if how not in HEAD_FUSIONS:
        raise ValueError(f"unknown head fusion {how!r}: use one of {HEAD_FUSIONS}")


def fuse_heads(attn: np.ndarray | torch.Tensor, how: str = "mean") -> torch.Tensor:
    """[L,H,N,N] -> [L,N,N]: the heads of each layer fused by mean (float32), max or min (float16 for
    float16 weights: a maximum of them is one of them, exactly, at half the memory; else float32)."""
    check_fusion(how)
    a = torch.as_tensor(attn)
    # One layer at a time: converting all of [L,H,N,N] to float32 at once allocates ~300 MB at 448 px.
    keep = (lambda x: x) if a.dtype == torch.float16 else (lambda x: x.float())
    fuse = {"mean": lambda x: x.float().mean(dim=0), "max": lambda x: keep(x.amax(dim=0))}
    fuse["min"] = lambda x: keep(x.amin(dim=0))
    return torch.stack([fuse[how](layer) for layer in a])


@functools.lru_cache(maxsize=64)
def indices(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """`values` as an index tensor on `device`, made once: a copy from the host waits for all the work queued on
    a GPU. Shared: read it, never write to it."""
    return torch.tensor(values, dtype=torch.long, device=device)


def rollout(
    fused: torch.Tensor,
    discard_ratio: float = 0.0,
    thresholds: torch.Tensor | None = None,
    start: np.ndarray | None = None,
    keep: tuple[int, ...] = (0,),
) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020), the readout's row over the tokens.

    fused: [L,N,N] head-fused attention (see `fuse_heads`). Per layer: weights at or below
    the `discard_ratio` quantile are zeroed (never those in the `keep` columns, the readout tokens), the
    identity is added for the residual path and rows are re-normalised: Â_l. The rollout is
    start · Â_L ... Â_1, with start [N] the readout's weights over the tokens (default: the CLS token's
    one-hot row; an attention-pool's probe attention for SigLIP, the full product's last row). It runs as a
    vector times matrices from the last layer down, O(L·N²). thresholds: [L] the per-layer quantile values
    if already known (see `discard_thresholds`). Returns [N] float32: it sums to 1, prefix tokens first.
    """
    per_layer = None if thresholds is None else torch.as_tensor(thresholds)[:, None]
    return rollouts(fused, [discard_ratio], per_layer, start, keep)[0]


ROLL_CHUNK_BYTES = 2**30  # on a GPU, the most that one layer's ratios at once take in `rollouts` (their mask: +25 %)


def rollouts(
    fused: torch.Tensor | Sequence[torch.Tensor],
    ratios: list[float],
    thresholds: torch.Tensor | None = None,
    start: np.ndarray | None = None,
    keep: tuple[int, ...] = (0,),
    chunk: int | None = None,
) -> np.ndarray:
    """[R,N] float32 the `rollout` of each discard ratio in `ratios`, from the same fused heads [L,N,N] (or L
    layers [N,N], a forward's, not copied into one tensor) on any device. thresholds: [L,R] each layer's discard
    threshold of each ratio, where known (see `discard_thresholds`). A batch's images go together: L layers
    [B,N,N], thresholds [L,B,R] (needed), start [B,N] (or one [N] for all) give [B,R,N].

    `chunk` ratios at a time go through each layer together. By default as many as fit `ROLL_CHUNK_BYTES` on a
    GPU (all 20 of the slider's at 448 px), where one kernel for many ratios costs what one for a single ratio
    does; one at a time on a CPU, where 4 at once took twice as long at 448 px (a broadcast `where` is slow
    there, and [4,N,N] leaves the caches)."""
    if not ratios:
        raise ValueError("rollouts needs at least one discard ratio")
    for r in ratios:
        if not 0.0 <= r < 1.0:
            raise ValueError(f"discard_ratio must be in [0, 1), got {r}")
    device, dtype, n, layers = fused[0].device, fused[0].dtype, fused[0].shape[-1], len(fused)
    batched = fused[0].dim() == 3
    images = fused[0].shape[0] if batched else 1
    discarding = [i for i, r in enumerate(ratios) if r > 0.0]
    if discarding and thresholds is None:
        if batched:
            raise ValueError("a batch's rollouts need its thresholds [L,B,R]")
        thresholds = torch.zeros(layers, len(ratios), dtype=dtype, device=device)
        thresholds[:, indices(tuple(discarding), device)] = discard_thresholds(fused, [ratios[i] for i in discarding])
    if discarding:  # [L,B,R] float32, exact for float16 ones; a ratio of 0 keeps every weight: below them all
        thresholds = torch.as_tensor(thresholds).to(device, torch.float32).clone().reshape(layers, images, len(ratios))
        thresholds[..., indices(tuple(i for i, r in enumerate(ratios) if r == 0.0), device)] = float("-inf")
    if start is None:
        first = torch.zeros(n, dtype=torch.float32, device=device)
        first[0] = 1.0
    else:
        first = torch.as_tensor(np.asarray(start, np.float32)).to(device)
    if chunk is None:
        chunk = 1 if device.type == "cpu" else max(1, min(len(ratios), ROLL_CHUNK_BYTES // (images * n * n * 4)))
    per_ratio = thresholds.cpu().tolist() if discarding and chunk == 1 else None  # [L][B][R]
    columns = indices(tuple(keep), device)
    rows = first.reshape(-1, 1, n).expand(images, len(ratios), n)  # [B,R,N]
    for layer in range(layers - 1, -1, -1):
        a = fused[layer].float()  # once a layer, whichever ratio it serves
        a = (a if batched else a[None])[:, None]  # [B,1,N,N]
        made = []
        for lo in range(0, len(ratios), chunk):
            c = min(chunk, len(ratios) - lo)
            part = a
            if per_ratio is not None:  # a where a > the ratio's threshold, else 0: [B,1,N,N]
                each = [F.threshold(a[i, 0], per_ratio[layer][i][lo], 0.0) for i in range(images)]
                part = (each[0][None] if images == 1 else torch.stack(each))[:, None]  # no copy for one image
            elif discarding:  # the same for c ratios at once: [B,c,N,N]
                part = torch.where(a > thresholds[layer, :, lo : lo + c, None, None], a, a.new_zeros(()))
            if discarding:
                part[..., columns] = a[..., columns]
            # v·Â = (v / rowsum) · (A + I): A + I is never materialised.
            scaled = rows[:, lo : lo + c] / (part.sum(dim=-1) + 1.0)  # [B,c,N]
            made.append((scaled[..., None, :] @ part)[..., 0, :] + scaled)
        rows = torch.cat(made, dim=1)
    out = rows.cpu().numpy()
    return out if batched else out[0]


def discard_thresholds(fused: torch.Tensor | Sequence[torch.Tensor], ratios: list[float]) -> torch.Tensor:
    """[L,N,N] -> [L,R]: per layer, the value below which a fraction `ratio` of weights lie.

    It is the k-th smallest weight, k = max(1, int(N² · ratio)): weights at or below it are dropped. Exact, and
    never by a whole sort. float16 weights are counted: a float's bits, read as an integer (see `_ordered`), order
    as the floats do, and float16 has 65,536 bit patterns, so one count of a layer gives all its thresholds (on a
    CPU by NumPy, a layer at a time; elsewhere, and with a sign bit set, every layer in one count). float32
    weights on a CPU are counted by their top 16 bits, a layer at a time, and only the weights in the bins that
    hold a k-th are sorted (`_float32_thresholds`): a fifth of NumPy's introselect's time at 448 px. On a GPU,
    float32 layers are sorted whole, which takes less than either there, and
    float16 ones counted. Returns float16 for float16 input, else float32, on `fused`'s device.
    """
    if not isinstance(fused, torch.Tensor):  # L layers [N,N]
        fused = torch.stack(list(fused))
    flat = fused.reshape(fused.shape[0], -1)
    if flat.dtype not in (torch.float16, torch.float32):
        flat = flat.float()
    ks = indices(tuple(max(1, int(flat.shape[1] * r)) for r in ratios), flat.device)
    if flat.dtype == torch.float32:
        if flat.is_cuda:  # a GPU sorts each row in less time than a count steps through them
            return flat.sort(dim=1).values[:, ks - 1]
        return torch.from_numpy(np.stack([_float32_thresholds(row, ks.numpy()) for row in flat.detach().numpy()]))
    if not flat.is_cuda:
        bits = flat.detach().numpy().view(np.uint16)
        if bits.max() < 2**15:  # no sign bit set: the bits, unsigned, order as the floats do; NumPy counts a layer
            counted = [np.searchsorted(np.cumsum(np.bincount(row, minlength=2**16)), ks.numpy()) for row in bits]
            return torch.from_numpy(np.stack(counted).astype(np.uint16).view(np.float16))  # in a fifth of torch's time
    ints, offset, rows = flat.view(torch.int16), 0, flat.shape[0]
    if flat.is_cuda or bool((ints < 0).any()):  # a sign bit set (a negative weight, or -0.0); a GPU is not asked,
        ints, offset = _ordered(ints.int(), 16), 2**15  # which would wait for its queued work
    # each bit pattern its own bin: one count of every row at once gives every threshold
    bins = ints.int() + offset + torch.arange(rows, device=flat.device, dtype=torch.int32)[:, None] * 2**16
    if flat.is_cuda:  # a count by index_add_: bincount would wait for the GPU, to learn the largest bin
        one = torch.ones((), dtype=torch.long, device=flat.device).expand(bins.numel())
        counts = torch.zeros(rows * 2**16, dtype=torch.long, device=flat.device).index_add_(0, bins.flatten(), one)
    else:
        counts = torch.bincount(bins.flatten(), minlength=rows * 2**16)
    counts = counts.view(rows, 2**16)
    key = torch.searchsorted(counts.cumsum(1), ks.expand(rows, -1).contiguous()) - offset  # the k-th's bin
    return (_ordered(key, 16) if offset else key).to(torch.int16).view(flat.dtype)


def _float32_thresholds(row: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """[M] float32 -> the k-th smallest of `row` for each k of `ks` (1 to M). Non-negative floats' bits order as
    the floats do: one count of their top 16 bits finds the bin that holds each k-th, and only those bins' weights
    are sorted: about a tenth of a layer's million at 448 px for 100 thresholds (a thousand a bin).
    A sign bit set (a negative weight, or -0.0) is selected by introselect instead."""
    bits = row.view(np.int32)
    if bits.min() < 0:
        return np.partition(row, np.unique(ks - 1))[ks - 1]
    top = bits >> 16
    counts = np.bincount(top, minlength=1 << 15)
    below = np.cumsum(counts) - counts  # the weights in lower bins
    bins = np.searchsorted(below + counts, ks)  # the bin of each k-th: the first whose count reaches k
    chosen = np.unique(bins)
    wanted = np.zeros(1 << 15, dtype=bool)
    wanted[chosen] = True
    candidates = np.sort(row[wanted[top]])  # the chosen bins' weights, bin after bin
    starts = np.cumsum(counts[chosen]) - counts[chosen]  # each chosen bin's first place among them
    at = np.searchsorted(chosen, bins)
    return candidates[starts[at] + ks - 1 - below[bins]]


def _ordered(bits: torch.Tensor, width: int) -> torch.Tensor:
    """IEEE floats' bit patterns (as int32, `width` 16 or 32 bits) -> integers that order as the floats do:
    the magnitude bits of negative numbers flipped. Its own inverse."""
    return bits ^ ((bits >> (width - 1)) & (2 ** (width - 1) - 1))


def pos_embed_similarity(pos: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """pos: [P,D] patch position embeddings -> cosine similarity [gh,gw,gh,gw] (ViT Fig. 7)."""
    unit = pos / np.maximum(np.linalg.norm(pos, axis=1, keepdims=True), 1e-12)
    return (unit @ unit.T).astype(np.float32).reshape(*grid, *grid)


def patch_centers(grid: tuple[int, int], patch: int) -> np.ndarray:
    """[P,2] (y, x) pixel coordinates of the patch centres in the model input."""
    ys, xs = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    return (np.stack([ys.ravel(), xs.ravel()], axis=1) + 0.5) * patch


@functools.lru_cache(maxsize=8)
def patch_distances(grid: tuple[int, int], patch: int) -> torch.Tensor:
    """[P,P] float32 pixel distances between patch centres, kept per grid: building it takes several times as
    long as a layer's mean attention distance (docs/benchmarks.md). Shared: read it, never write to it."""
    c = patch_centers(grid, patch)
    return torch.from_numpy(np.sqrt(((c[:, None] - c[None]) ** 2).sum(-1)).astype(np.float32))


def mean_attention_distance(
    attn: np.ndarray | torch.Tensor, grid: tuple[int, int], patch: int, n_prefix: int
) -> np.ndarray:
    """[L,H,N,N] -> [L,H] mean attention distance in input pixels (ViT paper, App. D.7).

    For each patch query, the pixel distance to every patch key weighted by the attention
    (re-normalised over the patch keys), averaged over the queries. attn: NumPy, or a torch tensor on
    any device (a batch's weights as a forward hook sees them, [B,H,N,N]).
    """
    attn = torch.as_tensor(attn)
    return np.stack([_head_distances(a, grid, patch, n_prefix).cpu().numpy() for a in attn])


def _head_distances(attn: torch.Tensor, grid: tuple[int, int], patch: int, n_prefix: int) -> torch.Tensor:
    """[H,N,N] weights -> [H] float32 `mean_attention_distance`, on their device."""
    dist = patch_distances(tuple(grid), patch).to(attn.device)
    a = attn[:, n_prefix:, n_prefix:].float()
    # einsum: the row-wise dot product without an [H,P,P] temporary, 2 to 3x faster on a CPU
    return (torch.einsum("hqk,qk->hq", a, dist) / a.sum(-1)).mean(-1)


def attention_entropy(attn: np.ndarray | torch.Tensor) -> np.ndarray:
    """[L,H,N,N] -> [L,H] mean entropy of the attention rows, in nats (0 = one-hot)."""
    attn = torch.as_tensor(attn)
    out = np.empty(attn.shape[:2], np.float32)
    for layer in range(attn.shape[0]):
        # entr(x) = -x log x, 0 at x = 0, in one pass (twice as fast as clamp, log and multiply)
        out[layer] = torch.special.entr(attn[layer].float()).sum(-1).mean(-1).cpu().numpy()
    return out


def score_statistics(
    scores: torch.Tensor, grid: tuple[int, int], patch: int, n_prefix: int
) -> tuple[np.ndarray, np.ndarray]:
    """[H,N,N] one layer's attention scores (before the softmax) -> ([H] `mean_attention_distance`, [H]
    `attention_entropy`) of their softmax's float32 weights, not of weights rounded to float16 (whose entropy is
    off by up to ~4e-4 where many keys share a small weight). The entropy -Σ p log p takes log p from the
    log-softmax, with no logarithm of a weight: faster than `attention_entropy` of the weights
    (docs/benchmarks.md)."""
    with torch.inference_mode():
        log_weights = torch.log_softmax(scores.float(), dim=-1)
        weights = log_weights.exp()
        # a key scored -inf (a mask) has log p = -inf and p = 0: its term is 0, as entr's, not 0 · -inf
        log_weights.clamp_(min=torch.finfo(log_weights.dtype).min)
        entropy = -log_weights.mul_(weights).sum(-1).mean(-1)  # in place: one [H,N,N] temporary fewer
        return _head_distances(weights, grid, patch, n_prefix).cpu().numpy(), entropy.cpu().numpy()


def token_norms(tokens: np.ndarray, grid: tuple[int, int], n_prefix: int) -> np.ndarray:
    """tokens: [N,D] output tokens -> L2 norm of each patch token, [gh,gw]."""
    return np.linalg.norm(tokens[n_prefix:].astype(np.float32), axis=1).reshape(grid)


def high_norm_tokens(norms: np.ndarray, ratio: float = 2.0, gap: float = 1.25) -> np.ndarray:
    """[gh,gw] -> bool [gh,gw]: the high-norm "artifact" tokens of Darcet et al. 2023 ("Vision
    Transformers Need Registers"), if the model has any.

    Those are a few patch tokens with norms several times the rest. A token is flagged when its
    norm is at least `ratio` x the median AND the flagged tokens stand apart: the smallest flagged
    norm is at least `gap` x the largest unflagged one. A smooth tail (a skyline 1.2x the median)
    is no artifact; small DINOv2 models, whose largest norm is about 1.3x the median, have none.
    """
    candidates = norms >= ratio * np.median(norms)
    if not candidates.any() or candidates.all() or norms[candidates].min() < gap * norms[~candidates].max():
        return np.zeros_like(norms, dtype=bool)
    return candidates


def pca_rgb(tokens: np.ndarray, grid: tuple[int, int], n_prefix: int) -> np.ndarray:
    """tokens: [N,D] -> the first three principal components of the patch tokens as RGB.

    Returns [gh,gw,3] float32 in [0,1], each component min-max scaled. Component signs
    are fixed so that each component's largest loading is positive (stable colours).
    """
    x = tokens[n_prefix:].astype(np.float64)
    x = x - x.mean(axis=0)
    if len(x) >= x.shape[1]:  # the covariance's eigenvectors: the SVD's right vectors, 4x faster at 1024 x 384
        vt = np.linalg.eigh(x.T @ x)[1][:, ::-1][:, :3].T
    else:
        vt = np.linalg.svd(x, full_matrices=False)[2][:3]
    vt = vt * np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])[:, None]
    comps = x @ vt.T
    lo, hi = comps.min(axis=0), comps.max(axis=0)
    rgb = (comps - lo) / np.maximum(hi - lo, 1e-12)
    if rgb.shape[1] < 3:
        rgb = np.pad(rgb, ((0, 0), (0, 3 - rgb.shape[1])))
    return rgb.astype(np.float32).reshape(*grid, 3)


def colour_scale(values: np.ndarray, scale: str = DEFAULT_SCALE) -> tuple[np.ndarray, float, float, np.ndarray]:
    """How to colour a map: (values to colour, low, high, bool mask of the values above `high`).

    values: any shape. Attention and rollout have heavy tails (a maximum 7 to 20x the 99th percentile),
    and most of an image often sits in a narrow band near the minimum (a sky, a wall). "log" colours
    log10(values) from the 1st to the 99th percentile of the values above a millionth of the maximum,
    which spreads that band over the colormap; smaller values and zeros take the lowest colour. "robust"
    is linear up to the 99th percentile. Both return the values above the clip, so that a picture can
    mark them. "min-max" spans the data.
    """
    if scale not in COLOUR_SCALES:
        raise ValueError(f"unknown colour scale {scale!r}: use one of {COLOUR_SCALES}")
    values = np.asarray(values, dtype=np.float32)
    lo, hi = float(values.min()), float(values.max())
    if scale == "log":
        floor = max(hi * LOG_FLOOR, np.finfo(np.float32).tiny) if hi > 0 else 1e-12
        logged = np.log10(np.maximum(values, floor))
        above = logged[values > floor]  # the percentiles of what is there: a ReLU's zeros would set the low end
        low, clip = np.percentile(above, CLIP_PERCENTILES) if above.size else (0.0, 0.0)
        if clip > low:
            return logged, float(low), float(clip), logged > clip
        return logged, float(logged.min()), float(logged.max()), np.zeros(values.shape, bool)
    if scale == "robust":
        clip = float(np.percentile(values, CLIP_PERCENTILES[1]))
        if clip > lo:
            return values, lo, clip, values > clip
    return values, lo, hi, np.zeros(values.shape, bool)


def scaled_scores(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """q [dh], k [N,dh] -> [N] the scaled dot products q·k_j · scale, with scale = 1/sqrt(dh)."""
    return (k.astype(np.float32) @ q.astype(np.float32)) * np.float32(scale)


def softmax(scores: np.ndarray) -> np.ndarray:
    """[..., N] -> [..., N] float32 rows that sum to 1 (shifted by the row maximum, so exp never overflows)."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def effective_keys(weights: np.ndarray) -> float:
    """[N] attention weights -> exp(entropy): how many keys a row spreads over (1 to N)."""
    w = weights[weights > 0].astype(np.float64)
    return float(np.exp(-(w * np.log(w)).sum()))


def top_share(weights: np.ndarray, fraction: float = 0.01) -> float:
    """[N] weights -> the share held by the largest ceil(fraction·N) of them."""
    k = max(1, int(np.ceil(fraction * len(weights))))
    return float(np.sort(weights)[-k:].sum())


def value_norms(v: np.ndarray, wo: np.ndarray, heads: int) -> np.ndarray:
    """||W_o,h v_hj||: what one unit of attention to token j carries out of head h (Kobayashi et al. 2020).

    v: [N,H*dh] the values of all heads side by side; wo: [D,H*dh] the output projection's weight,
    whose columns h*dh:(h+1)*dh are head h's slice. Returns [H,N]. Times the weight α_hj it is
    ||α_hj W_o,h v_hj||, the norm of token j's contribution to the attention output (bias left out).
    """
    n, width = v.shape
    dh = width // heads
    vh = v.reshape(n, heads, dh).transpose(1, 0, 2)  # [H,N,dh]
    wh = wo.reshape(wo.shape[0], heads, dh).transpose(1, 0, 2)  # [H,D,dh]
    # ||W v||² = vᵀ (WᵀW) v: a dh×dh Gram matrix per head instead of projecting every value to D.
    gram = np.matmul(wh.transpose(0, 2, 1), wh)  # [H,dh,dh]
    squared = np.einsum("hnd,hnd->hn", np.matmul(vh, gram), vh)
    return np.sqrt(np.maximum(squared, 0)).astype(np.float32)
