"""A real browser (Debian's Chromium driven by Playwright) clicking through the app."""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import astuple
from pathlib import Path

import cv2
import numpy as np
import pytest
from app_server import pid_of, running_app
from conftest import ASSETS
from support.harness import CHROMIUM, fake_camera, fetch_picture, photos, start_live_stream, tallest_label
from support.harness import CHROMIUM_ARGS as ARGS

from vitviz.app.layout import VIEWS
from vitviz.app.photo import NO_PHOTO
from vitviz.render import LARGE_LABEL_PX
from vitviz.tabs import ORDER, TABS, label
from vitviz.views.attention import SHEET_TILE

pytestmark = pytest.mark.app  # every test here drives the served app


@pytest.fixture(scope="module")
def page():
    if not Path(CHROMIUM).exists():
        if os.environ.get("VITVIZ_REQUIRE_BROWSER"):
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with running_app() as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        yield page
        browser.close()


def shot(page, tmp_path: Path, name: str) -> None:
    page.wait_for_function("() => !document.body.innerText.includes('processing')", timeout=30_000)
    page.screenshot(path=str(tmp_path / name), full_page=True)
    target = os.environ.get("VITVIZ_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / name, Path(target) / name)


SERVER_PICTURES = "Pictures drawn by the server"


def open_server_pictures(page) -> None:
    """The Attention tab opens on the Explorer; the server-drawn pictures (the API's) are in an accordion."""
    if not page.locator("#layer").is_visible():
        page.get_by_text(SERVER_PICTURES).click()
    page.locator("#layer").wait_for(timeout=10_000)


def choose(page, selector: str, option: str) -> None:
    """Pick `option` in the dropdown `selector`."""
    page.locator(f"{selector} input").click()
    page.locator(f'li[role=option][aria-label="{option}"]').click()


def overlay_src(page) -> str:
    return page.locator("#attention img").first.get_attribute("src") or ""


def wait_for_new_overlay(page, before: str) -> str:
    page.wait_for_function(
        "b => { const i = document.querySelector('#attention img'); return i && i.src && i.src !== b; }",
        arg=before,
        timeout=30_000,
    )
    return overlay_src(page)


def test_example_slider_and_patch_click_change_the_overlay(page, tmp_path):
    shot(page, tmp_path, "tokens.png")
    page.locator("#examples img").nth(2).click()  # astronaut.jpg
    page.locator("#status").get_by_text("grid 32 rows × 32 columns").wait_for(timeout=60_000)

    page.get_by_role("tab", name=label("attention")).click()
    open_server_pictures(page)
    page.locator("#attention img").first.wait_for(timeout=30_000)
    start = overlay_src(page)
    assert start

    slider = page.locator("#layer input[type=range]")
    slider.focus()
    for _ in range(8):
        slider.press("ArrowLeft")
    after_slider = wait_for_new_overlay(page, start)
    assert page.locator("#layer input[type=number]").input_value() == "3"

    picker = page.locator("#picker img").first
    box = picker.bounding_box()
    picker.click(position={"x": box["width"] * 0.5, "y": box["height"] * 0.3})
    page.wait_for_function("() => document.querySelector('#patch input').value !== '-1'", timeout=30_000)
    after_click = wait_for_new_overlay(page, after_slider)
    patch = int(page.locator("#patch input").input_value())
    assert 0 <= patch < 32 * 32
    assert patch // 32 == 9 and patch % 32 == 16  # row 30 %, column 50 % of a 32x32 grid
    assert after_click != start
    shot(page, tmp_path, "attention.png")
    for name, tab in [
        ("rollout.png", label("rollout")),
        ("position.png", label("positions")),
        ("heads.png", label("heads")),
        ("output.png", label("output")),
    ]:
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1500)
        if tab == label("heads"):  # its statistics take a moment: shoot the result, not the progress bars
            page.locator("#norms img").first.wait_for(timeout=60_000)
        shot(page, tmp_path, name)


def src(page, selector: str) -> str:
    img = page.locator(f"{selector} img").first
    return (img.get_attribute("src") or "") if img.count() else ""


def wait_for_src_change(page, selector: str, before: str) -> str:
    page.wait_for_function(
        "([s, b]) => { const i = document.querySelector(s + ' img'); return i && i.src && i.src !== b; }",
        arg=[selector, before],
        timeout=30_000,
    )
    return src(page, selector)


def test_a_view_is_drawn_when_looked_at_and_follows_the_display_settings(page, tmp_path):
    """A new image draws the shown view only; another view draws when its tab is selected; the
    colormap, shared by every view, redraws the shown one at once."""
    page.get_by_role("tab", name=label("tokens")).click()
    tokens_before, dense_before = src(page, "#tokens"), src(page, "#dense")
    page.locator("#examples img").nth(1).click()  # coffee.jpg
    page.locator("#status").get_by_text("grid 21 rows × 32 columns").wait_for(timeout=60_000)
    wait_for_src_change(page, "#tokens", tokens_before)
    page.wait_for_timeout(1500)
    assert src(page, "#dense") == dense_before  # the Output view is not drawn while nobody looks at it
    page.get_by_role("tab", name=label("output")).click()
    dense = wait_for_src_change(page, "#dense", dense_before)
    choose(page, "#cmap", "viridis")
    wait_for_src_change(page, "#dense", dense)


def test_clearing_the_upload_is_not_an_error_and_sends_no_view(page, tmp_path):
    """Clear empties the upload box and says that the views are the last photo's; it sends two requests, the
    analysis of no photo and the stop of any heavy run (not queued), not one per view."""
    page.get_by_role("tab", name=label("tokens")).click()
    page.wait_for_timeout(2000)  # the tab's own requests are sent
    shown = src(page, "#tokens")
    sent = []
    page.on("request", lambda r: sent.append(r.url) if "/gradio_api/" in r.url and r.method == "POST" else None)
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#status").get_by_text(NO_PHOTO).wait_for(timeout=30_000)
    page.wait_for_timeout(1500)
    assert page.get_by_text("Error").count() == 0
    assert sorted(url.split("/gradio_api/")[1] for url in sent) == ["queue/join?", "run/predict"], sent
    assert src(page, "#tokens") == shown
    page.locator("#examples img").nth(0).click()
    page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)


def tab_of_each_request(page) -> dict[int, set[str]]:
    """{fn_index: the ids of the tabs that hold its outputs}, from the page's own config."""
    config = page.evaluate("() => window.gradio_config")
    tab_ids = {c["id"]: c["props"].get("id") for c in config["components"] if c["type"] == "tabitem"}
    holder = {}

    def walk(node, tab):
        tab = tab_ids.get(node["id"], tab)
        holder[node["id"]] = tab
        for child in node.get("children", []):
            walk(child, tab)

    walk(config["layout"], None)
    states = {c["id"] for c in config["components"] if c["type"] == "state"}
    return {d["id"]: {holder.get(o) for o in d["outputs"] if o not in states} - {None} for d in config["dependencies"]}


def test_a_cleared_photo_leaves_the_pictures_and_the_same_photo_again_draws_a_tab_selected_meanwhile(page, tmp_path):
    """While no photo is in, a tab selected shows the last photo's pictures (as the status says), not empty ones;
    and the same photo chosen again, whose key is the one before the Clear, still reaches that tab."""
    (path,) = photos(1, tmp_path, prefix="again")
    page.get_by_role("tab", name=label("attention")).click()
    open_server_pictures(page)
    page.locator("#attention img").first.wait_for(timeout=30_000)
    page.get_by_role("tab", name=label("tokens")).click()
    before = src(page, "#tokens")
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(path))
    wait_for_src_change(page, "#tokens", before)
    stale = overlay_src(page)  # the Attention tab's, for the photo before: it was hidden meanwhile
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#status").get_by_text(NO_PHOTO).wait_for(timeout=30_000)
    page.get_by_role("tab", name=label("attention")).click()
    page.wait_for_timeout(1500)
    assert overlay_src(page) == stale  # not emptied
    page.locator("#upload input[type=file]").set_input_files(str(path))
    wait_for_new_overlay(page, stale)


def test_an_upload_sends_the_shown_tabs_requests_alone_and_a_hidden_tab_catches_up_when_selected(page, tmp_path):
    """A new photo, or the page's first, is drawn on the shown tab alone: no queued request draws a hidden tab's
    view (each used to send one, answered with nothing). A hidden tab, selected, fits its controls to the new
    photo and draws."""
    import json

    tabs = tab_of_each_request(page)
    sent = []

    def record(r):
        if r.url.endswith("/gradio_api/queue/join") or "/gradio_api/queue/join?" in r.url:
            sent.append(json.loads(r.post_data)["fn_index"])

    fresh = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        fresh.on("request", record)
        fresh.goto(page.url)
        fresh.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        fresh.locator("#tokens img").first.wait_for(timeout=30_000)
        fresh.wait_for_timeout(2000)
    finally:
        fresh.close()
    elsewhere = {fn: tabs[fn] for fn in sent if tabs[fn] - {"tokens"}}
    assert sent and not elsewhere, elsewhere  # the page's first photo
    sent.clear()
    page.get_by_role("tab", name=label("tokens")).click()
    page.wait_for_timeout(2000)
    page.on("request", record)
    before, inside = src(page, "#tokens"), src(page, "#inside-weights")
    (path,) = photos(1, tmp_path, prefix="routed")
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(path))
    wait_for_src_change(page, "#tokens", before)
    page.wait_for_timeout(2000)  # every request of the upload is sent
    page.remove_listener("request", record)
    elsewhere = {fn: tabs[fn] for fn in sent if tabs[fn] - {"tokens"}}
    assert sent and not elsewhere, elsewhere
    page.get_by_role("tab", name=label("inside")).click()
    wait_for_src_change(page, "#inside-weights", inside)
    answers = []
    page.on("response", lambda r: answers.append(r.status) if "/gradio_api/run/predict" in r.url else None)
    page.get_by_role("tab", name=label("attributions")).click()  # its selection relabels its buttons for the photo
    page.get_by_role("button", name=re.compile(r"Compute attribution \(about")).wait_for(timeout=20_000)
    page.wait_for_timeout(1500)
    assert answers and set(answers) == {200}, answers  # the selection's step, with its fits, answered


def test_every_tab_is_visible_and_depth_says_how_to_enable_it_offline(page, tmp_path):
    """No tab hides in an overflow menu; offline, the Depth tab explains itself instead of hanging."""
    names = [t.inner_text().strip() for t in page.get_by_role("tab").all() if t.is_visible()]
    assert [n.split(" · ")[0] for n in names] == [str(i) for i in range(1, len(names) + 1)] and len(names) >= 7
    page.get_by_role("tab", name=label("depth")).click()
    page.locator("#depth-note").get_by_text("--depth-model PATH").first.wait_for(timeout=20_000)
    page.wait_for_timeout(2000)  # the tab's own attempt at depth has answered
    assert page.get_by_text("--depth-model PATH").count() == 1  # one notice
    assert not page.locator("#depth-results").is_visible()  # and no empty panels under it
    shot(page, tmp_path, "depth-offline.png")


def test_selecting_each_tab_leaves_the_tab_bar_as_it_was(page, tmp_path):
    """A component wired between the tabs rather than inside one makes Gradio draw a selected tab twice."""

    def bar() -> list[str]:
        return [t.inner_text().strip() for t in page.get_by_role("tab").all() if t.is_visible()]

    names = bar()
    for name in names:
        page.get_by_role("tab", name=name).first.click()
        page.wait_for_timeout(800)
        assert bar() == names, name


def test_a_new_image_clears_the_previous_images_attribution(page, tmp_path):
    page.get_by_role("tab", name=label("attributions")).click()
    choose(page, "#method", "Saliency (|gradient|)")
    page.get_by_role("button", name="Compute attribution").click()
    wait_for_src_change(page, "#attribution", "")
    assert "Saliency" in page.locator("#attr-summary").inner_text()
    page.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")  # load the pictures below the fold
    page.wait_for_timeout(1000)
    shot(page, tmp_path, "attributions.png")
    shown = src(page, "#attribution")
    choose(page, "#cmap", "magma")  # a display setting recolours the result, not rerun
    wait_for_src_change(page, "#attribution", shown)
    assert "Saliency" in page.locator("#attr-summary").inner_text()
    page.locator("#examples img").nth(3).click()  # rocket.jpg
    page.wait_for_function("() => !document.querySelector('#attribution img')", timeout=30_000)
    assert page.locator("#attr-summary").inner_text().strip() == ""


OVERLAPS = """() => {
  const shown = e => e.offsetParent && e.getBoundingClientRect().width > 0;
  const labels = [...document.querySelectorAll('[data-testid="block-label"]')].filter(shown);
  const pictures = [...document.querySelectorAll('img')].filter(shown).filter(i => i.naturalWidth > 100);
  const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const out = [];
  for (const l of labels) for (const p of pictures) {
    if (hit(l.getBoundingClientRect(), p.getBoundingClientRect())) out.push(l.innerText + ' on ' + p.src.slice(-40));
  }
  // a chart's title and captions stay clear of the labels, and an axis' names of each other
  const drawn = e => e.getBoundingClientRect().width > 0;  // SVG has no offsetParent: a hidden tab's is 0 wide
  const texts = [...document.querySelectorAll('.js-plotly-plot .gtitle, .js-plotly-plot .annotation-text')];
  for (const l of labels) for (const t of texts.filter(drawn)) {
    if (hit(l.getBoundingClientRect(), t.getBoundingClientRect())) out.push(l.innerText + ' on ' + t.textContent);
  }
  for (const axis of document.querySelectorAll('.js-plotly-plot .xaxislayer-above')) {
    const ticks = [...axis.querySelectorAll('g[class$="tick"] text')].filter(drawn)  // .xtick, .x2tick, ...
      .map(t => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 1; i < ticks.length; i++) {
      if (hit(ticks[i - 1][1], ticks[i][1])) out.push(ticks[i - 1][0] + ' on ' + ticks[i][0]);
    }
  }
  return out;
}"""


@pytest.mark.parametrize("width, height", [(1024, 768), (390, 844), (1400, 1000)])
def test_projector_and_phone_show_every_tab_and_no_label_on_a_picture(page, tmp_path, width, height):
    """At a 1024x768 projector every tab is in the bar (none behind '...') and nothing scrolls sideways; on a
    phone the upload, the examples and the main picture are there, and the tabs on the first screen (the
    settings come after the views). No label box covers any picture or a chart's title, and no axis' names
    run into each other."""
    small = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        small.goto(page.url)
        small.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        assert small.locator("#upload").is_visible() and small.locator("#examples img").first.is_visible()
        assert small.evaluate("() => document.documentElement.scrollWidth") <= width
        tabs = [t.inner_text().strip() for t in small.get_by_role("tab").all() if t.is_visible()]
        if width >= 1024:
            assert len(tabs) == len(VIEWS), tabs
        box = small.get_by_role("tab", name=label("tokens")).bounding_box()
        assert box["y"] + box["height"] < height  # the tab bar comes up without scrolling, on a phone too
        names = (
            [label("tokens"), label("attention"), label("rollout"), INSIDE]
            if width >= 1024
            else [label("attention"), INSIDE]
        )
        for name in names:
            small.get_by_role("tab", name=name).click()
            small.wait_for_timeout(2000)
            small.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")  # lazy images load
            small.wait_for_timeout(500)
            assert small.evaluate(OVERLAPS) == [], name
            if name == label("attention"):
                shot(small, tmp_path, f"attention-{width}x{height}.png")
        small.locator("#inside-values").scroll_into_view_if_needed()  # under the live panel, lazily loaded
        small.locator("#inside-values img").first.wait_for(timeout=30_000)
        small.locator("#inside-strips .js-plotly-plot").first.wait_for(timeout=30_000)
        shot(small, tmp_path, f"inside-{width}x{height}.png")
    finally:
        small.close()


def test_a_phone_or_a_projector_sends_no_request_once_its_views_are_drawn(page):
    """A phone sets the large labels as its first views draw, a teacher switches the projector mode on and
    changes the colormap as they draw: each change redraws the shown view, and then the page is quiet. (Gradio's
    client could set every view's redraw off again, without end: 13 requests a second, on 3 phones out of 4.)"""
    for width, height, projector in ((390, 844, False), (390, 844, False), (1024, 768, True)):
        other = page.context.browser.new_page(viewport={"width": width, "height": height}, has_touch=width < 500)
        posts: list[str] = []
        other.on("request", lambda r, posts=posts: posts.append(r.url) if r.method == "POST" else None)
        try:
            other.goto(page.url)
            other.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
            other.locator("#examples img").nth(2).click()
            if projector:  # while the new image's views draw
                for colormap in ("viridis", "inferno", "viridis"):
                    choose(other, "#cmap", colormap)
                other.locator("#large-text input").check()
            other.locator("#status").get_by_text("grid 32 rows × 32 columns").wait_for(timeout=60_000)
            other.wait_for_function("() => !document.body.innerText.includes('processing')", timeout=60_000)
            other.wait_for_timeout(3000)
            drawn = len(posts)
            other.wait_for_timeout(4000)
            assert posts[drawn:] == [], f"{width}x{height}: {len(posts) - drawn} requests in 4 s of quiet"
        finally:
            other.close()


INSIDE = label("inside")
STEPS = ("#inside-scores", "#inside-weights", "#inside-values")


def test_inside_a_head_follows_a_clicked_patch_and_another_head(page, tmp_path):
    """Clicking a patch makes it the query, and another head recomputes: the scores, the weights and the
    weight × value maps all change, and the text names the new query and head."""
    page.get_by_role("tab", name=INSIDE).click()
    for s in STEPS:
        page.locator(f"{s} img").first.wait_for(timeout=30_000)
    page.locator("#inside-note").get_by_text("The query is").wait_for(timeout=30_000)
    assert "The query is CLS" in page.locator("#inside-note").inner_text()
    before = [src(page, s) for s in STEPS]
    weights = page.locator("#inside-weights img").first
    joins: list[str] = []

    def on_request(r) -> None:
        if "/queue/join" in r.url:
            joins.append(r.url)

    page.on("request", on_request)
    weights.click(position={"x": 5, "y": 5})  # the top-left patch (a colorbar is on the right)
    page.wait_for_function("() => document.querySelector('#inside-patch input').value === '0'", timeout=30_000)
    clicked = [wait_for_src_change(page, s, b) for s, b in zip(STEPS, before, strict=True)]
    page.wait_for_timeout(500)
    page.remove_listener("request", on_request)
    assert len(joins) == 1, joins  # the click's answer is the redraw: one request, not a pick then a redraw
    page.locator("#inside-note").get_by_text("The query is patch 0 (row 0, column 0)").wait_for(timeout=30_000)
    choose(page, "#inside-head", "head 3")
    for s, b in zip(STEPS, clicked, strict=True):
        wait_for_src_change(page, s, b)
    page.locator("#inside-note").get_by_text("Head 3 maps each token").wait_for(timeout=30_000)
    shot(page, tmp_path, "inside.png")


TILE_WIDTH = """(tile) => {  // the shown width of one all-heads tile: the sheet's shown scale times a tile's pixels
  const i = document.querySelector('#attention img');
  return i.getBoundingClientRect().width / i.naturalWidth * tile;
}"""


@pytest.mark.parametrize("width, height", [(1400, 1000), (1024, 768), (390, 844)])
def test_the_all_heads_sheet_has_tiles_a_class_can_read(page, tmp_path, width, height):
    """All heads: the sheet takes a line of its own, so each head's tile is at least 200 px wide at 1400
    and on a 1024x768 projector; a phone gets the tiles in one column, its captions 18 px tall or more, and the
    other pictures' labels drawn large too. One head puts the picker and the overlay side by side again."""
    view = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        view.goto(page.url)
        view.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        view.get_by_role("tab", name=label("attention")).click()
        open_server_pictures(view)
        view.locator("#attention img").first.wait_for(timeout=30_000)
        one = overlay_src(view)
        side_by_side = view.locator("#attention img").first.bounding_box()["width"]
        choose(view, "#head", "all heads (grid)")
        wait_for_new_overlay(view, one)
        view.wait_for_timeout(500)
        assert view.evaluate(TILE_WIDTH, SHEET_TILE) >= 200
        if width < 600:  # and the pictures' labels are drawn large: the token numbers 11 px or more, not 5
            assert shown_label(view, "#attention", 16) >= 18
            view.get_by_role("tab", name=label("tokens")).click()
            assert shown_label(view, "#tokens") >= 11
            view.get_by_role("tab", name=label("attention")).click()
        view.evaluate("() => window.scrollTo(0, document.body.scrollHeight)")
        shot(view, tmp_path, f"all-heads-{width}x{height}.png")
        assert view.evaluate("() => document.documentElement.scrollWidth") <= width
        choose(view, "#head", "head 2")
        view.wait_for_function("() => !document.querySelector('#attention-pictures.all-heads')", timeout=10_000)
        view.wait_for_timeout(500)
        assert view.locator("#attention img").first.bounding_box()["width"] <= side_by_side * 1.05
    finally:
        view.close()


def test_large_text_grows_what_the_back_row_reads(page, tmp_path):
    tab = page.get_by_role("tab", name=label("tokens"))  # one line of text: its box grows with the text
    before = tab.bounding_box()["height"]
    page.locator("#large-text input").check()
    page.wait_for_function("() => document.body.classList.contains('vitviz-large')", timeout=10_000)
    assert tab.bounding_box()["height"] > 1.15 * before
    page.locator("#large-text input").uncheck()
    page.wait_for_function("() => !document.body.classList.contains('vitviz-large')", timeout=10_000)


def test_live_camera_draws_changing_overlays_and_freeze_feeds_every_view(page, tmp_path):
    """A fake camera plays the bundled photos: the live overlays arrive and change from frame to frame, and
    "freeze" makes the current 640x480 frame the image of the other views."""
    import vitviz

    photos = [vitviz.load_image(ASSETS / f"{n}.jpg") for n in ("chelsea", "astronaut", "coffee", "rocket")]
    camera = fake_camera(tmp_path / "camera.y4m", photos)
    browser = page.context.browser.browser_type.launch(executable_path=CHROMIUM, args=ARGS + camera)
    try:
        live = browser.new_context(viewport={"width": 1400, "height": 1000}, permissions=["camera"]).new_page()
        live.goto(page.url)
        live.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        live.get_by_role("tab", name=label("live")).click()
        assert "The camera is off. Click the camera's box" in live.locator("#live-info").inner_text()
        start_live_stream(live)
        frames = [wait_for_src_change(live, "#live-attention", "")]
        for _ in range(5):  # new frames keep coming, and they show what the camera sees
            frames.append(wait_for_src_change(live, "#live-attention", frames[-1]))
        pictures = [cv2.imdecode(np.frombuffer(live.request.get(f).body(), np.uint8), cv2.IMREAD_COLOR) for f in frames]
        assert max(np.abs(a.astype(int) - b.astype(int)).mean() for a in pictures for b in pictures) > 10
        assert src(live, "#live-rollout") and src(live, "#live-dense")
        info = live.locator("#live-info").inner_text()
        assert "input 224 px high × 224 px wide, 16 rows × 16 columns of patches" in info
        shot(live, tmp_path, "live.png")
        live.locator("#freeze").click()
        live.locator("#status").get_by_text("grid 24 rows × 32 columns").wait_for(timeout=60_000)  # the 640x480 frame
        tokens = src(live, "#tokens")
        live.get_by_role("tab", name=label("tokens")).click()
        wait_for_src_change(live, "#tokens", tokens)
    finally:
        browser.close()


def test_the_live_tab_on_a_projector_shows_camera_controls_and_pictures_on_one_screen(page, tmp_path):
    """At 1024x768 with "Large text" on and a camera streaming: from the page's top, the camera, its controls and
    the three live pictures are on the first screen, and the pictures' labels are 18 px tall or more."""
    import vitviz

    camera = fake_camera(tmp_path / "camera.y4m", [vitviz.load_image(ASSETS / "coffee.jpg")])
    browser = page.context.browser.browser_type.launch(executable_path=CHROMIUM, args=ARGS + camera)
    try:

        def camera_page(viewport):  # a page of its own context, which may use the fake camera
            return browser.new_context(viewport=viewport, permissions=["camera"]).new_page()

        live = on_a_projector(camera_page, page.url)
        start_live_stream(live)
        wait_for_src_change(live, "#live-dense", "")
        sizes = {s: shown_label(live, s) for s in ("#live-attention", "#live-rollout", "#live-dense")}
        assert min(sizes.values()) >= 18, sizes
        controls = ["#live-camera", "#live-layer", "#live-head", "#live-draw", "#freeze"]
        problems = first_screen(live, controls, ["#live-attention img", "#live-rollout img", "#live-dense img"])
        shot(live, tmp_path, "live-projector.png")
        assert problems == []
    finally:
        browser.close()


def test_the_depth_tab_on_a_projector_shows_its_map_and_controls_on_one_screen(page, tmp_path):
    """With a depth model (a tiny random Depth Anything) at 1024x768 with "Large text" on: the depth map's
    colour scale reads 18 px tall or more, and from the page's top the model's controls and the map are on the
    first screen."""
    from conftest import tiny_depth_anything

    folder = tmp_path / "depth-model"
    tiny_depth_anything().save_pretrained(folder)
    with running_app(["--depth-model", str(folder)]) as url:
        view = on_a_projector(page.context.browser.new_page, url)
        try:
            view.get_by_role("tab", name=label("depth")).click()
            view.locator("#depth img").first.wait_for(state="attached", timeout=60_000)
            assert shown_label(view, "#depth") >= 18
            problems = first_screen(view, ["#depth-model", "#depth-tab button.primary"], ["#depth img"])
            shot(view, tmp_path, "depth-projector.png")
            assert problems == []
        finally:
            view.close()


def lesson_picture(page) -> bytes:
    return page.request.get(src(page, "#lesson-picture")).body()


def test_the_lesson_walks_every_step_and_a_link_opens_one(page, tmp_path):
    """Next goes through all the steps, each with its own picture; ?step=3 opens step 3 directly."""
    from vitviz.lesson import ALL_STEPS as STEPS

    page.get_by_role("tab", name=label("lesson")).click()
    page.locator("#lesson-title").get_by_text(f"Step 1 of {len(STEPS)}").wait_for(timeout=60_000)
    page.locator("#lesson-picture img").first.wait_for(timeout=30_000)
    pictures = [lesson_picture(page)]
    for step in range(2, len(STEPS) + 1):
        before = src(page, "#lesson-picture")
        page.locator("#lesson-next").click()
        page.locator("#lesson-title").get_by_text(f"Step {step} of {len(STEPS)}").wait_for(timeout=60_000)
        wait_for_src_change(page, "#lesson-picture", before)
        pictures.append(lesson_picture(page))
        assert pictures[-1] != pictures[-2], step
        assert len(page.locator("#lesson-text").inner_text()) > 200
        if step == 3:
            shot(page, tmp_path, "lesson.png")
    linked = page.context.browser.new_page(viewport={"width": 1024, "height": 768})
    try:
        linked.goto(page.url.split("?")[0] + "?step=3")
        linked.locator("#lesson-title").get_by_text(f"Step 3 of {len(STEPS)}").wait_for(timeout=60_000)
        # the title comes before the picture's file: wait for it to show (it raises if it never does)
        linked.locator("#lesson-picture img").first.wait_for(state="visible", timeout=30_000)
        assert "most local head" in linked.locator("#lesson-text").inner_text()
        linked.wait_for_function(  # the step is on screen, its picture whole, without scrolling
            """() => document.getElementById('lesson-title').getBoundingClientRect().top < 300 &&
                     document.querySelector('#lesson-picture img').getBoundingClientRect().bottom <= innerHeight"""
        )
        linked.screenshot(path=str(tmp_path / "lesson-1024x768.png"))  # what the projector shows: no scrolling
    finally:
        linked.close()


FIRST_SCREEN = """(selectors) => {  // each shown element of `selectors` on the screen, at the page's top
  const bar = Math.max(...[...document.querySelectorAll('[role=tab]')].filter((t) => t.offsetParent)
    .map((t) => t.getBoundingClientRect().bottom));
  const found = [];
  for (const sel of selectors) {
    const shown = [...document.querySelectorAll(sel)].filter((e) => e.getClientRects().length);
    if (!shown.length) found.push({sel, problem: 'not shown'});
    for (const e of shown) {
      let r = e.getBoundingClientRect(), whole = true;
      if (e.tagName === 'IMG') {  // the picture within its box: whole only where it is contained in it
        const s = Math.min(r.width / e.naturalWidth, r.height / e.naturalHeight), w = e.naturalWidth * s;
        const h = e.naturalHeight * s, fit = getComputedStyle(e).objectFit;
        whole = e.complete && e.naturalWidth > 0 &&
          (fit === 'contain' || Math.abs(w - r.width) + Math.abs(h - r.height) < 3);
        r = {left: r.left + (r.width - w) / 2, right: r.left + (r.width + w) / 2, top: r.top + (r.height - h) / 2,
             bottom: r.top + (r.height + h) / 2};
      } else if (e.tagName === 'CANVAS') {  // drawn at its own shape, not squeezed into a shorter box
        whole = e.width > 0 && Math.abs(r.width / r.height - e.width / e.height) < 0.02;
      } else if (e.classList.contains('js-plotly-plot')) {  // the chart, not only its box
        r = e.querySelector('.main-svg').getBoundingClientRect();
      }
      for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {  // cut by a clipping box
        const s = getComputedStyle(a), c = a.getBoundingClientRect();
        const out = r.top < c.top - 1 || r.bottom > c.bottom + 1 || r.left < c.left - 1 || r.right > c.right + 1;
        if (out && s.display !== 'contents' && /hidden|clip|auto|scroll/.test(s.overflowX + s.overflowY)) whole = false;
      }
      const at = [[0.5, 0.5], [0.1, 0.1], [0.9, 0.1], [0.1, 0.9], [0.9, 0.9]].map(([u, v]) =>
        document.elementFromPoint(r.left + u * (r.right - r.left), r.top + v * (r.bottom - r.top)));
      const covered = e.tagName === 'IMG' || e.tagName === 'CANVAS' || e.classList.contains('js-plotly-plot')
        ? at.some((hit) => !hit || !e.contains(hit)) : false;
      found.push({sel, top: Math.round(r.top), bottom: Math.round(r.bottom), whole, covered});
    }
  }
  return {bar, scrollY, height: innerHeight, found};
}"""


def first_screen(view, controls: list[str], pictures: list[str]) -> list[str]:
    """What is wrong on the first screen, seen from the page's top: each of `controls` and `pictures` (CSS
    selectors) must be shown whole within the screen's height, the pictures under the tab bar, uncovered, and
    neither cut by a box around them nor squeezed."""
    view.evaluate("() => window.scrollTo(0, 0)")
    seen = view.evaluate(FIRST_SCREEN, [*controls, *pictures])
    problems = [f"scrolled to {seen['scrollY']}"] if seen["scrollY"] else []
    for e in seen["found"]:
        if "problem" in e:
            problems.append(f"{e['sel']}: {e['problem']}")
            continue
        picture = e["sel"] in pictures
        if e["bottom"] > seen["height"] or (picture and e["top"] < seen["bar"] - 1):
            problems.append(f"{e['sel']}: {e['top']} to {e['bottom']}, the tab bar ending at {seen['bar']:.0f}")
        if not e["whole"] or e["covered"]:
            problems.append(f"{e['sel']}: {'covered' if e['covered'] else 'cut or squeezed'}")
    return problems


def upload(view, photo: Path, grid: str) -> None:
    """A photo dropped on the upload box, as a user does: the box's file is cleared first."""
    view.locator("#upload button[aria-label='Clear']").first.click()
    view.locator("#upload input[type=file]").set_input_files(str(photo))
    view.locator("#status").get_by_text(f"grid {grid}").wait_for(timeout=60_000)


def test_the_projector_shows_each_tabs_controls_and_main_picture_on_its_first_screen(page, tmp_path):
    """At 1024x768 with large text, from the page's top right after a photo is uploaded: the tab bar, and for each
    tab its first screen's controls and main pictures (its `Tab` record's), whole (every lesson step's too), under
    the tab bar within the 768 px; the Explorer's text 18 px or more."""
    from vitviz.lesson import ALL_STEPS as STEPS

    view = on_a_projector(page.context.browser.new_page, page.url)
    try:
        upload(view, ASSETS / "astronaut.jpg", "32 rows × 32 columns")
        problems = {}
        for record in TABS:
            if record.first_screen is None:
                continue
            tab, (controls, pictures, ready) = record.id, astuple(record.first_screen)
            view.get_by_role("tab", name=label(tab)).click()
            if ready is not None:
                view.wait_for_function(ready, timeout=60_000)
            if tab == "attributions":
                choose(view, "#method", "Saliency (|gradient|)")
                view.get_by_role("button", name="Compute attribution").click()
                view.locator("#attr-summary").get_by_text("target").wait_for(timeout=120_000)
            for selector in pictures:
                if selector.endswith("img"):
                    view.wait_for_function(f"() => document.querySelector('{selector}')?.complete", timeout=60_000)
            view.wait_for_timeout(500)  # the tab's layout has settled
            problems[tab] = first_screen(view, controls, pictures)
            if tab == "lesson":
                for step in range(2, len(STEPS) + 1):
                    before = src(view, "#lesson-picture")
                    view.locator("#lesson-next").click()
                    view.locator("#lesson-title").get_by_text(f"Step {step} of {len(STEPS)}").wait_for(timeout=60_000)
                    wait_for_src_change(view, "#lesson-picture", before)
                    view.wait_for_function("() => document.querySelector('#lesson-picture img').complete")
                    problems[f"lesson step {step}"] = first_screen(view, controls, pictures)
            if tab == "attention":
                smallest = view.evaluate(
                    """() => Math.min(...[...document.querySelectorAll(
                           '#explorer :is(.vx label, .vx figcaption, .vx-legend, .vx-mech td)')]
                         .filter((e) => e.offsetParent).map((e) => parseFloat(getComputedStyle(e).fontSize) * 1.25))"""
                )
                assert smallest >= 18, smallest
            shot(view, tmp_path, f"first-screen-{tab}.png")
        assert {tab: p for tab, p in problems.items() if p} == {}
    finally:
        view.close()


def test_a_phone_shows_the_explorers_photo_on_its_first_screen_and_speaks_of_fingers(page, tmp_path):
    """At 390x844, by touch, right after an upload with the Attention tab selected: the Explorer's photo starts on
    the first screen, and the tab's help speaks of a finger, not of arrow keys; with a mouse it names the keys."""
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    try:
        phone.goto(page.url)
        phone.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        upload(phone, ASSETS / "astronaut.jpg", "32 rows × 32 columns")
        phone.get_by_role("tab", name=label("attention")).click()
        phone.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length > 0", timeout=60_000)
        phone.evaluate("() => window.scrollTo(0, 0)")
        seen = phone.evaluate(FIRST_SCREEN, ["#explorer .vx-big-canvas"])
        photo = seen["found"][0]
        assert seen["bar"] <= photo["top"] < 844 - 50, seen  # a good part of it, not its top edge alone
        shot(phone, tmp_path, "attention-phone-first-screen.png")
        said = phone.locator(".tabitem:visible").first.inner_text()
        assert "finger" in said and not any(key in said for key in "←→↑↓"), said
    finally:
        phone.close()
    page.get_by_role("tab", name=label("attention")).click()
    help_for = {kind: page.locator(f".tabitem:visible .vitviz-{kind}").first for kind in ("pointer", "touch")}
    assert help_for["pointer"].is_visible() and not help_for["touch"].is_visible()
    assert "←" in help_for["pointer"].inner_text()


def test_a_phone_starts_each_tabs_main_picture_on_its_first_screen(page, tmp_path):
    """At 390x844, by touch, right after an upload: the introduction is its title alone, and each tab's
    main picture (its `Tab` record's first) starts on the first screen, a good part of it above the screen's foot.
    Before the introduction folded, the intro, the upload, the examples and the tab bar took ~590 px."""
    phone = page.context.browser.new_page(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
    try:
        phone.goto(page.url)
        phone.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        upload(phone, ASSETS / "astronaut.jpg", "32 rows × 32 columns")
        assert not phone.locator("#intro p").first.is_visible() and phone.locator("#intro h1").is_visible()
        late = {}
        for record in TABS:
            if record.first_screen is None or record.id in ("attributions", "depth"):  # their pictures wait for a
                continue  # button (Compute, a depth model), which the projector's test presses
            pictures, ready = record.first_screen.pictures, record.first_screen.ready
            phone.get_by_role("tab", name=label(record.id)).click()
            if ready is not None:
                phone.wait_for_function(ready, timeout=60_000)
            if pictures[0].endswith("img"):
                phone.wait_for_function(f"() => document.querySelector('{pictures[0]}')?.complete", timeout=60_000)
            phone.wait_for_timeout(300)
            phone.evaluate("() => window.scrollTo(0, 0)")
            seen = phone.evaluate(FIRST_SCREEN, pictures[:1])["found"][0]
            if "problem" in seen or seen["top"] > 844 - 150:
                late[record.id] = seen
        shot(phone, tmp_path, "phone-first-screen.png")
        assert late == {}, late
    finally:
        phone.close()


SHOWN = """(sel) => {  // a picture's address, and the scale it is shown at on the screen (object-fit: contain)
  const i = document.querySelector(sel), r = i.getBoundingClientRect();
  return [i.src, i.complete ? Math.min(r.width / i.naturalWidth, r.height / i.naturalHeight) : 0];
}"""
CHART_TEXT = """() => Math.min(...[...document.querySelectorAll('.js-plotly-plot text')]
  .filter((t) => t.textContent.trim() && t.getBoundingClientRect().height > 0)
  .map((t) => parseFloat(getComputedStyle(t).fontSize) * 1.25))"""  # computed sizes leave out the page's zoom
CHART_CUT = """() => {  // each shown chart's text, legend and colour bar outside its chart, its panel or the page
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const p = plot.getBoundingClientRect(), b = (plot.closest('.block') || plot).getBoundingClientRect();
    const box = {left: Math.max(p.left, b.left, 0), right: Math.min(p.right, b.right, innerWidth),
                 top: Math.max(p.top, b.top), bottom: Math.min(p.bottom, b.bottom)};
    if (!p.height) continue;
    for (const e of plot.querySelectorAll('text, .legend, .colorbar')) {
      const r = e.getBoundingClientRect();
      if (!r.height || (e.tagName === 'text' && !e.textContent.trim())) continue;
      if (r.left < box.left - 2 || r.right > box.right + 2 || r.top < box.top - 2 || r.bottom > box.bottom + 2)
        out.push((e.textContent || e.getAttribute('class')).slice(0, 40));
    }
  }
  return out;
}"""
LABELLED = {  # each tab's pictures with labels drawn in them, and whether it has Plotly charts
    "tokens": (["#tokens"], False),
    "inside": (["#inside-scores", "#inside-weights", "#inside-values"], True),
    "rollout": (["#rollout"], False),
    "positions": (["#pos-large"], True),
    "heads": (["#norms"], True),
    "output": (["#dense"], False),
    "whatif": (["#whatif-tiles"], False),
}


def shown_label(view, selector: str, drawn: int = LARGE_LABEL_PX - 1) -> float:
    """The height on the screen of the labels in the picture `selector`, once they are `drawn` px tall in it
    (default: drawn again for the projector): their inked height in the picture's own pixels times the scale at
    which the page shows it."""
    measured = 0
    for _ in range(60):
        view.locator(selector).scroll_into_view_if_needed()
        url, scale = view.evaluate(SHOWN, f"{selector} img")
        measured = tallest_label(fetch_picture(url)) if scale else 0
        if measured >= drawn:
            return measured * scale
        view.wait_for_timeout(1000)
    raise AssertionError(f"{selector}: labels {measured} px tall in the picture, not {drawn}")


def on_a_projector(new_page, url: str):
    """A page of the app at 1024x768 with "Large text, for a projector" on; new_page: a browser's or a context's."""
    view = new_page(viewport={"width": 1024, "height": 768})
    view.goto(url)
    view.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
    view.locator("#large-text input").check()
    view.wait_for_function("() => document.body.classList.contains('vitviz-large')", timeout=10_000)
    return view


def test_the_projector_mode_shows_the_labels_in_pictures_and_charts_18_px_tall(page, tmp_path):
    """At 1024x768 with "Large text" on, every picture drawn with labels (colour scales, token numbers, the
    lesson's tables) shows them at least 18 px tall on the screen, measured from the picture served and the
    size the page shows it at; Plotly's text is 18 px or more too, and no chart's text, legend or colour bar is
    cut off. (test_the_projector_shows_each_tabs_controls_and_main_picture_on_its_first_screen: where they are.)"""
    from vitviz.lesson import ALL_STEPS as STEPS

    view = on_a_projector(page.context.browser.new_page, page.url)
    try:
        sizes = {}
        for tab, (pictures, charts) in LABELLED.items():
            view.get_by_role("tab", name=label(tab)).click()
            for selector in pictures:
                view.locator(f"{selector} img").first.wait_for(state="attached", timeout=60_000)  # lazy: scrolled to
                sizes[selector] = shown_label(view, selector)
            if charts:
                view.wait_for_function(f"() => {CHART_TEXT}() < Infinity", timeout=60_000)  # this tab's charts drawn
                sizes[f"{tab} charts"] = view.evaluate(CHART_TEXT)
                assert view.evaluate(CHART_CUT) == [], tab  # no tick, legend or colour bar cut off
        view.get_by_role("tab", name=label("attributions")).click()
        choose(view, "#method", "Saliency (|gradient|)")
        view.get_by_role("button", name="Compute attribution").click()
        view.locator("#attr-summary").get_by_text("target").wait_for(timeout=120_000)
        sizes["#attribution"] = shown_label(view, "#attribution")
        view.get_by_role("tab", name=label("lesson")).click()
        for step in range(1, len(STEPS) + 1):
            view.locator("#lesson-title").get_by_text(f"Step {step} of {len(STEPS)}").wait_for(timeout=60_000)
            sizes[f"lesson step {step}"] = shown_label(view, "#lesson-picture")
            if step < len(STEPS):
                view.locator("#lesson-next").click()
        shot(view, tmp_path, "lesson-projector.png")
        assert min(sizes.values()) >= 18, sizes
    finally:
        view.close()


def test_stop_or_a_new_image_ends_a_running_attribution_and_says_so(page, tmp_path):
    """Integrated Gradients at 128 steps (about half a minute here; at the default 32 an idle machine can finish
    before the test presses Stop): Stop ends it within 2 s and says so; so does a new image, and no result lands
    on it."""
    page.get_by_role("tab", name=label("attributions")).click()
    choose(page, "#method", "Integrated Gradients")
    steps = page.locator("#option-n_steps input[type=number]")
    steps.fill("128")
    steps.press("Enter")
    before = src(page, "#attribution")
    for stop in ("button", "new image"):
        page.get_by_role("button", name="Compute attribution").click()
        page.wait_for_timeout(3000)  # running: the batches have begun
        if stop == "button":
            page.get_by_role("button", name="Stop").click()
        else:  # a photo the page has not shown: a new analysis, a new key
            page.locator("#upload button[aria-label='Clear']").first.click()
            page.locator("#upload input[type=file]").set_input_files(str(photos(1, tmp_path, prefix="new")[0]))
        page.locator("#attr-summary").get_by_text("Stopped.").wait_for(timeout=2_000 if stop == "button" else 60_000)
        page.wait_for_timeout(6000)
        assert "Stopped." in page.locator("#attr-summary").inner_text()  # it stays said
        assert src(page, "#attribution") in (before, ""), stop  # nothing landed
        before = src(page, "#attribution")


VIOLATIONS = """window.violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));"""


def test_the_page_runs_whole_under_its_content_security_policy(page):
    """The policy is as strict as Gradio's page allows: every tab, the Explorer's and the Q·K view's layers (fetched
    with the page's token), the plots and the lesson run, and Chromium reports no violation of it."""
    from vitviz.app.access import CONTENT_SECURITY_POLICY

    strict = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        strict.add_init_script(VIOLATIONS)
        failed = []
        strict.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        answer = strict.goto(page.url)
        assert answer.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        strict.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        for tab in ORDER:
            strict.get_by_role("tab", name=label(tab)).click()
            strict.wait_for_timeout(2500)
        strict.get_by_role("tab", name=label("attention")).click()
        strict.wait_for_function("() => window.vitviz.explorer.state().loaded.length === 12", timeout=60_000)
        assert strict.evaluate("window.violations") == [] and failed == []
    finally:
        strict.close()


def start_a_long_attribution(view) -> None:
    """Integrated Gradients at 128 steps and 3 NoiseTunnel samples, a minute or more here in the one heavy slot,
    under way: its batches have begun."""
    view.get_by_role("tab", name=label("attributions")).click()
    choose(view, "#method", "Integrated Gradients")
    for option, value in (("n_steps", "128"), ("noise_samples", "3")):
        box = view.locator(f"#option-{option} input[type=number]")
        box.fill(value)
        box.press("Enter")
    view.get_by_role("button", name="Compute attribution").click()
    view.locator("#attr-summary").get_by_text("Running Integrated Gradients").wait_for(timeout=10_000)
    view.wait_for_timeout(3000)


def cpu_seconds(pid: int) -> float:
    """The CPU time, user and system, that every thread of process `pid` has used (Linux's /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_clearing_the_photo_or_closing_the_page_ends_a_running_attribution_and_frees_its_slot(page, tmp_path):
    """While one student's long attribution holds the one heavy slot, another's (through the API) waits. Clear
    ends the run within 2 s and says so; closing the page ends it too. Each time the other's attribution then
    runs at once, and the server goes quiet: the run stopped on the server, not only in the page."""
    gradio_client = pytest.importorskip("gradio_client")
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads the server's CPU time from Linux's /proc")
    from gradio_client.utils import Status

    pid = pid_of(page.url)
    other = gradio_client.Client(page.url, verbose=False, ssl_verify=False)
    image = gradio_client.handle_file(str(ASSETS / "coffee.jpg"))
    where = [image, "dinov2-small", "model default"]
    saliency = [*where, "Saliency (|gradient|)", "default", "blurred", 8, 0, 11, [], "inferno", 0.6]
    page.locator("#examples img").nth(1).click()  # coffee.jpg: the other student's photo, analysed once
    page.locator("#status").get_by_text("grid 21 rows × 32 columns").wait_for(timeout=60_000)
    closing = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    closing.goto(page.url)
    closing.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
    for view, end in ((page, "clear"), (closing, "close")):
        start_a_long_attribution(view)
        waiting = other.submit(*saliency, api_name="/attribute")
        time.sleep(3)
        assert waiting.status().code == Status.IN_QUEUE, end  # behind the run, in the one heavy slot
        ended = time.perf_counter()
        if end == "clear":
            view.locator("#upload button[aria-label='Clear']").first.click()
            view.locator("#attr-summary").get_by_text("Stopped.").wait_for(timeout=2_000)
        else:
            view.close()
        assert "Saliency" in waiting.result(timeout=60)[3], end
        assert time.perf_counter() - ended < 20, end  # the run took a minute or more
        time.sleep(1)
        before = cpu_seconds(pid)
        time.sleep(3)
        assert cpu_seconds(pid) - before < 1.0, end  # the run used two cores' worth
    page.locator("#examples img").nth(1).click()  # a photo again, for the tests that follow
    page.locator("#status").get_by_text("grid 21 rows × 32 columns").wait_for(timeout=60_000)


# Every layer of the depth model's encoder takes half a second more, in the app's process: a run is long enough to
# be cleared while it runs, and each of its layers ends well within the 2 s a stop is given.
SLOW_DEPTH = """
import time
import vitviz.app.server as session
load = session.load_depth_model
def slowed(*args, **kwargs):
    model = load(*args, **kwargs)
    for block in model.encoder.blocks:
        block.register_forward_pre_hook(lambda *_: time.sleep(0.5))
    return model
session.load_depth_model = slowed
"""


def test_clearing_the_photo_ends_a_running_depth_estimate_and_frees_the_heavy_slot(page, tmp_path):
    """A tiny random DPT of 40 layers, slowed to 20 s a run: while one student's Depth tab runs it, another's depth
    (through the API) waits for the one heavy slot. Clear ends the run: the page says "Stopped." and the other's
    run starts, each within 2 s, and no toast or picture calls the stop an error."""
    gradio_client = pytest.importorskip("gradio_client")
    import transformers as tf
    from conftest import TINY_ENCODER, TINY_NECK
    from gradio_client.utils import Status

    from vitviz.app.head_choice import MEAN_OF_HEADS_VALUE

    folder = tmp_path / "deep-dpt"
    config = {**TINY_ENCODER, "num_hidden_layers": 40}
    tf.DPTForDepthEstimation(tf.DPTConfig(**config, backbone_out_indices=[9, 19, 29, 39], **TINY_NECK)).save_pretrained(
        folder
    )
    with running_app(["--depth-model", str(folder)], setup=SLOW_DEPTH) as url:
        view = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            view.goto(url)
            view.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
            view.get_by_role("tab", name=label("depth")).click()  # the tab draws its depth when shown
            view.get_by_text("the encoder's layers").first.wait_for(timeout=30_000)  # its progress: it runs
            other = gradio_client.Client(url, verbose=False, ssl_verify=False)
            image = gradio_client.handle_file(str(ASSETS / "coffee.jpg"))
            waiting = other.submit(
                image, str(folder), "inferno", 0.6, 39, MEAN_OF_HEADS_VALUE, False, api_name="/depth"
            )
            deadline = time.monotonic() + 10
            while waiting.status().code != Status.IN_QUEUE and time.monotonic() < deadline:
                time.sleep(0.1)
            assert waiting.status().code == Status.IN_QUEUE  # behind the run, in the one heavy slot
            cleared = time.perf_counter()
            view.locator("#upload button[aria-label='Clear']").first.click()
            view.locator("#depth-note").get_by_text("Stopped.").wait_for(timeout=2_000)
            started = {Status.PROCESSING, Status.PROGRESS, Status.ITERATING, Status.FINISHED}
            while waiting.status().code not in started and time.perf_counter() - cleared < 2:
                time.sleep(0.05)
            assert waiting.status().code in started, waiting.status().code
            view.wait_for_timeout(1500)
            assert "Stopped." in view.locator("#depth-note").inner_text()  # it stays said
            assert view.locator(".toast-body").count() == 0  # and nothing calls the stop an error
            assert view.locator("#depth-tab").get_by_text("Error", exact=True).count() == 0
            shot(view, tmp_path, "depth-stopped.png")
            waiting.cancel()
        finally:
            view.close()


LOADED = "s => { const i = document.querySelector(s + ' img'); return i && i.complete && i.naturalWidth > 0; }"
CONTENT_BOX = """([sel, size]) => {  // where the picture's pixels are on the page: object-fit may letterbox them
  const i = document.querySelector(sel + ' img');  // size: its pixel size, for a picture that is still loading
  i.scrollIntoView({block: 'center'});
  const r = i.getBoundingClientRect(), [nw, nh] = size || [i.naturalWidth, i.naturalHeight];
  let sx = r.width / nw, sy = r.height / nh;
  const fit = getComputedStyle(i).objectFit;
  if (fit === 'contain') sx = sy = Math.min(sx, sy);
  if (fit === 'scale-down') sx = sy = Math.min(sx, sy, 1);
  return {left: r.left + (r.width - nw * sx) / 2, top: r.top + (r.height - nh * sy) / 2, sx, sy};
}"""


def marker_box(url: str) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) of the magenta query marker in the picture at `url` (a JPEG: colours are near); None
    where the picture has none (yet)."""
    import urllib.request

    data = np.frombuffer(urllib.request.urlopen(url, timeout=30).read(), np.uint8)
    rgb = cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB).astype(int)
    ys, xs = np.nonzero((rgb[..., 0] > 190) & (rgb[..., 1] < 100) & (rgb[..., 2] > 190))
    return (xs.min(), ys.min(), xs.max(), ys.max()) if len(xs) else None


def under(box, x: float, y: float) -> bool:
    """Whether (x, y) lies in the marker's box (2 px of JPEG blur allowed)."""
    return box is not None and box[0] - 2 <= x <= box[2] + 2 and box[1] - 2 <= y <= box[3] + 2


def wait_for_width(page, selector: str, width: int) -> None:
    """Until the picture shown is this image's (a new image's views replace the last one's). A picture off the
    screen is not loaded (lazy): it is scrolled to."""
    page.wait_for_function(
        """([s, w]) => { const i = document.querySelector(s + ' img');
                        if (i && !i.naturalWidth) i.scrollIntoView({block: 'center'});
                        return i && i.naturalWidth === w; }""",
        arg=[selector, int(width)],
        timeout=60_000,
    )
    page.wait_for_timeout(500)


def settle(page, selector: str) -> None:
    """Until the picture has stopped changing for 1 s: a tab's first draw lands after its pictures appear, and
    a click on a picture being replaced is lost (as a user's would be)."""
    last, same = None, 0
    for _ in range(60):
        now = src(page, selector)
        same = same + 1 if now == last else 0
        if same >= 2:
            return
        last = now
        page.wait_for_timeout(500)


def click_patches(page, selector: str, grid, area, cells, read) -> None:
    """Click the centre of each (row, col) of `cells` in the picture `selector`, whose patch grid `grid` covers
    `area` (h, w) pixels from its top-left; each click must choose that cell (`read()`), and the redrawn
    picture's query marker must lie under the pointer. Each answer gets 20 s to land (a loaded CI machine)."""
    (gh, gw), (h, w) = grid, area
    settle(page, selector)
    for r, c in cells:
        x, y = (c + 0.5) * w / gw, (r + 0.5) * h / gh  # in the picture's own pixels
        page.wait_for_function(LOADED, arg=selector, timeout=20_000)  # the last answer's picture has loaded
        box = page.evaluate(CONTENT_BOX, [selector, None])
        page.mouse.click(box["left"] + x * box["sx"], box["top"] + y * box["sy"])
        marked = None
        for _ in range(200):  # read every 100 ms: an answer takes 0.2 to 1 s
            page.wait_for_timeout(100)
            if read() != (r, c):
                continue
            marked = marker_box(src(page, selector))
            if under(marked, x, y):
                break
        assert read() == (r, c), (selector, (r, c), read())
        assert under(marked, x, y), (selector, (r, c), (x, y), marked)


def rapid_clicks(page, selector: str, grid, area, cells, read) -> None:
    """Five clicks 100 ms apart: the query ends on the last one, and the picture marks it. A click may land
    while the last answer's picture is loading (the app holds it until the picture is in)."""
    (gh, gw), (h, w) = grid, area
    settle(page, selector)
    page.wait_for_function(LOADED, arg=selector, timeout=20_000)
    size = page.evaluate(
        "s => { const i = document.querySelector(s + ' img'); return [i.naturalWidth, i.naturalHeight]; }", selector
    )
    for r, c in cells:
        box = page.evaluate(CONTENT_BOX, [selector, size])  # the page above may grow as the answers land
        page.mouse.click(box["left"] + (c + 0.5) * w / gw * box["sx"], box["top"] + (r + 0.5) * h / gh * box["sy"])
        page.wait_for_timeout(100)
    for _ in range(40):  # the clicks' answers queue behind their redraws: give them 20 s to settle
        page.wait_for_timeout(500)
        if read() == cells[-1]:
            break
    page.wait_for_timeout(2000)  # and nothing comes after
    assert read() == cells[-1], (selector, cells[-1], read())
    x, y = (cells[-1][1] + 0.5) * w / gw, (cells[-1][0] + 0.5) * h / gh
    for _ in range(20):  # the picture shows the last query once its redraw lands
        marked = marker_box(src(page, selector))
        if under(marked, x, y):
            break
        page.wait_for_timeout(500)
    assert under(marked, x, y), (selector, cells[-1], (x, y), marked)


def test_every_click_picks_the_patch_under_the_pointer(page, tmp_path, embedded):
    """In every clickable picture (Attention's query picker, Inside a head's three maps, the position map), for
    a portrait photo, and in the picker for a landscape one: the corner patches' and a middle patch's centres pick
    that patch, and the marker is drawn where the click was. Five rapid clicks end on the last."""
    import vitviz

    coffee = cv2.imread(str(vitviz.example("coffee")))
    page.get_by_role("tab", name=label("tokens")).click()
    choose(page, "#size", "224")  # at 224 px each click redraws twice as fast
    try:
        for shape, photo in (("portrait", cv2.rotate(coffee, cv2.ROTATE_90_CLOCKWISE)), ("landscape", coffee)):
            photo_file = tmp_path / f"coffee-{shape}.png"
            cv2.imwrite(str(photo_file), photo)
            a = vitviz.analyze(embedded, photo_file, longest=224)
            page.get_by_role("tab", name=label("tokens")).click()
            page.locator("#upload button[aria-label='Clear']").first.click()  # a shown file hides the file input
            page.locator("#upload input[type=file]").set_input_files(str(photo_file))
            page.locator("#status").get_by_text(f"grid {a.grid[0]} rows × {a.grid[1]} columns").wait_for(timeout=60_000)
            click_every_picture(page, a, shape)
    finally:
        choose(page, "#size", "model default")  # the page is shared with the next tests


def click_every_picture(page, a, shape: str) -> None:
    from vitviz import render
    from vitviz.views.common import display
    from vitviz.views.inside import INSIDE_SIDE
    from vitviz.views.positions import POS_MAP_SIDE

    (gh, gw), photo = a.grid, display(a).shape[:2]
    corners = [(0, 0), (0, gw - 1), (gh - 1, 0), (gh - 1, gw - 1), (gh // 2, gw // 3)]
    rapid = [(1, 1), (gh - 2, 2), (2, gw - 3), (gh // 2, gw // 2), (gh // 3, 1)]

    def patch_of(selector):
        def read():
            value = int(page.locator(f"{selector} input").input_value())
            return divmod(value, gw) if value >= 0 else None

        return read

    page.get_by_role("tab", name=label("attention")).click()
    open_server_pictures(page)
    wait_for_width(page, "#picker", photo[1])
    click_patches(page, "#picker", a.grid, photo, corners, patch_of("#patch"))
    rapid_clicks(page, "#picker", a.grid, photo, rapid, patch_of("#patch"))

    if shape != "portrait":  # Inside a head's maps and the position map are the portrait's; their mapping of
        return  # a landscape photo is in tests/test_server.py -k click
    page.get_by_role("tab", name=label("inside")).click()
    inside = render.fit(display(a), INSIDE_SIDE).shape[:2]
    for selector in STEPS:
        wait_for_width(page, selector, max(inside[1], render.MIN_BAR_BELOW))
        order = [3, 2, 1, 0, 4] if selector == STEPS[1] else range(5)  # each first click moves the query
        click_patches(page, selector, a.grid, inside, [corners[i] for i in order], patch_of("#inside-patch"))
        rapid_clicks(page, selector, a.grid, inside, rapid, patch_of("#inside-patch"))

    # The position map belongs to the model, not the photo: one shape checks it.
    page.get_by_role("tab", name=label("positions")).click()
    page.locator("#pos-large img").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    g = a.model.native_grid

    def position():
        return tuple(int(page.locator(f"#pos-{s} input[type=number]").input_value()) for s in ("row", "col"))

    side = (POS_MAP_SIDE, POS_MAP_SIDE)
    cells = [(0, 0), (0, g[1] - 1), (g[0] - 1, 0), (g[0] - 1, g[1] - 1), (g[0] // 3, g[1] // 4)]
    click_patches(page, "#pos-large", g, side, cells, position)
    rapid_clicks(page, "#pos-large", g, side, [(1, 2), (3, 4), (5, 6), (7, 8), (2, 9)], position)


def test_a_full_queue_says_in_the_page_where_the_photo_stood(page):
    """`--max-queue 0`: the page's first analysis is refused, and a toast says why in the app's words
    (`scheduling.queue_full`), not a bare "Error" nor Gradio's "This application is currently busy"."""
    from vitviz.app.scheduling import queue_full

    with running_app(["--max-queue", "0"]) as url:
        view = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            view.goto(url)
            said = view.locator(".toast-body").get_by_text(queue_full(0, 0, None))
            said.wait_for(timeout=60_000)
            assert view.get_by_text("currently busy").count() == 0
        finally:
            view.close()


def tokens_grey(page) -> float:
    """The median grey of the Tokens view's picture: its photo's, under the patch grid and the numbers."""
    picture = page.request.get(src(page, "#tokens")).body()
    return float(np.median(cv2.imdecode(np.frombuffer(picture, np.uint8), cv2.IMREAD_GRAYSCALE)))


def test_a_multipage_tiff_shows_its_first_page_and_a_refused_upload_says_why_and_leaves_the_views(page, tmp_path):
    """A TIFF of three pages (greys 40, 120 and 200) is analysed from its first: the status says so and how to see
    another, and the Tokens view shows that page. One over the upload limit (25 MB: three 3-megapixel pages) is
    refused with its reason in a toast, and a file that is no image with its reason in the status; each time the
    status says that the views keep the last photo, and the Tokens view still shows the TIFF's first page. Each step
    waits for what it checks, not for a time: the server may be loaded."""
    from PIL import Image

    from vitviz.app.photo import not_read
    from vitviz.sentences import first_picture_note

    rng = np.random.default_rng(0)
    small, large, junk = tmp_path / "pages.tiff", tmp_path / "large.tiff", tmp_path / "notes.png"
    pages = [Image.fromarray(np.full((300, 400, 3), 40 + 80 * i, np.uint8)) for i in range(3)]
    pages[0].save(small, save_all=True, append_images=pages[1:])
    pages = [Image.fromarray(rng.integers(0, 255, (1500, 2000, 3), np.uint8)) for _ in range(3)]
    pages[0].save(large, save_all=True, append_images=pages[1:])
    assert large.stat().st_size > 25 * 2**20
    junk.write_bytes(b"not a picture")
    page.get_by_role("tab", name=label("tokens")).click()
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(small))
    said = first_picture_note("TIFF", 3).split("**")[1]  # its words, without the markdown around them
    page.locator("#status").get_by_text(said).wait_for(timeout=60_000)
    assert "input 336 px high × 448 px wide" in page.locator("#status").inner_text()  # 300 × 400
    deadline = time.monotonic() + 60
    while abs(tokens_grey(page) - 40) > 8 and time.monotonic() < deadline:  # the view lands after the status
        page.wait_for_timeout(250)
    assert abs(tokens_grey(page) - 40) <= 8  # the first page, not the last photo
    shown = src(page, "#tokens")
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(large))
    page.locator(".toast-body").get_by_text("exceed the maximum allowed size of 25.0 Mb").wait_for(timeout=60_000)
    page.locator("#status").get_by_text(NO_PHOTO).wait_for(timeout=30_000)
    assert src(page, "#tokens") == shown  # the last photo's, as the status says
    page.locator("#upload input[type=file]").set_input_files(str(junk))  # the refused file left the box empty
    reason = "notes.png is not an image (unrecognised file format)"
    page.locator("#status").get_by_text(not_read(reason).split("**")[2].strip()).wait_for(timeout=60_000)
    page.locator(".toast-body").get_by_text(reason).wait_for(timeout=10_000)
    shot(page, tmp_path, "tiff-refused.png")
    assert src(page, "#tokens") == shown and abs(tokens_grey(page) - 40) <= 8
    page.locator("#examples img").nth(0).click()
    page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)


def test_a_click_on_a_head_tile_switches_that_head_off_and_says_what_it_did(page, tmp_path):
    """What if: a click on layer 9's head 3 tile ablates that head; the page names it and its sentence is
    `ablation_words` of `vitviz.ablate` on the same photo, the output after differs from before, and a click on
    the photo chooses its patch."""
    import vitviz
    from vitviz.app.server import EXAMPLES
    from vitviz.render import TILE_H, TILE_LEFT, TILE_TOP, TILE_W
    from vitviz.whatif_words import ablation_words

    page.get_by_role("tab", name=label("whatif")).click()
    tiles = page.locator("#whatif-tiles img").first
    tiles.wait_for(timeout=60_000)
    page.wait_for_function("() => document.querySelector('#whatif-tiles img').complete", timeout=30_000)
    scale = page.evaluate(
        "() => { const i = document.querySelector('#whatif-tiles img');"
        " return i.getBoundingClientRect().width / i.naturalWidth; }"
    )
    x, y = TILE_LEFT + 3 * TILE_W + TILE_W / 2, TILE_TOP + 9 * TILE_H + TILE_H / 2
    tiles.click(position={"x": x * scale, "y": y * scale})
    page.locator("#whatif-off").get_by_text("layer 9, head 3, zeroed").wait_for(timeout=60_000)
    assert page.locator("#whatif-layer input[type=number]").input_value() == "9"
    assert page.locator("#whatif-head input[type=number]").input_value() == "3"
    model = vitviz.load_model(device="cpu")
    w = vitviz.ablate(model, EXAMPLES[0], heads=[(9, 3)])
    page.locator("#whatif-said").get_by_text(f"from {w.before:.3g} to {w.after:.3g}").wait_for(timeout=30_000)
    assert page.locator("#whatif-said").inner_text().strip() == ablation_words(w)
    before, after = (src(page, f"#whatif-dense-{s}") for s in ("before", "after"))
    assert before and after and before != after
    page.locator("#whatif-photo img").first.click(position={"x": 3, "y": 3})  # the top-left patch
    page.wait_for_function("() => document.querySelector('#whatif-patches textarea').value === '0'", timeout=30_000)
    shot(page, tmp_path, "whatif.png")


def test_the_explorers_head_switched_off_puts_the_output_beside_it_and_says_by_how_much(page, tmp_path):
    """Attention: the Explorer's test handle shows layer 9's head 3, and *Switch off the head shown* ablates that
    head: the page names it, its sentence is `ablation_words` of `vitviz.ablate` on the same photo with the numbers
    it quotes, and the output with the head off is Python's ablated dense map, beside the unablated one."""
    import vitviz
    from vitviz.app.server import EXAMPLES
    from vitviz.views.output import output_view
    from vitviz.views.whatif import dense_limits
    from vitviz.whatif_words import ablation_words

    page.get_by_role("tab", name=label("attention")).click()
    page.wait_for_function("() => window.vitviz?.explorer?.state().loaded.length > 0", timeout=60_000)
    page.evaluate("() => window.vitviz.explorer.hover(9, 3, -1)")
    assert [page.evaluate("() => window.vitviz.explorer.state()")[k] for k in ("layer", "head")] == [9, 3]
    page.locator("#explorer-switch-off").click()
    page.locator("#explorer-off").get_by_text("layer 9, head 3, zeroed").wait_for(timeout=60_000)
    model = vitviz.load_model(device="cpu")
    # the input the page analysed, whatever size an earlier test chose on this shared page
    h, w = map(int, re.search(r"input (\d+) px high × (\d+) px wide", page.locator("#status").inner_text()).groups())
    w = vitviz.ablate(model, EXAMPLES[0], heads=[(9, 3)], longest=max(h, w))
    said = page.locator("#explorer-said").inner_text().strip()
    assert said == ablation_words(w)
    shown = float(re.search(r"by ([\d.]+) % on this photo", said)[1])
    assert shown == pytest.approx(abs(w.relative) * 100, abs=0.06) and shown > 0.01
    assert f"from {w.before:.3g} to {w.after:.3g}" in said
    before, after = (fetch_picture(src(page, f"#explorer-dense-{s}")) for s in ("before", "after"))
    # drawn with the page's settings, whatever an earlier test on this shared page chose (one chooses magma)
    cmap = page.locator("#cmap input").input_value()
    scale = page.locator("#colour-scale input:checked").input_value()
    limits = dense_limits((w.baseline, w), scale)  # the two drawn on one scale
    want_before, want_after = (output_view(a, cmap, 0.6, scale, limits)[1] for a in (w.baseline, w))
    assert before.shape == want_before.shape and after.shape == want_after.shape
    assert np.abs(after.astype(int) - want_after).mean() < 3 < np.abs(after.astype(int) - want_before).mean() * 10
    assert np.abs(before.astype(int) - want_before).mean() < 3
    shot(page, tmp_path, "explorer-switch-off.png")


def tile_click(view, selector: str, layer: int, head: int) -> None:
    """A click on the middle of head (layer, head)'s tile in the head tiles `selector`, drawn in the page's labels'
    mode (`large`), at the scale the page shows them."""
    from vitviz.render import large_labels, tile_geometry

    large = view.evaluate("() => document.querySelector('#large-text input')?.checked ?? false")
    with large_labels(large):
        left, top, width, height, _ = tile_geometry()
    img = view.locator(f"{selector} img").first
    scale = view.evaluate(
        f"() => {{ const i = document.querySelector('{selector} img');"
        " return i.getBoundingClientRect().width / i.naturalWidth; }"
    )
    x, y = left + head * width + width / 2, top + layer * height + height / 2
    img.click(position={"x": x * scale, "y": y * scale})


NATURAL_WIDTH = (
    "(sel) => document.querySelector(sel + ' img')?.complete && document.querySelector(sel + ' img').naturalWidth"
)


def tiles_width(large: bool) -> int:
    """The width of the What-if tab's head tiles (12 layers × 6 heads) drawn in the labels' mode `large`."""
    from vitviz.render import head_tiles, large_labels

    with large_labels(large):
        return head_tiles(12, 6).shape[1]


def tile_fills(tiles: np.ndarray) -> np.ndarray:
    """[L*H,3] int: each head tile's fill, read inside its top-left corner, of tiles drawn in the normal labels' mode
    (grey, 225, before a grid is measured)."""
    from vitviz.render import large_labels, tile_geometry

    with large_labels(False):
        left, top, width, height, _ = tile_geometry()
    return np.array([tiles[top + i * height + 4, left + h * width + 4] for i in range(12) for h in range(6)], int)


@pytest.mark.parametrize("width, height, projector", [(1400, 1000, False), (1024, 768, True)])
def test_the_what_if_tiles_are_whole_on_the_first_screen_and_read_from_the_back_of_the_room(
    page, tmp_path, width, height, projector
):
    """What if, after a photo (at 224 px), a click on a tile (one head switched off) and every head's importance
    measured: the tab's first screen (its `Tab` record's) shows the head tiles whole under the tab bar with the
    controls, at 1400x1000 and on a 1024x768 projector. There the tiles carry the projector's labels, 18 px tall or
    more on the screen, and a click on one switches off the head it shows; switching the projector off draws them
    again in the other labels' mode, still coloured by the grid measured."""
    from vitviz.tabs import BY_ID

    view = page.context.browser.new_page(viewport={"width": width, "height": height})
    try:
        view.goto(page.url)
        view.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        choose(view, "#size", "224")  # before the projector mode, which folds the settings away
        view.locator("#status").get_by_text("× 16 columns").wait_for(timeout=60_000)
        if projector:
            view.locator("#large-text input").check()
            view.wait_for_function("() => document.body.classList.contains('vitviz-large')", timeout=10_000)
        view.get_by_role("tab", name=label("whatif")).click()
        view.wait_for_function(f"() => ({NATURAL_WIDTH})('#whatif-tiles') === {tiles_width(projector)}")
        tile_click(view, "#whatif-tiles", 9, 3)
        view.locator("#whatif-off").get_by_text("layer 9, head 3, zeroed").wait_for(timeout=60_000)
        grey = src(view, "#whatif-tiles")
        view.locator("#whatif-importance").click()
        view.locator("#whatif-importance-note").get_by_text("Tiles:").wait_for(timeout=300_000)
        wait_for_src_change(view, "#whatif-tiles", grey)
        view.wait_for_function(f"() => ({NATURAL_WIDTH})('#whatif-tiles') === {tiles_width(projector)}")
        view.wait_for_timeout(500)  # the tab's layout has settled
        controls, pictures, _ = astuple(BY_ID["whatif"].first_screen)
        problems = first_screen(view, controls, pictures)
        shot(view, tmp_path, f"whatif-first-screen-{width}x{height}.png")
        assert problems == []
        if projector:
            assert shown_label(view, "#whatif-tiles") >= 18
            coloured = src(view, "#whatif-tiles")
            view.locator("#large-text input").uncheck()
            view.wait_for_function(f"() => ({NATURAL_WIDTH})('#whatif-tiles') === {tiles_width(False)}")
            assert src(view, "#whatif-tiles") != coloured
            assert np.abs(tile_fills(fetch_picture(src(view, "#whatif-tiles"))) - 225).max() > 40  # not grey
    finally:
        view.close()


def test_the_lessons_guess_is_measured_revealed_and_kept_for_the_photo_and_clear_stops_it(page, tmp_path):
    """Step 9 at 224 px: a click on layer 11's head 0 is the guess; every head's importance is measured in the
    page's heavy slot and the step says `guess_words` of `vitviz.importance` run here, every number in it; back to
    step 8 and on to 9 shows it again at once, with no click (the photo's grid is kept); a guess on another photo
    is stopped by Clear, which says so."""
    import vitviz
    from vitviz.app.server import EXAMPLES
    from vitviz.head_importance import importance
    from vitviz.whatif_words import guess_words

    view = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        view.goto(page.url.split("?")[0] + "?step=9")
        view.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
        choose(view, "#size", "224")
        view.locator("#status").get_by_text("× 16 columns").wait_for(timeout=60_000)  # chelsea, 224 px wide
        view.locator("#lesson-title").get_by_text("Step 9 of 9").wait_for(timeout=60_000)
        view.locator("#lesson-text").get_by_text("Click its tile.").wait_for(timeout=60_000)
        view.wait_for_function("() => document.querySelector('#lesson-picture img')?.complete", timeout=30_000)
        assert "forwards' work" in view.locator("#lesson-text").inner_text()
        tile_click(view, "#lesson-picture", 11, 0)
        view.locator("#lesson-text").get_by_text("by the size of that change").wait_for(timeout=300_000)
        model = vitviz.load_model(device="cpu")
        grid = importance(model, EXAMPLES[0], longest=224)
        want = guess_words(grid, model, 11, 0).replace("**", "")
        assert view.locator("#lesson-text").inner_text().strip().startswith(want)
        revealed = src(view, "#lesson-picture")
        view.locator("#lesson-back").click()
        view.locator("#lesson-title").get_by_text("Step 8 of 9").wait_for(timeout=60_000)
        view.locator("#lesson-next").click()
        view.locator("#lesson-title").get_by_text("Step 9 of 9").wait_for(timeout=60_000)
        view.locator("#lesson-text").get_by_text("by the size of that change").wait_for(timeout=10_000)
        assert view.locator("#lesson-text").inner_text().strip().startswith(want) and src(view, "#lesson-picture")
        assert fetch_picture(src(view, "#lesson-picture")).shape == fetch_picture(revealed).shape
        choose(view, "#size", "model default")  # another photo for the lesson: nothing kept for it
        view.locator("#lesson-text").get_by_text("Click its tile.").wait_for(timeout=60_000)
        view.wait_for_function("() => document.querySelector('#lesson-picture img')?.complete", timeout=30_000)
        tile_click(view, "#lesson-picture", 5, 2)
        view.locator("#lesson-text").get_by_text("You guessed layer 5, head 2.").wait_for(timeout=30_000)
        view.get_by_text("each switched off alone").first.wait_for(timeout=30_000)  # the run's progress: it started
        view.locator("#upload button[aria-label='Clear']").first.click()
        view.locator("#lesson-text").get_by_text("Stopped.").wait_for(timeout=10_000)
    finally:
        view.close()
