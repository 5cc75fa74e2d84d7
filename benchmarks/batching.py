"""Benchmark: `python -m benchmarks.batching [--device auto|cpu|cuda] [--repeats N] [--batches 2,4,8] [--roll]
[--dense]`.

Would micro-batching concurrent uploads help? For the bundled coffee photo at 224 and 448 px (longest side),
prints the time of k forward passes of one image each, one after the other, against one forward of the k images
as a batch, in images per second, and their ratio. Both capture every image's analysis from their forward, as
the app's `Batcher` does (hidden states, tokens and update norms; attention is recomputed from them when a view
asks); with `--roll`, each image's slider rollouts too, made from the forward's weights as the app's forward
makes them (`ForwardFusions`); with `--dense`, each image's dense-head map too, made by one more forward of the
batch at 224 px, as the app's forward makes them. Medians of N runs after one untimed run of each shape; on a
GPU each time is taken between `torch.cuda.synchronize()` calls. The app batches by default only where this
shows a gain (see `vitviz.app.scheduling.batcher`).
"""

from __future__ import annotations

import argparse
import functools

import torch

from vitviz import example, load_image, load_model
from vitviz.capture import capture_all, forward_for, model_input

from .bench import median_ms


def batched_forward(model, rgb, x: torch.Tensor, roll: bool = False, dense: bool = False) -> None:
    """One forward of the batch x [k,3,h,w] (k inputs of `rgb`) and each image's analysis captured from it
    (rolled, and with its dense map, if asked)."""
    inputs = [(rgb, x[i : i + 1].cpu().numpy()) for i in range(len(x))]
    capture_all(model, inputs, *forward_for(model, x, roll), dense)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="2,4,8")
    parser.add_argument("--roll", action="store_true", help="make each image's slider rollouts, as the app does")
    parser.add_argument("--dense", action="store_true", help="make each image's dense map, as the app does")
    args = parser.parse_args(argv)
    model = load_model(device=args.device)
    device = torch.device(model.device)
    made = (", rolled" if args.roll else "") + (", dense maps" if args.dense else "")
    print(f"{model.name} on {device} ({torch.get_num_threads()} CPU threads){made}")
    rgb = load_image(example("coffee"))
    forward = functools.partial(batched_forward, model, rgb, roll=args.roll, dense=args.dense)
    print("| input | k | one by one, images/s | as a batch, images/s | batch / one by one |")
    print("|---|---|---|---|---|")
    for side in (224, 448):
        one = torch.from_numpy(model_input(model, rgb, side)).to(device)
        forward(one)  # untimed: the first run of a shape allocates
        single = median_ms(lambda x=one: forward(x), args.repeats, device) / 1000
        for k in (int(b) for b in args.batches.split(",")):
            batch = one.repeat(k, 1, 1, 1)
            forward(batch)
            together = median_ms(lambda x=batch: forward(x), args.repeats, device) / 1000
            size, ratio = f"{one.shape[3]}×{one.shape[2]}", single * k / together
            print(f"| {size} | {k} | {1 / single:.2f} | {k / together:.2f} | {ratio:.2f}× |")


if __name__ == "__main__":
    main()
