"""The `vitviz` command (also `python -m vitviz`): serve the app, export an image's maps, or measure
attention distance and entropy over a dataset. Every command checks its arguments before it loads a model, and
before it imports torch but for the method names and the model's own counts (--layers, --heads in range), so that
a usage error answers at once; long work shows a progress bar on stderr.

Exit codes: 0 done; 1 a failure at run time: an input that could not be read (each named on stderr with the
reason), or a check that found a mismatch; 2 a usage error (a bad option, a missing input file, a model that
cannot be had).
"""

from __future__ import annotations

import argparse
import sys

from . import analyze, check, explore, faithfulness, stats
from .arguments import DEFAULT_MODEL, UsageError, check_model, image_files
from .faithfulness import ASKED_BY_NAME, faithfulness_methods

__all__ = ["ASKED_BY_NAME", "DEFAULT_MODEL", "UsageError", "faithfulness_methods", "image_files", "main", "parser"]
COMMANDS = (analyze, stats, check, faithfulness, explore)  # each module adds its subcommand; serve is the app's


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["serve"]:  # the app keeps its own options (python app.py takes the same)
            return run_serve(argv[1:])
        args = parser().parse_args(argv)  # argparse itself exits with 2 on a bad option
        return args.run(args)
    except UsageError as exc:
        print(f"vitviz: {exc}", file=sys.stderr)
        return 2


def run_serve(argv: list[str]) -> int:
    """Check the app's options and model names, say at once that the model is loading, then serve."""
    from ..app import main as serve
    from ..app import parse_args

    args = parse_args(argv, prog="vitviz serve")
    check_model(args.model, "--model")
    if args.depth_model is not None:
        check_model(args.depth_model, "--depth-model")
    print(f"vitviz: loading {args.model}, then serving on http://{args.host}:{args.port}/ …", file=sys.stderr)
    serve(argv, prog="vitviz serve")
    return 0


def parser() -> argparse.ArgumentParser:
    """Every subcommand's options: serve's are the app's own, the others' are in their modules."""
    from .. import __version__

    top = argparse.ArgumentParser(prog="vitviz", description="See inside a Vision Transformer.", epilog=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    top.add_argument("--version", action="version", version=f"vitviz {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="{serve,analyze,stats,check,faithfulness,explore}")
    sub.add_parser("serve", help="start the web app (vitviz serve --help lists its options)")
    for command in COMMANDS:
        command.add(sub)
    return top
