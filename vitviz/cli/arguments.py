"""The command line's arguments, checked before a model loads and before torch is imported, so that a usage error
answers at once: argparse's types, the index lists, model names, input files and folders."""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
DEFAULT_MODEL = "dinov2-small"  # vitviz.DEFAULT_MODEL, named here so that checking arguments imports no torch


class UsageError(Exception):
    """A command that cannot run as given: its message is printed, and the exit code is 2."""


class Failure(Exception):
    """A command that failed at run time for a reason its message names (and how to act on it): the message is
    printed, and the exit code is 1."""


def model_options(p: argparse.ArgumentParser) -> None:
    """--model, and the input's options."""
    p.add_argument("--model", default=DEFAULT_MODEL, help="catalogue name, hub id or local folder")
    p.set_defaults(model_argument="--model")
    input_options(p)


def input_options(p: argparse.ArgumentParser) -> None:
    """--size and --device."""
    p.add_argument("--size", type=positive, default=None, help="input's longest side in pixels (default: the model's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def positive(text: str) -> int:
    """argparse's type for counts and sizes: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def indices(text: str, what: str) -> list[int] | None:
    """'all' -> None, '0,5,11' -> [0, 5, 11]: the syntax, checked before the model loads."""
    if text == "all":
        return None
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise UsageError(f"--{what} must be 'all' or numbers like 0,5,11, got {text!r}") from None


def within(chosen: list[int] | None, count: int, what: str) -> list[int]:
    """The chosen indices (all of them for None), each in [0, count): the model's own count, once it is loaded."""
    if chosen is None:
        return list(range(count))
    bad = [i for i in chosen if not 0 <= i < count]
    if bad:
        raise UsageError(f"--{what} {bad} out of range: this model has {count} {what} (0 to {count - 1})")
    return chosen


def check_model(name: str, argument: str) -> None:
    """A model name that cannot name a model, a folder without weights, or a hub id that cannot be had here (no
    network and not in the cache), refused before anything heavy loads."""
    from ..hub import ModelUnavailableError, pretrained_source

    if name != DEFAULT_MODEL:
        try:
            pretrained_source(name)
        except (ValueError, ModelUnavailableError) as exc:
            raise UsageError(f"{argument} {name}: {exc}") from None


def existing(paths: list[Path], what: str) -> None:
    """Every file named must be there: a missing one, or a folder, is a usage error, found before the model loads."""
    folders = [str(p) for p in paths if p.is_dir()]
    if folders:
        raise UsageError(f"{what}: {', '.join(folders)}: a folder, not a file; name the file inside it")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"{what}: no such file: {', '.join(missing)}")


def image_files(inputs: list[str]) -> list[Path]:
    """Folders (their image files), files and glob patterns -> sorted, without duplicates."""
    found: set[Path] = set()
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found.update(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        elif p.exists():
            found.add(p)
        else:
            matches = glob.glob(item, recursive=True)
            if not matches:
                raise UsageError(f"{item}: no such file, folder or matching pattern")
            found.update(Path(f) for f in matches if Path(f).is_file())
    return sorted(found)


def output_folder(out: Path, what: str = "--out") -> None:
    """A folder to write in: missing is fine (it is made), a file there is a usage error."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"{what} {out}: a file, not a folder; name a folder (it is made if missing)")
