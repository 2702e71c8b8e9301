// Compact record rows (message browser and live tail): a row's button shows or hides the
// detail row it controls. Delegated, so rows swapped in by htmx or added by the tail work.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    const button = event.target.closest("button.expand");
    if (!button) return;
    const detail = document.getElementById(button.getAttribute("aria-controls"));
    if (!detail) return;
    const open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", open ? "true" : "false");
    detail.hidden = !open;
  });
})();
