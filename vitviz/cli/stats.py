"""`vitviz stats`: mean attention distance and entropy per layer and head over many images, in shards, on Ray or
merged from shards' tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import (
    Failure,
    UsageError,
    check_model,
    existing,
    image_files,
    model_options,
    output_folder,
    positive,
)
from .console import load, skip


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser("stats", help="mean attention distance and entropy per layer and head over many images")
    p.add_argument("inputs", nargs="*", help="folders, image files or glob patterns (quote them)")
    p.add_argument("--out", type=Path, required=True, help="folder for stats.csv, stats.html and stats.png")
    model_options(p)
    p.add_argument("--batch", type=positive, default=4, help="images per forward pass (same size; default 4)")
    p.add_argument("--shard", default="0/1", help="i/n: take every n-th file from the i-th (0-based)")
    p.add_argument("--merge", nargs="+", type=Path, help="merge the stats.csv of shards instead")
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help='schedule it on Ray Data: a local Ray, or the cluster at ADDRESS ("auto" for this '
        'machine\'s); needs pip install "vitviz[ray]"',
    )
    p.add_argument("--workers", type=positive, help="with --ray: model replicas (default: one per GPU, else 2)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """stats.csv, stats.html and stats.png in OUT, and the table on stdout; exit 1 if a file was skipped."""
    output_folder(args.out)
    if args.merge:
        table, skipped = _merged(args.merge), 0
    else:
        files = _files(args)
        try:
            table, skipped = _measured(args, files)
        except ValueError as exc:  # every file was skipped, each named above
            print(f"vitviz: {exc}: none of the {len(files)} files could be read", file=sys.stderr)
            return 1
    from .. import stats

    stats.write(table, args.out)
    print(stats.summary_table(table))
    print(f"wrote {args.out}/stats.csv, stats.html and stats.png")
    return 1 if skipped else 0


def _merged(paths: list[Path]):
    """The table of the shards' stats.csv files, pooled."""
    existing(paths, "--merge")
    from .. import stats

    try:
        return stats.merge([stats.read_csv(p) for p in paths])
    except (OSError, ValueError) as exc:
        raise UsageError(f"--merge: {exc}") from None


def _files(args: argparse.Namespace) -> list[Path]:
    """This shard's image files, once every other argument is checked too (Ray installed where --ray asks)."""
    if not args.inputs:
        raise UsageError("stats needs images (folders, files or patterns), or --merge CSV...")
    try:
        index, count = (int(t) for t in args.shard.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise UsageError(f"--shard must be i/n with 0 <= i < n, got {args.shard!r}")
    files = image_files(args.inputs)[index::count]
    if not files:
        raise UsageError(f"no image files in {' '.join(args.inputs)} (shard {args.shard})")
    if args.workers is not None and args.ray is None:
        raise UsageError("--workers goes with --ray")
    check_model(args.model, args.model_argument)
    if args.ray is not None:
        _check_ray()
    return files


def _check_ray() -> None:
    """Ray Data importable (the check imports it: a few seconds, spent by the run anyway)."""
    try:
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError('--ray needs Ray Data: pip install "vitviz[ray]"') from None


def _measured(args: argparse.Namespace, files: list[Path]):
    """(the table, how many files were skipped): here, or on Ray, where each worker loads the model itself."""
    if args.ray is not None:
        return _ray_stats(args, files)
    model = load(args)
    from .. import stats

    return stats.over_images(model, files, args.size, args.batch, on_skip=skip)


def _ray_stats(args: argparse.Namespace, files: list[Path]):
    from .. import ray_stats

    address = None if args.ray == "local" else args.ray
    try:
        return ray_stats.over_images(
            args.model, files, args.size, args.batch, address, args.workers, args.device, on_skip=skip
        )
    except ray_stats.RayUnavailableError as exc:
        logs = "Ray's logs in /tmp/ray/session_latest/logs" if address is None else f"`ray status` on {address}"
        raise Failure(f"--ray: {exc}; see {logs}, or run without --ray") from None
