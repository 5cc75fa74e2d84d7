"""What a command shows while it works: progress bars and lines on stderr, the model loading under a bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import UsageError


def bar(total: float, desc: str, unit: str):
    """A progress bar on stderr: what runs, how far it is, for how long."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)


def say(line: str, file=None) -> None:
    """A line printed above the progress bars (on stdout by default), which tqdm draws again under it."""
    from tqdm import tqdm

    tqdm.write(line, file=file or sys.stdout)


def skip(path: Path | str, exc: Exception) -> None:
    """An input that could not be read, named on stderr with the reason."""
    say(f"vitviz: skipped {path}: {exc}", sys.stderr)


def load(args: argparse.Namespace):
    """The model the command names, under a progress bar; a model that cannot be had is a usage error, named
    as the user gave it (--model, or check's MODEL)."""
    with bar(1, f"loading {args.model}", "model") as loading:
        from .. import ModelUnavailableError, load_model

        try:
            model = load_model(args.model, device=args.device)
        except (ValueError, ModelUnavailableError, OSError) as exc:
            loading.leave = False
            raise UsageError(f"{args.model_argument} {args.model}: {exc}") from None
        loading.update()
    return model
