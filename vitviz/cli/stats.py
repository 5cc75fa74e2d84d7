"""`vitviz stats`: mean attention distance and entropy per layer and head over many images, in shards, on Ray or
merged from shards' tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import UsageError, check_model, existing, image_files, model_options, positive
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
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help='schedule it on Ray Data: a local Ray, or the cluster at ADDRESS ("auto" for this '
                        'machine\'s); needs pip install "vitviz[ray]"')  # fmt: skip
    p.add_argument("--workers", type=positive, help="with --ray: model replicas (default: one per GPU, else 2)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """stats.csv, stats.html and stats.png in OUT, and the table on stdout; exit 1 if a file was skipped."""
    if args.merge:
        existing(args.merge, "--merge")
        from .. import stats

        try:
            table = stats.merge([stats.read_csv(p) for p in args.merge])
        except (OSError, ValueError) as exc:
            raise UsageError(f"--merge: {exc}") from None
        skipped = 0
    else:
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
        model = load(args)
        from .. import stats

        try:
            if args.ray is None:
                table, skipped = stats.over_images(model, files, args.size, args.batch, on_skip=skip)
            else:
                table, skipped = _ray_stats(args, files)
        except ValueError as exc:  # every file was skipped, each named above
            print(f"vitviz: {exc}: none of the {len(files)} files could be read", file=sys.stderr)
            return 1
    stats.write(table, args.out)
    print(stats.summary_table(table))
    print(f"wrote {args.out}/stats.csv, stats.html and stats.png")
    return 1 if skipped else 0


def _ray_stats(args: argparse.Namespace, files: list[Path]):
    try:
        import ray.data  # noqa: F401

        from .. import ray_stats
    except ImportError:
        raise UsageError('--ray needs Ray Data: pip install "vitviz[ray]"') from None
    address = None if args.ray == "local" else args.ray
    return ray_stats.over_images(args.model, files, args.size, args.batch, address, args.workers, args.device,
                                 on_skip=skip)  # fmt: skip
