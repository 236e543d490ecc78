// gym report: sorting, filtering and the task details. Rollout text is untrusted: it is only ever
// put in the page as text (textContent), never parsed as HTML.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var table = document.getElementById("task-table");
  var tbody = table.tBodies[0];
  var headers = Array.prototype.slice.call(table.querySelectorAll("tr.sort th"));
  var filter = document.getElementById("task-filter");
  var failingOnly = document.getElementById("failing-only");
  var count = document.getElementById("task-count");
  var detail = document.getElementById("task-detail");

  function key(row, col) {
    var value = row.cells[col].getAttribute("data-sort");
    return value === null ? row.cells[col].textContent : value;
  }

  // Numbers compare as numbers, text as text; an empty key (a value this run lacks) always goes last.
  function sortBy(col, descending) {
    var rows = Array.prototype.slice.call(tbody.rows);
    var numeric = rows.every(function (r) { var k = key(r, col); return k === "" || !isNaN(parseFloat(k)); });
    rows.sort(function (a, b) {
      var x = key(a, col), y = key(b, col);
      if (x === "" || y === "") { return (x === "") - (y === ""); }
      var order = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
      return descending ? -order : order;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    headers.forEach(function (h, i) {
      h.setAttribute("aria-sort", i === col ? (descending ? "descending" : "ascending") : "none");
    });
  }

  headers.forEach(function (th, col) {
    th.addEventListener("click", function () {
      sortBy(col, th.getAttribute("aria-sort") === "ascending");
    });
  });

  function applyFilter() {
    var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    Array.prototype.forEach.call(tbody.rows, function (row) {
      var text = (row.cells[0].textContent + " " + (data.tasks[row.dataset.task] || {}).prompt).toLowerCase();
      var visible = words.every(function (w) { return text.indexOf(w) !== -1; }) &&
        (!failingOnly.checked || row.dataset.failing === "1");
      row.hidden = !visible;
      if (visible) { shown += 1; }
    });
    count.textContent = shown + " of " + tbody.rows.length + " tasks";
  }
  filter.addEventListener("input", applyFilter);
  failingOnly.addEventListener("change", applyFilter);

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined) { node.textContent = text; }
    if (cls) { node.className = cls; }
    return node;
  }

  function fmt(value) {
    return typeof value === "number" ? (Number.isInteger(value) ? String(value) : value.toFixed(3)) : String(value);
  }

  function show(row) {
    Array.prototype.forEach.call(tbody.rows, function (r) { r.removeAttribute("aria-selected"); });
    row.setAttribute("aria-selected", "true");
    var task = data.tasks[row.dataset.task];
    detail.replaceChildren(el("h3", "Task " + row.dataset.task), el("h4", "Prompt (last user message)"),
      el("pre", task.prompt || "(none)"));
    task.runs.forEach(function (run, i) {
      detail.appendChild(el("h4", data.runs[i]));
      if (run === null) { detail.appendChild(el("p", "Not in this run.", "note")); return; }
      var failing = run.first_failing;
      if (!failing) {
        detail.appendChild(el("p", run.n + " rollouts, every one with reward 1: nothing failed.", "note"));
        return;
      }
      var facts = el("dl");
      [["rollouts", run.n], ["mean reward", run.mean], ["first failing rollout", failing.rollout_index],
        ["its reward", failing.reward], ["extracted answer", failing.extracted_answer],
        ["expected answer", failing.expected_answer], ["verifier's reason", failing.reason]].forEach(function (pair) {
        if (pair[1] !== undefined && pair[1] !== null) {
          facts.appendChild(el("dt", pair[0]));
          facts.appendChild(el("dd", fmt(pair[1])));
        }
      });
      detail.appendChild(facts);
      detail.appendChild(el("pre", failing.answer === null ? "(no final answer in the response)" : failing.answer,
        "answer"));
    });
  }

  tbody.addEventListener("click", function (event) {
    var row = event.target.closest("tr");
    if (row) { show(row); }
  });
  tbody.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.tagName === "TR") { show(event.target); }
  });
  applyFilter();
}());
