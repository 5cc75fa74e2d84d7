"""The notebook widget's JS heap: `python -m benchmarks.widget_heap [--runs 10] [--control] [--snapshot]`.

Runs one JupyterLab cell `--runs` times, each run's `vitviz.explore(...)` (embedded model, 224 px, a bundled
photo each time) replacing the last one's output, and prints after each run, after a forced collection (CDP
`HeapProfiler.collectGarbage`): the JS heap in use, the array buffers' bytes, and how many canvases the page
holds (CDP `Runtime.queryObjects`, its result released at once: held, it would keep what it counted alive).
`--control`: a widget that draws nothing but carries the same bytes (the widget's module text as comments, the
meta in its state), so that the host's own cost of a widget is measured apart. `--close`: each run closes the last
run's widget first. `--snapshot`: heap snapshots after run 2 and the last run, what grew between them, and the shortest
retaining path of the canvases out of the document, so that whatever keeps an old Explorer is named.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import Counter, deque
from pathlib import Path

from tests.support.harness import CHROMIUM, CHROMIUM_ARGS
from tests.support.heap import collect, count_objects

SETUP = """import anywidget, traitlets, vitviz
from vitviz import explorer, widget
model = vitviz.load_model()
NOTHING = "export default {render({el}) { el.appendChild(document.createElement('canvas'));" \\
          " window.vitvizControl = (window.vitvizControl || 0) + 1; }}"

class Control(anywidget.AnyWidget):  # the host's own cost: the widget's module text, as comments, and its meta
    _esm = NOTHING + "\\n" + "\\n".join("// " + line for line in widget.ESM.splitlines())
    meta = traitlets.Dict().tag(sync=True)

def control(a):  # the Explorer's state: its meta without the parts the page asks for (ExplorerWidget.EXTRAS)
    meta = explorer.standalone_meta(a, explorer.DEFAULT_CMAP, explorer.DEFAULT_OPACITY, widget.DEFAULT_SCALE)
    return Control(meta={k: v for k, v in meta.items() if k not in widget.ExplorerWidget.EXTRAS})"""

# each run, the next bundled photo; `--close` closes the last run's widget first (the kernel lets it go)
CELL = """i = globals().get("i", -1) + 1
if {close} and "w" in globals():
    w.close()
w = {make}(vitviz.analyze(model, vitviz.example(vitviz.EXAMPLES[i % 4]), longest=224))
w"""

NEW_EXPLORER = """() => { const e = window.vitviz?.explorer;
  return e && e !== window.vitvizOld && e.state().loaded.length === 12; }"""


def set_up(page, run_cell) -> None:
    """The first cell run until it has run (a loaded machine takes a minute to load the model); run again if its
    run was lost, which happens while the kernel's connection settles."""
    prompt = "document.querySelector('.jp-Cell .jp-InputPrompt').textContent"
    for _ in range(3):
        run_cell(page, 0)
        page.wait_for_function(f"() => !{prompt}.includes('*')", timeout=300_000, polling=500)
        if page.evaluate(f"() => /\\[1\\]/.test({prompt})"):
            return
    raise RuntimeError("the set-up cell did not run")


def snapshot(cdp) -> dict:
    """A V8 heap snapshot of the page, after a forced collection, as its JSON."""
    chunks: list[str] = []
    cdp.on("HeapProfiler.addHeapSnapshotChunk", lambda e: chunks.append(e["chunk"]))
    cdp.send("HeapProfiler.collectGarbage")
    cdp.send("HeapProfiler.takeHeapSnapshot", {"reportProgress": False})
    return json.loads("".join(chunks))


class Heap:
    """A heap snapshot's nodes (type, name, self size, edges), for sums by kind and retaining paths."""

    def __init__(self, snap: dict) -> None:
        meta = snap["snapshot"]["meta"]
        self.nf, self.ef = len(meta["node_fields"]), len(meta["edge_fields"])
        self.node_types, self.edge_types = meta["node_types"][0], meta["edge_types"][0]
        self.nodes, self.edges, self.strings = snap["nodes"], snap["edges"], snap["strings"]
        self.n = len(self.nodes) // self.nf
        count_at = meta["node_fields"].index("edge_count")
        self.detached_at = meta["node_fields"].index("detachedness")  # 2: a DOM node out of the document
        self.first_edge, e = [0] * (self.n + 1), 0
        for i in range(self.n):
            self.first_edge[i] = e
            e += self.nodes[i * self.nf + count_at] * self.ef
        self.first_edge[self.n] = e

    def name(self, i: int) -> str:
        return self.strings[self.nodes[i * self.nf + 1]]

    def kinds(self) -> Counter:
        """Self bytes by (node type, name), names cut to 60 characters: what a diff of two snapshots compares."""
        out: Counter = Counter()
        for i in range(self.n):
            out[(self.node_types[self.nodes[i * self.nf]], self.name(i)[:60])] += self.nodes[i * self.nf + 3]
        return out

    def retaining_path(self, target: int) -> list[str]:
        """The shortest path from the GC roots to node `target`, over strong edges; a WeakMap's entries are not
        followed (they live only while their key does, which the snapshot's edges do not show)."""
        parent: dict[int, tuple[int, str]] = {0: (-1, "")}
        queue = deque([0])
        while queue and target not in parent:
            i = queue.popleft()
            for k in range(self.first_edge[i], self.first_edge[i + 1], self.ef):
                kind, to = self.edge_types[self.edges[k]], self.edges[k + 2] // self.nf
                label = self.edges[k + 1] if kind in ("element", "hidden") else self.strings[self.edges[k + 1]]
                if kind == "weak" or to in parent or "part of key" in str(label):
                    continue
                parent[to] = (i, f"{kind}:{str(label)[:50]}")
                queue.append(to)
        if target not in parent:
            return ["(not reachable: garbage at the next collection)"]
        path, i = [], target
        while i:
            up, label = parent[i]
            path.append(f"{self.name(i)[:70]!r} <-[{label}]-")
            i = up
        return path[::-1]

    def canvases(self) -> list[int]:
        return [i for i in range(self.n) if self.name(i).startswith("<canvas")]


def report_snapshots(before: Heap, after: Heap, runs: int) -> None:
    """What grew between two snapshots `runs` runs apart, and what keeps the canvases the page no longer shows."""
    grown = after.kinds()
    grown.subtract(before.kinds())
    print(f"snapshots {runs} runs apart: the kinds that grew most (self bytes a run)")
    top = grown.most_common(15)
    for (kind, name), size in top:
        print(f"  {size / runs / 1024:8.1f} KiB  {kind:<10} {name!r}")
    for _kind, name in [k for k, _ in top if k[0] == "string"][:2]:
        found = [i for i in range(after.n) if after.name(i)[:60] == name]
        print(f"what keeps the first of the {len(found)} strings {name[:30]!r}:")
        print("  " + "\n    ".join(after.retaining_path(found[0])))
    detached = [i for i in after.canvases() if after.nodes[i * after.nf + after.detached_at] == 2]
    print(f"canvases: {len(after.canvases())}, {len(detached)} not in the document")
    for i in detached[:2]:
        print("  " + "\n    ".join(after.retaining_path(i)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--control", action="store_true", help="a widget that does nothing, carrying the same bytes")
    parser.add_argument("--close", action="store_true", help="each run closes the last run's widget first")
    parser.add_argument("--snapshot", action="store_true", help="name what retains the canvases not in the page")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from tests.support.jupyter import open_notebook, run_cell, running_jupyter, write_notebook

    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp, running_jupyter(Path(tmp)) as url, sync_playwright() as pw:
        cell = CELL.format(close=args.close, make="control" if args.control else "vitviz.explore")
        write_notebook(Path(tmp) / "heap.ipynb", SETUP, cell)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_notebook(page, url, "heap.ipynb")
        set_up(page, run_cell)
        cdp = page.context.new_cdp_session(page)
        rows = []
        for i in range(args.runs):
            if args.control:
                run_cell(page, 1)
                page.wait_for_function("(n) => window.vitvizControl === n", arg=i + 1, timeout=120_000)
            else:
                page.evaluate("() => { window.vitvizOld = window.vitviz?.explorer; }")
                run_cell(page, 1)
                page.wait_for_function(NEW_EXPLORER, timeout=120_000)
                page.evaluate("() => { window.vitvizOld = null; }")
            page.wait_for_timeout(500)  # the old view's clean-up and the kernel's idle message
            usage = collect(cdp)
            buffers = usage.get("backingStorageSize", 0) / 2**20
            canvases = count_objects(cdp, "HTMLCanvasElement.prototype")
            rows.append((usage["usedSize"] / 2**20, buffers, canvases))
            if args.snapshot and i == 1:
                first_snapshot = Heap(snapshot(cdp))
            print(
                f"run {i + 1:2d}: JS heap {rows[-1][0]:6.2f} MiB, array buffers {buffers:6.2f} MiB, "
                f"canvases {canvases}, load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        first, last = rows[0], rows[-1]
        per_run = (last[0] - first[0]) / max(1, len(rows) - 1)
        print(
            f"run 1 to run {len(rows)}: {last[0] - first[0]:+.2f} MiB JS heap ({per_run:+.3f} MiB a run), "
            f"{last[1] - first[1]:+.2f} MiB array buffers, {last[2] - first[2]:+d} canvases"
        )
        if args.snapshot:
            report_snapshots(first_snapshot, Heap(snapshot(cdp)), len(rows) - 2)
        browser.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
