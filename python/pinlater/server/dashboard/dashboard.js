// The PinLater admin dashboard. No framework and nothing from other origins.
// Safety rule: data from the server (queue names, job bodies, custom statuses) only ever reaches
// the page as text (textContent, text nodes, attribute values, canvas fillText); never as HTML.
"use strict";

(() => {
  const KINDS = ["enqueue", "dequeue", "ack_succeeded", "ack_failed"];
  const KIND_LABEL = { enqueue: "enqueued", dequeue: "dequeued", ack_succeeded: "acked ok", ack_failed: "acked failed" };
  const COLORS = { enqueue: "#2563eb", dequeue: "#16a34a", ack_succeeded: "#9ca3af", ack_failed: "#dc2626" };
  const COLUMNS = ["pending", "pending_future", "in_progress", "succeeded", "failed"];
  const REFRESH_MS = 5000;
  const CHART_WINDOW_MS = 10 * 60 * 1000;

  let overview = null;
  let rates = null;
  let selected = null;
  let refreshing = false;
  // The scan on show: its query, the continuation of its next page (null: none), its page number.
  let scan = null;
  // Called after each refresh and when a queue is selected (jobcontrol.js: schedules, redrives).
  const refreshHooks = [];

  const $ = (id) => document.getElementById(id);

  // Build an element: props are our own constants (class, type, ...); children are nodes or strings
  // (a string becomes a text node, so it can never be parsed as markup).
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function showMessage(text, isError) {
    const box = $("message");
    box.textContent = text;
    box.className = isError ? "error" : "";
    box.hidden = false;
  }

  async function call(method, url, body) {
    const options = { method, headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (err) {
      return { ok: false, status: 0, data: { error: `the server did not answer: ${err}` } };
    }
    let data;
    try {
      data = await response.json();
    } catch (err) {
      data = { error: `${response.status} ${response.statusText}` };
    }
    return { ok: response.ok, status: response.status, data };
  }

  const fmtTime = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");
  const fmtRate = (r) => (r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2));
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);

  // A duration for people: "45 s", "12 min", "3 h 5 min", "2 d 4 h".
  function fmtAge(ms) {
    if (ms === null || ms === undefined) return "";
    const s = Math.floor(ms / 1000);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min`;
    const h = Math.floor(m / 60);
    if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
    const d = Math.floor(h / 24);
    return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
  }

  // -- the queue table ----------------------------------------------------------------------------

  function rateText(rate) {
    if (rate.configured === null) return el("span", { text: "unlimited" });
    if (rate.paused) return el("span", { class: "paused", text: "paused" });
    let text = `${rate.configured} jobs/s`;
    if (overview.server_count > 1) text += ` (${fmtRate(rate.effective)} on this server)`;
    return el("span", { text });
  }

  function countCell(column, perPriority) {
    const total = sum(perPriority);
    const breakdown = perPriority.map((n, i) => `p${i + 1} ${n}`).join(" · ");
    const cls = column === "failed" && total > 0 ? "count nonzero-failed" : "count";
    return el(
      "td",
      { class: cls, "data-state": column },
      el("span", { class: "total", text: String(total) }),
      el("span", { class: "by-priority", text: breakdown }),
    );
  }

  // A queue's ordered groups: those with an unfinished job, and the blocked ones (a job waiting
  // behind the group's running ones); empty when it has none.
  function groupsText(groups) {
    if (!groups || groups.all === 0) return "";
    return groups.blocked ? `${groups.all} (${groups.blocked} blocked)` : String(groups.all);
  }

  // The queue config's other rules in force (maxInProgress, groupConcurrency, groupJobsPerSecond).
  function rulesText(rules) {
    const parts = [];
    if (rules.max_in_progress !== null) parts.push(`at most ${rules.max_in_progress} in progress`);
    let groups = `groups: ${rules.group_concurrency} at once`;
    if (rules.group_jobs_per_second !== null) groups += `, ${rules.group_jobs_per_second} jobs/s each`;
    parts.push(groups);
    return parts.join("; ");
  }

  function renderQueues() {
    const rows = overview.queues.map((q) => {
      const canvas = el("canvas", { width: "160", height: "36", class: "spark", "data-queue": q.name });
      const manage = el("button", { type: "button", class: "manage", text: "Manage" });
      manage.addEventListener("click", () => select(q.name));
      const row = el(
        "tr",
        { "data-queue": q.name, class: q.name === selected ? "selected" : "" },
        el("td", { class: "name", text: q.name }),
        ...COLUMNS.map((c) => countCell(c, q.counts[c])),
        el("td", { class: "oldest-ready", title: q.oldest_ready_age_ms === null ? "no ready job" : "", text: fmtAge(q.oldest_ready_age_ms) }),
        el("td", { class: q.expired ? "expired nonzero" : "expired", text: String(q.expired) }),
        el("td", { class: "rate" }, rateText(q.rate)),
        el("td", { class: "groups", text: groupsText(q.groups) }),
        el("td", { class: "activity" }, canvas),
        el("td", {}, manage),
      );
      return row;
    });
    document.querySelector("#queues tbody").replaceChildren(...rows);
    $("queues-empty").hidden = rows.length > 0;
    drawSparklines();
  }

  function renderSummary() {
    const shards = overview.shards;
    const healthy = shards.filter((s) => s.healthy).length;
    const parts = [`${healthy}/${shards.length} shards healthy`];
    const draining = shards.filter((s) => s.dequeue_only).map((s) => s.name);
    if (draining.length) parts.push(`dequeue-only: ${draining.join(", ")}`);
    const g = overview.gauges;
    if (g.requests_in_flight !== undefined) parts.push(`${g.requests_in_flight} requests in flight`);
    if (g.connections_open !== undefined) parts.push(`${g.connections_open} connections`);
    if (!overview.password_set) parts.push("admin actions disabled (no ADMIN_PASSWORD_HASH)");
    $("server-summary").textContent = parts.join(" · ");
    let refreshed = `updated ${fmtTime(overview.now_ms)}`;
    // Counts come from the last count pass when passes are slow (many queues on MySQL, say).
    const age = overview.counts_at_ms ? (overview.now_ms - overview.counts_at_ms) / 1000 : 0;
    if (age >= 2) refreshed += ` · job counts from ${age.toFixed(0)} s before`;
    $("refreshed").textContent = refreshed;
    renderMemory();
  }

  // Per shard, store memory used against its limit (shards whose store reports it: Redis).
  function renderMemory() {
    const memory = overview.memory;
    const box = $("shard-memory");
    const names = memory ? Object.keys(memory.shards).sort() : [];
    box.hidden = names.length === 0;
    const mib = (n) => `${(n / 1048576).toFixed(1)} MiB`;
    const parts = names.map((name) => {
      const m = memory.shards[name];
      if (!m.max_bytes) return el("span", { text: `shard ${name}: ${mib(m.used_bytes)} (no limit)` });
      const pct = Math.round(m.fraction * 100);
      const text = `shard ${name}: ${mib(m.used_bytes)} of ${mib(m.max_bytes)} (${pct}%)`;
      if (!m.above) return el("span", { text });
      const mark = Math.round(memory.high_water * 100);
      return el("span", { class: "memory-high", text: `${text}, above ${mark}%: no new jobs` });
    });
    const nodes = [];
    parts.forEach((part, i) => nodes.push(...(i ? [" · ", part] : ["memory: ", part])));
    box.replaceChildren(...nodes);
  }

  function fillSelect(select, values, labels) {
    const keep = select.value;
    select.replaceChildren(...values.map((v, i) => el("option", { value: v, text: labels[i] })));
    if (values.includes(keep)) select.value = keep;
  }

  function renderSelects() {
    const p = [];
    for (let i = 1; i <= overview.priorities; i += 1) p.push(String(i));
    for (const select of document.querySelectorAll(".priority-select")) {
      fillSelect(select, ["all", ...p], ["all", ...p]);
    }
    const names = overview.queues.map((q) => q.name);
    fillSelect($("scan-queue"), names, names);
  }

  // -- charts ---------------------------------------------------------------------------------------

  function seriesFor(queue) {
    // (own keys only: a queue named "constructor" or "__proto__" is a name, not Object's member)
    return rates && Object.hasOwn(rates.queues, queue) ? rates.queues[queue] : null;
  }

  // Rates as steps: point i covers (stamps[i] - seconds[i], stamps[i]]. The window is the last ten
  // minutes, or less while the server has less history (at least one minute).
  function drawChart(canvas, queue, withLabels) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width;
    const h = canvas.height;
    ctx.clearRect(0, 0, w, h);
    const pad = withLabels ? 44 : 2;
    ctx.strokeStyle = "#d9dee7";
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(pad, h - 1.5);
    ctx.lineTo(w, h - 1.5);
    ctx.stroke();
    const series = seriesFor(queue);
    const stamps = rates ? rates.timestamps_ms : [];
    if (!series || stamps.length === 0) return;
    const end = stamps[stamps.length - 1];
    const first = stamps[0] - rates.seconds[0] * 1000;
    const windowMs = Math.min(CHART_WINDOW_MS, Math.max(60000, end - first));
    const start = end - windowMs;
    let max = 0;
    for (const kind of KINDS) for (const v of series[kind]) max = Math.max(max, v);
    const top = max > 0 ? max * 1.1 : 1;
    const x = (t) => pad + (Math.max(0, t - start) / windowMs) * (w - pad - 1);
    const y = (v) => h - 2 - (v / top) * (h - (withLabels ? 16 : 4));
    for (const kind of KINDS) {
      ctx.strokeStyle = COLORS[kind];
      ctx.lineWidth = withLabels ? 2 : 1.3;
      ctx.beginPath();
      let started = false;
      series[kind].forEach((v, i) => {
        if (stamps[i] <= start || v === 0) {
          started = false; // zero is the axis: leave it to the axis line, so colours don't stack on it
          return;
        }
        const from = x(stamps[i] - rates.seconds[i] * 1000);
        if (started) ctx.lineTo(from, y(v));
        else ctx.moveTo(from, y(v));
        ctx.lineTo(x(stamps[i]), y(v));
        started = true;
      });
      ctx.stroke();
    }
    if (withLabels) {
      ctx.fillStyle = "#667085";
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillText(`${fmtRate(max)}/s`, 2, 12);
      ctx.fillText("0", 2, h - 4);
      const minutes = Math.round(windowMs / 60000);
      ctx.fillText(`${minutes} min ago`, pad + 2, h - 4);
      ctx.fillText("now", w - 24, h - 4);
    }
  }

  function drawSparklines() {
    for (const canvas of document.querySelectorAll("canvas.spark")) {
      drawChart(canvas, canvas.getAttribute("data-queue"), false);
    }
    if (selected) drawChart($("detail-chart"), selected, true);
  }

  function lastMinuteText(queue) {
    const series = seriesFor(queue);
    if (!series) return "No activity in the charted window.";
    const stamps = rates.timestamps_ms;
    const cutoff = stamps.length ? stamps[stamps.length - 1] - 60000 : 0;
    const parts = KINDS.map((kind) => {
      let jobs = 0;
      let secs = 0;
      series[kind].forEach((v, i) => {
        if (stamps[i] > cutoff) {
          jobs += v * rates.seconds[i];
          secs += rates.seconds[i];
        }
      });
      return `${KIND_LABEL[kind]} ${fmtRate(secs ? jobs / secs : 0)}/s`;
    });
    return `Last minute: ${parts.join(", ")}.`;
  }

  // -- the selected queue ---------------------------------------------------------------------------

  function select(queue) {
    selected = queue;
    $("scan-queue").value = queue;
    for (const row of document.querySelectorAll("#queues tbody tr")) {
      row.className = row.getAttribute("data-queue") === queue ? "selected" : "";
    }
    renderDetail();
    runHooks();
    $("queue-detail").scrollIntoView({ block: "nearest" });
  }

  function runHooks() {
    for (const hook of refreshHooks) hook();
  }

  function renderDetail() {
    const q = overview && overview.queues.find((x) => x.name === selected);
    $("queue-detail").hidden = !q;
    if (!q) return;
    $("detail-name").textContent = q.name;
    const current = $("rate-current");
    current.replaceChildren("In force: ", rateText(q.rate), `; ${rulesText(q.rules)}`);
    const canEdit = overview.rate_config_path !== null;
    for (const id of ["rate-set", "rate-pause", "rate-resume", "rate-unlimit", "rate-value"]) {
      $(id).disabled = !canEdit;
    }
    $("rate-disabled").hidden = canEdit;
    $("rate-disabled").textContent = canEdit
      ? ""
      : "Rate limits cannot be changed here: this server has no QUEUE_CONFIG_FILE_PATH.";
    $("detail-rates").textContent = lastMinuteText(q.name);
    drawChart($("detail-chart"), q.name, true);
  }

  // -- refresh ---------------------------------------------------------------------------------------

  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      const [o, r] = await Promise.all([call("GET", "/api/queues"), call("GET", "/api/rates")]);
      if (!o.ok) {
        $("server-summary").textContent = `cannot read queues: ${o.data.error}`;
        return;
      }
      overview = o.data;
      if (r.ok) rates = r.data;
      renderSummary();
      renderSelects();
      renderQueues();
      renderDetail();
      runHooks();
      document.body.setAttribute("data-loaded", "1");
    } finally {
      refreshing = false;
    }
  }

  // -- admin actions: confirm, ask for the password, then post -------------------------------------

  function confirmAction(text) {
    const dialog = $("confirm-dialog");
    $("confirm-text").textContent = text;
    $("confirm-password").value = "";
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener(
        "close",
        () => {
          const password = dialog.returnValue === "ok" ? $("confirm-password").value : null;
          $("confirm-password").value = ""; // (not left in the page until the next action)
          resolve(password);
        },
        { once: true },
      );
      dialog.showModal();
      $("confirm-password").focus();
    });
  }

  async function act(text, url, body, describe) {
    const password = await confirmAction(text);
    if (password === null) {
      showMessage("Cancelled: nothing was done.", false);
      return;
    }
    const result = await call("POST", url, { ...body, password });
    if (result.ok) showMessage(describe(result.data), false);
    else showMessage(`Refused (${result.status}): ${result.data.error}`, true);
    await refresh();
  }

  const priorityOf = (id) => ($(id).value === "all" ? null : Number($(id).value));
  const priorityText = (p) => (p === null ? "every priority" : `priority ${p}`);

  function onRetry(event) {
    event.preventDefault();
    const priority = priorityOf("retry-priority");
    const attempts = Number($("retry-attempts").value);
    const limit = Number($("retry-limit").value);
    const text =
      `Retry up to ${limit} FAILED jobs of queue ${selected} (${priorityText(priority)}), ` +
      `moving them back to PENDING with ${attempts} attempt(s) each?`;
    act(text, "/api/retry", { queue: selected, priority, attempts, limit }, (d) =>
      `Retried ${d.retried} failed job(s) of ${d.queue}.`);
  }

  function onDelete(event) {
    event.preventDefault();
    const state = $("delete-state").value;
    const priority = priorityOf("delete-priority");
    const regex = $("delete-regex").value;
    const limit = Number($("delete-limit").value);
    const filter = regex ? `, whose body matches /${regex}/` : "";
    const text =
      `Delete up to ${limit} ${state.toUpperCase()} jobs of queue ${selected} (${priorityText(priority)}${filter})? ` +
      "This cannot be undone.";
    act(text, "/api/delete", { queue: selected, state, priority, regex: regex || null, limit }, (d) =>
      `Deleted ${d.deleted} job(s) of ${d.queue}.`);
  }

  function rateAction(action) {
    const rate = Number($("rate-value").value);
    const where = `(rewrites ${overview.rate_config_path}, read by every server watching it)`;
    const texts = {
      set: `Limit dequeues from queue ${selected} to ${rate} jobs/s across the fleet ${where}?`,
      pause: `Pause queue ${selected}: every dequeue is refused until it is resumed ${where}?`,
      resume: `Resume queue ${selected} at the rate it had before it was paused ${where}?`,
      unlimit: `Remove the rate limit of queue ${selected} ${where}?`,
    };
    if (action === "set" && !(rate >= 0)) {
      showMessage("Enter a rate of 0 or more jobs per second.", true);
      return;
    }
    const body = { queue: selected, action };
    if (action === "set") body.rate = rate;
    act(texts[action], "/api/rate", body, (d) => {
      const r = d.rate;
      const now = r.configured === null ? "unlimited" : r.paused ? "paused" : `${r.configured} jobs/s`;
      return `Rate limit of ${d.queue} is now ${now}.`;
    });
  }

  // -- jobs: scan and lookup ------------------------------------------------------------------------

  function onScan(event) {
    event.preventDefault();
    const params = new URLSearchParams({
      queue: $("scan-queue").value,
      state: $("scan-state").value,
      limit: $("scan-limit").value || "50",
    });
    const priority = priorityOf("scan-priority");
    if (priority !== null) params.set("priority", String(priority));
    if ($("scan-regex").value) params.set("regex", $("scan-regex").value);
    if ($("scan-future").checked) params.set("future", "1");
    scan = { params, continuation: null, page: 0 };
    scanPage();
  }

  // The scan's next page: the first, or the one its continuation resumes at (same query).
  async function scanPage() {
    const params = new URLSearchParams(scan.params);
    if (scan.continuation) params.set("continuation", scan.continuation);
    const result = await call("GET", `/api/scan?${params}`);
    if (!result.ok) {
      showMessage(`Scan failed (${result.status}): ${result.data.error}`, true);
      return;
    }
    scan.page += 1;
    scan.continuation = result.data.continuation;
    const rows = result.data.jobs.map((job) => {
      const link = el("button", { type: "button", class: "lookup-link", text: job.descriptor });
      link.addEventListener("click", () => lookup(job.descriptor));
      return el(
        "tr",
        { "data-descriptor": job.descriptor },
        el("td", { class: "descriptor" }, link),
        el("td", { text: job.state.toUpperCase() }),
        el("td", { class: "attempts", text: `${job.attempts_remaining} / ${job.attempts_allowed}` }),
        el("td", { class: "status", text: job.custom_status }),
        el("td", { text: fmtTime(job.updated_at_ms) }),
        el("td", { text: fmtTime(job.run_after_ms) }),
        el("td", { class: "dedup-key", text: job.dedup_key || "" }),
        el("td", { class: "group-key", text: job.group_key || "" }),
      );
    });
    document.querySelector("#jobs tbody").replaceChildren(...rows);
    $("jobs-empty").hidden = rows.length > 0;
    $("scan-next").hidden = !scan.continuation;
    const more = scan.continuation ? "" : " (the last)";
    $("scan-page").textContent = scan.page > 1 || scan.continuation ? `page ${scan.page}${more}` : "";
  }

  async function lookup(descriptor) {
    $("lookup-descriptor").value = descriptor;
    const result = await call("GET", `/api/lookup?${new URLSearchParams({ descriptor })}`);
    if (!result.ok) {
      $("lookup-result").hidden = true;
      showMessage(`Lookup failed (${result.status}): ${result.data.error}`, true);
      return;
    }
    const job = result.data.job;
    const fields = [
      ["Descriptor", job.descriptor],
      ["State", job.state.toUpperCase()],
      ["Attempts left / allowed", `${job.attempts_remaining} / ${job.attempts_allowed}`],
      ["Custom status", job.custom_status],
      ["Created", fmtTime(job.created_at_ms)],
      ["Updated", fmtTime(job.updated_at_ms)],
      ["Run after", fmtTime(job.run_after_ms)],
      ["Claim", job.claim_descriptor || ""],
      ["Dedup key", job.dedup_key || ""],
      ["Group key", job.group_key || ""],
      ["Expires", fmtTime(job.expire_at_ms)],
    ];
    $("lookup-fields").replaceChildren(...fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    const size = job.body_size === undefined ? 0 : job.body_size;
    let note = `(${size} bytes; invalid UTF-8 shown as \uFFFD`;
    if (job.body_text_truncated) note += "; text cut short";
    if (job.body_hex_truncated) note += "; hex of the first 4096 bytes";
    $("lookup-body-size").textContent = `${note})`;
    $("lookup-body-text").textContent = job.body_text || "";
    $("lookup-body-hex").textContent = job.body_hex || "";
    const cancel = $("lookup-cancel");
    cancel.hidden = !(job.state === "pending" || job.state === "in_progress");
    cancel.setAttribute("data-descriptor", job.descriptor);
    $("lookup-result").hidden = false;
  }

  async function onCancelJob() {
    const descriptor = $("lookup-cancel").getAttribute("data-descriptor");
    const queue = descriptor.split(":")[0];
    const text =
      `Cancel job ${descriptor}? A PENDING job ends FAILED with "cancelled" in its custom status; ` +
      "a running one gets no further attempt (a success ack still counts).";
    await act(text, "/api/cancel", { queue, descriptors: [descriptor] }, (d) =>
      d.cancelled ? `Cancelled ${descriptor}.` : `${descriptor} was not changed (finished already, or unknown).`);
    await lookup(descriptor);
  }

  function onLookup(event) {
    event.preventDefault();
    const descriptor = $("lookup-descriptor").value.trim();
    if (descriptor) lookup(descriptor);
  }

  // -- start ---------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("retry-form").addEventListener("submit", onRetry);
    $("delete-form").addEventListener("submit", onDelete);
    $("rate-form").addEventListener("submit", (e) => {
      e.preventDefault();
      rateAction("set");
    });
    $("rate-pause").addEventListener("click", () => rateAction("pause"));
    $("rate-resume").addEventListener("click", () => rateAction("resume"));
    $("rate-unlimit").addEventListener("click", () => rateAction("unlimit"));
    $("scan-form").addEventListener("submit", onScan);
    $("scan-next").addEventListener("click", scanPage);
    $("lookup-cancel").addEventListener("click", onCancelJob);
    $("lookup-form").addEventListener("submit", onLookup);
    refresh();
    setInterval(refresh, REFRESH_MS);
  });

  // What jobcontrol.js builds on (the same helpers, the same password dialog).
  window.PinLaterDashboard = {
    el,
    call,
    act,
    showMessage,
    fmtTime,
    fmtAge,
    selected: () => selected,
    overview: () => overview,
    refresh,
    onRefresh: (hook) => refreshHooks.push(hook),
  };
})();
