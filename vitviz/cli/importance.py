"""`vitviz importance`: how much the output on one image changes when each head alone is switched off, as a layers ×
heads grid (`vitviz.importance`), printed or written to a JSON or CSV file."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

from .arguments import Failure, UsageError, check_model, existing, model_options
from .console import bar, load

FORMATS = (".json", ".csv")
WRITTEN = """The file is written whole or not at all: it is made beside, as .<name>.<pid>.partial, and renamed when
done, so Ctrl-C (exit 130) leaves no half-written file."""


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser(
        "importance",
        help="each head's effect on the output: the change when it alone is switched off",
        description="For every layer × head, the output's change on IMAGE when that head alone is switched off "
        "(zeroed, or replaced by its mean over the image's tokens): the dense map on what it marks, a classifier's "
        "top-class logit, or the readout vector's length.",
        epilog=WRITTEN,
    )
    p.add_argument("image", help="an image file")
    p.add_argument("--out", type=Path, default=None, help="a .json or .csv file (default: a table on stdout)")
    p.add_argument("--mode", choices=["zero", "mean"], default="zero", help="how a head is switched off")
    model_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The grid on stdout, or in --out; the cost said on stderr before the work starts."""
    image = Path(args.image)
    existing([image], "IMAGE")
    if args.out is not None:
        _check_out(args.out)
    check_model(args.model, args.model_argument)
    from ..preprocess import load_image

    try:
        rgb = load_image(image)
    except (OSError, ValueError) as exc:
        raise Failure(f"{image}: {exc}") from None
    model = load(args)
    from ..capture import model_input
    from ..head_importance import cost, importance, rows_per_forward

    try:
        size = tuple(model_input(model, rgb, args.size).shape[2:])
    except ValueError as exc:
        raise UsageError(f"--size {args.size}: {exc}") from None
    heads = model.num_layers * model.num_heads
    print(
        f"vitviz: {heads} heads one by one: about {cost(model, size):.0f} forwards' work at {size[1]}×{size[0]} px, "
        f"{min(rows_per_forward(model, size), heads + 1)} rows a forward",
        file=sys.stderr,
    )
    with bar(1.0, "importance", "grid") as progress:

        def moved(fraction: float) -> None:
            progress.n = round(fraction, 3)
            progress.refresh()

        grid = importance(model, rgb, mode=args.mode, longest=args.size, progress=moved)
    text = _text(grid, model, image, size, args.out)
    if args.out is None:
        print(text, end="")
        return 0
    _write_whole(args.out, text)
    print(f"wrote {args.out} ({grid.seconds:.1f} s, {grid.forwards:.0f} forwards' work)", file=sys.stderr)
    return 0


def _check_out(out: Path) -> None:
    if out.suffix.lower() not in FORMATS:
        raise UsageError(f"--out {out}: name a .json or .csv file")
    if out.is_dir():
        raise UsageError(f"--out {out}: a folder, not a file")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: no folder {out.parent} to write it in")


def _text(grid, model, image: Path, size: tuple[int, int], out: Path | None) -> str:
    """The grid as JSON, CSV (one row a head) or, for the terminal, a table of changes with the top heads."""
    relative = grid.relative
    if out is not None and out.suffix.lower() == ".json":
        record = {
            "model": model.name,
            "image": str(image),
            "input_height": size[0],
            "input_width": size[1],
            "output": grid.output.name(model),
            "mode": grid.mode,
            "before": grid.before,
            "after": grid.after.tolist(),
            "change": grid.change.tolist(),
            "relative_change": None if relative is None else relative.tolist(),
            "forwards": grid.forwards,
            "seconds": round(grid.seconds, 3),
        }
        return json.dumps(record, indent=2) + "\n"
    if out is not None:
        buffer = io.StringIO()
        rows = csv.writer(buffer)
        rows.writerow(["layer", "head", "before", "after", "change", "relative_change"])
        for (layer, head), after in zip(_pairs(grid), grid.after.ravel(), strict=True):
            share = "" if relative is None else repr(float(relative[layer, head]))
            rows.writerow([layer, head, grid.before, float(after), float(after - grid.before), share])
        return buffer.getvalue()
    from ..ablation import HEAD_MODES

    layers, heads = grid.change.shape
    lines = [
        f"change of {grid.output.name(model)} (unablated {grid.before:.4g}), each head alone {HEAD_MODES[grid.mode]}",
        "layer " + "".join(f"{f'head {h}':>11}" for h in range(heads)),
    ]
    lines += [f"{layer:>5} " + "".join(f"{v:>11.3g}" for v in grid.change[layer]) for layer in range(layers)]
    top = ", ".join(f"layer {i} head {h} ({c:+.3g})" for i, h, c in grid.ranked()[:5])
    return "\n".join([*lines, f"largest: {top}", ""])


def _pairs(grid):
    layers, heads = grid.change.shape
    return [(layer, head) for layer in range(layers) for head in range(heads)]


def _write_whole(out: Path, text: str) -> None:
    """`text` in `out`, through a partial file beside it that an error or Ctrl-C removes."""
    partial = out.parent / f".{out.name}.{os.getpid()}.partial"
    try:
        partial.write_text(text)
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
