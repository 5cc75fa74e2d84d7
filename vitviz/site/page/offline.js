// The page and its service worker (sw.js), which keeps the site for a visit with the network off and isolates the
// page where the host cannot (threads need it). A page that it does not control yet is loaded once more, through
// it. Where the host isolates the page itself, it is registered once the model is in (vitvizKeepSite), so that it
// stores the files the page has already fetched rather than fetching them beside the page.

function vitvizRegisterWorker() {
  return navigator.serviceWorker.register("sw.js").catch((e) => {
    console.warn(`vitviz: no service worker (${e.message}): the site needs the network on every visit`);
    return null;
  });
}

const vitvizCanKeep = () => "serviceWorker" in navigator && location.protocol.startsWith("http");

// Resolves to true where the page is being loaded again through the worker (the page's boot stops there)
async function vitvizThroughWorker() {
  if ("serviceWorker" in navigator && navigator.serviceWorker.controller)
    // a new build's worker took over this page of the last one (sw.js): the next load is the new build's
    navigator.serviceWorker.addEventListener("controllerchange", () => {
      document.querySelector(".site-update").hidden = false;
    });
  if (!vitvizCanKeep() || self.crossOriginIsolated) return false;
  const registered = await vitvizRegisterWorker(),
    waited = new Promise((resolve) => setTimeout(() => resolve(null), 5000));
  if (
    registered &&
    !navigator.serviceWorker.controller &&
    !sessionStorage.getItem("vitviz-reloaded") &&
    (await Promise.race([navigator.serviceWorker.ready, waited]))
  ) {
    sessionStorage.setItem("vitviz-reloaded", "1");
    location.reload();
    return true;
  }
  return false;
}

// Once the model is in, on a page that the host isolates: the worker keeps the site (and the browser checks it for
// a new build)
function vitvizKeepSite() {
  if (vitvizCanKeep() && self.crossOriginIsolated) vitvizRegisterWorker();
}
