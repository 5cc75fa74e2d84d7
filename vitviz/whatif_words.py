"""The What-if's sentences, and the exercises' that ask where a head looks: what switching heads off changes
(`ablation_words`, `importance_words`), how close a guess of the most important head came (`guess_words`) and of
the patch a head looks at most (`look_words`, whose twin is the site's page/guess.js), each made from the numbers
it describes."""

from __future__ import annotations

import numpy as np

from .ablation import HEAD_MODES
from .outputs import ClassLogit
from .sentences import fixed


def percent_words(share: float) -> str:
    """A share as a percentage with the digits its size needs: "12 %", "3.4 %", "0.05 %"."""
    value = abs(share) * 100
    digits = 0 if value >= 10 else 1 if value >= 1 else 2
    return f"{value:.{digits}f} %"


def ablation_words(a) -> str:
    """The difference an ablation (`ablation.Ablated`) makes to the output, in words and numbers, and how sure it
    is: "Switching off layer 9's head 3 lowers the dense head's map … by 12 % on this photo, from 0.412 to 0.363."
    A change within float32 rounding (`Ablated.within_noise`) is said to be one, with no direction."""
    m = a.model
    done = a.ablation.phrase(m)
    done, name = done[0].upper() + done[1:], a.output_read.name(m)
    sure = (
        f"One forward ablated against one not, on this photo: a measurement, exact to float32 rounding "
        f"(±{a.noise:.1g}), not a rule for other photos."
    )
    if a.within_noise:
        return (
            f"{done} leaves {name} as it was on this photo: it moves by {abs(a.change):.1g}, within float32 "
            f"rounding (±{a.noise:.1g}), so the output does not need it here (other parts may do its work). "
            "A measurement on this photo, not a rule for other photos."
        )
    verb = "raises" if a.change > 0 else "lowers"
    by = "" if a.relative is None else f" by {percent_words(a.relative)}"
    said = f"{done} {verb} {name}{by} on this photo, from {a.before:.3g} to {a.after:.3g}"
    read = a.output_read  # a class's logit: its probability too, which a reader knows
    if a.logits is not None and isinstance(read, ClassLogit) and read.index is not None:
        index = read.index
        before, after = (float(np.exp(x[index] - np.logaddexp.reduce(x))) for x in (a.baseline.logits, a.logits))
        said += f" (its probability {before:.1%} → {after:.1%})".replace("%", " %")
    return f"{said}. {sure}"


def importance_change(grid, value: float) -> str:
    """A head's change of the output on the importance grid (`head_importance.Importance`), signed: "−12 %" of the
    unablated output, or "+0.0312" in the output's units where that is near 0."""
    if grid.relative is None:
        return f"{value:+.3g}"
    return ("+" if value > 0 else "−") + percent_words(value / abs(grid.before))


def importance_words(grid, model) -> str:
    """The head that matters most to the output on this photo (`head_importance.Importance`), in words and numbers,
    and how sure it is: "Switching off layer 11's head 2 alone lowers … by 31 %, the largest change of the 72
    heads; the next is layer 10's head 4 (−12 %)." Every change within float32 rounding is said to be one."""
    (layer, head, change), (layer2, head2, change2) = grid.ranked()[:2]
    name, heads = grid.output.name(model), grid.change.size
    if abs(change) <= grid.noise:
        return (
            f"No head alone moves {name} on this photo beyond float32 rounding (±{grid.noise:.1g}): each one's "
            "work is done by others when it is off. A measurement on this photo, not a rule for other "
            "photos."
        )
    verb = "raises" if change > 0 else "lowers"
    by = importance_change
    return (
        f"Switching off layer {layer}'s head {head} alone {verb} {name} the most of the {heads} heads on this "
        f"photo: {by(grid, change)}, from {grid.before:.3g} to {grid.before + change:.3g}; the next is layer "
        f"{layer2}'s head {head2} ({by(grid, change2)}). Each head was {HEAD_MODES[grid.mode]} alone, exact "
        "to float32 rounding: a measurement on this photo, not a rule for other photos."
    )


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def guess_words(grid, model, layer: int, head: int) -> str:
    """How close a guess of the head that matters most (layer, head) came, on the importance grid
    (`head_importance.Importance`): its change, its rank among the heads (ties within float32 rounding shared,
    `Importance.rank`) and its change against the top head's, in one sentence, and how sure that is."""
    heads, name = grid.change.size, grid.output.name(model)
    change = float(grid.change[layer, head])
    top_layer, top_head, top = grid.ranked()[0]
    sure = (
        f"Each head was {HEAD_MODES[grid.mode]} alone on this photo, exact to float32 rounding "
        f"(±{grid.noise:.1g}; heads within it of each other share a rank): a measurement on this photo, not a "
        "rule for other photos."
    )
    if abs(top) <= grid.noise:
        return (
            f"You guessed **layer {layer}, head {head}**, but no head alone moves {name} beyond float32 rounding "
            f"on this photo: all {heads} heads share the 1st place, your guess too. {sure}"
        )
    rank, tied = grid.rank(layer, head)
    place = f"ranks **{ordinal(rank)} of the {heads} heads**"
    if tied:
        place = f"shares the **{ordinal(rank)} place of the {heads} heads** with {tied} other{'s' * (tied > 1)}"
    if abs(change) <= grid.noise:
        moved = f"leaves {name} as it was (it moves by {abs(change):.1g}, within float32 rounding)"
    else:
        verb = "raises" if change > 0 else "lowers"
        moved = f"{verb} {name} by {importance_change(grid, change)[1:]}, from {grid.before:.3g} to "
        moved += f"{grid.before + change:.3g}"
    if (top_layer, top_head) == (layer, head) or rank == 1:
        against = f"the largest change is {importance_change(grid, top)} (layer {top_layer}, head {top_head})"
    else:
        against = (
            f"the head that matters most, **layer {top_layer}, head {top_head}**, moves it by "
            f"{importance_change(grid, top)}, so yours does {percent_words(change / top)} of its change"
        )
    return (
        f"You guessed **layer {layer}, head {head}**. Switched off alone, it {moved}; it {place} by the size of "
        f"that change, and {against}. {sure}"
    )


def look_pct(share: float) -> str:
    """A share of a query's attention as the site's guessing step says it (its twin: page/guess.js'
    vitvizLookPct): "12 %", "3.4 %", "0.05 %" or "under 0.01 %", rounded as the browser's toFixed rounds (`fixed`)."""
    value = abs(share) * 100
    if value < 0.005:
        return "under 0.01 %"
    return f"{fixed(value, 0 if value >= 10 else 1 if value >= 1 else 2)} %"


def look_words(
    weights: np.ndarray, prefix, grid: tuple[int, int], layer: int, head: int, query: int, guessed: int | None = None
) -> str:
    """The static site's exercise "guess where a head looks", string for string as its page says it (twin:
    page/guess.js' vitvizLookWords): before a guess (`guessed` None) what to do; after it, the weight that layer
    `layer`'s head `head` gives the guessed patch from the query patch `query` (patches from 0, row by row), its
    rank among all the keys (1 + the keys that get more), the head's top patch, how far it lies from the guess and
    what share of its weight the guess gets, and the prefix tokens (`prefix`, their names) that get more than any
    patch. weights [N]: the head's attention row of the query over every key, the prefix tokens first."""
    gw = grid[1]

    def patch(p: int) -> str:
        return f"patch {p} (row {p // gw}, column {p % gw})"

    if guessed is None:
        return (
            "A map shows where a head looks once it is drawn; before you see this one, guess. Take **layer "
            f"{layer}, head {head}** (choose another above) and its query, {patch(query)}, marked with a white "
            "square: which patch do you think this head attends to most from there? **Click it on the photo.** "
            "Then the page draws the head's real attention and says how close you came."
        )
    w = np.asarray(weights, np.float64)
    patches = w[len(prefix) :]
    top = int(np.argmax(patches))
    mine, best = float(patches[guessed]), float(patches[top])
    rank = 1 + int((w > mine).sum())
    said = (
        f"You clicked **{patch(guessed)}**. Layer {layer}, head {head} gives it **{look_pct(mine)}** of the query's "
        f"attention: it ranks **{ordinal(rank)} of the {len(w)} keys**."
    )
    if top == guessed:
        said += " No patch gets more: you found the head's top patch."
    else:
        rows, columns = abs(top // gw - guessed // gw), abs(top % gw - guessed % gw)
        away = " and ".join(f"{k} {unit}{'s' * (k != 1)}" for k, unit in ((rows, "row"), (columns, "column")) if k)
        share = f": yours gets {look_pct(mine / best)} of its weight" if best > 0 else ""
        said += f" The head's top patch is **{patch(top)}**, with {look_pct(best)}, {away} from yours{share}."
    over = [f"{name} ({look_pct(w[i])})" for i, name in enumerate(prefix) if w[i] > best]
    if over:
        tokens = "a token" if len(over) == 1 else "tokens"
        said += f" More goes to {' and '.join(over)}, {tokens} not on the photo, than to any patch."
    outlined = "your guess" if top == guessed else "your guess and the top patch"
    return (
        f"{said} The picture is the head's real attention from the query (the white square), {outlined} outlined "
        "in cyan. Click another patch to compare it, or choose another head and guess again."
    )
