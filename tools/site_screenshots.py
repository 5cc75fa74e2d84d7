"""Screenshots of the static site's views, as a teacher opens them:
`python -m tools.site_screenshots OUT [--photo NAME]`.

Each view from the page's top, right after a photo is analysed, at 1400×1000, at 1024×768 with the projector mode
on, and at 390×844 (a phone, which gets 224 px), with the lesson's steps that weigh a test and its exercise (where
does a head look?) before a guess and after one. The site is built and served here first."""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

from vitviz.site.build import TABS, build
from vitviz.site.serve import server

LESSON_STEPS = (4, 5, 6, 8)  # the steps whose sentences weigh a test or draw a table, beside step 1 (the tab's own)
SIZES = (("1400x1000", 1400, 1000, False), ("1024x768-projector", 1024, 768, True), ("390x844", 390, 844, False))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--photo", default="chelsea")
    parser.add_argument("--site", type=Path, default=None, help="a built site (default: build one)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    site = args.site or build(Path(tempfile.mkdtemp()) / "site")
    httpd = server(site, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for label, width, height, projector in SIZES:
            page = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True).new_page()
            page.goto(url)
            page.wait_for_function("() => window.vitviz && window.vitviz.site", timeout=60_000)
            page.evaluate("() => window.vitviz.site.ready.then(() => true)")
            if projector:
                page.check(".site-projector")
            page.evaluate(f"() => window.vitviz.site.analyse('examples/{args.photo}.jpg', '{args.photo}.jpg')")
            for i, (tab, _) in enumerate(TABS):
                page.evaluate(f"() => window.vitviz.site.tab('{tab}')")
                page.wait_for_timeout(800)
                page.evaluate("() => window.scrollTo(0, 0)")
                page.screenshot(path=str(args.out / f"{i + 1:02d}-{tab}-{label}.png"))
            for step in LESSON_STEPS:
                page.evaluate(f"() => window.vitviz.site.lesson({step})")
                page.wait_for_timeout(500)
                page.evaluate("() => window.scrollTo(0, 0)")
                page.screenshot(path=str(args.out / f"lesson-step{step}-{label}.png"))
            for guessed, name in ((None, "asked"), (0, "revealed")):  # the exercise: before a guess, and after one
                page.evaluate(f"() => window.vitviz.site.look(6, 0, {'null' if guessed is None else guessed})")
                page.wait_for_timeout(500)
                page.evaluate("() => window.scrollTo(0, 0)")
                page.screenshot(path=str(args.out / f"lesson-guess-{name}-{label}.png"))
            page.context.close()
        browser.close()
    httpd.shutdown()
    print(f"wrote {(len(TABS) + len(LESSON_STEPS) + 2) * len(SIZES)} screenshots to {args.out}")


if __name__ == "__main__":
    main()
