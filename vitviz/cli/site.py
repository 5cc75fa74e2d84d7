"""`vitviz site OUT`: the whole ViT as a static folder, in which each visitor's browser runs the model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import Failure, UsageError
from .console import say


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser(
        "site", help="write the static site (the model runs in each visitor's browser); --serve serves it"
    )
    p.add_argument("out", type=Path, help="the folder to write (made if missing)")
    p.add_argument("--serve", action="store_true", help="then serve it on this machine, with the headers it needs")
    p.add_argument("--host", default="127.0.0.1", help="with --serve: the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="with --serve: the port (default 8000; 0: any free one)")
    p.add_argument("--no-build", action="store_true", help="with --serve: serve OUT as it is, without writing it")
    p.set_defaults(run=run)


def port(text: str) -> int:
    """argparse's type for a TCP port: 0 (any free one) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    """Write the site to OUT (unless --no-build), then serve it if asked."""
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"{args.out}: a file, not a folder; name a folder for the site")
    if args.no_build and not args.serve:
        raise UsageError("--no-build goes with --serve")
    if args.no_build and not (args.out / "index.html").is_file():
        raise UsageError(f"{args.out} holds no site: leave out --no-build to write it")
    if not args.no_build:
        from ..site.build import build

        try:
            build(args.out, lambda text: say(f"vitviz site: {text}", sys.stderr))
        except (OSError, RuntimeError, ValueError) as exc:  # a folder that cannot be written, an export that fails
            raise Failure(f"the site could not be written to {args.out}: {exc}") from None
        total = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
        say(
            f"vitviz site: {total / 1e6:.1f} MB in {args.out}; publish the folder on any static host, or serve it here "
            f"with `vitviz site {args.out} --serve`",
            sys.stderr,
        )
    if args.serve:
        from ..site.serve import serve

        serve(args.out, args.host, args.port)
    return 0
