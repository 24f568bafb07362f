// Reload the page after each plan cycle (the daemon's, or a surge's re-plan): poll /healthz and
// compare its count of cycles and the last one's time.
(function () {
  "use strict";
  var badge = document.getElementById("health");
  if (!badge) { return; }
  var seen = (badge.getAttribute("data-cycles") || "") + " " + (badge.getAttribute("data-last-cycle") || "");
  var editing = function () {
    var spec = document.getElementById("spec");
    return spec && spec.value.length > 0;
  };
  window.setInterval(function () {
    fetch("/healthz", { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) { return answer.json(); })
      .then(function (health) {
        var last = health.cycles + " " + (health.last_cycle_at || "");
        if (last !== seen && !editing()) { window.location.replace("/"); }
      })
      .catch(function () { badge.className = "bad"; badge.textContent = "daemon unreachable"; });
  }, 2000);
})();
