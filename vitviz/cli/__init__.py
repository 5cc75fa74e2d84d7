"""The `vitviz` command (also `python -m vitviz`): serve the app, export an image's maps, or measure
attention distance and entropy over a dataset. Every command checks its arguments before it loads a model, and
before it imports torch but for the method names and the model's own counts (--layers, --heads in range), so that
a usage error answers at once; long work shows a progress bar on stderr.

Exit codes: 0 done; 1 a failure at run time: an input that could not be read (each named on stderr with the
reason), a check that found a mismatch, or a Ray that would not start; 2 a usage error (a bad option, a missing
input file, a model that cannot be had); 130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

from . import analyze, check, explore, faithfulness, importance, site, stats
from .arguments import DEFAULT_MODEL, Failure, UsageError, check_model, image_files
from .faithfulness import asked_by_name, faithfulness_methods

__all__ = [
    "DEFAULT_MODEL",
    "Failure",
    "UsageError",
    "asked_by_name",
    "faithfulness_methods",
    "image_files",
    "main",
    "parser",
    "serve",
]
# each module adds its subcommand; serve is the app's
COMMANDS = (analyze, stats, check, faithfulness, importance, explore, site)
SHARE_WARNING = (
    "vitviz: warning: --share makes a public gradio.live link with no login: anyone who has it can use this app "
    "and this machine's CPU or GPU (--auth USER:PASS asks a login)"
)
SHARE_GUARDED = "vitviz: --share makes a public gradio.live link, guarded by --auth's login: only who signs in uses it"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # the app keeps its own options (python app.py takes the same)
        return serve(argv[1:])
    return answered(lambda: _run(argv))


def _run(argv: list[str]) -> int:
    args = parser().parse_args(argv)  # argparse itself exits with 2 on a bad option
    return args.run(args)


def answered(command) -> int:
    """command()'s exit code, or a failure's in one line on stderr: 2 for a usage error, 1 for a failure at run
    time, 130 for Ctrl-C."""
    try:
        return command()
    except UsageError as exc:
        print(f"vitviz: {exc}", file=sys.stderr)
        return 2
    except Failure as exc:
        print(f"vitviz: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("vitviz: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def serve(argv: list[str], prog: str = "vitviz serve") -> int:
    """`vitviz serve` and `python app.py`: the app's options and model names checked before anything loads."""
    return answered(lambda: _serve(argv, prog))


def _serve(argv: list[str], prog: str) -> int:
    """Check the app's options and model names, say at once that the model is loading, then serve."""
    from ..app import main as serve_app
    from ..app import parse_args

    args = parse_args(argv, prog=prog)
    check_model(args.model, "--model")
    if args.depth_model is not None:
        check_model(args.depth_model, "--depth-model")
    if args.share:
        print(SHARE_WARNING if args.auth is None else SHARE_GUARDED, file=sys.stderr)
    print(f"vitviz: loading {args.model}, then serving on http://{args.host}:{args.port}/ …", file=sys.stderr)
    serve_app(argv, prog=prog)
    return 0


def parser() -> argparse.ArgumentParser:
    """Every subcommand's options: serve's are the app's own, the others' are in their modules."""
    from .. import __version__

    top = argparse.ArgumentParser(
        prog="vitviz",
        description="See inside a Vision Transformer.",
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"vitviz {__version__}")
    names = ",".join(["serve", *(c.__name__.rsplit(".", 1)[1] for c in COMMANDS)])
    sub = top.add_subparsers(dest="command", required=True, metavar=f"{{{names}}}")
    sub.add_parser("serve", help="start the web app (vitviz serve --help lists its options)")
    for command in COMMANDS:
        command.add(sub)
    return top
