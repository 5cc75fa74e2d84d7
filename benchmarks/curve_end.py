"""Why a deletion curve may rise at its end: `python -m benchmarks.curve_end`.

On each bundled photo, Saliency's deletion curve of the embedded model's default output (its dense map where the
photo is salient), and the dense head's map on three inputs: the photo, the photo with 90 % of its patches hidden
in Saliency's order (the last 10 % left sharp), and the blur alone (every patch hidden). For each: the map's mean, on
the 10 % left and elsewhere, and the output itself (the map weighted by the photo's). Figures go to docs/design.md.
"""

from __future__ import annotations

import numpy as np
import torch

from vitviz import EXAMPLES, example, load_model
from vitviz.attributions import target_function
from vitviz.deletion import faithfulness
from vitviz.methods import absent_input
from vitviz.outputs import Output
from vitviz.preprocess import load_image


def main() -> None:
    torch.set_num_threads(1)  # a shared CPU: one thread does not wait on another
    model = load_model()
    for name in EXAMPLES:
        rgb = load_image(example(name))
        f = faithfulness(model, rgb, "saliency", random_orders=1)
        print(f"{name}: deletion {np.round(f.deletion, 3)}")
        x, score_fn, _, _ = target_function(model, rgb, Output("dense"), None)
        base = absent_input("blurred", rgb, x, model)
        grid, p = score_fn.grid, model.patch_size
        n = grid[0] * grid[1]
        left = f.order[int(round(0.9 * n)) :]  # the 10 % that the map ranks lowest, left sharp at 90 %
        hidden = np.ones(n, np.float32)
        hidden[left] = 0
        mask = torch.from_numpy(hidden.reshape(1, 1, *grid)).repeat_interleave(p, 2).repeat_interleave(p, 3)
        with torch.inference_mode():
            out = model.forward(torch.cat([x, x * (1 - mask) + base * mask, base]), attentions=lambda layer, w: None)
            maps = model.dense_map(out.hidden_states[-1], grid, tuple(x.shape[2:]))[:, 0].numpy()
        sharp = np.kron((hidden == 0).reshape(grid), np.ones((p, p))).astype(bool)
        for label, m in zip(("photo", "90 % hidden", "blur alone"), maps, strict=True):
            print(
                f"  {label}: map mean {m.mean():.3f}, on the 10 % left {m[sharp].mean():.3f}, elsewhere "
                f"{m[~sharp].mean():.3f}; output {(m * maps[0]).sum() / maps[0].sum():.3f}"
            )


if __name__ == "__main__":
    main()
