// The site's service worker: every file of the site, once fetched, is answered from this browser's cache (so that a
// second visit works with the network off), and every answer carries the cross-origin isolation headers (COOP and
// COEP) that threads need, which a static host such as GitHub Pages cannot set.
const CACHE = "vitviz-site-v1";
const FILES = []; // the site's files but the model (which the page keeps itself), written in by vitviz/site/build.py

// Installed once the page has fetched these files, so they are taken from the browser's HTTP cache where it has them
// ("force-cache": not asked of the site again), else fetched
self.addEventListener("install", (e) =>
  e.waitUntil(
    (async () => {
      const cache = await caches.open(CACHE);
      await Promise.all(
        FILES.map(async (file) => {
          const response = await fetch(file, { cache: "force-cache" });
          if (!response.ok) throw new Error(`HTTP ${response.status} for ${file}`);
          await cache.put(file, response);
        }),
      );
      await self.skipWaiting();
    })(),
  ),
);
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));

function isolated(response) {
  if (response.status === 0) return response; // opaque: its headers cannot be changed
  const headers = new Headers(response.headers);
  headers.set("Cross-Origin-Opener-Policy", "same-origin");
  headers.set("Cross-Origin-Embedder-Policy", "require-corp");
  headers.set("Cross-Origin-Resource-Policy", "same-origin");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

self.addEventListener("fetch", (e) => {
  const url = new URL(e.request.url);
  if (e.request.method !== "GET" || url.origin !== self.location.origin) return;
  e.respondWith(
    (async () => {
      const cache = await caches.open(CACHE);
      const key = url.pathname.endsWith("/") ? url.origin + url.pathname : e.request;
      try {
        const fresh = await fetch(e.request);
        if (fresh.ok && !url.pathname.endsWith(".onnx")) {
          // the model: vitvizModelBytes keeps it
          await cache.put(key, fresh.clone()).catch(() => {}); // a full quota: answered all the same
        }
        return isolated(fresh);
      } catch (err) {
        const kept = (await cache.match(key, { ignoreSearch: true })) || (await cache.match(e.request.url));
        if (kept) return isolated(kept);
        throw err;
      }
    })(),
  );
});
