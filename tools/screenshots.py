"""Screenshots of every tab, as a teacher sees them: `python -m tools.screenshots [OUT [TAB ...]]` from the
repository (TAB: ids of vitviz.tabs, to shoot only those).

Serves the app on a free loopback port and shoots each tab in Debian's Chromium at 1400x1000, at 1024x768 with
"Large text, for a projector" on, and at 390x844 (a phone, by touch), on the astronaut photo. Writes
OUT/<tab>-<size>.jpg, the whole page, and OUT/<tab>-<size>-first.jpg, its first screen from the page's top, what a
room sees before anyone scrolls (default OUT: docs/screens), and prints the smallest text each shot shows in the
Explorer. Chromium shoots a whole page as a device without touch: the phone's help for a finger shows only in the
first screen's shot.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cv2

from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, running_app
from vitviz.tabs import TABS, label

SIZES = [(1400, 1000, False, "1400x1000"), (1024, 768, True, "1024x768-projector"), (390, 844, False, "390x844")]
FIRST = {  # what each tab's first screen shows once it is drawn (its `Tab` record's)
    label(tab.id): tab.first_screen.ready for tab in TABS if tab.first_screen and tab.first_screen.ready
}
WHOLE = {  # and what its whole page shows further down, which the first screen does not wait for
    label("attention"): "() => window.vitviz?.explorer?.state().loaded.length === 12",
    label("inside"): "() => document.querySelector('#inside-values img')",
}


def check_saliency(page) -> None:
    """The Attributions tab with its trust panels filled: Saliency (quick), its faithfulness and sanity check."""
    page.locator("#method input").click()
    page.get_by_role("option", name="Saliency (|gradient|)").click()
    page.get_by_role("button", name="Compute attribution").click()
    page.locator("#attr-summary").get_by_text("target").wait_for(timeout=120_000)
    page.locator("#check-faithfulness").click()
    page.locator("#faithfulness-note").get_by_text("Attention rollout.").wait_for(timeout=180_000)
    page.locator("#check-sanity").click()
    page.locator("#sanity-note").get_by_text("rank correlation").wait_for(timeout=300_000)


def check_rollout(page) -> None:
    page.locator("#rollout-check").click()
    page.locator("#rollout-faithfulness").get_by_text("min fusion.").wait_for(timeout=180_000)


def show_lens(page) -> None:
    page.get_by_role("button", name="Show the layer lens").click()
    page.locator("#lens-note").get_by_text("output head").wait_for(timeout=60_000)


def ask_what_if(page) -> None:
    """The What-if tab with a head switched off beside the model as it is, and every head's importance."""
    page.locator("#whatif-run").click()
    page.locator("#whatif-off").get_by_text("zeroed").wait_for(timeout=60_000)
    page.locator("#whatif-importance").click()
    page.locator("#whatif-importance-note").get_by_text("of the 72 heads").wait_for(timeout=300_000)


ACTIONS = {
    label("attributions"): check_saliency,
    label("rollout"): check_rollout,
    label("output"): show_lens,
    label("whatif"): ask_what_if,
}  # a tab's panels that wait a click


def shoot(page, path: Path) -> None:
    """The whole page, as a reader who scrolls to its end sees it: pictures below the screen load only when
    scrolled to (Gradio's images are lazy), so the page is scrolled through first."""
    page.wait_for_function("() => !document.body.innerText.includes('processing')", timeout=60_000)
    height = page.evaluate("() => document.body.scrollHeight")
    for y in range(0, height, 600):
        page.evaluate(f"() => window.scrollTo(0, {y})")
        page.wait_for_timeout(150)
    page.evaluate("() => window.scrollTo(0, 0)")
    # the shown pictures have loaded (a lazy one that is hidden, as the preview on a projector, never loads)
    shown_loaded = "() => [...document.images].filter((i) => i.src && i.offsetParent).every((i) => i.complete)"
    try:
        page.wait_for_function(shown_loaded, timeout=10_000)
    except Exception:  # noqa: BLE001 (a shot with a picture still loading beats no shot)
        print(f"{path.name}: a picture was still loading")
    png = path.with_suffix(".png")
    for whole, name in ((False, path.with_name(f"{path.stem}-first.jpg")), (True, path)):
        page.screenshot(path=str(png), full_page=whole)
        image = cv2.imread(str(png))
        cv2.imwrite(str(name), image[:9000], [cv2.IMWRITE_JPEG_QUALITY, 80])
    png.unlink()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    out = Path(argv[0] if argv else "docs/screens")
    only = [label(tab) for tab in argv[1:]] or None  # tab ids after the folder: shoot only those
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with running_app() as (url, _), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for width, height, large, name in SIZES:
            page = browser.new_page(viewport={"width": width, "height": height}, has_touch=width < 500)
            page.goto(url)
            page.locator("#status").get_by_text("tokens").wait_for(timeout=60_000)
            if large:
                page.locator("#large-text input").check()
            page.locator("#examples img").nth(2).click()
            page.locator("#status").get_by_text("grid 32 rows × 32 columns").wait_for(timeout=60_000)
            for tab in only or [label(tab.id) for tab in TABS]:
                page.get_by_role("tab", name=tab).click()
                for ready in (FIRST, WHOLE):
                    if tab in ready:
                        page.wait_for_function(ready[tab], timeout=60_000)
                if tab in ACTIONS and (only is None or tab in only):
                    ACTIONS[tab](page)
                page.wait_for_timeout(1500)
                slug = tab.split(" · ")[1].lower().replace(" ", "-")
                shoot(page, out / f"{tab.split(' ·')[0].zfill(2)}-{slug}-{name}.jpg")
            sizes = page.evaluate(
                """() => { const z = document.body.classList.contains('vitviz-large') ? 1.25 : 1;
                  return Math.min(...[...document.querySelectorAll('.vx label, .vx figcaption, .vx-mech td')]
                    .map((e) => parseFloat(getComputedStyle(e).fontSize) * z)); }"""
            )
            print(f"{name}: {len(only or TABS)} tabs shot; the Explorer's smallest text {sizes:.1f} px")
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
