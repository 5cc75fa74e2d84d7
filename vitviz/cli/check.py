"""`vitviz check`: vitviz's capture of a model compared with transformers' own outputs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import check_model, existing, input_options
from .console import bar, load, say


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser("check", help="compare vitviz's capture of a model with transformers' own outputs")
    p.add_argument("model", metavar="MODEL", help="hub id, local folder or catalogue name")
    p.add_argument("--image", type=Path, default=None, help="the photo to compare on (default: a bundled one)")
    input_options(p)
    p.set_defaults(run=run, model_argument="MODEL")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when every quantity agrees within its tolerance, 1 on a mismatch or an image it cannot read."""
    if args.image is not None:
        existing([args.image], "--image")
    check_model(args.model, args.model_argument)
    model = load(args)
    from .. import check, example

    image = args.image or example("coffee")
    with bar(1, f"check {image.name}: vitviz against transformers", "image") as checking:
        try:
            rows = check.check(model, image, args.size)
        except (OSError, ValueError) as exc:
            say(f"vitviz: {image}: {exc}", sys.stderr)
            return 1
        checking.update()
    print(check.table(model, rows))
    bad = [r.quantity for r in rows if not r.ok]
    if bad:
        print(f"vitviz: MISMATCH in {', '.join(bad)}: vitviz's views of this model cannot be trusted", file=sys.stderr)
        return 1
    print("every quantity matches transformers' own outputs")
    return 0
