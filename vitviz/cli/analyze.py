"""`vitviz analyze`: an image's maps as PNG files, its arrays and a summary, in a folder per image."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .arguments import UsageError, check_model, image_files, indices, model_options, output_folder, within
from .console import bar, load, say, skip

INPUTS = """Each image is read before the model loads: a file that is not an image is named on stderr and skipped
(exit 1). A folder stands for its image files (not its subfolders')."""


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
    p.add_argument("--no-arrays", action="store_true",
                   help="leave out arrays.npz (the chosen layers' attention: tens of MB an image)")  # fmt: skip
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
    skipped = _write_each(args, model, images, layers, heads)
    return 1 if skipped or len(images) < len(files) else 0


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


def _write_each(args: argparse.Namespace, model, images: list[Path], layers, heads) -> int:
    """Each image's folder in OUT; how many images failed at their forward."""
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
            out = args.out / name
            out.mkdir(parents=True, exist_ok=True)
            progress.set_description(f"{path.name}: pictures")
            what = _write_pictures(a, layers, heads, out)
            if not args.no_arrays:
                progress.set_description(f"{path.name}: arrays")
                what += _write_arrays(a, layers, out)
            say(f"{path} -> {out}/ ({what})")
            progress.update()
    return skipped


def _write_pictures(a, layers: list[int], heads: list[int], out: Path) -> str:
    """The maps as PNG files and summary.json in `out`; what was written, in words."""
    import cv2
    import numpy as np

    from .. import views
    from ..notebook import show

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
    say(f"vitviz: {out.name}/arrays.npz: {size:.0f} MB before compression (the attention of {len(layers)} "
        f"layers, {a.num_tokens} tokens); --no-arrays leaves it out", sys.stderr)  # fmt: skip
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
