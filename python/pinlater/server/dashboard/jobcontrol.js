// The dashboard's job control: a queue's schedules (list, pause/resume, edit, delete) and paced
// redrives (start from the queue's panel; progress and Stop under Redrives). Built on
// dashboard.js (window.PinLaterDashboard), with its safety rule: server data reaches the page
// only as text. Writes go through the same password dialog as the other admin actions.
"use strict";

(() => {
  const D = window.PinLaterDashboard;
  const $ = (id) => document.getElementById(id);
  const el = D.el;
  // While a redrive runs, its progress is read this often (the page refreshes every 5 s anyway).
  const PROGRESS_MS = 1000;

  let schedulesOf = null; // the queue whose schedules are shown
  let schedules = [];
  let progressTimer = null;

  // -- schedules ---------------------------------------------------------------------------------

  const whenText = (s) => (s.cron !== null ? `cron ${s.cron}` : `every ${s.interval_ms} ms`);

  function jobText(s) {
    let text = `priority ${s.priority}, ${s.attempts} attempt(s)`;
    if (s.group_key) text += `, group ${s.group_key}`;
    if (s.custom_status) text += `, status ${s.custom_status}`;
    const body = s.body_text_truncated ? `${s.body_text}…` : s.body_text;
    return `${text}; body (${s.body_size} bytes): ${body}`;
  }

  async function loadSchedules() {
    const queue = D.selected();
    if (!queue) return;
    // (without their whole bodies, which editing one fetches: a queue's may hold 8 MiB)
    const result = await D.call("GET", `/api/schedules?${new URLSearchParams({ queue, bodies: "0" })}`);
    if (!result.ok) {
      $("schedules-empty").hidden = false;
      $("schedules-empty").textContent = `Cannot read the schedules: ${result.data.error}`;
      return;
    }
    if (queue !== schedulesOf) clearForm();
    schedulesOf = queue;
    schedules = result.data.schedules;
    renderSchedules();
  }

  function renderSchedules() {
    const rows = schedules.map((s) => {
      const flip = el("button", { type: "button", class: "schedule-flip", text: s.paused ? "Resume" : "Pause" });
      flip.addEventListener("click", () => flipSchedule(s));
      const edit = el("button", { type: "button", class: "schedule-edit", text: "Edit" });
      edit.addEventListener("click", () => editSchedule(s));
      const remove = el("button", { type: "button", class: "schedule-delete danger", text: "Delete" });
      remove.addEventListener("click", () => deleteSchedule(s));
      return el(
        "tr",
        { "data-schedule": s.name },
        el("td", { class: "name", text: s.name }),
        el("td", { class: "when", text: whenText(s) }),
        el("td", { class: "next-run", text: s.paused ? "" : D.fmtTime(s.next_run_ms) }),
        el("td", { class: s.paused ? "state paused" : "state", text: s.paused ? "paused" : "active" }),
        el("td", { class: "status", text: jobText(s) }),
        el("td", {}, el("div", { class: "buttons" }, flip, edit, remove)),
      );
    });
    document.querySelector("#schedules tbody").replaceChildren(...rows);
    $("schedules-empty").textContent = "No schedules on this queue.";
    $("schedules-empty").hidden = rows.length > 0;
  }

  function flipSchedule(s) {
    const queue = schedulesOf;
    const [url, text] = s.paused
      ? ["/api/schedules/resume", `Resume schedule ${quoted(s.name)} of queue ${queue} (from its next tick after now)?`]
      : ["/api/schedules/pause", `Pause schedule ${quoted(s.name)} of queue ${queue}? It keeps everything it holds.`];
    D.act(text, url, { queue, name: s.name }, (d) =>
      `Schedule ${d.schedule.name} of ${d.queue} is now ${d.schedule.paused ? "paused" : "active"}.`);
  }

  function deleteSchedule(s) {
    const queue = schedulesOf;
    D.act(`Delete schedule ${quoted(s.name)} of queue ${queue}? Jobs it enqueued stay.`, "/api/schedules/delete",
      { queue, name: s.name }, (d) => `Deleted schedule ${d.name} of ${d.queue}.`);
  }

  let editing = 0; // the latest Edit click: an earlier one's answer, come late, fills nothing

  async function editSchedule(listed) {
    const queue = schedulesOf;
    const mine = ++editing;
    const result = await D.call("GET", `/api/schedules?${new URLSearchParams({ queue, name: listed.name })}`);
    // (another queue selected meanwhile: its form is not filled with this one's schedule)
    if (mine !== editing || queue !== schedulesOf || queue !== D.selected()) return;
    const s = result.ok ? result.data.schedules[0] : undefined;
    if (!s) {
      D.showMessage(`Cannot read schedule ${listed.name}: ${result.ok ? "it is gone" : result.data.error}`, true);
      return;
    }
    $("schedule-form-title").textContent = `Edit schedule ${s.name}`;
    $("schedule-name").value = s.name;
    $("schedule-cron").value = s.cron || "";
    $("schedule-interval").value = s.interval_ms === null ? "" : String(s.interval_ms);
    // A body that is not whole, valid text is edited as base64, so saving keeps its bytes.
    const asText = !s.body_text_truncated && !s.body_text.includes("\uFFFD");
    $("schedule-body").value = asText ? s.body_text : s.body_base64;
    $("schedule-body-base64").checked = !asText;
    $("schedule-priority").value = String(s.priority);
    $("schedule-attempts").value = String(s.attempts);
    $("schedule-status").value = s.custom_status;
    $("schedule-group").value = s.group_key || "";
    $("schedule-paused").checked = s.paused;
    $("schedule-form").scrollIntoView({ block: "nearest" });
  }

  function clearForm() {
    $("schedule-form").reset();
    $("schedule-form-title").textContent = "New schedule";
  }

  function onSaveSchedule(event) {
    event.preventDefault();
    const queue = D.selected();
    const body = {
      queue,
      name: $("schedule-name").value,
      cron: $("schedule-cron").value.trim() || null,
      interval_ms: $("schedule-interval").value ? Number($("schedule-interval").value) : null,
      priority: Number($("schedule-priority").value),
      attempts: Number($("schedule-attempts").value),
      custom_status: $("schedule-status").value,
      group_key: $("schedule-group").value || null,
      paused: $("schedule-paused").checked,
    };
    if ($("schedule-body-base64").checked) body.body_base64 = $("schedule-body").value.trim();
    else body.body = $("schedule-body").value;
    const exists = schedules.some((s) => s.name === body.name);
    const when = body.cron ? `cron ${body.cron}` : `every ${body.interval_ms} ms`;
    const how = `${when}${body.paused ? ", paused" : ""}`;
    const text = `${exists ? "Replace" : "Create"} schedule ${quoted(body.name)} of queue ${queue} (${how})?`;
    D.act(text, "/api/schedules", body, (d) => {
      clearForm();
      const next = d.schedule.paused ? "paused" : `next run ${D.fmtTime(d.schedule.next_run_ms)}`;
      return `Schedule ${d.schedule.name} of ${d.queue} saved (${next}).`;
    });
  }

  // -- redrives ----------------------------------------------------------------------------------

  function onStartRedrive(event) {
    event.preventDefault();
    const queue = D.selected();
    const rate = Number($("redrive-rate").value);
    const limit = $("redrive-limit").value ? Number($("redrive-limit").value) : null;
    const priority = $("redrive-priority").value === "all" ? null : Number($("redrive-priority").value);
    const attempts = Number($("redrive-attempts").value);
    const text =
      `Move FAILED jobs of queue ${queue} (${priority === null ? "every priority" : `priority ${priority}`}) back to ` +
      `PENDING at ${rate} jobs/s, ${limit === null ? "as many as are FAILED now" : `at most ${limit}`}, ` +
      `with ${attempts} attempt(s) each? It runs in the background inside this server and does not ` +
      "survive a restart of it.";
    D.act(text, "/api/redrives", { queue, rate, limit, priority, attempts }, (d) =>
      `Redrive ${d.redrive.id} of ${d.redrive.queue} started (${d.redrive.failed_at_start} FAILED).`);
  }

  function stopRedrive(r) {
    D.act(`Stop redrive ${r.id} of queue ${r.queue}? The jobs it moved stay moved.`,
      `/api/redrives/${encodeURIComponent(r.id)}/stop`, {}, (d) =>
      `Redrive ${d.redrive.id} ${d.redrive.state}: moved ${d.redrive.moved}.`);
  }

  const dash = (v) => (v === null || v === undefined ? "–" : String(v));

  async function loadRedrives() {
    const result = await D.call("GET", "/api/redrives");
    if (!result.ok) return;
    $("redrives-note").textContent = result.data.note;
    const redrives = result.data.redrives;
    const rows = redrives.map((r) => {
      const actions = el("td", {});
      if (r.state === "running") {
        const stop = el("button", { type: "button", class: "redrive-stop danger", text: "Stop" });
        stop.addEventListener("click", () => stopRedrive(r));
        actions.append(stop);
      }
      return el(
        "tr",
        { "data-redrive": r.id, "data-state": r.state },
        el("td", { class: "descriptor", text: r.id }),
        el("td", { text: r.queue }),
        el("td", { class: `state ${r.state}`, text: r.state }),
        el("td", { class: "moved", text: String(r.moved) }),
        el("td", { class: "failed", text: `${r.failed_at_start} / ${dash(r.failed_now)}` }),
        el("td", { text: `${r.rate} (now ${r.actual_rate})` }),
        el("td", { text: dash(r.limit) }),
        el("td", { text: D.fmtTime(r.started_at_ms) }),
        el("td", { class: "reason", text: r.reason || "" }),
        actions,
      );
    });
    document.querySelector("#redrives tbody").replaceChildren(...rows);
    $("redrives-empty").hidden = rows.length > 0;
    const running = redrives.some((r) => r.state === "running");
    if (running && progressTimer === null) progressTimer = setInterval(loadRedrives, PROGRESS_MS);
    if (!running && progressTimer !== null) {
      clearInterval(progressTimer);
      progressTimer = null;
    }
  }

  // A schedule's name in a question, quoted: a name may hold spaces and punctuation ("nightly of
  // queue staging? ... (") that would read as another schedule's in the dialog.
  function quoted(name) {
    return JSON.stringify(name);
  }

  // -- start ---------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("schedule-form").addEventListener("submit", onSaveSchedule);
    $("schedule-clear").addEventListener("click", clearForm);
    $("redrive-form").addEventListener("submit", onStartRedrive);
    D.onRefresh(() => {
      loadSchedules();
      loadRedrives();
    });
  });
})();
