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

  // A body over DATA_UPLOAD_MAX_MEMORY_SIZE, or with more fields than
  // DATA_UPLOAD_MAX_NUMBER_FIELDS, is refused by Django itself before any view runs: a 413
  // whose text says so (memory_project.urls.handler400), as a proxy's body limit is a 413 too.
  // A view's own refusal never lands here: it answers htmx with a 200 holding the form's
  // errors (browser.lib.rendering.refused).
  var TOO_LARGE = "The form is too large to send (too much text or too many fields), so nothing was saved.";

  function tooLarge(xhr) {
    return xhr.status === 413;
  }

  document.addEventListener("htmx:responseError", function (evt) {
    var xhr = evt.detail.xhr;
    var status = xhr.status;
    var message = tooLarge(xhr) ? TOO_LARGE :
      status === 403 ? "Your role does not allow this." :
      status === 404 ? "Not found: it may have been deleted." :
      status === 503 ? "The database is unavailable or busy; retry in a few seconds." :
      "Something went wrong (" + status + "). Please retry.";
    toast(message, "error");
  });
  document.addEventListener("htmx:sendError", function () {
    toast("The server cannot be reached.", "error");
  });

  // Filter forms send only the fields in use, so pushed URLs stay short and shareable.
  // A picker asks for suggestions with its text as `q`.
  document.addEventListener("htmx:configRequest", function (evt) {
    if (evt.detail.verb !== "get") return;
    var params = evt.detail.parameters;
    var elt = evt.detail.elt;
    if (elt.matches && elt.matches("input[data-picker]")) {
      params.delete(elt.name);
      params.set("q", elt.value);
      return;
    }
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

  // The phone layout names each cell after its column (data-label); a template that did not
  // label its cells gets the names from the table's header row.
  function labelCells() {
    document.querySelectorAll("table.table").forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (row) {
        Array.prototype.forEach.call(row.children, function (cell, index) {
          if (cell.hasAttribute("data-label") || cell.hasAttribute("colspan")) return;
          if (cell.matches(".check, .actions") || !heads[index]) return;
          cell.setAttribute("data-label", heads[index]);
        });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", labelCells);
  document.addEventListener("htmx:afterSettle", labelCells);

  // Filter pickers: an ARIA 1.2 combobox over the suggestions htmx swaps into its listbox.
  // Arrows move, Enter or a click picks (the id goes into the box, the name under it, and the
  // filter form applies it), Escape closes. Without JavaScript the box takes a name or an id.
  function pickerParts(input) {
    var root = input.closest(".picker");
    return {
      list: document.getElementById(input.getAttribute("aria-controls")),
      hint: root.querySelector("[data-picker-hint]"),
      status: root.querySelector("[data-picker-status]")
    };
  }

  function pickerOptions(list) {
    return Array.prototype.slice.call(list.querySelectorAll('[role="option"]:not([aria-disabled="true"])'));
  }

  function pickerActivate(input, option) {
    var list = pickerParts(input).list;
    list.querySelectorAll('[aria-selected="true"]').forEach(function (o) {
      o.setAttribute("aria-selected", "false");
    });
    if (option) {
      option.setAttribute("aria-selected", "true");
      input.setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  function pickerOpen(input, open) {
    var list = pickerParts(input).list;
    list.hidden = !open;
    input.setAttribute("aria-expanded", open ? "true" : "false");
    if (!open) pickerActivate(input, null);
  }

  function pickerChoose(input, option) {
    var parts = pickerParts(input);
    input.value = option.getAttribute("data-value");
    parts.hint.textContent = option.getAttribute("data-label");
    pickerOpen(input, false);
    input.dispatchEvent(new Event("change", { bubbles: true }));
  }

  document.addEventListener("htmx:afterSwap", function (evt) {
    var list = evt.detail.target;
    if (!list || list.getAttribute("role") !== "listbox") return;
    var input = document.querySelector('input[data-picker][aria-controls="' + list.id + '"]');
    if (!input) return;
    var count = pickerOptions(list).length;
    pickerOpen(input, document.activeElement === input);
    pickerParts(input).status.textContent = count === 0 ? "No suggestions." :
      count + (count === 1 ? " suggestion" : " suggestions") + ", use the arrow keys.";
  });

  document.addEventListener("keydown", function (evt) {
    var input = evt.target;
    if (!input.matches || !input.matches("input[data-picker]")) return;
    var list = pickerParts(input).list;
    var open = input.getAttribute("aria-expanded") === "true";
    var options = pickerOptions(list);
    var current = document.getElementById(input.getAttribute("aria-activedescendant") || "");
    var index = options.indexOf(current);
    if ((evt.key === "ArrowDown" || evt.key === "ArrowUp") && open && options.length) {
      evt.preventDefault();
      var step = evt.key === "ArrowDown" ? 1 : -1;
      index = index < 0 ? (step > 0 ? 0 : options.length - 1) : (index + step + options.length) % options.length;
      pickerActivate(input, options[index]);
    } else if (evt.key === "Enter" && open && current) {
      evt.preventDefault();
      pickerChoose(input, current);
    } else if (evt.key === "Escape" && open) {
      evt.preventDefault();
      evt.stopPropagation();
      pickerOpen(input, false);
    }
  });

  // mousedown, not click: the box keeps its focus, so no stray change event fires first.
  document.addEventListener("mousedown", function (evt) {
    var option = evt.target.closest && evt.target.closest('.picker-list [role="option"]');
    if (!option || option.getAttribute("aria-disabled") === "true") return;
    evt.preventDefault();
    var input = document.querySelector('input[data-picker][aria-controls="' + option.parentElement.id + '"]');
    if (input) pickerChoose(input, option);
  });

  document.addEventListener("focusout", function (evt) {
    if (evt.target.matches && evt.target.matches("input[data-picker]")) pickerOpen(evt.target, false);
  });

  // After htmx swaps in a new panel, move focus to it so keyboard and screen reader users follow.
  document.addEventListener("htmx:afterSwap", function (evt) {
    if (evt.detail.target && evt.detail.target.id === "main") {
      evt.detail.target.focus({ preventScroll: true });
    }
  });
})();

// The header search (browser/views/search.py): an ARIA 1.2 combobox over the live results htmx
// swaps into its listbox, grouped by tier. Arrow keys move through the results, Enter opens the
// active one (with none active, the form goes to the results page), Escape closes the list and
// a second Escape empties the box. "/" anywhere else focuses the box. Without JavaScript the box
// is a plain GET form.
(function () {
  "use strict";

  function searchBox() { return document.querySelector("input[data-site-search]"); }
  function searchList(input) { return document.getElementById(input.getAttribute("aria-controls")); }
  function searchOptions(list) { return Array.prototype.slice.call(list.querySelectorAll('[role="option"]')); }

  function searchActivate(input, option) {
    searchList(input).querySelectorAll('[aria-selected="true"]').forEach(function (o) {
      o.setAttribute("aria-selected", "false");
    });
    if (option) {
      option.setAttribute("aria-selected", "true");
      input.setAttribute("aria-activedescendant", option.id);
      option.scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  function searchOpen(input, open) {
    var list = searchList(input);
    open = open && searchOptions(list).length > 0;
    list.hidden = !open;
    input.setAttribute("aria-expanded", open ? "true" : "false");
    if (!open) searchActivate(input, null);
  }

  function searchGo(option) {
    var href = option && option.getAttribute("data-href");
    if (href) window.location.assign(href);
  }

  document.addEventListener("htmx:afterSwap", function (evt) {
    var input = searchBox();
    if (!input || evt.detail.target !== searchList(input)) return;
    var options = searchOptions(evt.detail.target);
    var hits = options.filter(function (o) { return !o.classList.contains("site-search-more"); }).length;
    searchOpen(input, document.activeElement === input && input.value.trim() !== "");
    var status = input.form.querySelector("[data-site-search-status]");
    if (status) {
      status.textContent = !input.value.trim() ? "" : hits === 0 ? "No matches." :
        hits + (hits === 1 ? " result" : " results") + ", use the arrow keys.";
    }
  });

  document.addEventListener("input", function (evt) {
    if (evt.target.matches && evt.target.matches("input[data-site-search]") && !evt.target.value.trim()) {
      searchList(evt.target).innerHTML = "";
      searchOpen(evt.target, false);
    }
  });

  document.addEventListener("keydown", function (evt) {
    var input = evt.target;
    if (evt.key === "/" && !evt.ctrlKey && !evt.metaKey && !evt.altKey) {
      var editing = input.closest && input.closest("input, textarea, select, [contenteditable]");
      var box = searchBox();
      if (!editing && box) {
        evt.preventDefault();
        box.focus();
        box.select();
      }
      return;
    }
    if (!input.matches || !input.matches("input[data-site-search]")) return;
    var list = searchList(input);
    var open = input.getAttribute("aria-expanded") === "true";
    var options = searchOptions(list);
    var current = document.getElementById(input.getAttribute("aria-activedescendant") || "");
    var index = options.indexOf(current);
    if ((evt.key === "ArrowDown" || evt.key === "ArrowUp") && options.length) {
      evt.preventDefault();
      if (!open) searchOpen(input, true);
      var step = evt.key === "ArrowDown" ? 1 : -1;
      index = index < 0 ? (step > 0 ? 0 : options.length - 1) : (index + step + options.length) % options.length;
      searchActivate(input, options[index]);
    } else if (evt.key === "Enter" && open && current) {
      evt.preventDefault();
      searchGo(current);
    } else if (evt.key === "Escape") {
      evt.preventDefault();
      evt.stopPropagation();
      if (open) {
        searchOpen(input, false);
      } else if (input.value) {
        input.value = "";
        list.innerHTML = "";
      }
    }
  });

  // mousedown, not click: the box keeps its focus until the page changes.
  document.addEventListener("mousedown", function (evt) {
    var option = evt.target.closest && evt.target.closest('.site-search-list [role="option"]');
    if (!option) return;
    evt.preventDefault();
    searchGo(option);
  });

  document.addEventListener("focusout", function (evt) {
    if (evt.target.matches && evt.target.matches("input[data-site-search]")) searchOpen(evt.target, false);
  });
  document.addEventListener("focusin", function (evt) {
    if (evt.target.matches && evt.target.matches("input[data-site-search]") && evt.target.value.trim()) {
      searchOpen(evt.target, true);
    }
  });
})();

// The Review tab (browser/views/review.py): j / k move through the queue, x selects the item,
// a approves it, r puts the cursor in its reason box (Enter rejects), e opens its edit row, m
// merges it into its similar stored item; Shift+A and Shift+R act on the selection. Keys typed
// in a field are the field's, and Escape leaves the field for the list again. The shortcuts
// are listed on the page; every action is also a plain button.
(function () {
  "use strict";

  function reviewRows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-review-list] [data-review-row]"));
  }

  function reviewCurrent() {
    var rows = reviewRows();
    var active = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("[data-review-row]") : null;
    return active && rows.indexOf(active) >= 0 ? active : rows.filter(function (r) {
      return r.classList.contains("review-current");
    })[0] || null;
  }

  function reviewFocus(row) {
    if (!row) return;
    reviewRows().forEach(function (r) { r.classList.remove("review-current"); });
    row.classList.add("review-current");
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function reviewClick(row, selector) {
    var el = row && row.querySelector(selector);
    if (el) el.click();
    return !!el;
  }

  document.addEventListener("keydown", function (evt) {
    if (!document.querySelector("[data-review-list]")) return;
    var target = evt.target;
    var typing = target.matches && target.matches("input, textarea, select, [contenteditable]");
    if (typing) {
      if (evt.key === "Escape" && target.closest("[data-review-row], [data-review-batch]")) {
        target.blur();
        reviewFocus(target.closest("[data-review-row]") || reviewCurrent() || reviewRows()[0]);
      }
      return;
    }
    if (evt.ctrlKey || evt.metaKey || evt.altKey) return;
    var rows = reviewRows();
    var row = reviewCurrent();
    var index = row ? rows.indexOf(row) : -1;
    var handled = true;
    if (evt.key === "j") {
      reviewFocus(rows[Math.min(rows.length - 1, index + 1)]);
    } else if (evt.key === "k") {
      reviewFocus(rows[Math.max(0, index - 1)]);
    } else if (evt.key === "x" && row) {
      var box = row.querySelector('input[type="checkbox"]');
      if (box) { box.checked = !box.checked; box.dispatchEvent(new Event("change", { bubbles: true })); }
    } else if (evt.key === "a" && row) {
      reviewClick(row, "[data-review-approve]");
    } else if (evt.key === "r" && row) {
      var reason = row.querySelector("[data-review-reason]");
      if (reason) reason.focus();
    } else if (evt.key === "e" && row) {
      reviewClick(row, "[data-review-edit]");
    } else if (evt.key === "m" && row) {
      handled = reviewClick(row, "[data-review-merge]");
    } else if (evt.key === "A") {
      reviewClick(document, "[data-review-batch-approve]");
    } else if (evt.key === "R") {
      var batchReason = document.querySelector("[data-review-batch-reason]");
      if (batchReason) batchReason.focus();
    } else {
      handled = false;
    }
    if (handled) evt.preventDefault();
  });

  // After a decision the queue is re-rendered: the cursor goes to the first row left, so a
  // reviewer can keep pressing keys.
  document.addEventListener("htmx:afterSettle", function (evt) {
    if (!evt.detail.target || evt.detail.target.id !== "review-results") return;
    var count = evt.detail.target.querySelector("[data-review-tab-count]");
    var tab = document.querySelector('nav.tabs a[href$="/review/"]');
    if (count && tab) {
      var n = parseInt(count.getAttribute("data-review-tab-count"), 10) || 0;
      tab.textContent = n ? "Review (" + n + ")" : "Review";
    }
    var first = reviewRows()[0];
    if (first) reviewFocus(first);
  });
})();
