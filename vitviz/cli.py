"""The `vitviz` command (also `python -m vitviz`): serve the app, export an image's maps, or measure
attention distance and entropy over a dataset. Heavy modules are imported inside the commands, so that
`vitviz --help` answers at once.

Exit codes: 0 done; 1 some inputs, or all of them, were skipped (each named on stderr with the reason);
2 a usage error (a bad option, missing inputs, a model that cannot be had).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


class UsageError(Exception):
    """A command that cannot run as given: its message is printed, and the exit code is 2."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["serve"]:  # the app keeps its own options (python app.py takes the same)
        from .app import main as serve

        serve(argv[1:], prog="vitviz serve")
        return 0
    args = parser().parse_args(argv)  # argparse itself exits with 2 on a bad option
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"vitviz: {exc}", file=sys.stderr)
        return 2


def parser() -> argparse.ArgumentParser:
    from . import __version__

    top = argparse.ArgumentParser(prog="vitviz", description="See inside a Vision Transformer.", epilog=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    top.add_argument("--version", action="version", version=f"vitviz {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="{serve,analyze,stats,check,faithfulness}")
    sub.add_parser("serve", help="start the web app (vitviz serve --help lists its options)")

    analyze = sub.add_parser("analyze", help="write an image's maps as PNG files, its arrays and a summary")
    analyze.add_argument("images", nargs="+", type=Path, help="image files")
    analyze.add_argument("--out", type=Path, required=True, help="folder; each image gets OUT/<name>/")
    _model_options(analyze)
    analyze.add_argument("--layers", default="all", help="layers for the attention sheets: all, or e.g. 0,5,11")
    analyze.add_argument("--heads", default="all", help="heads tiled in each sheet: all, or e.g. 0,3")
    analyze.set_defaults(run=run_analyze)

    stats = sub.add_parser("stats", help="mean attention distance and entropy per layer and head over many images")
    stats.add_argument("inputs", nargs="*", help="folders, image files or glob patterns (quote them)")
    stats.add_argument("--out", type=Path, required=True, help="folder for stats.csv, stats.html and stats.png")
    _model_options(stats)
    stats.add_argument("--batch", type=int, default=4, help="images per forward pass (same input size; default 4)")
    stats.add_argument("--shard", default="0/1", help="i/n: take every n-th file from the i-th (0-based)")
    stats.add_argument("--merge", nargs="+", type=Path, help="merge the stats.csv of shards instead")
    stats.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                       help='schedule it on Ray Data: a local Ray, or the cluster at ADDRESS ("auto" for this '
                            'machine\'s); needs pip install "vitviz[ray]"')  # fmt: skip
    stats.add_argument("--workers", type=int, help="with --ray: model replicas (default: one per GPU, else 2)")
    stats.set_defaults(run=run_stats)

    check = sub.add_parser("check", help="compare vitviz's capture of a model with transformers' own outputs")
    check.add_argument("model", help="hub id, local folder or catalogue name")
    check.add_argument("--image", type=Path, default=None, help="the photo to compare on (default: a bundled one)")
    check.add_argument("--size", type=int, default=None, help="input's longest side in pixels (default: the model's)")
    check.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    check.set_defaults(run=run_check)

    faith = sub.add_parser("faithfulness", help="how faithful each attribution map is, over many images")
    faith.add_argument("inputs", nargs="+", help="folders, image files or glob patterns (quote them)")
    _model_options(faith)
    faith.add_argument("--methods", default="all", help="all, or e.g. integrated_gradients,rollout")
    faith.add_argument("--steps", type=int, default=10, help="points on each curve, less one (10: every 10 %%)")
    faith.add_argument("--replacement", default="blur", help="what a hidden patch shows: blur, mean or black")
    faith.add_argument("--random", type=int, default=5, help="random orders for the baseline band (default 5)")
    faith.set_defaults(run=run_faithfulness)
    return top


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="dinov2-small", help="catalogue name, hub id or local folder")
    p.add_argument("--size", type=int, default=None, help="input's longest side in pixels (default: the model's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def _indices(text: str, count: int, what: str) -> list[int]:
    """'all' or '0,5,11' -> indices in [0, count)."""
    if text == "all":
        return list(range(count))
    try:
        chosen = [int(t) for t in text.split(",")]
    except ValueError:
        raise UsageError(f"--{what} must be 'all' or numbers like 0,5,11, got {text!r}") from None
    bad = [i for i in chosen if not 0 <= i < count]
    if bad:
        raise UsageError(f"--{what} {bad} out of range: this model has {count} {what} (0 to {count - 1})")
    return chosen


def _load(args: argparse.Namespace):
    """The model the command names; a model that cannot be had is a usage error, not a traceback."""
    from . import ModelUnavailableError, load_model

    try:
        return load_model(args.model, device=args.device)
    except (ValueError, ModelUnavailableError, OSError) as exc:
        raise UsageError(f"--model {args.model}: {exc}") from None


def _skip(path: Path | str, exc: Exception) -> None:
    print(f"vitviz: skipped {path}: {exc}", file=sys.stderr)


def run_analyze(args: argparse.Namespace) -> int:
    """Per image, in OUT/<name>/: tokens.png, attention_layerNN.png (the chosen heads and their mean,
    CLS query), rollout.png, pca.png, dense.png (models with a dense head), arrays.npz, summary.json."""
    import cv2
    import numpy as np

    from . import analyze, views
    from .notebook import show

    model = _load(args)
    layers = _indices(args.layers, model.num_layers, "layers")
    heads = _indices(args.heads, model.num_heads, "heads")
    skipped = 0
    used: set[str] = set()
    for path in args.images:
        try:
            a = analyze(model, path, longest=args.size)
        except (OSError, ValueError) as exc:
            _skip(path, exc)
            skipped += 1
            continue
        name = path.stem
        while name in used:  # two photo.jpg from different folders
            name += "-2"
        used.add(name)
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        pictures = {"tokens.png": views.tokens_view(a)[0], "rollout.png": views.rollout_view(a, "mean", 0.0)[0]}
        for layer in layers:
            pictures[f"attention_layer{layer:02d}.png"] = views.attention_sheet(a, layer, heads)
        pictures["pca.png"] = np.asarray(show(a, "pca"))
        if a.dense_map() is not None:
            pictures["dense.png"] = views.output_view(a)[1]
        for file, picture in pictures.items():
            cv2.imwrite(str(out / file), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))
        np.savez_compressed(
            out / "arrays.npz",
            attentions=np.stack([a.layer_attention(layer) for layer in layers]),
            layers=np.array(layers),
            rollout=a.rollout("mean"),
            grid=np.array(a.grid),
            pixel_values=a.pixel_values,
        )
        (out / "summary.json").write_text(json.dumps(summary(a, sorted(pictures)), indent=2))
        print(f"{path} -> {out}/ ({len(pictures)} pictures)")
    return 1 if skipped else 0


def summary(a, files: list[str]) -> dict:
    """What summary.json holds: the model, its input, the token layout, the top classes and the per-head
    statistics ([layer][head])."""
    m = a.model
    h, w = a.pixel_values.shape[2:]
    return {
        "model": m.name,
        "input_size": [int(w), int(h)],
        "patch_size": m.patch_size,
        "grid": list(a.grid),
        "prefix_tokens": list(m.prefix_tokens),
        "tokens": a.num_tokens,
        "top_classes": [[label, round(p, 6)] for label, p in a.top_classes(5)],
        "mean_attention_distance_px": a.mean_attention_distance.astype(float).round(3).tolist(),
        "attention_entropy_nats": a.attention_entropy.astype(float).round(4).tolist(),
        "files": files,
    }


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


def run_stats(args: argparse.Namespace) -> int:
    from . import stats

    if args.merge:
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
        if args.workers is not None and (args.ray is None or args.workers < 1):
            raise UsageError("--workers must be a positive number, with --ray")
        model = _load(args)
        try:
            if args.ray is None:
                table, skipped = stats.over_images(model, files, args.size, args.batch, on_skip=_skip)
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

        from . import ray_stats
    except ImportError:
        raise UsageError('--ray needs Ray Data: pip install "vitviz[ray]"') from None
    address = None if args.ray == "local" else args.ray
    return ray_stats.over_images(args.model, files, args.size, args.batch, address, args.workers, args.device,
                                 on_skip=_skip)  # fmt: skip


def run_check(args: argparse.Namespace) -> int:
    """Exit 0 when every quantity agrees within its tolerance, 1 on a mismatch."""
    from . import check, example

    model = _load(args)
    try:
        rows = check.check(model, args.image or example("coffee"), args.size)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(check.table(model, rows))
    bad = [r.quantity for r in rows if not r.ok]
    if bad:
        print(f"vitviz: MISMATCH in {', '.join(bad)}: vitviz's views of this model cannot be trusted", file=sys.stderr)
        return 1
    print("every quantity matches transformers' own outputs")
    return 0


def run_faithfulness(args: argparse.Namespace) -> int:
    """Per method: the mean deletion, insertion and random areas over the images, how many beat every random
    order, and the seconds per map and per set of curves."""
    from .attributions import METHODS
    from .deletion import MAPS, REPLACEMENTS, over_images, table

    known = [*METHODS, *MAPS]
    methods = known if args.methods == "all" else args.methods.split(",")
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise UsageError(f"--methods: unknown {', '.join(unknown)}; use all or some of {', '.join(known)}")
    if args.replacement not in REPLACEMENTS:
        raise UsageError(f"--replacement must be one of {', '.join(REPLACEMENTS)}, got {args.replacement!r}")
    files = image_files(args.inputs)
    if not files:
        raise UsageError(f"no image files in {' '.join(args.inputs)}")
    model = _load(args)
    skipped = []
    try:
        rows = over_images(model, files, methods, on_skip=lambda p, e: (skipped.append(p), _skip(p, e)),
                           longest=args.size, steps=args.steps, replacement=args.replacement,
                           random_orders=args.random)  # fmt: skip
    except ValueError as exc:
        if skipped:
            print(f"vitviz: none of the {len(files)} files could be read", file=sys.stderr)
            return 1
        raise UsageError(str(exc)) from None
    print(table(rows))
    from .attributions import describe

    target = "each image's top class logit" if model.labels is not None else describe(model, None, None)
    n = len(files) - len(skipped)
    print(
        f"{n} image{'s' * (n != 1)}; target: {target}; hidden patches show "
        f"{args.replacement}. Lower deletion and higher insertion areas are better; 'faithful' counts the images "
        f"where deletion fell faster than every random order."
    )
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
