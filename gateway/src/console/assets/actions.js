// The operator's actions from the console: pause and resume an entrypoint, drain a worker,
// find, cancel and re-run a task, the failed tasks with bulk re-run and removal, and the audit
// log. Every action is a same-origin fetch carrying the session's own token (the hidden field
// of the sign-out form) in X-Console-Csrf: the gateway refuses an action by session without it.
// Values from the cluster go in through textContent only, never as HTML.
"use strict";

(function () {
  const base = document.body.dataset.base || "";
  const api = base + "/console/api";
  const $ = (id) => document.getElementById(id);
  const field = document.querySelector('#logout-form input[name="csrf"]');
  const csrf = field ? field.value : "";

  function say(message, ok) {
    const el = $("action-result");
    el.textContent = message;
    el.className = "result " + (ok ? "ok" : "bad");
  }

  // The error an API answer names, as plain text.
  function problem(status, body) {
    if (body && body.error) {
      const e = body.error;
      return "HTTP " + status + " " + (e.code || "") + ": " + (e.message || "");
    }
    return "HTTP " + status;
  }

  function call(method, path, body) {
    const init = { method: method, credentials: "same-origin", headers: { "x-console-csrf": csrf } };
    if (body !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(api + path, init).then((r) => {
      if (r.status === 401) { window.location.reload(); }
      return r.text().then((text) => {
        let parsed = null;
        try { parsed = text ? JSON.parse(text) : null; } catch (err) { parsed = null; }
        return { ok: r.ok, status: r.status, body: parsed };
      });
    });
  }

  // Runs an action, says how it went, and reads the audit log again.
  function act(label, method, path, body, then) {
    say(label + "…", true);
    return call(method, path, body).then((reply) => {
      if (reply.ok) say(label + ": done", true);
      else say(label + ": " + problem(reply.status, reply.body), false);
      loadAudit();
      if (then) then(reply);
      return reply;
    }).catch(() => say(label + ": the gateway is not reachable", false));
  }

  function button(text, name, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.dataset.action = name;
    b.addEventListener("click", () => { b.disabled = true; onClick(); });
    return b;
  }

  function group(buttons) {
    const span = document.createElement("span");
    for (const b of buttons) span.appendChild(b);
    return span;
  }

  const path = (value) => encodeURIComponent(value);

  // The buttons of an entrypoint's row.
  function entrypoint(e) {
    if (e.paused) {
      return group([button("Resume", "resume", () =>
        act("Resume " + e.name, "POST", "/entrypoints/" + path(e.name) + "/resume"))]);
    }
    return group([
      button("Pause", "pause", () =>
        act("Pause " + e.name, "POST", "/entrypoints/" + path(e.name) + "/pause", { mode: "queue" })),
      button("Pause, refuse new", "pause-refuse", () =>
        act("Pause " + e.name + " (refusing)", "POST", "/entrypoints/" + path(e.name) + "/pause", { mode: "refuse" })),
    ]);
  }

  // The buttons of a worker's row.
  function worker(w) {
    const b = button(w.draining ? "Draining" : "Drain", "drain", () =>
      act("Drain " + w.id, "POST", "/workers/" + path(w.id) + "/drain"));
    b.disabled = Boolean(w.draining);
    return group([b]);
  }

  // Keeps the failed list's entrypoint choices in step with the cluster (adding only, so that
  // an operator's choice stays put while the overview refreshes).
  function overview(o) {
    const select = $("failed-entrypoint");
    const have = new Set(Array.from(select.options).map((option) => option.value));
    for (const e of o.entrypoints) {
      if (have.has(e.name)) continue;
      const option = document.createElement("option");
      option.value = e.name;
      option.textContent = e.name;
      select.appendChild(option);
    }
  }

  // Find a task.
  let shownTask = null;
  function showTask(id) {
    return call("GET", "/tasks/" + path(id)).then((reply) => {
      if (!reply.ok) {
        $("task-view").hidden = true;
        shownTask = null;
        say("Task " + id + ": " + problem(reply.status, reply.body), false);
        return;
      }
      shownTask = id;
      $("task-json").textContent = JSON.stringify(reply.body, null, 2);
      $("task-view").hidden = false;
      $("task-cancel").disabled = false;
      $("task-rerun").disabled = false;
      say("Task " + id + " found", true);
    }).catch(() => say("The gateway is not reachable", false));
  }
  $("task-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = $("task-id").value.trim();
    if (id) showTask(id);
  });
  $("task-cancel").addEventListener("click", () => {
    if (!shownTask) return;
    const id = shownTask;
    $("task-cancel").disabled = true;
    act("Cancel " + id, "POST", "/tasks/" + path(id) + "/cancel", undefined, () => showTask(id));
  });
  $("task-rerun").addEventListener("click", () => {
    if (!shownTask) return;
    const id = shownTask;
    $("task-rerun").disabled = true;
    act("Re-run " + id, "POST", "/tasks/" + path(id) + "/rerun", undefined, (reply) => {
      const next = reply.ok && reply.body && reply.body.task && reply.body.task.taskId;
      if (next) {
        $("task-id").value = next;
        showTask(next).then(() => say("Re-run of " + id + " is task " + next, true));
      }
    });
  });

  // The failed tasks of one entrypoint, a page at a time.
  let failedCursor = null;
  function loadFailed(cursor) {
    const entrypointName = $("failed-entrypoint").value;
    if (!entrypointName) return Promise.resolve();
    let query = "?entrypoint=" + path(entrypointName);
    if (cursor) query += "&cursor=" + path(cursor);
    return call("GET", "/failed" + query).then((reply) => {
      if (!reply.ok) {
        $("failed-list").tBodies[0].replaceChildren();
        say("Failed tasks: " + problem(reply.status, reply.body), false);
        return;
      }
      const items = (reply.body && reply.body.tasks) || [];
      window.consoleRows("failed-list", items, (item) => item.id, (item) => {
        const check = document.createElement("input");
        check.type = "checkbox";
        check.value = item.id;
        check.setAttribute("aria-label", "Select " + item.id);
        return [["select", check],
          ["when", item.finishedAtMs ? new Date(item.finishedAtMs).toLocaleTimeString() : null],
          ["task", item.id], ["code", item.code], ["message", item.message],
          ["attempt", item.attempt]];
      });
      failedCursor = reply.body ? reply.body.nextCursor || null : null;
      $("failed-next").hidden = !failedCursor;
      $("failed-all").checked = false;
    }).catch(() => say("The gateway is not reachable", false));
  }
  function selected() {
    return Array.from(document.querySelectorAll("#failed-list tbody input[type=checkbox]:checked"))
      .map((check) => check.value);
  }
  $("failed-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadFailed(null);
  });
  $("failed-next").addEventListener("click", () => loadFailed(failedCursor));
  $("failed-all").addEventListener("change", (event) => {
    for (const check of document.querySelectorAll("#failed-list tbody input[type=checkbox]")) {
      check.checked = event.target.checked;
    }
  });
  $("failed-rerun").addEventListener("click", () => {
    const ids = selected();
    if (ids.length === 0) { say("Select failed tasks first", false); return; }
    act("Re-run " + ids.length + " task(s)", "POST", "/failed/rerun", { ids: ids }, () => loadFailed(null));
  });
  $("failed-remove").addEventListener("click", () => {
    const ids = selected();
    if (ids.length === 0) { say("Select failed tasks first", false); return; }
    act("Remove " + ids.length + " task(s) from the list", "POST", "/failed/remove", { ids: ids }, () => loadFailed(null));
  });

  // The audit log, newest first.
  function loadAudit() {
    return call("GET", "/audit").then((reply) => {
      if (!reply.ok || !reply.body) return;
      const entries = (reply.body.entries || []).slice(0, 50);
      window.consoleRows("audit", entries, (entry) => entry.atMs + ":" + entry.action, (entry) => [
        ["when", new Date(entry.atMs).toLocaleString()], ["who", entry.actor],
        ["action", entry.action], ["target", entry.target],
        ["detail", entry.detail === null || entry.detail === undefined ? "" : JSON.stringify(entry.detail)],
      ]);
    }).catch(() => {});
  }
  // After console.js ran (it loads after this script and lends its table renderer,
  // window.consoleRows).
  document.addEventListener("DOMContentLoaded", loadAudit);

  window.consoleActions = { entrypoint: entrypoint, worker: worker, overview: overview };
})();
