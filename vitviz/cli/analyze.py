"""`vitviz analyze`: an image's maps as PNG files, its arrays and a summary, in a folder per image."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .arguments import check_model, existing, indices, model_options, within
from .console import bar, load, say, skip


def add(sub) -> None:
    """The subcommand and its options."""
    p = sub.add_parser("analyze", help="write an image's maps as PNG files, its arrays and a summary")
    p.add_argument("images", nargs="+", type=Path, help="image files")
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
    existing(args.images, "analyze")
    layers, heads = indices(args.layers, "layers"), indices(args.heads, "heads")
    check_model(args.model, args.model_argument)
    model = load(args)
    layers, heads = within(layers, model.num_layers, "layers"), within(heads, model.num_heads, "heads")
    from .. import analyze

    skipped = 0
    used: set[str] = set()
    with bar(len(args.images), "analyze", "image") as images:
        for path in args.images:
            images.set_description(f"{path.name}: forward")
            try:
                a = analyze(model, path, longest=args.size, dense=True)  # the dense map once, in the record
            except (OSError, ValueError) as exc:
                skip(path, exc)
                skipped += 1
                images.update()
                continue
            name = path.stem
            while name in used:  # two photo.jpg from different folders
                name += "-2"
            used.add(name)
            out = args.out / name
            out.mkdir(parents=True, exist_ok=True)
            images.set_description(f"{path.name}: pictures")
            written = _write_pictures(a, layers, heads, out)
            if not args.no_arrays:
                images.set_description(f"{path.name}: arrays")
                written += _write_arrays(a, layers, out)
            say(f"{path} -> {out}/ ({written})")
            images.update()
    return 1 if skipped else 0


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
