"""Plotly figures. They take arrays, never a model."""

from __future__ import annotations

import textwrap

import numpy as np
import plotly.graph_objects as go

from .render import DIVERGING

# Every figure's text: 15 px, which the projector mode's 1.25 zoom makes 18.75 px, readable from the back row
FONT = dict(size=15)


def wrapped(text: str, width: int = 36) -> str:
    """A title in lines of at most `width` characters: Plotly never wraps a title, it cuts it at the edge."""
    return "<br>".join(textwrap.wrap(text, width))


# render's "diverging" as a Plotly colour scale over [0, 1]: blue at 0, near-white at 0.5, red at 1
DIVERGING_SCALE = [[0.0, f"rgb{DIVERGING[0]}"], [0.5, f"rgb{DIVERGING[1]}"], [1.0, f"rgb{DIVERGING[2]}"]]


def pos_embed_grid(sim: np.ndarray, max_tiles: int = 12) -> go.Figure:
    """Grid of grids (ViT paper, Fig. 7 left): tile (i, j) is position (i, j)'s similarity map, a signed cosine
    on the diverging scale centred at 0 (blue -1, white 0, red 1).

    sim: [g,g,g,g]. Large grids show every k-th position so at most `max_tiles` per side
    are drawn; each tile keeps its full g x g resolution.
    """
    g = sim.shape[0]
    step = max(1, -(-g // max_tiles))
    rows = list(range(0, g, step))
    gap = 1
    side = len(rows) * (g + gap) - gap
    sheet = np.full((side, side), np.nan, np.float32)
    custom = np.full((side, side, 4), -1, np.int32)
    yy, xx = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
    for ti, r in enumerate(rows):
        for tj, c in enumerate(rows):
            y0, x0 = ti * (g + gap), tj * (g + gap)
            sheet[y0 : y0 + g, x0 : x0 + g] = sim[r, c]
            custom[y0 : y0 + g, x0 : x0 + g] = np.stack([np.full_like(yy, r), np.full_like(xx, c), yy, xx], -1)
    fig = go.Figure(
        go.Heatmap(
            z=sheet,
            customdata=custom,
            colorscale=DIVERGING_SCALE,
            zmin=-1,
            zmid=0,
            zmax=1,
            colorbar=dict(title="cosine"),
            hovertemplate="position (row %{customdata[0]}, column %{customdata[1]})<br>"
            "vs (row %{customdata[2]}, column %{customdata[3]})<br>similarity %{z:.3f}<extra></extra>",
        )
    )
    shown = f"every {step}th position" if step > 1 else "every position"
    fig.update_layout(
        title=wrapped(f"Position-embedding similarity, {g}x{g} grid ({shown})", 24),  # a phone's width
        xaxis=dict(visible=False),
        yaxis=dict(visible=False, autorange="reversed", scaleanchor="x"),
        margin=dict(l=10, r=10, t=90, b=10),
        height=560,
        font=FONT,
    )
    return fig


# Okabe and Ito's colour-blind-safe palette, and a marker shape per head: heads stay apart on a projector too
HEAD_COLOURS = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
HEAD_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "triangle-down")


def head_style(h: int) -> dict:
    return dict(color=HEAD_COLOURS[h % len(HEAD_COLOURS)], symbol=HEAD_SYMBOLS[h % len(HEAD_SYMBOLS)])


def attention_distance(dist: np.ndarray, patch: int) -> go.Figure:
    """Mean attention distance of every head against depth (ViT paper, Fig. 7 right). dist: [L,H]."""
    layers, heads = dist.shape
    fig = go.Figure()
    for h in range(heads):
        fig.add_scatter(
            x=np.arange(layers),
            y=dist[:, h],
            mode="markers",
            name=f"head {h}",
            marker=dict(size=10, opacity=0.9, **head_style(h)),
            hovertemplate=f"layer %{{x}}, head {h}<br>%{{y:.0f}} px<extra></extra>",
        )
    fig.update_layout(
        title="Mean attention distance per head",
        xaxis=dict(title="layer (depth)", dtick=1),
        yaxis=dict(title=f"pixels (one patch = {patch} px)", rangemode="tozero"),
        # the heads' legend in a row under the chart: beside it, it would take half of a narrow column
        legend=dict(orientation="h", yanchor="top", y=-0.22, x=0),
        margin=dict(l=10, r=10, t=50, b=10),
        height=480,
        font=FONT,
    )
    return fig


def layer_head_heatmap(values: np.ndarray, title: str, unit: str) -> go.Figure:
    """A layer x head heatmap, e.g. attention entropy. values: [L,H]."""
    layers, heads = values.shape
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=[f"head {h}" for h in range(heads)],
            y=[f"layer {i}" for i in range(layers)],
            colorscale="Viridis",
            colorbar=dict(title=unit),
            hovertemplate="%{y}, %{x}<br>%{z:.2f} " + unit + "<extra></extra>",
        )
    )
    fig.update_layout(
        title=wrapped(title),
        yaxis=dict(autorange="reversed"),
        margin=dict(l=10, r=10, t=70, b=10),
        height=460,
        font=FONT,
    )
    return fig


def depth_cloud(depth: np.ndarray, rgb: np.ndarray, max_side: int = 160) -> go.Figure:
    """The image as a 3-D point cloud: each pixel lifted by its relative inverse depth.

    depth: [H,W] (larger = nearer); rgb: [H,W,3] uint8, the same grid. Both are subsampled
    so that the longest side has at most `max_side` points.
    """
    h, w = depth.shape
    step = max(1, -(-max(h, w) // max_side))
    d = depth[::step, ::step]
    c = rgb[::step, ::step].reshape(-1, 3)
    yy, xx = np.mgrid[0:h:step, 0:w:step]
    fig = go.Figure(
        go.Scatter3d(
            x=xx.ravel(),
            y=d.ravel(),
            z=-yy.ravel(),
            mode="markers",
            marker=dict(size=2, color=[f"rgb({r},{g},{b})" for r, g, b in c]),
            hovertemplate="pixel (x %{x}, y %{customdata})<br>nearness %{y:.3g}<extra></extra>",
            customdata=yy.ravel(),
        )
    )
    fig.update_layout(
        title="Your image lifted by its depth (drag to turn it)",
        scene=dict(
            xaxis=dict(title="x (pixels)"),
            yaxis=dict(title="nearness"),
            zaxis=dict(title="", showticklabels=False),
            aspectmode="manual",
            aspectratio=dict(x=w / max(h, w) * 1.5, y=0.8, z=h / max(h, w) * 1.5),
            camera=dict(eye=dict(x=0.6, y=-1.9, z=0.5), up=dict(x=0, y=0, z=1)),
        ),
        margin=dict(l=0, r=0, t=40, b=0),
        height=520,
        font=FONT,
    )
    return fig


def vector_strips(groups: list[tuple[str, list[np.ndarray], list[str]]], title: str) -> go.Figure:
    """Vectors as coloured strips, one per row (blue negative, white 0, red positive), in groups stacked
    top to bottom that each get their own colour scale: e.g. ("q, k", [q, k_1, ...], labels), ("v", ...).
    Each vector is [d]. Built in one go (no make_subplots): it is redrawn on every click."""
    total, gap, top, data, layout = sum(len(rows) for _, rows, _ in groups), 0.08, 1.0, [], {}
    for i, (name, rows, labels) in enumerate(groups):
        z = np.stack(rows)
        limit = float(np.abs(z).max()) or 1.0
        share = (1 - gap * (len(groups) - 1)) * len(rows) / total
        axis = "" if i == 0 else str(i + 1)
        data.append(
            dict(
                type="heatmap",
                z=z,
                y=labels,
                xaxis="x",
                yaxis=f"y{axis}",
                colorscale="RdBu_r",
                zmin=-limit,
                zmax=limit,
                hovertemplate="%{y}<br>component %{x}: %{z:.3f}<extra></extra>",
                colorbar=dict(title=dict(text=name), thickness=12, len=share, y=top - share / 2),
            )
        )
        layout[f"yaxis{axis}"] = dict(domain=[max(0.0, top - share), min(1.0, top)], autorange="reversed")
        top -= share + gap
    layout["xaxis"] = dict(title=dict(text="component (0 … d−1)"), anchor=f"y{len(groups) if len(groups) > 1 else ''}")
    # the title just above the strips, under the Plot's own label (two lines on a projector), which sits on the
    # top margin where Plotly puts a title by default
    title = dict(text=title, y=1, yref="paper", yanchor="bottom", pad=dict(b=6))
    return go.Figure(
        data=data,
        layout=dict(title=title, margin=dict(l=10, r=10, t=90, b=10), height=180 + 34 * total, font=FONT, **layout),
    )


def head_and_layer_bars(shares: np.ndarray, head: int, updates: dict[str, tuple[float, float]], layer: int):
    """Two bar charts: each head's share of the attention output for one query (the chosen head
    highlighted), and the sizes of the residual stream and the layer's two updates, for the query
    and averaged over all tokens. shares: [H]; updates: {name: (query's norm, mean norm)}."""
    names = list(updates)
    colours = ["#d62728" if h == head else "#7f7f7f" for h in range(len(shares))]
    data = [
        dict(
            type="bar",
            x=[f"h{h}" for h in range(len(shares))],
            y=shares,
            marker=dict(color=colours),
            showlegend=False,
            hovertemplate="%{x}: %{y:.1%}<extra></extra>",
            xaxis="x",
            yaxis="y",
        )
    ]
    for i, who in enumerate(("this token", "mean over tokens")):
        data.append(
            dict(
                type="bar",
                x=names,
                y=[updates[n][i] for n in names],
                name=who,
                xaxis="x2",
                yaxis="y2",
                hovertemplate="%{x}: %{y:.2f}<extra>" + who + "</extra>",
            )
        )
    titles = [("Each head's share", 0.185), (f"Layer {layer}: sizes ‖·‖", 0.735)]
    layout = dict(
        xaxis=dict(domain=[0, 0.37], tickangle=0),
        yaxis=dict(tickformat=".0%"),
        xaxis2=dict(domain=[0.47, 1], tickangle=0),  # its three names side by side, on a phone too
        yaxis2=dict(anchor="x2"),
        annotations=[
            dict(text=t, x=x, y=1.02, xref="paper", yref="paper", showarrow=False, yanchor="bottom", xanchor="center")
            for t, x in titles
        ],
        barmode="group",
        legend=dict(orientation="h", y=-0.2),
        margin=dict(l=10, r=10, t=90, b=10),  # room for the Plot's own label above the titles
        height=420,
        font=FONT,
    )
    return go.Figure(data=data, layout=layout)


def distance_with_spread(mean: np.ndarray, std: np.ndarray, title: str) -> go.Figure:
    """Mean attention distance of every head against depth, with its spread over images as error bars.
    mean, std: [L,H] in pixels."""
    layers, heads = mean.shape
    fig = go.Figure()
    for h in range(heads):
        fig.add_scatter(
            x=np.arange(layers) + (h - (heads - 1) / 2) * 0.06,  # heads side by side within a layer
            y=mean[:, h],
            error_y=dict(type="data", array=std[:, h], thickness=1),
            mode="markers",
            name=f"head {h}",
            hovertemplate=f"layer %{{x:.0f}}, head {h}<br>%{{y:.0f}} px<extra></extra>",
        )
    fig.update_layout(
        title=wrapped(title, 60),
        xaxis=dict(title="layer (depth)", dtick=1),
        yaxis=dict(title="mean attention distance (pixels)", rangemode="tozero"),
        height=520,
        font=FONT,
    )
    return fig


def faithfulness_curves(results: list, names: list[str]) -> go.Figure:
    """Deletion (top) and insertion (below) curves of each map in `results` (deletion.Faithfulness, one name
    each), with the middle 90 % of the random orders at each step as a band. Putting patches back in a random order
    is deleting them in the reversed order, so the insertion band is the deletion band read from the other end. The
    verdict ranks whole areas, not steps, and the titles say how many orders a faithful map's area must be below.
    Stacked, not side by side, so that each keeps the page's width on a phone."""
    from plotly.subplots import make_subplots

    from .odds import needed

    first = results[0]
    k = len(first.random)
    rank = f"area below {needed(k)} of {k} random orders = faithful" if needed(k) <= k else "too few random orders"
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.24,
        subplot_titles=(
            f"<b>Deletion</b>: top patches hidden first<br>(lower is better; {rank})",
            "<b>Insertion</b>: top patches shown first<br>(higher is better)",
        ),
    )
    x = 100 * first.fractions
    for row, band in ((1, first.random), (2, first.random[:, ::-1])):
        fig.add_scatter(
            x=x,
            y=np.percentile(band, 95, 0),
            mode="lines",
            line=dict(width=0),
            showlegend=False,
            hoverinfo="skip",
            row=row,
            col=1,
        )
        fig.add_scatter(
            x=x,
            y=np.percentile(band, 5, 0),
            mode="lines",
            line=dict(width=0),
            fill="tonexty",
            fillcolor="rgba(128,128,128,0.3)",
            name=f"{k} random orders (middle 90 % at each step)",
            showlegend=row == 1,
            legendgroup="random",
            hoverinfo="skip",
            row=row,
            col=1,
        )
    dashes = ("solid", "dash", "dot")
    for i, (r, name) in enumerate(zip(results, names, strict=True)):
        style = dict(color=HEAD_COLOURS[(4, 5, 2)[i % 3]], width=4, dash=dashes[i % 3])
        for row, curve, auc in ((1, r.deletion, r.deletion_auc), (2, r.insertion, r.insertion_auc)):
            hover = f"{name}<br>%{{x:.0f}} %: %{{y:.4g}} (area {auc:.3g})<extra></extra>"
            fig.add_scatter(
                x=x,
                y=curve,
                mode="lines+markers",
                line=style,
                marker=dict(size=8),
                name=name,
                legendgroup=name,
                showlegend=row == 1,
                row=row,
                col=1,
                hovertemplate=hover,
            )
    fig.update_xaxes(title="patches hidden (%)", row=1, col=1)
    fig.update_xaxes(title="patches shown (%)", row=2, col=1)
    fig.update_yaxes(title=wrapped(first.target, 24))
    fig.update_layout(height=760, margin=dict(l=10, r=10, t=90, b=10), font=FONT, legend=dict(orientation="h", y=-0.12))
    fig.update_annotations(font_size=15)
    return fig


def layer_lens(values: np.ndarray, labels: list[str] | None, k: int = 5) -> go.Figure:
    """The lens through depth. values: [L,C] class probabilities (the last layer's top k classes, one line each)
    or [L] the readout's cosine with the last layer's."""
    fig = go.Figure()
    layers = np.arange(len(values))
    if values.ndim == 1:
        fig.add_scatter(
            x=layers,
            y=values,
            mode="lines+markers",
            name="readout",
            line=dict(width=4),
            marker=dict(size=10),
            hovertemplate="layer %{x}: cosine %{y:.3f}<extra></extra>",
        )
        title, axis = "The readout, each layer's against the last's", "cosine similarity with the last layer"
    else:
        for i, c in enumerate(np.argsort(-values[-1])[:k]):
            fig.add_scatter(
                x=layers,
                y=values[:, c],
                mode="lines+markers",
                name=labels[c],
                line=dict(width=4, color=HEAD_COLOURS[i]),
                marker=dict(size=10, **head_style(i)),
                hovertemplate=f"layer %{{x}}: {labels[c]} %{{y:.1%}}<extra></extra>",
            )
        title, axis = "Each layer's tokens read by the classifier", "probability"
    fig.update_layout(
        title=title,
        xaxis=dict(title="layer (depth)", dtick=1),
        yaxis=dict(title=axis),
        height=420,
        margin=dict(l=10, r=10, t=50, b=10),
        font=FONT,
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


def sanity_correlation(randomised: np.ndarray, correlation: np.ndarray, name: str) -> go.Figure:
    """A sanity check's cascade: the map's rank correlation with the original against how many of the last layers
    are random (Adebayo et al. 2018, Fig. 2's curves)."""
    fig = go.Figure()
    hover = "last %{x} layers random: ρ %{y:.2f}<extra></extra>"
    fig.add_scatter(
        x=randomised,
        y=correlation,
        mode="lines+markers",
        name=name,
        line=dict(width=4),
        marker=dict(size=10),
        hovertemplate=hover,
    )
    fig.add_hline(y=0, line=dict(color="grey", dash="dot"))
    fig.update_layout(
        title="The map against the original as layers turn random",
        height=380,
        font=FONT,
        xaxis=dict(title="last layers randomised", dtick=1),
        margin=dict(l=10, r=10, t=50, b=10),
        yaxis=dict(title="rank correlation ρ", range=[-1.05, 1.05]),
    )
    return fig


def map_grid(maps: np.ndarray, titles: list[str], cols: int = 3, shared: bool = True, side: int = 64) -> go.Figure:
    """Small maps side by side, each with its title: maps [K,h,w] (resized to at most `side` cells a side).
    Three a row: on a phone four titles of 16 px ran into each other, and the maps shrank to 50 px.
    shared: one colour scale for all (maps of one quantity); else each scaled to its own min-max (maps compared
    by their order, such as a sanity check's)."""
    import cv2
    from plotly.subplots import make_subplots

    k = len(maps)
    rows = -(-k // cols)
    h, w = maps.shape[1:]
    scale = min(1.0, side / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = [cv2.resize(m.astype(np.float32), size, interpolation=cv2.INTER_AREA) for m in maps]
    if not shared:
        small = [(m - m.min()) / max(float(m.max() - m.min()), 1e-12) for m in small]
    lo, hi = min(float(m.min()) for m in small), max(float(m.max()) for m in small)
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.03, vertical_spacing=0.1 / rows * 3
    )
    for i, m in enumerate(small):
        fig.add_heatmap(
            z=m,
            zmin=lo,
            zmax=hi,
            colorscale="Inferno",
            showscale=i == 0,
            row=i // cols + 1,
            col=i % cols + 1,
            hovertemplate=f"{titles[i]}<br>%{{z:.3g}}<extra></extra>",
        )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    for i in range(k):  # each map keeps its own aspect: its y axis tied to its own x axis, not the first map's
        fig.update_yaxes(scaleanchor=f"x{i + 1 if i else ''}", row=i // cols + 1, col=i % cols + 1)
    # the colour scale under the maps, across: beside them it took a phone's width from the maps
    bar = dict(
        orientation="h",
        y=-60 / (170 * rows),
        yanchor="top",
        thickness=14,
        len=0.9,
        title=dict(text="each map, 0 to 1" if not shared else "", side="top"),
    )
    fig.update_traces(colorbar=bar, selector=dict(showscale=True))
    fig.update_layout(height=170 * rows + 200, margin=dict(l=10, r=10, t=90, b=110), font=FONT)
    fig.update_annotations(font_size=16)
    return fig
