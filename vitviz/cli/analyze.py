"""`vitviz analyze`: an image's maps as PNG files, its arrays and a summary, in a folder per image."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .arguments import UsageError, check_model, image_files, indices, model_options, output_folder, within
from .console import bar, load, say, skip

INPUTS = """Each image is read before the model loads: a file that is not an image is named on stderr and skipped
(exit 1). A folder stands for its image files (not its subfolders'). Each image's folder is written whole or not
at all: it is made beside, as OUT/.<name>.<pid>.partial, and renamed when done, so Ctrl-C (exit 130) leaves the
images done and no half-written folder."""


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser(
        "analyze",
        help="write an image's maps as PNG files, its arrays and a summary",
        description="Write each image's maps as PNG files, its arrays and a summary in OUT/<name>/.",
        epilog=INPUTS,
    )
    p.add_argument("images", nargs="+", help="image files, folders (their images) or glob patterns (quote them)")
    p.add_argument("--out", type=Path, required=True, help="folder; each image gets OUT/<name>/")
    model_options(p)
    p.add_argument("--layers", default="all", help="layers for the attention sheets: all, or e.g. 0,5,11")
    p.add_argument("--heads", default="all", help="heads tiled in each sheet: all, or e.g. 0,3")
    p.add_argument(
        "--no-arrays",
        action="store_true",
        help="leave out arrays.npz (the chosen layers' attention: tens of MB an image)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Per image, in OUT/<name>/: tokens.png, attention_layerNN.png (the chosen heads and their mean,
    CLS query), rollout.png, pca.png, dense.png (models with a dense head), arrays.npz (unless --no-arrays),
    summary.json."""
    files = image_files(args.images)
    if not files:
        raise UsageError(f"no image files in {' '.join(args.images)}")
    output_folder(args.out)
    layers, heads = indices(args.layers, "layers"), indices(args.heads, "heads")
    check_model(args.model, args.model_argument)
    images = _readable(files)
    if not images:
        return 1
    model = load(args)
    layers, heads = within(layers, model.num_layers, "layers"), within(heads, model.num_heads, "heads")
    made = [p for p in (args.out, *args.out.parents) if not p.exists()]  # removed again if Ctrl-C leaves them empty
    written: list[Path] = []
    try:
        skipped = _write_each(args, model, images, layers, heads, written)
    except KeyboardInterrupt:
        return _interrupted(args.out, made, written, len(images))
    return 1 if skipped or len(images) < len(files) else 0


def _interrupted(out: Path, made: list[Path], written: list[Path], total: int) -> int:
    """Ctrl-C: the folders this run made and left empty removed, what was written said in one line; exit 130."""
    for folder in made:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    done = f"{len(written)} of {total} images written whole in {out}/" if written else "no image written"
    print(f"vitviz: interrupted: {done}, none half-written", file=sys.stderr)
    return 130


def _readable(files: list[Path]) -> list[Path]:
    """The files that decode as images; each other one named on stderr with the reason. Each is decoded here
    and again for its forward, which keeps one image in memory at a time."""
    from ..preprocess import load_image

    images = []
    for path in files:
        try:
            load_image(path)
        except (OSError, ValueError) as exc:
            skip(path, exc)
        else:
            images.append(path)
    return images


def _write_each(args: argparse.Namespace, model, images: list[Path], layers, heads, written: list[Path]) -> int:
    """Each image's folder in OUT, appended to `written` once whole; how many images failed at their forward."""
    from .. import analyze

    skipped = 0
    used: set[str] = set()
    with bar(len(images), "analyze", "image") as progress:
        for path in images:
            progress.set_description(f"{path.name}: forward")
            try:
                a = analyze(model, path, longest=args.size, dense=True)  # the dense map once, in the record
            except (OSError, ValueError) as exc:
                skip(path, exc)
                skipped += 1
                progress.update()
                continue
            name = path.stem
            while name in used:  # two photo.jpg from different folders
                name += "-2"
            used.add(name)
            with _whole(args.out / name) as out:
                progress.set_description(f"{path.name}: pictures")
                what = _write_pictures(a, layers, heads, out)
                if not args.no_arrays:
                    progress.set_description(f"{path.name}: arrays")
                    what += _write_arrays(a, layers, out, name)
            written.append(args.out / name)
            say(f"{path} -> {args.out / name}/ ({what})")
            progress.update()
    return skipped


@contextmanager
def _whole(folder: Path) -> Iterator[Path]:
    """A folder beside `folder` to write in, which becomes `folder` once the block ends; on an error or Ctrl-C it
    is removed. Files of an earlier run in `folder` stay, but for those written again."""
    partial = folder.parent / f".{folder.name}.{os.getpid()}.partial"  # mkdir, not mkdtemp: the umask's mode
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if not folder.is_dir():
        partial.rename(folder)
        return
    for file in partial.iterdir():
        os.replace(file, folder / file.name)
    partial.rmdir()


def _write_pictures(a, layers: list[int], heads: list[int], out: Path) -> str:
    """The maps as PNG files and summary.json in `out`; what was written, in words."""
    import cv2
    import numpy as np

    from ..notebook import show
    from ..views.attention import attention_sheet
    from ..views.output import output_view
    from ..views.rollout import rollout_view
    from ..views.tokens import tokens_view

    pictures = {"tokens.png": tokens_view(a)[0], "rollout.png": rollout_view(a, "mean", 0.0)[0]}
    for layer in layers:
        pictures[f"attention_layer{layer:02d}.png"] = attention_sheet(a, layer, heads)
    pictures["pca.png"] = np.asarray(show(a, "pca"))
    if a.dense_map() is not None:
        pictures["dense.png"] = output_view(a)[1]
    for file, picture in pictures.items():
        cv2.imwrite(str(out / file), cv2.cvtColor(picture, cv2.COLOR_RGB2BGR))
    (out / "summary.json").write_text(json.dumps(summary(a, sorted(pictures)), indent=2))
    return f"{len(pictures)} pictures"


def _write_arrays(a, layers: list[int], out: Path, name: str) -> str:
    """arrays.npz in `out`, its size said on stderr before it is written (the chosen layers' attention makes
    tens of MB), as in the image's folder `name`; what was written, in words."""
    import numpy as np

    arrays = {
        "attentions": np.stack([a.layer_attention(layer) for layer in layers]),
        "layers": np.array(layers),
        "rollout": a.rollout("mean"),
        "grid": np.array(a.grid),
        "pixel_values": a.pixel_values,
    }
    size = sum(v.nbytes for v in arrays.values()) / 1e6
    say(
        f"vitviz: {name}/arrays.npz: {size:.0f} MB before compression (the attention of {len(layers)} "
        f"layers, {a.num_tokens} tokens); --no-arrays leaves it out",
        sys.stderr,
    )
    np.savez_compressed(out / "arrays.npz", **arrays)
    return f", arrays.npz {(out / 'arrays.npz').stat().st_size / 1e6:.0f} MB"


def summary(a, files: list[str]) -> dict:
    """What summary.json holds: the model, its input, the token layout, the top classes and the per-head
    statistics ([layer][head])."""
    import numpy as np

    m = a.model
    h, w = a.pixel_values.shape[2:]
    distance, entropy = (np.stack(s) for s in zip(*(a.layer_statistics(i) for i in range(a.num_layers)), strict=True))
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
        "mean_attention_distance_px": distance.astype(float).round(3).tolist(),
        "attention_entropy_nats": entropy.astype(float).round(4).tolist(),
        "files": files,
    }
