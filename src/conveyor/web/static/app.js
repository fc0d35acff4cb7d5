// Conveyor dashboard: live refresh of the #live region, and confirmations.
// No inline script anywhere (the Content-Security-Policy forbids it); no dependencies.
(function () {
  "use strict";
  var KEY = "conveyor-live";
  var live = document.getElementById("live");
  var toggle = document.getElementById("live-toggle");
  var busy = false;
  var stopped = false;

  function enabled() {
    try { return window.localStorage.getItem(KEY) !== "off"; } catch (e) { return true; }
  }

  function showToggle() {
    if (!toggle) { return; }
    toggle.hidden = false;
    var on = enabled() && !stopped;
    toggle.textContent = on ? "Live" : "Paused";
    toggle.className = "live-toggle " + (on ? "on" : "off");
    toggle.setAttribute("aria-pressed", on ? "true" : "false");
    toggle.title = on ? "Updates every few seconds while this tab is visible; click to pause"
                      : "Click to resume live updates";
  }

  function interacting() {
    var el = document.activeElement;
    if (!el || !live.contains(el)) { return false; }
    return /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
  }

  function openDetails() {
    var open = [];
    live.querySelectorAll("details[open] > summary").forEach(function (s) {
      open.push(s.textContent);
    });
    return open;
  }

  function refresh() {
    if (!live || busy || stopped || !enabled() || document.hidden || interacting()) { return; }
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Conveyor-Live": "1" }, credentials: "same-origin", cache: "no-store"
    }).then(function (response) {
      if (response.status === 401 || response.status === 403) { stopped = true; showToggle(); }
      return response.ok ? response.text() : null;
    }).then(function (html) {
      if (html === null || interacting()) { return; }
      var open = openDetails();
      live.innerHTML = html;
      live.querySelectorAll("details > summary").forEach(function (s) {
        var d = s.parentNode;
        if (open.indexOf(s.textContent) >= 0) { d.open = true; } else if (open.length) { d.open = false; }
      });
      live.dispatchEvent(new CustomEvent("conveyor:refreshed", { bubbles: true }));
    }).catch(function () { /* offline for a moment: try again next tick */ })
      .then(function () { busy = false; });
  }

  if (live && live.dataset.poll) {
    var every = Math.max(parseFloat(live.dataset.poll) || 2, 0.5) * 1000;
    showToggle();
    window.setInterval(refresh, every);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) { refresh(); }
    });
    if (toggle) {
      toggle.addEventListener("click", function () {
        try { window.localStorage.setItem(KEY, enabled() ? "off" : "on"); } catch (e) { /* private mode */ }
        stopped = false;
        showToggle();
        refresh();
      });
    }
  }

  // Forms that change something important ask first (delegated: #live is replaced).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
})();
