"""`vitviz explore`: an image's Explorer as one HTML file that works offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import UsageError, check_model, existing, indices, model_options, within
from .console import bar, load, say, skip


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser("explore", help="write an image's Explorer as one HTML file that works offline")
    p.add_argument("image", type=Path, help="image file")
    p.add_argument("--html", type=Path, required=True, help="the .html file to write")
    model_options(p)
    p.add_argument(
        "--layers", default="all", help="layers to embed: all, or e.g. 0,5,11 (a 224 px square: 1.1 MB a layer)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """One self-contained HTML file: the Explorer of IMAGE with the chosen layers' queries and keys embedded."""
    existing([args.image], "explore")
    layers = indices(args.layers, "layers")
    if args.html.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--html must name an .html file, got {str(args.html)!r}")
    if not args.html.resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: no such folder {args.html.parent}")
    check_model(args.model, args.model_argument)
    model = load(args)
    layers = within(layers, model.num_layers, "layers")
    from .. import analyze
    from ..export import export_html

    try:
        a = analyze(model, args.image, longest=args.size)
    except (OSError, ValueError) as exc:
        skip(args.image, exc)
        return 1
    with bar(len(layers), "explore: layers", "layer") as embedded:
        path = export_html(a, args.html, layers=layers, progress=lambda _: embedded.update())
    h, w = a.pixel_values.shape[2:]
    say(
        f"vitviz: wrote {path} ({path.stat().st_size / 1e6:.1f} MB: {len(layers)} layers at {w} × {h} px; "
        f"--layers or --size make it smaller)",
        sys.stderr,
    )
    return 0
