// sagaflow console: the little JavaScript the pages need. Everything works without it except
// live updates and the lazily loaded trace panel.
"use strict";

(function () {
  const main = document.getElementById("main");

  // The trace panel is fetched after the page painted (Jaeger may be slow or off).
  function loadTrace() {
    const box = document.getElementById("trace");
    if (!box || !box.dataset.url) return;
    fetch(box.dataset.url, { credentials: "same-origin" })
      .then((r) => r.text())
      .then((html) => { box.innerHTML = html; })
      .catch(() => { box.querySelector("p").textContent = "The trace could not be loaded."; });
  }

  // Live updates: poll a tiny JSON endpoint; re-render <main> only when the history moved.
  let lastChange = Date.now();
  function swapMain(html) {
    const doc = new DOMParser().parseFromString(html, "text/html");
    const fresh = doc.getElementById("main");
    if (!fresh) return;
    const open = new Set(Array.from(main.querySelectorAll("details[open][id]")).map((d) => d.id));
    const typing = main.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
    if (typing || open.size) return; // never pull a form away from someone filling it in
    main.innerHTML = fresh.innerHTML;
    for (const attr of ["data-seq", "data-terminal"]) {
      if (fresh.hasAttribute(attr)) main.setAttribute(attr, fresh.getAttribute(attr));
      else main.removeAttribute(attr);
    }
    loadTrace();
    wireLive();
  }

  function wireLive() {
    const toggle = document.getElementById("live-toggle");
    const note = document.getElementById("live-note");
    if (!toggle) return;
    if (main.dataset.terminal) { toggle.checked = false; toggle.disabled = true; note.textContent = "finished"; return; }
    note.textContent = "updated " + Math.round((Date.now() - lastChange) / 1000) + " s ago";
  }

  function poll() {
    const url = main.dataset.liveUrl;
    const toggle = document.getElementById("live-toggle");
    if (!url || main.dataset.terminal || document.hidden || (toggle && !toggle.checked)) { wireLive(); return; }
    fetch(url, { credentials: "same-origin" }).then((r) => r.json()).then((live) => {
      if (String(live.seq) !== main.dataset.seq) {
        lastChange = Date.now();
        return fetch(location.href, { credentials: "same-origin" }).then((r) => r.text()).then(swapMain);
      }
      wireLive();
    }).catch(() => {});
  }

  // Pages that want a plain refresh (a running repair job) say data-refresh="seconds".
  if (main && main.dataset.refresh) {
    setTimeout(() => { if (!document.hidden) location.reload(); }, Number(main.dataset.refresh) * 1000);
  }
  if (main && main.dataset.liveUrl) {
    wireLive();
    setInterval(poll, 2000);
  }
  loadTrace();
})();
