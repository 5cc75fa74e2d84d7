"""What the app derives from one analysis and keeps for speed (`Derived`): the fused heads, the discard thresholds,
the rollouts, the layers' statistics, the dense map, the last layer's projections and the drawings; the background
warm that fills them; and the accounting by which the server's cache sheds them. The analysis itself stays a
record (`analysis.Analysis`): the CLI and a notebook use it without any of this."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass, fields

import numpy as np
import torch

from . import inside, maps
from .analysis import Analysis
from .outputs import Output


class Derived(Analysis):
    """One analysis with what is derived from it, kept: an `Analysis` (its fields are the record's own arrays,
    shared, not copied) whose methods answer from what it keeps where it has it. The record itself stays in
    `analysis`, for what is made from it afresh. The server's cache holds one per analysis; a forward fills it with
    what it rolled (`fill`), the background warm with the rest (`warm_step`); `held`, `nbytes` and the counters say
    what it keeps and did, `shed` and `forget` let it go."""

    # The rollout tab's discard slider: 0 %, 5 %, ..., 95 %, made all at once from one stack of fused heads.
    ROLLOUT_PERCENTS = tuple(range(0, 100, 5))

    def __init__(self, analysis: Analysis) -> None:
        for f in fields(Analysis):  # the record is frozen: its fields are set as its own __init__ sets them
            object.__setattr__(self, f.name, getattr(analysis, f.name))
        self.analysis = analysis
        self._fused: dict = {}  # {fusion: [L,N,N]}, a ratio off the slider's
        self._warm_rows: dict = {}  # {fusion: {layer: [N,N]}}, the warm's sweep
        self._thresholds: dict = {}  # {fusion: [L,100]}
        self._warm_thresholds: dict = {}  # {fusion: {layer: [100]}}, the same
        # {(fusion, percent discarded): [gh,gw]} toward its own output, {(start, fusion, percent): ...} another's
        self._rollouts: dict = {}  # (see `_key`)
        self._layer_stats: dict = {}
        self._fusion_locks = {f: threading.RLock() for f in maps.HEAD_FUSIONS}
        self._projections: inside.LayerProjections | None = None
        self._updates: dict = {}
        self._dense: list = []  # [] until made, then [the map or None]
        self._drawn: dict = {}
        self.pending = None  # the forward's roll, until made (`capture.PendingRoll`)
        self.rollouts_made = 0  # rollouts this made (not those a forward filled)
        self.rollouts_served = 0  # requests for a rollout answered from those kept
        self.layers_recomputed = 0  # layers whose scores or weights this recomputed from the hidden states

    @property
    def nbytes(self) -> int:
        """Memory held: the analysis' arrays and what is kept from them."""
        drawn = sum(a.nbytes for a in list(self._drawn.values()))
        rolled = sum(r.nbytes for r in list(self._rollouts.values()))
        dense = sum(d.nbytes for d in list(self._dense) if d is not None)
        pending = self.pending
        held = 0 if pending is None else pending.nbytes
        return self.analysis.nbytes + drawn + rolled + dense + held + self.shed_bytes

    @property
    def shed_bytes(self) -> int:
        """Memory that `shed` would free."""
        return self._sheddable(keep_mean=False)

    def _sheddable(self, keep_mean: bool) -> int:
        kept = ("mean",) if keep_mean else ()
        tensors = [t for f, t in list(self._fused.items()) if f not in kept]  # a request may add one meanwhile
        tensors += [t for f, rows in list(self._warm_rows.items()) if f not in kept for t in list(rows.values())]
        projections = self._projections  # read once: another thread may shed it
        tensors_bytes = sum(t.numel() * t.element_size() for t in tensors)
        return tensors_bytes + (projections.nbytes if projections is not None else 0)

    def shed(self, keep_mean: bool = False) -> int:
        """Drop what is recomputed from the hidden states when next asked (the fused heads: 50 MB a fusion at 448
        px, and a layer's projections), but the mean fusion, the rollout's default, with `keep_mean`; the
        thresholds and statistics made from them stay. Returns the bytes freed."""
        freed = self._sheddable(keep_mean)
        pending = self.pending
        if pending is not None and not keep_mean:
            freed += pending.nbytes
            pending.drop()
        elif pending is not None:  # its max and min, which the forward holds for it until it rolls the mean
            freed += pending.shed_held()
        for held in (self._fused, self._warm_rows):
            for fusion in [f for f in list(held) if not (keep_mean and f == "mean")]:  # list(): a request may add one
                held.pop(fusion, None)
        self._projections = None
        return freed

    def projections(self, layer: int) -> inside.LayerProjections:
        """`Analysis.projections`, of the last layer asked for kept: every layer's would multiply the memory."""
        p = self._projections
        if p is None or p.layer != layer:
            p = self._projections = self.analysis.projections(layer)
        return p

    def layer_updates(self, layer: int) -> inside.LayerUpdates:
        """`Analysis.layer_updates`, kept where the forward did not keep the norms."""
        if self.analysis.update_norms is not None:
            return self.analysis.layer_updates(layer)
        if layer not in self._updates:
            self._updates[layer] = self.analysis.layer_updates(layer)
        return self._updates[layer]

    def drawing(self, name: str, make):
        """What a drawing makes of this analysis once (`make()`, e.g. the image at display size), kept under `name`
        and counted in `nbytes`."""
        if name not in self._drawn:
            self._drawn[name] = make()
        return self._drawn[name]

    def settle(self) -> None:
        """Make the forward's rollouts and thresholds now, if it left them (`pending`)."""
        pending = self.pending
        if pending is not None:
            pending.run()

    def fused(self, head_fusion: str = "mean") -> torch.Tensor:
        """[L,N,N] head-fused attention (see `maps.fuse_heads`), made once per fusion and kept until `shed`:
        from the layers that the warm's sweep fused already, and the others recomputed. One lock per fusion: a
        request for one never waits while the background fills another."""
        self.settle()
        fused = self._fused.get(head_fusion)
        if fused is not None:
            return fused
        with self._fusion_locks.get(head_fusion, nullcontext()):  # fuse_heads refuses other names
            if head_fusion not in self._fused:
                self._fused[head_fusion] = self._fused_layers(head_fusion)
                self._warm_rows.pop(head_fusion, None)
            return self._fused[head_fusion]

    def _fused_layers(self, head_fusion: str, recompute: bool = True) -> torch.Tensor | None:
        """[L,N,N] the fused heads, made now where they are not kept (and not kept by this); None where a layer
        would be recomputed and `recompute` is False."""
        maps.check_fusion(head_fusion)  # before any layer is recomputed
        fused = self._fused.get(head_fusion)
        if fused is not None:
            return fused
        swept = dict(self._warm_rows.get(head_fusion, {}))  # a snapshot: a shed may take them meanwhile
        layers = [swept.get(i) for i in range(self.num_layers)]
        if not recompute and any(t is None for t in layers):
            return None
        for i in (i for i, t in enumerate(layers) if t is None):
            layers[i] = maps.fuse_heads(self._attention(i)[None], head_fusion)[0]
        return torch.stack(layers)

    def _attention(self, layer: int) -> torch.Tensor:
        """[H,N,N] `Analysis.device_attention`, counted in `layers_recomputed`."""
        self.layers_recomputed += 1
        return self.analysis.device_attention(layer)

    def _scores(self, layer: int) -> torch.Tensor:
        """[H,N,N] `Analysis.device_scores`, counted in `layers_recomputed`."""
        self.layers_recomputed += 1
        return self.analysis.device_scores(layer)

    def _key(self, head_fusion: str, percent: int, start: str | Output) -> tuple:
        own = start == self.start_of(None)
        return (head_fusion, percent) if own else (start, head_fusion, percent)

    def rollout(
        self, head_fusion: str = "mean", discard_ratio: float = 0.0, toward: Output | None = None
    ) -> np.ndarray:
        """`Analysis.rollout`, kept. A whole percent discarded is kept: the first request for one of
        `ROLLOUT_PERCENTS` (the rollout tab's slider) makes all of them at once from the same fused heads, which are
        then let go: a rollout is 4 kB at 448 px, the fused heads that make it 50 MB and a recomputation of every
        layer. Any other ratio (a sweep) is made from fused heads that are kept (`fused`) until a cache sheds them."""
        self.settle()
        start = self.start_of(toward)
        percent = round(discard_ratio * 100) if 0 <= discard_ratio < 1 else None  # NaN and others: refused below
        whole = percent is not None and percent < 100 and abs(percent - discard_ratio * 100) < 1e-9
        if whole and (percent > 0 or discard_ratio == 0):  # not 1e-12, which discards each layer's least
            key = self._key(head_fusion, percent, start)
            if key in self._rollouts:
                self.rollouts_served += 1
            else:
                with self._fusion_locks.get(head_fusion, nullcontext()):
                    if key not in self._rollouts:
                        self._roll(head_fusion, [percent], start=start)
            return self._rollouts[key].copy()
        first, keep = self.rollout_start(head_fusion, start)
        rolled = maps.rollout(self.fused(head_fusion), discard_ratio, None, first, keep)
        self.rollouts_made += 1
        return rolled[self.n_prefix :].reshape(self.grid)

    def _roll(self, head_fusion: str, percents: list[int], background: bool = False, start=None) -> None:
        """Keep the rollouts from `start` (see `Analysis.start_of`; default: the model's own output's) that discard
        `percents` and every one of `ROLLOUT_PERCENTS` not kept yet, made from one stack of fused heads: the kept
        one for a percent off the slider (a sweep reuses it), else one made and let go. A request holds the
        fusion's lock meanwhile. The background takes it only to store, and only rolls layers that its sweep
        fused: where a request or a cache took them meanwhile, it leaves the rest to the next request. The same
        rollouts made twice at once are the same."""
        start = self.start_of(None) if start is None else start
        # a request where every layer's fused heads are held (a forward's, see `hold`, or the warm's) rolls what it
        # asks alone, and leaves the slider's others to the warm or to their own requests, from the same rows
        held = len(self._warm_rows.get(head_fusion, ())) == self.num_layers
        todo = dict.fromkeys([*percents, *(() if held and not background else self.ROLLOUT_PERCENTS)])
        todo = [p for p in todo if self._key(head_fusion, p, start) not in self._rollouts]
        if not todo:
            return
        if background or set(percents) <= set(self.ROLLOUT_PERCENTS):
            fused = self._fused_layers(head_fusion, recompute=not background)
            if fused is None:
                return
        else:
            fused = self.fused(head_fusion)
        thresholds = self.percent_thresholds(head_fusion, fused)
        # the Rollout tab's note compares the rollouts toward the output and toward the readout at each discard:
        # both are made from the fused heads in hand, since a later request for the other would recompute them
        for each in (start,) if start == "readout" else (start, "readout"):
            left = [p for p in todo if self._key(head_fusion, p, each) not in self._rollouts]
            if left:
                chosen = thresholds.index_select(1, maps.indices(tuple(left), thresholds.device))
                first, keep = self.rollout_start(head_fusion, each)
                rows = maps.rollouts(fused, [p / 100 for p in left], chosen, first, keep)
                self.rollouts_made += len(left)
                self.fill(head_fusion, left, rows, each)

    def fill(self, head_fusion: str, percents: list[int], rows: np.ndarray, start=None, thresholds=None) -> None:
        """Keep the rollouts [R,N] from `start` (default: the model's own output's) that discard `percents`, as
        maps over the patches: copies, not views of a batch's rows; and the fusion's [L,100] discard `thresholds`
        where given (a forward that rolled made both, see `capture.ForwardFusions`)."""
        start = self.start_of(None) if start is None else start
        if thresholds is not None:
            self._thresholds[head_fusion] = thresholds.clone()
        patches = rows[:, self.n_prefix :].reshape(len(rows), *self.grid)
        made = {self._key(head_fusion, p, start): m.copy() for p, m in zip(percents, patches, strict=True)}
        self._rollouts.update(made)
        if self._rolled(head_fusion):
            self._warm_rows.pop(head_fusion, None)  # its rollouts are made: the rows are not needed again

    def hold(self, head_fusion: str, rows: dict) -> None:
        """Keep a forward's fused heads of `head_fusion` ({layer: [N,N]}, see `capture.ForwardFusions.HELD`) as the
        warm's sweep keeps its rows, until its slider's rollouts are made: its first rollout recomputes no layer."""
        with self._fusion_locks[head_fusion]:
            if not self._rolled(head_fusion) and head_fusion not in self._fused:
                self._warm_rows.setdefault(head_fusion, {}).update(rows)

    def _rolled(self, head_fusion: str) -> bool:
        """Whether every rollout of the slider toward the model's own output is kept for this fusion."""
        return all((head_fusion, p) in self._rollouts for p in self.ROLLOUT_PERCENTS)

    def percent_thresholds(self, head_fusion: str = "mean", fused: torch.Tensor | None = None) -> torch.Tensor:
        """`Analysis.percent_thresholds`, counted once per fusion: from the warm's sweep, `fused` where the caller
        has them, or the fused heads."""
        self.settle()
        with self._fusion_locks.get(head_fusion, nullcontext()):  # the warm and a request may ask at once
            if head_fusion not in self._thresholds:
                swept = self._warm_thresholds.pop(head_fusion, {})
                if len(swept) == self.num_layers:  # each layer's, from the warm's sweep
                    self._thresholds[head_fusion] = torch.stack([swept[i] for i in range(self.num_layers)])
                else:
                    fused = self._fused_layers(head_fusion) if fused is None else fused
                    self._thresholds[head_fusion] = self.analysis.percent_thresholds(head_fusion, fused)
            return self._thresholds[head_fusion]

    def warm(self) -> None:
        """Compute now what other views read first (see `warm_step`)."""
        step = 0
        while self.warm_step(step):
            step += 1

    def warm_step(self, step: int) -> bool:
        """One step of filling what other views read first: 0, the rollouts that the forward left (`settle`) and
        the dense map from the forward's tokens (the output view, the rollout's note); 1 to L, each layer's scores
        recomputed once for its statistics where no request made them (the attention view's numbers, and all of
        them the heads view), its heads fused by mean, max and min where no forward fused them, with their discard
        thresholds; then for each fusion, the rollouts of the tab's slider made from the swept layers, which are
        then let go. False when there is no such step. The app runs them one by one in the background, between
        requests, so that no control's first touch computes them."""
        layers = self.num_layers
        if step == 0:
            self.settle()
            self.dense_map()
        elif step <= layers:
            self._sweep(step - 1)
        elif step - layers <= len(maps.HEAD_FUSIONS):
            fusion = maps.HEAD_FUSIONS[step - layers - 1]
            try:
                if len(self._warm_rows.get(fusion, ())) == layers:  # under no lock: a request never waits for it
                    self._roll(fusion, [], background=True)
                elif len(self._warm_thresholds.get(fusion, ())) == layers:  # a cache shed the rows: a request
                    self.percent_thresholds(fusion)  # makes the rollouts; the thresholds are gathered now
            finally:
                self._warm_rows.pop(fusion, None)
        else:
            return False
        return True

    def _sweep(self, layer: int) -> None:
        """The warm's step for one layer: its scores recomputed once give its statistics, and where a fusion has no
        row of it (the forward's, see `hold`), its heads fused that way, with their discard thresholds, held until
        the fusion's rollouts are made. It takes a fusion's lock only to store them: a request never waits for it."""
        attention = None
        if layer not in self._layer_stats:
            scores = None if self.analysis.kept_attentions is not None else self._scores(layer)
            self.layer_statistics(layer, scores=scores)
            unfused = [f for f in maps.HEAD_FUSIONS if not self._rolled(f) and f not in self._fused]
            if scores is not None and any(layer not in self._warm_rows.get(f, {}) for f in unfused):
                attention = inside.attention_weights(scores)  # and the scores go now: 50 MB at 448 px, 12 heads
            del scores
        for fusion in maps.HEAD_FUSIONS:
            if self._rolled(fusion):
                continue  # a request made them already
            fused, kept = self._fused.get(fusion), self._warm_rows.get(fusion, {}).get(layer)
            if fused is not None:
                row = fused[layer : layer + 1]
            elif kept is not None:  # a forward's (see `hold`)
                row = kept[None]
            else:
                attention = self._attention(layer) if attention is None else attention
                row = maps.fuse_heads(attention[None], fusion)
            thresholds = None if fusion in self._thresholds else maps.discard_thresholds(row, self.PERCENTS)[0]
            with self._fusion_locks[fusion]:
                if thresholds is not None and fusion not in self._thresholds:
                    self._warm_thresholds.setdefault(fusion, {})[layer] = thresholds
                if fused is None and kept is None and not self._rolled(fusion):  # a request may have made them
                    self._warm_rows.setdefault(fusion, {})[layer] = row[0]

    def layer_statistics(self, layer: int, *, scores: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`Analysis.layer_statistics`, computed once per layer."""
        if layer not in self._layer_stats:
            self.layers_recomputed += scores is None and self.analysis.kept_attentions is None
            self._layer_stats[layer] = self.analysis.layer_statistics(layer, scores=scores)
        return self._layer_stats[layer]

    def dense_map(self) -> np.ndarray | None:
        """`Analysis.dense_map`: the captured one, or made once."""
        if self.analysis.captured_dense:
            return self.analysis.captured_dense[0]
        if not self._dense:
            self._dense[:] = [self.analysis.dense_map()]
        return self._dense[0]

    def held(self) -> Held:
        """What this keeps now (see `Held`)."""
        projections = self._projections
        return Held(
            rollouts=frozenset(self._rollouts),
            rollout_bytes=sum(r.nbytes for r in list(self._rollouts.values())),
            fused=frozenset(self._fused),
            thresholds=frozenset(self._thresholds),
            warm_rows={f: len(rows) for f, rows in list(self._warm_rows.items())},
            warm_thresholds={f: len(t) for f, t in list(self._warm_thresholds.items())},
            warm_storage_bytes=sum(
                t.untyped_storage().nbytes() for rows in list(self._warm_rows.values()) for t in list(rows.values())
            ),
            statistics=frozenset(self._layer_stats),
            projections=None if projections is None else projections.layer,
            dense_map=bool(self._dense) or bool(self.analysis.captured_dense),
            pending_roll=self.pending is not None,
        )

    def forget(self, rollouts: bool = False, thresholds: bool = False, statistics: bool = False) -> None:
        """Drop derived results that are made again when next asked: the kept rollouts, the discard thresholds
        (with the warm's per-layer ones), the layers' statistics. As a `Derived` that never had them behaves."""
        if rollouts:
            self._rollouts.clear()
        if thresholds:
            self._thresholds.clear()
            self._warm_thresholds.clear()
        if statistics:
            self._layer_stats.clear()


@dataclass(frozen=True)
class Held:
    """What a `Derived` keeps, for a cache's accounting and for tests.

    rollouts: the keys of its kept rollouts ((fusion, percent) toward its own output, (start, fusion, percent)
    toward another); rollout_bytes: their memory. fused: the fusions whose [L,N,N] fused heads are kept.
    thresholds: the fusions whose [L,100] discard thresholds are kept. warm_rows, warm_thresholds: {fusion: layers}
    the background warm swept and holds until it rolls (or the forward held, see `hold`); warm_storage_bytes: the
    bytes of the storage behind each of those rows, more than the row's own where it is a view of a larger tensor.
    statistics: the layers whose statistics are kept.
    projections: the layer whose projections are kept, or None. dense_map: whether the dense head's map is made.
    pending_roll: whether it holds a forward's fused heads, to roll when first needed (`capture.PendingRoll`).
    """

    rollouts: frozenset
    rollout_bytes: int
    fused: frozenset
    thresholds: frozenset
    warm_rows: dict
    warm_thresholds: dict
    warm_storage_bytes: int
    statistics: frozenset
    projections: int | None
    dense_map: bool
    pending_roll: bool = False
