"""How the head dropdowns (and the API) name a head: an index, the mean of the heads or all of them in a grid."""

from __future__ import annotations

from ..models import VitModel
from ..views.attention import ALL_HEADS

# How the head dropdown (and the API) says "the mean of the heads" and views.attention.ALL_HEADS, besides head indices
MEAN_OF_HEADS_VALUE, ALL_HEADS_VALUE = -1, -2


def head_choices(model: VitModel) -> list[tuple[str, int]]:
    return [("mean of heads", MEAN_OF_HEADS_VALUE), ("all heads (grid)", ALL_HEADS_VALUE)] + [
        (f"head {h}", h) for h in range(model.num_heads)
    ]


def head_arg(head: int | None, model: VitModel) -> int | str | None:
    """The head dropdown's value -> what `views.attention.attention_view` takes (an index, None or ALL_HEADS)."""
    if head is None or head == MEAN_OF_HEADS_VALUE:
        return None
    if head == ALL_HEADS_VALUE:
        return ALL_HEADS
    if not 0 <= int(head) < model.num_heads:
        raise ValueError(f"head must be -1 (mean), -2 (all) or in [0, {model.num_heads}), got {head}")
    return int(head)
