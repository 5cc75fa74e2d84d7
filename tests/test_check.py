"""`vitviz check`: every family, saved as a hub model is, passes; a planted fault in the capture is caught."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image
from test_cli import vitviz_cli

from vitviz import check, cli
from vitviz.families import Readout


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_from_a_saved_folder_matches_transformers(name, tmp_path, capsys):
    """The command end to end: a tiny model saved with save_pretrained (as from the hub) is loaded by its folder,
    and its attentions, hidden states, probe attention (SigLIP) and logits or readout agree. The command runs as a
    process for one family, and in this process for the others (a process takes 3 s to import torch)."""
    FAMILIES[name]().net.save_pretrained(tmp_path / name, safe_serialization=True)
    argv = ["check", str(tmp_path / name), "--device", "cpu", "--size", "48"]
    if name == "vit":
        done = vitviz_cli(*argv)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        code = cli.main(argv)
        stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    rows = [line for line in stdout.splitlines() if line.endswith(("(abs)", "(rel)"))]
    expected = 3 + ("siglip" in name) + (name in ("clip", "siglip"))  # and the probe; and the image-text logit
    assert len(rows) == expected and all(" ok " in line for line in rows), stdout


def with_output(model, change):
    """The model with `change(out)` applied to what its forward returns (a fault in the capture)."""
    real = model.forward

    def forward(*args, **kwargs):
        out = real(*args, **kwargs)
        change(out)
        return out

    object.__setattr__(model, "forward", forward)
    return model


def heads_averaged(out) -> None:
    """The probe's weights averaged over its heads, as PyTorch returns them by default."""
    pool = out.get("pool_attention")
    if isinstance(pool, np.ndarray):
        out["pool_attention"] = np.broadcast_to(pool.mean(-2, keepdims=True), pool.shape)  # [B,H,N]


def with_layers_shifted(model):
    """The model with each layer's modules taken from the next layer: the attentions that an analysis recomputes
    from the hidden states come from the wrong weights (a fault in the capture), while the forward is untouched."""
    real = model.layer_parts
    object.__setattr__(model, "layer_parts", lambda layer: real((layer + 1) % model.num_layers))
    return model


TEXT_LOGIT = f"image-text logit (token ids {check.TEXT_IDS})"


def with_similarity(model, similarity):
    """The model with its family's image-text logit replaced (a fault in the text target)."""
    return dataclasses.replace(model, family=dataclasses.replace(model.family, similarity=similarity))


def biased(model):
    """A SigLIP model whose learned bias is not the 0 it starts as."""
    with torch.no_grad():
        model.net.logit_bias.fill_(-1.5)
    return model


def unbiased(net, image, text):
    """SigLIP's logit without its learned bias."""
    cosine = torch.nn.functional.normalize(image, dim=-1) @ torch.nn.functional.normalize(text, dim=-1).T
    return cosine[:, 0] * net.logit_scale.exp()


def unprojected(net, image, text):
    """CLIP's logit from the readout vector before its projection (the text's features cut to its width)."""
    cosine = (
        torch.nn.functional.normalize(image[:, : text.shape[1]], dim=-1) @ torch.nn.functional.normalize(text, dim=-1).T
    )
    return cosine[:, 0] * net.logit_scale.exp()


@pytest.mark.parametrize(
    "name, fault, wrong, right",
    [
        ("dinov2", lambda m: dataclasses.replace(m, readout=Readout((1,))), "readout vector", "attentions [L,H,N,N]"),
        ("siglip", lambda m: dataclasses.replace(m, readout=Readout((0,))), "readout vector", "attentions [L,H,N,N]"),
        ("dino", with_layers_shifted, "attentions [L,H,N,N]", "readout vector"),
        ("siglip_vision", lambda m: with_output(m, heads_averaged), "probe attention [H,N]", "attentions [L,H,N,N]"),
        ("siglip", lambda m: with_similarity(biased(m), unbiased), TEXT_LOGIT, "readout vector"),
        ("clip", lambda m: with_similarity(m, unprojected), TEXT_LOGIT, "readout vector"),
    ],
)
def test_a_fault_in_the_capture_is_a_mismatch(name, fault, wrong, right):
    rows = {r.quantity: r for r in check.check(fault(FAMILIES[name]()), random_image(48, 48), 48)}
    assert not rows[wrong].ok and rows[right].ok, rows
