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
    var toRollouts = el("button", "Show its rollouts");
    toRollouts.type = "button";
    toRollouts.id = "task-rollouts";
    toRollouts.addEventListener("click", function () {
      showTaskRollouts(row.dataset.task);
    });
    detail.replaceChildren(el("h3", "Task " + row.cells[0].textContent), el("p", "id " + row.dataset.task, "note"),
      toRollouts, el("h4", "Prompt (last user message)"), el("pre", task.prompt || "(none)"));
    task.runs.forEach(function (run, i) {
      detail.appendChild(el("h4", data.runs[i] + (task.indices[i] === null ? "" : " (task " + task.indices[i] + ")")));
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

  // The rollout viewer: every rollout of the runs, filtered by text, task, run, reward and reason.
  var rollouts = data.rollouts;
  var rbody = document.getElementById("rollout-table").tBodies[0];
  var search = document.getElementById("rollout-search");
  var taskFilter = document.getElementById("rollout-task");
  var runFilter = document.getElementById("rollout-run");
  var rewardFilter = document.getElementById("rollout-reward");
  var reasonFilter = document.getElementById("rollout-reason");
  var rcount = document.getElementById("rollout-count");
  var rdetail = document.getElementById("rollout-detail");
  var haystacks = [];

  function haystack(i) {
    if (haystacks[i] === undefined) {
      var r = rollouts[i];
      var parts = r.items.map(function (item) { return (item.name || "") + " " + item.text; });
      Object.keys(r.fields).forEach(function (k) { parts.push(k + " " + r.fields[k]); });
      haystacks[i] = parts.join("\n").toLowerCase();
    }
    return haystacks[i];
  }

  rollouts.forEach(function (r, i) {
    var tr = el("tr");
    tr.dataset.index = String(i);
    tr.tabIndex = 0;
    if (r.failed) { tr.className = "failed"; }
    [data.runs[r.run], r.task_index, r.rollout === null || r.rollout === undefined ? "–" : r.rollout,
      r.reward === null ? "failed" : fmt(r.reward), r.reason === null ? "" : r.reason].forEach(function (v) {
      tr.appendChild(el("td", String(v)));
    });
    rbody.appendChild(tr);
  });

  function rolloutMatches(r, i, words, task) {
    if (runFilter.value !== "" && String(r.run) !== runFilter.value) { return false; }
    // A task index, exactly, or the start of a task id (6 characters at least: not a stray digit).
    if (task && r.task_index !== task && !(task.length >= 6 && r.task.indexOf(task) === 0)) { return false; }
    var reward = rewardFilter.value;
    if (reward === "none" && r.reward !== null) { return false; }
    if (reward === "below1" && !(r.reward !== null && r.reward < 1)) { return false; }
    if (reward.charAt(0) === "=" && r.reward !== parseFloat(reward.slice(1))) { return false; }
    var reason = reasonFilter.value;
    if (reason === "-" && r.reason !== null) { return false; }
    if (reason.charAt(0) === "=" && r.reason !== reason.slice(1)) { return false; }
    if (!words.length) { return true; }
    var text = haystack(i);
    return words.every(function (w) { return text.indexOf(w) !== -1; });
  }

  // From the task table: that task's rollouts in every run, whatever the other filters said.
  function showTaskRollouts(id) {
    search.value = "";
    taskFilter.value = id;
    runFilter.value = rewardFilter.value = reasonFilter.value = "";
    applyRolloutFilter();
    document.getElementById("rollouts").scrollIntoView();
  }

  function applyRolloutFilter() {
    var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
    var task = taskFilter.value.trim();
    var shown = 0;
    Array.prototype.forEach.call(rbody.rows, function (tr) {
      var i = parseInt(tr.dataset.index, 10);
      tr.hidden = !rolloutMatches(rollouts[i], i, words, task);
      if (!tr.hidden) { shown += 1; }
    });
    rcount.textContent = shown + " of " + rollouts.length + " rollouts";
  }
  [search, taskFilter].forEach(function (input) { input.addEventListener("input", applyRolloutFilter); });
  [runFilter, rewardFilter, reasonFilter].forEach(function (s) { s.addEventListener("change", applyRolloutFilter); });

  function showRollout(tr) {
    Array.prototype.forEach.call(rbody.rows, function (r) { r.removeAttribute("aria-selected"); });
    tr.setAttribute("aria-selected", "true");
    var r = rollouts[parseInt(tr.dataset.index, 10)];
    rdetail.replaceChildren(el("h3", data.runs[r.run] + ": task " + r.task_index + ", rollout " +
      (r.rollout === null || r.rollout === undefined ? "–" : r.rollout)),
      el("p", r.failed ? "Failed: no reward (" + (r.reason || "no reason") + ")" :
        "reward " + fmt(r.reward) + (r.reason === null ? "" : " · " + r.reason), "note"),
      el("h4", "Transcript"));
    if (!r.items.length) { rdetail.appendChild(el("p", "(no messages recorded)", "note")); }
    r.items.forEach(function (item) {
      var box = el("div", undefined, "item " + item.kind);
      var label = item.kind === "call" ? "tool call: " + item.name : item.kind === "output" ? "tool output" :
        item.kind === "message" ? item.role : item.kind + (item.role ? ": " + item.role : "");
      box.appendChild(el("div", label, "label"));
      box.appendChild(el("pre", item.text));
      rdetail.appendChild(box);
    });
    rdetail.appendChild(el("h4", "Fields"));
    var facts = el("dl");
    Object.keys(r.fields).forEach(function (k) {
      facts.appendChild(el("dt", k));
      facts.appendChild(el("dd", r.fields[k]));
    });
    rdetail.appendChild(facts);
  }
  rbody.addEventListener("click", function (event) {
    var tr = event.target.closest("tr");
    if (tr) { showRollout(tr); }
  });
  rbody.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.tagName === "TR") { showRollout(event.target); }
  });
  applyRolloutFilter();
}());
