// Behaviour htmx does not cover: toasts, select-all, counted confirmations, copy buttons.
(function () {
  "use strict";

  // Not a <noscript> style: htmx parses history-restore responses without scripting, which
  // would switch such a style on.
  document.documentElement.classList.replace("no-js", "js");

  function toast(message, level) {
    var box = document.getElementById("toasts");
    if (!box || !message) return;
    var el = document.createElement("div");
    el.className = "toast toast-" + (level === "error" ? "error" : "success");
    el.textContent = message;
    box.appendChild(el);
    setTimeout(function () { el.remove(); }, 5000);
  }

  document.addEventListener("toast", function (evt) {
    toast(evt.detail && evt.detail.message, evt.detail && evt.detail.level);
  });

  // Server-rendered flash messages fade like htmx toasts.
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("#toasts .toast").forEach(function (el) {
      setTimeout(function () { el.remove(); }, 6000);
    });
  });

  document.addEventListener("htmx:responseError", function (evt) {
    var status = evt.detail.xhr.status;
    var message = status === 403 ? "Your role does not allow this." :
      status === 404 ? "Not found: it may have been deleted." :
      "Something went wrong (" + status + "). Please retry.";
    toast(message, "error");
  });
  document.addEventListener("htmx:sendError", function () {
    toast("The server cannot be reached.", "error");
  });

  // Filter forms send only the fields in use, so pushed URLs stay short and shareable.
  document.addEventListener("htmx:configRequest", function (evt) {
    if (evt.detail.verb !== "get") return;
    var params = evt.detail.parameters;
    var keys = params instanceof FormData ? Array.from(params.keys()) : Object.keys(params);
    keys.forEach(function (key) {
      var values = params instanceof FormData ? params.getAll(key) : [].concat(params[key]);
      if (values.every(function (v) { return String(v).trim() === ""; })) {
        if (params instanceof FormData) params.delete(key); else delete params[key];
      }
    });
  });

  function selectedIn(form) {
    return Array.prototype.filter.call(
      document.querySelectorAll('input[name="ids"][form="' + form.id + '"]'),
      function (box) { return box.checked; }
    );
  }

  function refreshBatch(form) {
    if (!form) return;
    var count = selectedIn(form).length;
    form.querySelectorAll("[data-selected-count]").forEach(function (el) { el.textContent = count; });
    form.querySelectorAll("button[type=submit]").forEach(function (b) { b.disabled = count === 0; });
    var all = document.querySelector('[data-select-all="' + form.id + '"]');
    if (all) {
      var boxes = document.querySelectorAll('input[name="ids"][form="' + form.id + '"]');
      all.checked = boxes.length > 0 && count === boxes.length;
      all.indeterminate = count > 0 && count < boxes.length;
    }
  }

  document.addEventListener("change", function (evt) {
    var target = evt.target;
    if (target.matches("[data-select-all]")) {
      var form = document.getElementById(target.getAttribute("data-select-all"));
      document.querySelectorAll('input[name="ids"][form="' + form.id + '"]').forEach(function (box) {
        box.checked = target.checked;
      });
      refreshBatch(form);
    } else if (target.matches('input[name="ids"][form]')) {
      refreshBatch(document.getElementById(target.getAttribute("form")));
    }
  });

  function refreshAll() {
    document.querySelectorAll("form[data-batch]").forEach(refreshBatch);
  }
  document.addEventListener("DOMContentLoaded", refreshAll);
  document.addEventListener("htmx:afterSettle", refreshAll);

  // The confirmation states how many rows will go: "Delete 3 facts?".
  document.addEventListener("htmx:confirm", function (evt) {
    var form = evt.detail.elt;
    if (!form.matches || !form.matches("form[data-batch]")) return;
    evt.preventDefault();
    var count = selectedIn(form).length;
    if (count === 0) { toast("Select at least one row.", "error"); return; }
    var noun = count === 1 ? form.dataset.noun : form.dataset.nounPlural;
    if (window.confirm("Delete " + count + " " + noun + "? This cannot be undone.")) {
      evt.detail.issueRequest(true);
    }
  });

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest("[data-copy]");
    if (!button) return;
    var input = document.querySelector(button.getAttribute("data-copy"));
    input.select();
    if (navigator.clipboard) {
      navigator.clipboard.writeText(input.value).then(function () { toast("Copied."); });
    } else {
      document.execCommand("copy");
      toast("Copied.");
    }
  });
  document.addEventListener("focusin", function (evt) {
    if (evt.target.matches("[data-select-on-focus]")) evt.target.select();
  });

  // Close the workspace menu with Escape, like a native menu.
  document.addEventListener("keydown", function (evt) {
    if (evt.key !== "Escape") return;
    document.querySelectorAll("details[data-dropdown][open]").forEach(function (d) {
      d.removeAttribute("open");
      d.querySelector("summary").focus();
    });
  });

  // After htmx swaps in a new panel, move focus to it so keyboard and screen reader users follow.
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "main") {
      evt.detail.target.focus({ preventScroll: true });
    }
  });
})();
