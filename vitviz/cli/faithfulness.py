"""`vitviz faithfulness`: how faithful each attribution map is (deletion and insertion curves against random
orders), over many images."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .arguments import UsageError, check_model, image_files, model_options, positive
from .console import bar, load, skip

# A map that sends more images than this through the model at 224 px (a 14 × 14 grid), at its defaults, takes
# minutes on a CPU (occlusion: one forward per patch), so faithfulness runs it only when named (or with all)
SLOW_PASSES, REFERENCE_GRID = 100, (14, 14)


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser("faithfulness", help="how faithful each attribution map is, over many images")
    p.add_argument("inputs", nargs="+", help="folders, image files or glob patterns (quote them)")
    model_options(p)
    p.add_argument(
        "--methods",
        default=None,
        help=f"e.g. integrated_gradients,rollout, or all (default: every method but those of more than "
        f"{SLOW_PASSES} passes a map at 224 px, minutes a map: occlusion's one a patch; and "
        "guided_backprop, which on a GELU ViT repeats the gradient)",
    )
    p.add_argument("--steps", type=positive, default=10, help="points on each curve, less one (10: every 10 %%)")
    p.add_argument("--replacement", default="blur", help="what a hidden patch shows: blur, mean or black")
    p.add_argument(
        "--random",
        type=positive,
        default=50,
        help="random orders each map is ranked against (default 50; a verdict needs 19)",
    )
    p.set_defaults(run=run)


def asked_by_name() -> list[str]:
    """The methods that faithfulness runs only when named: those whose records say that a map at their defaults
    sends more than SLOW_PASSES images through the model at 224 px (`methods.Method.passes`), or that their map
    repeats another's (`Method.repeats`)."""
    from .. import methods

    return [k for k, m in methods.REGISTRY.items() if m.repeats or m.passes({}, REFERENCE_GRID) > SLOW_PASSES]


def faithfulness_methods(text: str | None) -> list[str]:
    """The methods --methods names: None is every one but those `asked_by_name`, "all" every one."""
    from ..attributions import METHODS
    from ..deletion import MAPS

    known = [*METHODS, *MAPS]
    if text is None:
        slow = asked_by_name()
        return [m for m in known if m not in slow]
    methods = known if text == "all" else text.split(",")
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise UsageError(f"--methods: unknown {', '.join(unknown)}; use all or some of {', '.join(known)}")
    return methods


class _MapsBar:
    """One progress bar over every (method, image) map of `faithfulness`: it names the map under way and moves
    with its progress."""

    def __init__(self, total: int) -> None:
        self.bar, self.done = bar(total, "faithfulness", "map"), 0

    def files(self, files: list[Path], method: str):
        """The files as `over_images` takes them, each named on the bar while its map is made."""
        for path in files:
            self.bar.set_description(f"{method} {path.name}", refresh=False)
            self.progress(0.0)
            yield path
            self.done += 1
        self.progress(0.0)

    def progress(self, fraction: float) -> None:
        self.bar.n = round(self.done + fraction, 2) if fraction else self.done
        self.bar.refresh()


def run(args: argparse.Namespace) -> int:
    """Per method: the mean deletion, insertion and random areas over the images, how many beat every random
    order, and the seconds per map and per set of curves."""
    files = image_files(args.inputs)
    if not files:
        raise UsageError(f"no image files in {' '.join(args.inputs)}")
    check_model(args.model, args.model_argument)
    methods = faithfulness_methods(args.methods)  # the method names live with torch: an import of a few seconds
    from ..deletion import REPLACEMENTS

    if args.replacement not in REPLACEMENTS:
        raise UsageError(f"--replacement must be one of {', '.join(REPLACEMENTS)}, got {args.replacement!r}")
    model = load(args)
    from ..deletion_table import over_images, table

    skipped: set[Path] = set()

    def skip_once(path: Path, exc: Exception) -> None:  # each method meets the same unreadable file
        if path not in skipped:
            skipped.add(path)
            skip(path, exc)

    maps = _MapsBar(len(files) * len(methods))
    rows, bands = [], {}  # each image's random orders, drawn for its first method and kept for the others
    try:
        for method in methods:
            rows += over_images(
                model,
                maps.files(files, method),
                [method],
                on_skip=skip_once,
                bands=bands,
                longest=args.size,
                steps=args.steps,
                replacement=args.replacement,
                random_orders=args.random,
                progress=maps.progress,
            )
    except ValueError as exc:
        if skipped:
            print(f"vitviz: none of the {len(files)} files could be read", file=sys.stderr)
            return 1
        raise UsageError(str(exc)) from None
    finally:
        maps.bar.close()
    print(table(rows))
    from ..attributions import describe

    target = "each image's top class logit" if model.labels is not None else describe(model, None, None)
    n = len(files) - len(skipped)
    from ..odds import FEWEST_DRAWS, LEVEL, needed

    if args.random < FEWEST_DRAWS:
        rule = f"with {args.random} random orders no map can be, at p ≤ {LEVEL:g}: use --random {FEWEST_DRAWS} or more"
    else:
        rule = f"below at least {needed(args.random)} of them, p ≤ {LEVEL:g} one-sided"
    print(
        f"{n} image{'s' * (n != 1)}; target: {target}; hidden patches show "
        f"{args.replacement}. Lower deletion and higher insertion areas are better; 'faithful' counts the images "
        f"where the map's deletion area was below enough of the {args.random} random orders ({rule})."
    )
    return 1 if skipped else 0
