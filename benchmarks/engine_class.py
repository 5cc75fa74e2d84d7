"""A class of 30 through the engine alone: `python -m benchmarks.engine_class [--device cuda] [--users 30]
[--moves 10] [--rounds 3] [--batch-ms 2] [--think-s 0.2,0.6] [--profile] [--cold]`.

For a machine where the app's web stack cannot go (a lent GPU machine that reaches no package registry, and
carries 64 MiB at most). Each user is a thread: it analyses its own new 448x448 photo through the app's
micro-batcher (`Batcher`, as `VITVIZ_BATCH_MS` sets it; `--batch-ms off` for one forward each) with the
rollouts and the dense head's map that the server's forward makes (`Server._forward`), draws its
shown view (the attention view, as the classroom benchmark's users wait for), then makes `--moves` mixed moves
(`bench.mixed_moves`: attention at any layer, head or query; rollout at any fusion and discard) after think
times drawn from `--think-s`. At most `--draws` views are drawn at once (4, the app's "draw" slots in
Gradio's queue; the others wait, as they do there). It prints, per round and over all rounds, p50/p95/max
from upload to view and of a move, the errors and the batches' sizes. What it leaves out is Gradio's own
work (the HTTP request, the queue, the picture's file): `benchmarks.classroom` measures that, where the app
can run. `--profile` samples the threads' stacks over the rounds (`benchmarks.stacks`) and prints where they
spent their time.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time

import numpy as np
import torch

from vitviz import load_model
from vitviz.batching import Batcher
from vitviz.capture import analyze
from vitviz.views.attention import attention_view
from vitviz.views.rollout import rollout_view

from .bench import figures, mixed_moves, run_together
from .stacks import Stacks


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def user(
    model,
    photo: np.ndarray,
    batcher: Batcher | None,
    moves: int,
    think: tuple[float, float],
    seed: int,
    out: dict,
    draws: threading.Semaphore,
) -> None:
    rng = np.random.default_rng(seed)
    device = torch.device(model.device)
    try:
        start = time.perf_counter()
        a = (batcher.analyze if batcher else analyze)(model, photo, 448, roll=True, dense=True)  # as the server's
        with draws:
            attention_view(a, model.num_layers - 1, None, "readout")
        synchronize(device)
        out["upload"] = time.perf_counter() - start
        patches = a.grid[0] * a.grid[1]
        for move in list(mixed_moves(model, patches, 60))[seed % 50 : seed % 50 + moves]:
            time.sleep(rng.uniform(*think))
            start = time.perf_counter()
            with draws:
                if move[0] == "attention":
                    attention_view(a, *move[1:])
                else:
                    rollout_view(a, *move[1:])
                synchronize(device)
            out.setdefault("moves", []).append(time.perf_counter() - start)
            out.setdefault("kinds", []).append(move[0])
    except Exception as exc:  # counted and shown, not raised: the other users go on
        out.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--moves", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-ms", default="2", help="the batching window in ms, or 'off'")
    parser.add_argument("--draws", type=int, default=4, help="views drawn at once, at most")
    parser.add_argument("--think-s", default="0.2,0.6", help="a move's think time, drawn in this range (s)")
    parser.add_argument("--profile", action="store_true", help="sample the threads' stacks and print them")
    parser.add_argument("--cold", action="store_true", help="leave out the server's warm batch (Batcher.warm)")
    args = parser.parse_args(argv)
    model = load_model(device=args.device)
    think = tuple(float(t) for t in args.think_s.split(","))
    batcher = None if args.batch_ms == "off" else Batcher(float(args.batch_ms) / 1000, 8)
    rng = np.random.default_rng(0)
    warm = rng.integers(0, 256, (448, 448, 3), dtype=np.uint8)  # kernels and allocator warmed, untimed
    rollout_view(analyze(model, warm, 448), "mean", 0.5)
    if batcher and not args.cold:
        batcher.warm(model, 448)  # as the server warms a model it loads where it batches
    print(
        f"{model.name} on {model.device}; {args.users} users x (1 upload + {args.moves} moves) x {args.rounds} "
        f"rounds; batching window {args.batch_ms} ms; think times {think[0]}-{think[1]} s"
    )
    uploads, moves, errors = [], [], []
    draws = threading.Semaphore(args.draws)
    stacks = Stacks() if args.profile else contextlib.nullcontext()
    with stacks:
        for r in range(args.rounds):
            photos = [rng.integers(0, 256, (448, 448, 3), dtype=np.uint8) for _ in range(args.users)]
            outs = [{} for _ in photos]
            sizes_before = len(batcher.sizes) if batcher else 0
            threads = [
                threading.Thread(target=user, args=(model, p, batcher, args.moves, think, 100 * r + i, outs[i], draws))
                for i, p in enumerate(photos)
            ]
            took = run_together(threads, 600)
            up = [o["upload"] for o in outs if "upload" in o]
            mv = [m for o in outs for m in o.get("moves", [])]
            err = [e for o in outs for e in o.get("errors", [])]
            sizes = list(batcher.sizes)[sizes_before:] if batcher else []
            print(f"round {r + 1} ({took:.1f} s): {len(err)} errors; batches {sizes}")
            print(f"  upload to view  {figures(up)}")
            print(f"  a move          {figures(mv)}")
            for kind in ("attention", "rollout"):
                done = [o for o in outs if "moves" in o]
                of_kind = [m for o in done for m, k in zip(o["moves"], o["kinds"], strict=True) if k == kind]
                first = [o["moves"][o["kinds"].index(kind)] for o in done if kind in o["kinds"]]
                print(f"    {kind:9}     {figures(of_kind)}; each user's first: {figures(first)}")
            uploads, moves, errors = uploads + up, moves + mv, errors + err
    print(f"all rounds: upload to view {figures(uploads)}")
    print(f"            a move         {figures(moves)}")
    print(f"            errors         {len(errors)} {errors[:3]}")
    if args.profile:
        stacks.report()


if __name__ == "__main__":
    main()
