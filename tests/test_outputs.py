"""The output a map explains (vitviz/outputs.py): one record, and the map, its check and its sentence all follow it.

Rollout toward a dense output is held against the full matrix chain in float64 with the output's weights as its
last row; every map's check and sentence against the record; and every sentence of every tab against what the
model's output reads.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import FAMILIES, random_image, reference_outputs, tiny_dinov2, tiny_vit

import vitviz
from vitviz import lesson, sentences
from vitviz.attributions import attribute, input_analysis
from vitviz.deletion import faithfulness
from vitviz.lens import LENSES, lens_of
from vitviz.outputs import KINDS, ClassLogit, DenseMap, Output, ReadoutVector, TextLogit, default_output, output_for
from vitviz.preprocess import prepare_input
from vitviz.views.heads import heads_views
from vitviz.views.output import output_view
from vitviz.views.rollout import rollout_truth_note, rollout_view
from vitviz.views.tokens import tokens_view


@pytest.fixture(scope="module")
def coffee_224(embedded, coffee) -> vitviz.Analysis:
    return vitviz.analyze(embedded, coffee, longest=224)


def test_a_model_has_the_output_its_head_gives(embedded):
    assert default_output(tiny_vit()) == Output("class")
    assert default_output(embedded) == Output("dense") and not Output("dense").reads_readout
    assert default_output(tiny_dinov2()) == Output("readout") and Output("readout").reads_readout
    assert output_for(embedded, box=(1, 2, 3, 4)) == Output("dense", box=(1.0, 2.0, 3.0, 4.0))
    assert output_for(tiny_vit(), target=3) == Output("class", index=3)
    assert output_for(embedded, text="a dog") == Output("text", text="a dog")  # a text wins, where it applies


def test_each_kind_is_its_own_class_named_by_one_word():
    """`Output(kind, ...)` builds the kind's class, equal to it built directly and to nothing of another kind; the
    lens speaks the same words (each lens follows one of `KINDS`, and every kind but the text has one)."""
    built = [
        Output("class", index=3),
        Output("text", text=[1, 2]),
        Output("dense", box=(0, 0, 2, 2)),
        Output("readout"),
    ]
    direct = [ClassLogit(3), TextLogit((1, 2)), DenseMap(box=(0, 0, 2, 2)), ReadoutVector()]
    assert built == direct and [type(o) for o in built] == list(KINDS.values())
    assert [o.kind for o in built] == list(KINDS) == ["class", "text", "dense", "readout"]
    assert all(isinstance(o, Output) for o in built) and ClassLogit() != ReadoutVector() and len(set(built)) == 4
    assert [lens.follows.kind for lens in LENSES] == ["class", "dense", "readout"]
    with pytest.raises(ValueError, match="has none to read"):
        lens_of(FAMILIES["clip"](), [], (28, 28), (28, 28), TextLogit("a dog"))


def test_no_module_asks_an_outputs_kind():
    """What a kind does lives in its class: no module of vitviz compares an output's kind to a kind's name."""
    names = "|".join(KINDS)
    asks = re.compile(rf"""kind\s*(==|!=|in)\s*[("']*({names}|classes)\b""")
    found = [
        f"{path}:{n}"
        for path in sorted(Path(vitviz.__file__).parent.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert found == []


def test_a_bad_output_is_named():
    with pytest.raises(ValueError, match="unknown output kind 'logits'"):
        Output("logits")
    with pytest.raises(ValueError, match="unknown dense region 'edges'"):
        Output("dense", region="edges")
    with pytest.raises(ValueError, match="a text output needs its text"):
        Output("text")
    with pytest.raises(ValueError, match="has no dense head"):
        attribute(tiny_vit(), random_image(32, 32), "saliency", output=Output("dense"))
    with pytest.raises(ValueError, match="is not a classifier"):
        attribute(tiny_dinov2(), random_image(40, 56), "saliency", output=Output("class"), longest=56)


def chain_by_hand(a: vitviz.Analysis, fusion: str, ratio: float, last_row: np.ndarray, keep: list[int]) -> np.ndarray:
    """start · Â_{L-1} ... Â_0 as the full product of [N,N] matrices in float64: each layer's heads fused, weights
    at or below the layer's `ratio` quantile dropped (never the `keep` columns), the identity added, rows summing
    to 1; `last_row` [N] the output's weights."""
    n = a.num_tokens
    product = np.eye(n)
    for layer in range(a.num_layers):
        w = a.layer_attention(layer).astype(np.float64)
        fused = w.mean(0) if fusion == "mean" else w.max(0)
        if ratio > 0:
            k = max(1, int(n * n * ratio))
            kept = np.where(fused > np.sort(fused.ravel())[k - 1], fused, 0.0)
            kept[:, keep] = fused[:, keep]
            fused = kept
        step = fused + np.eye(n)
        product = (step / step.sum(1, keepdims=True)) @ product
    return (last_row @ product)[a.n_prefix :].reshape(a.grid)


@pytest.mark.parametrize("fusion, ratio", [("mean", 0.0), ("max", 0.5), ("mean", 0.9)])
def test_rollout_toward_a_dense_output_is_the_matrix_chain_with_its_weights_as_the_last_row(coffee_224, fusion, ratio):
    a = coffee_224
    gh, gw = a.grid
    h, w = a.pixel_values.shape[2:]
    with torch.no_grad():  # the dense head on this forward's own tokens: transformers' final ones
        last = a.model.net(pixel_values=torch.from_numpy(a.pixel_values)).last_hidden_state  # after its final norm
        patches = last[:, a.n_prefix :].reshape(1, gh, gw, -1).permute(0, 3, 1, 2)
        dense = a.model.dense_head(patches, (h, w))[0, 0].double().numpy()
    box = (0.0, 0.0, a.image.shape[1] / 2, float(a.image.shape[0]))  # the left half: whole patches here
    left = np.concatenate([np.ones((h, w // 2)), np.zeros((h, w - w // 2))], 1)
    by_pixels = {
        Output("dense"): dense,
        Output("dense", region="image"): np.ones((h, w)),
        Output("dense", box=box): left,
    }
    assert w % 2 == 0 and (w // 2) % a.model.patch_size == 0
    for output, pixels in by_pixels.items():
        row = np.zeros(a.num_tokens)
        row[a.n_prefix :] = pixels.reshape(gh, h // gh, gw, w // gw).mean((1, 3)).ravel()
        expected = chain_by_hand(a, fusion, ratio, row / row.sum(), [])
        np.testing.assert_allclose(a.rollout(fusion, ratio, output), expected, atol=1e-6)
    cls = np.zeros(a.num_tokens)
    cls[0] = 1
    np.testing.assert_allclose(
        a.rollout(fusion, ratio, Output("readout")), chain_by_hand(a, fusion, ratio, cls, [0]), atol=1e-6
    )


def own_score(model, rgb: np.ndarray, output: Output) -> float:
    """The output's value on the unmasked photo, from transformers' own forward and the head's module."""
    x = prepare_input(rgb, (224, 224), 14, model.mean, model.std)
    ref = reference_outputs(model, x)
    if output.kind == "readout":
        return float(ref.pooler_output[0].norm())  # along its own direction: its length
    with torch.no_grad():
        tokens = ref.last_hidden_state[0, 1:].reshape(16, 16, -1).permute(2, 0, 1)[None]
        m = model.dense_head(tokens, (224, 224))[0, 0].double().numpy()
    if output.box is not None:
        return float(m[:, :112].mean())
    return float((m * m).sum() / m.sum())


def test_each_map_its_check_and_its_sentence_follow_one_output_and_change_with_it(embedded, coffee, coffee_224):
    """Rollout (the Rollout tab's map, note and check) and an attribution (the Attributions tab's map, summary and
    check), for three outputs of the embedded model: each names its output, and changing it changes all three."""
    same = input_analysis(embedded, coffee)
    outputs = [Output("dense"), Output("readout"), Output("dense", box=(0, 0, 300, 400))]
    said = []
    for output in outputs:
        values = coffee_224.rollout("mean", 0.0, output)
        picture, note = rollout_view(coffee_224, "mean", 0.0, toward=output)
        np.testing.assert_array_equal(picture, rollout_view(coffee_224, "mean", 0.0, toward=output)[0])
        assert note == sentences.rollout_note(coffee_224, values, output)
        assert sentences.toward_phrase(coffee_224, output) in note
        check = faithfulness(embedded, coffee, "rollout", output=output, steps=2, random_orders=1)
        assert check.output == output and check.target == output.short()
        np.testing.assert_array_equal(check.order, np.argsort(-same.rollout(toward=output).ravel(), kind="stable"))
        assert check.deletion[0] == pytest.approx(own_score(embedded, coffee, output), rel=1e-4)
        shown = attribute(embedded, coffee, "saliency", output=output)
        assert shown.output == output and shown.target == output.name(embedded)
        assert shown.score == pytest.approx(check.deletion[0], rel=1e-5)
        said.append((note, check.target, shown.target, check.deletion[0], shown.raw.tobytes(), values.tobytes()))
    for one, other in zip(said, said[1:], strict=False):
        assert all(x != y for x, y in zip(one, other, strict=True)), "an output changed, and something did not"


CLAIMS = re.compile(
    r"feeds|gathers the image for the output|output reads|reads only the|read from|reads no prefix|"
    r"does not read|feeds nothing"
)
DENIED = re.compile(r"\bnot\b|\bnothing\b|\bno prefix\b|would be different")


def readout_claims(text: str) -> list[tuple[str, bool]]:
    """(sentence, whether it says the output reads the readout) for each sentence that speaks of what reads it."""
    plain = re.sub(r"\*|\$[^$]*\$", "", text)
    found = []
    for sentence in re.split(r"(?<=\.)\s+", plain):
        if CLAIMS.search(sentence) and re.search(r"CLS|readout|prefix|probe|distillation", sentence):
            found.append((sentence, not DENIED.search(sentence)))
    return found


def every_sentence(a: vitviz.Analysis) -> list[str]:
    """What the tabs say about this model on this image: tokens, attention, inside a head, rollout toward either
    output, heads, every lesson step, and the layer lens."""
    texts = [tokens_view(a)[1], sentences.attention_note(a, a.num_layers - 1, None, "readout")]
    texts.append(sentences.inside_note(a, a.inside_head(a.num_layers - 1, 0, 0), a.layer_updates(a.num_layers - 1)))
    texts += [rollout_view(a, "mean", 0.0, toward=o)[1] for o in (a.output, Output("readout"))]
    texts += [rollout_truth_note(a, "mean", 0.0), output_view(a)[2]]
    texts.append(heads_views(a)[4])
    texts += [lesson.lesson_step(a, step)[2] for step in range(1, len(lesson.STEPS) + 1)]
    texts.append(vitviz.layer_lens(a.model, a.image).sentence())
    return texts


def test_no_sentence_says_the_readout_feeds_an_output_that_does_not_read_it(embedded, coffee_224):
    """Every tab's sentences, parsed: on the embedded model (a dense head on the patches) every claim about what
    reads the readout denies it; on a classifier, they affirm it and none denies it. The tabs' own fixed texts
    (every Markdown of the app) make no claim either way for the embedded model."""
    from vitviz.app.layout import build
    from vitviz.app.server import Server

    dense = [c for t in every_sentence(coffee_224) for c in readout_claims(t)]
    assert dense and not [s for s, says in dense if says], [s for s, says in dense if says]
    classifier = vitviz.analyze(FAMILIES["vit"](), random_image(32, 32, seed=3))
    claims = [c for t in every_sentence(classifier) for c in readout_claims(t)]
    assert any(says for _, says in claims) and not [s for s, says in claims if not says], claims
    config = build(Server(device="cpu"), "dinov2-small").get_config_file()
    fixed = [str(c["props"].get("value") or "") for c in config["components"] if c["type"] == "markdown"]
    assert not [s for t in fixed for s, says in readout_claims(t) if says]


def transformers_readout(model: vitviz.VitModel, x: torch.Tensor) -> np.ndarray:
    """[D] float64 the readout vector by transformers' own forward: a classifier's ViT's final-normed CLS token, an
    attention-pool's output, else the final-normed CLS token."""
    with torch.no_grad():
        if model.labels is not None:
            return model.net.vit(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state[0, 0].double().numpy()
        ref = reference_outputs(model, x.numpy())
    pooled = ref.pooler_output if model.readout.pool else ref.last_hidden_state[:, 0]
    return pooled[0].double().numpy()


TEXT_IDS = [0, 5, 6, 3, 2]
SCORED = [
    ("vit", Output("class")),
    ("vit", Output("class", index=2)),
    ("vit", Output("readout")),  # a classifier followed by its readout: the vector its head reads, not the logits
    ("dinov2", Output("readout")),
    ("siglip_vision", Output("readout")),  # an attention-pool
    ("clip", Output("text", text=TEXT_IDS)),
    ("siglip", Output("text", text=TEXT_IDS)),
]


@pytest.mark.parametrize("name, output", SCORED, ids=[f"{n}-{o!r}" for n, o in SCORED])
def test_each_output_fixed_on_a_photo_scores_another_image_as_transformers_forward_says(name, output):
    """`Output.reading` fixes an output on one photo; on a second image its value, from the forward's result and from
    the last layer's tokens alike, is transformers' own: the class logit (the photo's top class, for a class of
    None), the image-text logit, the readout vector's length along the photo's (float64 from their forwards)."""
    model = FAMILIES[name]()
    photo, other = (
        torch.from_numpy(prepare_input(random_image(40, 56, seed=s), (40, 56), model.patch_size, model.mean, model.std))
        for s in (11, 12)
    )
    with torch.no_grad():
        reading = output.reading(model, model.forward(photo), (40, 56), (40, 56))
        out = model.forward(other)
        scores = [float(reading.of_output(out)[0]), float(reading.of_tokens(out.hidden_states[-1])[0])]
    if output.kind == "class":
        logits = [reference_outputs(model, x.numpy()).logits[0].double().numpy() for x in (photo, other)]
        index = int(logits[0].argmax()) if output.index is None else output.index
        assert reading.output == Output("class", index=index)
        expected = logits[1][index]
    elif output.kind == "readout":
        v = transformers_readout(model, photo)
        expected = transformers_readout(model, other) @ v / np.linalg.norm(v)
    else:
        with torch.no_grad():
            expected = float(
                model.net(
                    input_ids=torch.tensor([TEXT_IDS]), pixel_values=other, interpolate_pos_encoding=True
                ).logits_per_image[0, 0]
            )
    np.testing.assert_allclose(scores, [expected, expected], rtol=1e-4, atol=1e-5)


def test_a_dense_output_fixed_on_a_photo_weighs_another_images_map_as_it_says(embedded, coffee):
    """On a second image, a dense output is its dense map weighted by the photo's map (salient), by ones (the
    image) or by the box's mask (the left half of the 600x400 photo), over the weights' sum: in float64, from the
    dense head's maps of the two forwards."""
    photo_x, other_x = (
        torch.from_numpy(prepare_input(im, (224, 224), 14, embedded.mean, embedded.std))
        for im in (coffee, random_image(400, 600, seed=4))
    )
    with torch.no_grad():
        photo, other = embedded.forward(photo_x), embedded.forward(other_x)
        m0, m1 = (
            embedded.dense_map(o.hidden_states[-1], (16, 16), (224, 224))[0, 0].double().numpy() for o in (photo, other)
        )
        left = np.concatenate([np.ones((224, 112)), np.zeros((224, 112))], 1)
        for output, weights in [
            (Output("dense"), m0),
            (Output("dense", region="image"), np.ones((224, 224))),
            (Output("dense", box=(0, 0, 300, 400)), left),
        ]:
            reading = output.reading(embedded, photo, (224, 224), coffee.shape[:2])
            scores = [float(reading.of_output(other)[0]), float(reading.of_tokens(other.hidden_states[-1])[0])]
            expected = float((m1 * weights).sum() / weights.sum())
            np.testing.assert_allclose(scores, [expected, expected], rtol=1e-4, err_msg=str(output))
            assert not np.isclose(expected, (m0 * weights).sum() / weights.sum(), rtol=1e-3)  # another image


def test_a_class_out_of_range_and_what_a_model_lacks_are_named():
    model, other = tiny_vit(), tiny_dinov2()
    x = torch.from_numpy(prepare_input(random_image(40, 56), (40, 56), model.patch_size, model.mean, model.std))
    n = len(model.labels)
    with torch.no_grad():
        out = model.forward(x)
        for index in (0, n - 1):
            assert Output("class", index=index).reading(model, out, (40, 56), (40, 56)).output.index == index
        for bad in (-1, n):
            with pytest.raises(ValueError, match=re.escape(f"target must be a class index in [0, {n}), got {bad}")):
                Output("class", index=bad).reading(model, out, (40, 56), (40, 56))
    lacks = [
        (Output("text", text="a dog"), model, "has no text tower: a text target needs a full CLIP or SigLIP model"),
        (Output("class"), other, "is not a classifier: it has no classes; follow its readout or dense output instead"),
        (Output("dense"), model, "has no dense head: its output is not a map"),
    ]
    for output, lacking, said in lacks:
        with pytest.raises(ValueError, match=f"^{re.escape(f'{lacking.name} {said}')}$"):
            output.check(lacking)
    Output("readout").check(model)
    Output("text", text="a dog").check(FAMILIES["clip"]())
