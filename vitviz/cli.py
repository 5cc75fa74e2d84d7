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
import glob
import json
import sys
from pathlib import Path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}
DEFAULT_MODEL = "dinov2-small"  # vitviz.DEFAULT_MODEL, named here so that checking arguments imports no torch
ASKED_BY_NAME = ("occlusion",)  # one forward per patch: minutes a map on a CPU, so faithfulness runs it when named


class UsageError(Exception):
    """A command that cannot run as given: its message is printed, and the exit code is 2."""


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
    from .app import main as serve
    from .app import parse_args

    args = parse_args(argv, prog="vitviz serve")
    _check_model(args.model, "--model")
    if args.depth_model is not None:
        _check_model(args.depth_model, "--depth-model")
    print(f"vitviz: loading {args.model}, then serving on http://{args.host}:{args.port}/ …", file=sys.stderr)
    serve(argv, prog="vitviz serve")
    return 0


def parser() -> argparse.ArgumentParser:
    from . import __version__

    top = argparse.ArgumentParser(prog="vitviz", description="See inside a Vision Transformer.", epilog=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    top.add_argument("--version", action="version", version=f"vitviz {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="{serve,analyze,stats,check,faithfulness,explore}")
    sub.add_parser("serve", help="start the web app (vitviz serve --help lists its options)")

    analyze = sub.add_parser("analyze", help="write an image's maps as PNG files, its arrays and a summary")
    analyze.add_argument("images", nargs="+", type=Path, help="image files")
    analyze.add_argument("--out", type=Path, required=True, help="folder; each image gets OUT/<name>/")
    _model_options(analyze)
    analyze.add_argument("--layers", default="all", help="layers for the attention sheets: all, or e.g. 0,5,11")
    analyze.add_argument("--heads", default="all", help="heads tiled in each sheet: all, or e.g. 0,3")
    analyze.add_argument("--no-arrays", action="store_true",
                         help="leave out arrays.npz (the chosen layers' attention: tens of MB an image)")  # fmt: skip
    analyze.set_defaults(run=run_analyze)

    stats = sub.add_parser("stats", help="mean attention distance and entropy per layer and head over many images")
    stats.add_argument("inputs", nargs="*", help="folders, image files or glob patterns (quote them)")
    stats.add_argument("--out", type=Path, required=True, help="folder for stats.csv, stats.html and stats.png")
    _model_options(stats)
    stats.add_argument("--batch", type=_positive, default=4, help="images per forward pass (same size; default 4)")
    stats.add_argument("--shard", default="0/1", help="i/n: take every n-th file from the i-th (0-based)")
    stats.add_argument("--merge", nargs="+", type=Path, help="merge the stats.csv of shards instead")
    stats.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                       help='schedule it on Ray Data: a local Ray, or the cluster at ADDRESS ("auto" for this '
                            'machine\'s); needs pip install "vitviz[ray]"')  # fmt: skip
    stats.add_argument("--workers", type=_positive, help="with --ray: model replicas (default: one per GPU, else 2)")
    stats.set_defaults(run=run_stats)

    check = sub.add_parser("check", help="compare vitviz's capture of a model with transformers' own outputs")
    check.add_argument("model", metavar="MODEL", help="hub id, local folder or catalogue name")
    check.add_argument("--image", type=Path, default=None, help="the photo to compare on (default: a bundled one)")
    _input_options(check)
    check.set_defaults(run=run_check, model_argument="MODEL")

    faith = sub.add_parser("faithfulness", help="how faithful each attribution map is, over many images")
    faith.add_argument("inputs", nargs="+", help="folders, image files or glob patterns (quote them)")
    _model_options(faith)
    faith.add_argument("--methods", default=None,
                       help=f"e.g. integrated_gradients,rollout, or all (default: every method but "
                            f"{', '.join(ASKED_BY_NAME)}, which take minutes a map)")  # fmt: skip
    faith.add_argument("--steps", type=_positive, default=10, help="points on each curve, less one (10: every 10 %%)")
    faith.add_argument("--replacement", default="blur", help="what a hidden patch shows: blur, mean or black")
    faith.add_argument("--random", type=_positive, default=5, help="random orders for the baseline band (default 5)")
    faith.set_defaults(run=run_faithfulness)

    explore = sub.add_parser("explore", help="write an image's Explorer as one HTML file that works offline")
    explore.add_argument("image", type=Path, help="image file")
    explore.add_argument("--html", type=Path, required=True, help="the .html file to write")
    _model_options(explore)
    explore.add_argument("--layers", default="all",
                         help="layers to embed: all, or e.g. 0,5,11 (a 224 px square: 1.1 MB a layer)")  # fmt: skip
    explore.set_defaults(run=run_explore)
    return top


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="catalogue name, hub id or local folder")
    p.set_defaults(model_argument="--model")
    _input_options(p)


def _input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=_positive, default=None, help="input's longest side in pixels (default: the model's)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def _positive(text: str) -> int:
    """argparse's type for counts and sizes: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _indices(text: str, what: str) -> list[int] | None:
    """'all' -> None, '0,5,11' -> [0, 5, 11]: the syntax, checked before the model loads."""
    if text == "all":
        return None
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise UsageError(f"--{what} must be 'all' or numbers like 0,5,11, got {text!r}") from None


def _within(chosen: list[int] | None, count: int, what: str) -> list[int]:
    """The chosen indices (all of them for None), each in [0, count): the model's own count, once it is loaded."""
    if chosen is None:
        return list(range(count))
    bad = [i for i in chosen if not 0 <= i < count]
    if bad:
        raise UsageError(f"--{what} {bad} out of range: this model has {count} {what} (0 to {count - 1})")
    return chosen


def _check_model(name: str, argument: str) -> None:
    """A model name that cannot name a model, or a folder without weights, refused before anything heavy loads."""
    from .hub import ModelUnavailableError, model_folder

    if name != DEFAULT_MODEL:
        try:
            model_folder(name)
        except (ValueError, ModelUnavailableError) as exc:
            raise UsageError(f"{argument} {name}: {exc}") from None


def _existing(paths: list[Path], what: str) -> None:
    """Every file named must be there: a missing one is a usage error, found before the model loads."""
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UsageError(f"{what}: no such file: {', '.join(missing)}")


def _bar(total: float, desc: str, unit: str):
    """A progress bar on stderr: what runs, how far it is, for how long."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)


def _say(line: str, file=None) -> None:
    """A line printed above the progress bars (on stdout by default), which tqdm draws again under it."""
    from tqdm import tqdm

    tqdm.write(line, file=file or sys.stdout)


def _load(args: argparse.Namespace):
    """The model the command names, under a progress bar; a model that cannot be had is a usage error, named
    as the user gave it (--model, or check's MODEL)."""
    with _bar(1, f"loading {args.model}", "model") as bar:
        from . import ModelUnavailableError, load_model

        try:
            model = load_model(args.model, device=args.device)
        except (ValueError, ModelUnavailableError, OSError) as exc:
            bar.leave = False
            raise UsageError(f"{args.model_argument} {args.model}: {exc}") from None
        bar.update()
    return model


def _skip(path: Path | str, exc: Exception) -> None:
    _say(f"vitviz: skipped {path}: {exc}", sys.stderr)


def run_analyze(args: argparse.Namespace) -> int:
    """Per image, in OUT/<name>/: tokens.png, attention_layerNN.png (the chosen heads and their mean,
    CLS query), rollout.png, pca.png, dense.png (models with a dense head), arrays.npz (unless --no-arrays),
    summary.json."""
    _existing(args.images, "analyze")
    layers, heads = _indices(args.layers, "layers"), _indices(args.heads, "heads")
    _check_model(args.model, args.model_argument)
    model = _load(args)
    layers, heads = _within(layers, model.num_layers, "layers"), _within(heads, model.num_heads, "heads")
    from . import analyze

    skipped = 0
    used: set[str] = set()
    with _bar(len(args.images), "analyze", "image") as bar:
        for path in args.images:
            bar.set_description(f"{path.name}: forward")
            try:
                a = analyze(model, path, longest=args.size)
            except (OSError, ValueError) as exc:
                _skip(path, exc)
                skipped += 1
                bar.update()
                continue
            name = path.stem
            while name in used:  # two photo.jpg from different folders
                name += "-2"
            used.add(name)
            out = args.out / name
            out.mkdir(parents=True, exist_ok=True)
            bar.set_description(f"{path.name}: pictures")
            written = _write_pictures(a, layers, heads, out)
            if not args.no_arrays:
                bar.set_description(f"{path.name}: arrays")
                written += _write_arrays(a, layers, out)
            _say(f"{path} -> {out}/ ({written})")
            bar.update()
    return 1 if skipped else 0


def run_explore(args: argparse.Namespace) -> int:
    """One self-contained HTML file: the Explorer of IMAGE with the chosen layers' queries and keys embedded."""
    _existing([args.image], "explore")
    layers = _indices(args.layers, "layers")
    if args.html.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--html must name an .html file, got {str(args.html)!r}")
    if not args.html.resolve().parent.is_dir():
        raise UsageError(f"--html {args.html}: no such folder {args.html.parent}")
    _check_model(args.model, args.model_argument)
    model = _load(args)
    layers = _within(layers, model.num_layers, "layers")
    from . import analyze
    from .export import export_html

    try:
        a = analyze(model, args.image, longest=args.size)
    except (OSError, ValueError) as exc:
        _skip(args.image, exc)
        return 1
    with _bar(len(layers), "explore: layers", "layer") as bar:
        path = export_html(a, args.html, layers=layers, progress=lambda _: bar.update())
    h, w = a.pixel_values.shape[2:]
    _say(f"vitviz: wrote {path} ({path.stat().st_size / 1e6:.1f} MB: {len(layers)} layers at {w} × {h} px; "
         f"--layers or --size make it smaller)", sys.stderr)  # fmt: skip
    return 0


def _write_pictures(a, layers: list[int], heads: list[int], out: Path) -> str:
    """The maps as PNG files and summary.json in `out`; what was written, in words."""
    import cv2
    import numpy as np

    from . import views
    from .notebook import show

    pictures = {"tokens.png": views.tokens_view(a)[0], "rollout.png": views.rollout_view(a, "mean", 0.0)[0]}
    for layer in layers:
        pictures[f"attention_layer{layer:02d}.png"] = views.attention_sheet(a, layer, heads)
    pictures["pca.png"] = np.asarray(show(a, "pca"))
    if a.dense_map() is not None:
        pictures["dense.png"] = views.output_view(a)[1]
    for file, picture in pictures.items():
        cv2.imwrite(str(out / file), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))
    (out / "summary.json").write_text(json.dumps(summary(a, sorted(pictures)), indent=2))
    return f"{len(pictures)} pictures"


def _write_arrays(a, layers: list[int], out: Path) -> str:
    """arrays.npz in `out`, its size said on stderr before it is written (the chosen layers' attention makes
    tens of MB); what was written, in words."""
    import numpy as np

    arrays = {
        "attentions": np.stack([a.layer_attention(layer) for layer in layers]),
        "layers": np.array(layers),
        "rollout": a.rollout("mean"),
        "grid": np.array(a.grid),
        "pixel_values": a.pixel_values,
    }
    size = sum(v.nbytes for v in arrays.values()) / 1e6
    _say(f"vitviz: {out.name}/arrays.npz: {size:.0f} MB before compression (the attention of {len(layers)} "
         f"layers, {a.num_tokens} tokens); --no-arrays leaves it out", sys.stderr)  # fmt: skip
    np.savez_compressed(out / "arrays.npz", **arrays)
    return f", arrays.npz {(out / 'arrays.npz').stat().st_size / 1e6:.0f} MB"


def summary(a, files: list[str]) -> dict:
    """What summary.json holds: the model, its input, the token layout, the top classes and the per-head
    statistics ([layer][head])."""
    m = a.model
    h, w = a.pixel_values.shape[2:]
    return {
        "model": m.name,
        "input_width": int(w),
        "input_height": int(h),
        "patch_size": m.patch_size,
        "grid_rows": a.grid[0],
        "grid_cols": a.grid[1],
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
    if args.merge:
        _existing(args.merge, "--merge")
        from . import stats

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
        _check_model(args.model, args.model_argument)
        model = _load(args)
        from . import stats

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
    """Exit 0 when every quantity agrees within its tolerance, 1 on a mismatch or an image it cannot read."""
    if args.image is not None:
        _existing([args.image], "--image")
    _check_model(args.model, args.model_argument)
    model = _load(args)
    from . import check, example

    image = args.image or example("coffee")
    with _bar(1, f"check {image.name}: vitviz against transformers", "image") as bar:
        try:
            rows = check.check(model, image, args.size)
        except (OSError, ValueError) as exc:
            _say(f"vitviz: {image}: {exc}", sys.stderr)
            return 1
        bar.update()
    print(check.table(model, rows))
    bad = [r.quantity for r in rows if not r.ok]
    if bad:
        print(f"vitviz: MISMATCH in {', '.join(bad)}: vitviz's views of this model cannot be trusted", file=sys.stderr)
        return 1
    print("every quantity matches transformers' own outputs")
    return 0


def faithfulness_methods(text: str | None) -> list[str]:
    """The methods --methods names: None is every one but those ASKED_BY_NAME, "all" every one."""
    from .attributions import METHODS
    from .deletion import MAPS

    known = [*METHODS, *MAPS]
    if text is None:
        return [m for m in known if m not in ASKED_BY_NAME]
    methods = known if text == "all" else text.split(",")
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise UsageError(f"--methods: unknown {', '.join(unknown)}; use all or some of {', '.join(known)}")
    return methods


class _MapsBar:
    """One progress bar over every (method, image) map of `faithfulness`: it names the map under way and moves
    with its progress."""

    def __init__(self, total: int) -> None:
        self.bar, self.done = _bar(total, "faithfulness", "map"), 0

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


def run_faithfulness(args: argparse.Namespace) -> int:
    """Per method: the mean deletion, insertion and random areas over the images, how many beat every random
    order, and the seconds per map and per set of curves."""
    files = image_files(args.inputs)
    if not files:
        raise UsageError(f"no image files in {' '.join(args.inputs)}")
    _check_model(args.model, args.model_argument)
    methods = faithfulness_methods(args.methods)  # the method names live with torch: an import of a few seconds
    from .deletion import REPLACEMENTS

    if args.replacement not in REPLACEMENTS:
        raise UsageError(f"--replacement must be one of {', '.join(REPLACEMENTS)}, got {args.replacement!r}")
    model = _load(args)
    from .deletion import over_images, table

    skipped: set[Path] = set()

    def skip(path: Path, exc: Exception) -> None:  # each method meets the same unreadable file
        if path not in skipped:
            skipped.add(path)
            _skip(path, exc)

    maps = _MapsBar(len(files) * len(methods))
    rows = []
    try:
        for method in methods:
            rows += over_images(model, maps.files(files, method), [method], on_skip=skip, longest=args.size,
                                steps=args.steps, replacement=args.replacement, random_orders=args.random,
                                progress=maps.progress)  # fmt: skip
    except ValueError as exc:
        if skipped:
            print(f"vitviz: none of the {len(files)} files could be read", file=sys.stderr)
            return 1
        raise UsageError(str(exc)) from None
    finally:
        maps.bar.close()
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
