"""A Chromium page's heap through the DevTools protocol, for the widget's test and its heap benchmark: a forced
collection, the heap in use, and how many live objects have a given prototype."""

from __future__ import annotations


def collect(cdp) -> dict:
    """A full collection, then the heap's usage: usedSize (JS heap) and backingStorageSize (array buffers), bytes."""
    cdp.send("HeapProfiler.collectGarbage")
    return cdp.send("Runtime.getHeapUsage")


def count_objects(cdp, prototype: str, where: str = "true") -> int:
    """How many live objects have `prototype` (a JS expression, e.g. "HTMLCanvasElement.prototype") and make `where`
    true (a JS expression of `o`, e.g. "!o.isConnected"). The array that CDP's queryObjects makes is released
    before returning: held, it would keep every object it counted alive."""
    group = {"objectGroup": "vitviz-count"}
    try:
        proto = cdp.send("Runtime.evaluate", {"expression": prototype, **group})["result"]["objectId"]
        found = cdp.send("Runtime.queryObjects", {"prototypeObjectId": proto, **group})["objects"]["objectId"]
        length = f"function () {{ return this.filter((o) => {where}).length; }}"
        call = {"objectId": found, "functionDeclaration": length, "returnByValue": True}
        return cdp.send("Runtime.callFunctionOn", call)["result"]["value"]
    finally:
        cdp.send("Runtime.releaseObjectGroup", group)
