// The site's service worker: every file of the site is answered from this browser's cache first (so that a second
// visit asks the site for nothing, the graphs and the runtime's .wasm being kept by the page, and works with the
// network off), and every answer carries the cross-origin isolation headers (COOP and COEP) that threads need,
// which a static host such as GitHub Pages cannot set. The cache's name carries the build's content hash: a new
// build is a new sw.js, which the browser finds when it checks this file on a visit; once it has every file of the
// new build it takes over at once and deletes the older caches, so the next visit is the new build's, whole (the
// page that found it says so).
const BUILD = ""; // the hash of FILES' contents, written in by vitviz/site/build.py
const CACHE = `vitviz-site-${BUILD}`;
// the site's files but the graphs and the runtime's .wasm (which the page keeps itself), written in by build.py
const FILES = [];

// Installed once the page has fetched these files: each is asked of the site with the browser's HTTP copy's date
// ("no-cache"), so that an unchanged file costs a 304 and no bytes, and a new build's installs its own files, never
// the copies the HTTP cache kept of the last one
self.addEventListener("install", (e) =>
  e.waitUntil(
    (async () => {
      const cache = await caches.open(CACHE);
      await Promise.all(
        FILES.map(async (file) => {
          const response = await fetch(file, { cache: "no-cache" });
          if (!response.ok) throw new Error(`HTTP ${response.status} for ${file}`);
          await cache.put(file, response);
        }),
      );
      await self.skipWaiting();
    })(),
  ),
);
self.addEventListener("activate", (e) =>
  e.waitUntil(
    (async () => {
      for (const name of await caches.keys())
        if (name.startsWith("vitviz-site-") && name !== CACHE) await caches.delete(name);
      await self.clients.claim();
    })(),
  ),
);

function isolated(response) {
  if (response.status === 0) return response; // opaque: its headers cannot be changed
  const headers = new Headers(response.headers);
  headers.set("Cross-Origin-Opener-Policy", "same-origin");
  headers.set("Cross-Origin-Embedder-Policy", "require-corp");
  headers.set("Cross-Origin-Resource-Policy", "same-origin");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

// A page (a navigation, whatever its ?size= or ?tab=) is the kept index; any other file is kept under its whole URL,
// whose ?v= names its content. What the cache lacks (the graphs and the .wasm, which vitvizModelBytes keeps) is
// fetched, not kept:
// an older build's page, open while this one took over, would keep this build's bytes under its own URLs.
self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== self.location.origin) return;
  e.respondWith(
    (async () => {
      const cache = await caches.open(CACHE);
      const kept = await cache.match(e.request, { ignoreSearch: e.request.mode === "navigate" });
      return isolated(kept || (await fetch(e.request)));
    })(),
  );
});
