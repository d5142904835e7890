// dlscope's pages: draws the charts the server put on the page (Vega-Lite specifications,
// drawn by vega-embed as SVG), and runs the launch form: submit, show the API's errors next
// to their fields, follow the evaluation or experiment live until it ends.
// No framework, no build step, nothing fetched from elsewhere: the server renders the pages.
"use strict";

(function () {
  // --- charts ------------------------------------------------------------------------------
  async function drawCharts() {
    const specs = document.querySelectorAll("script[data-chart-for]");
    if (!specs.length) {
      document.body.dataset.chartsDrawn = "0";
      return;
    }
    let drawn = 0;
    const failures = [];
    await Promise.all(
      Array.from(specs).map(async (script) => {
        const target = document.getElementById(script.dataset.chartFor);
        try {
          const spec = JSON.parse(script.textContent);
          target.textContent = "";
          await window.vegaEmbed(target, spec, {
            renderer: "svg",
            // The page's policy allows no eval: Vega interprets its expressions from their
            // syntax tree (vega-interpreter) instead of compiling them with new Function.
            ast: true,
            // Nor inline styles: vega-embed's and the tooltips' are in dlscope.css.
            defaultStyle: false,
            forceActionsMenu: true,
            tooltip: { disableDefaultStyle: true },
            // Export as SVG or PNG; no link to the online editor (this may run offline).
            actions: { export: true, source: false, compiled: false, editor: false },
          });
          drawn += 1;
        } catch (error) {
          failures.push(error);
          target.innerHTML = "";
          const message = document.createElement("p");
          message.className = "message error";
          message.textContent = "This chart could not be drawn: " + error;
          target.appendChild(message);
        }
      }),
    );
    document.body.dataset.chartsFailed = String(failures.length);
    // When the last chart was drawn, in ms since navigation began (for bench/ui_pages.py).
    document.body.dataset.chartsDrawnMs = String(Math.round(performance.now()));
    document.body.dataset.chartsDrawn = String(drawn);
  }

  // --- API calls ---------------------------------------------------------------------------
  function token() {
    const field = document.getElementById("token");
    return field && field.value ? field.value : null;
  }

  async function api(method, path, body) {
    const headers = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    const bearer = token();
    if (bearer) headers.authorization = "Bearer " + bearer;
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (error) {
      return { status: 0, body: { detail: "the gateway cannot be reached: " + error } };
    }
    let parsed = null;
    try {
      parsed = await response.json();
    } catch (error) {
      parsed = { detail: response.statusText || "no readable answer" };
    }
    return { status: response.status, body: parsed };
  }

  function describe(detail) {
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      return detail.map((d) => (d.loc || []).slice(1).join(".") + ": " + d.msg).join("; ");
    }
    return JSON.stringify(detail);
  }

  // --- launch form -------------------------------------------------------------------------
  function launchForm() {
    const form = document.getElementById("launch");
    if (!form) return;
    const catalog = JSON.parse(document.getElementById("launch-catalog").textContent);
    const $ = (id) => document.getElementById(id);

    function selectedFrameworks() {
      if ($("fw-all").checked) return "all";
      return Array.from(form.querySelectorAll("input[name=framework]:checked")).map((c) => c.value);
    }

    function refreshVersions() {
      const model = catalog.models[$("model").value];
      const version = $("version");
      version.innerHTML = "";
      const latest = new Option("latest (*)", "*");
      version.appendChild(latest);
      for (const v of (model && model.versions) || []) {
        version.appendChild(new Option(v.version + (v.deprecated ? " (deprecated)" : ""), "==" + v.version));
      }
    }

    function refreshSplits() {
      const dataset = catalog.datasets[$("dataset").value];
      const split = $("split");
      split.innerHTML = "";
      split.appendChild(new Option("all samples", ""));
      for (const name of (dataset && dataset.splits) || []) split.appendChild(new Option(name, name));
      split.disabled = !dataset;
    }

    function refreshScenario() {
      const name = $("scenario").value;
      for (const field of form.querySelectorAll("[data-scenarios]")) {
        field.hidden = !field.dataset.scenarios.split(" ").includes(name);
      }
    }

    function refreshTask() {
      // A language model's fields only for a language model: the others would be ignored.
      const model = catalog.models[$("model").value];
      const task = (model && model.task) || "";
      for (const set of form.querySelectorAll("[data-task]")) set.hidden = set.dataset.task !== task;
    }

    function refreshMode() {
      const frameworks = selectedFrameworks();
      for (const box of form.querySelectorAll("input[name=framework]")) box.disabled = frameworks === "all";
      const experiment = frameworks === "all" || frameworks.length !== 1;
      $("mode").textContent = experiment
        ? "Launches an experiment: the model on " +
          (frameworks === "all" ? "every framework with an online worker" : frameworks.join(", ")) +
          ", compared (latency, accuracy, output parity)."
        : "Launches one evaluation on " + frameworks[0] + ".";
      $("trace_level").disabled = experiment;
      $("trace-note").hidden = !experiment;
    }

    $("model").addEventListener("change", refreshVersions);
    $("model").addEventListener("change", refreshTask);
    $("dataset").addEventListener("change", refreshSplits);
    $("scenario").addEventListener("change", refreshScenario);
    form.addEventListener("change", (event) => {
      if (event.target.name === "framework" || event.target.id === "fw-all") refreshMode();
    });
    refreshVersions();
    refreshSplits();
    refreshScenario();
    refreshTask();
    refreshMode();

    function clearErrors() {
      for (const node of form.querySelectorAll(".error-text")) node.remove();
      for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
      $("form-error").hidden = true;
    }

    function showError(loc, message) {
      // The deepest field the location names: body.scenario.iterations -> scenario.iterations.
      const path = loc.filter((part) => part !== "body").join(".");
      let field = null;
      for (let end = loc.length; end > 0 && !field; end -= 1) {
        const key = loc.slice(0, end).filter((part) => part !== "body").join(".");
        field = key ? form.querySelector('[data-loc="' + key + '"]') : null;
      }
      if (!field) {
        $("form-error").hidden = false;
        $("form-error").textContent = (path ? path + ": " : "") + message;
        return;
      }
      const control = field.matches("input, select") ? field : field.querySelector("input, select");
      if (control) control.setAttribute("aria-invalid", "true");
      const text = document.createElement("div");
      text.className = "error-text";
      text.setAttribute("role", "alert");
      text.textContent = message;
      (field.closest(".field") || field).appendChild(text);
    }

    function number(id) {
      const raw = $(id).value.trim();
      return raw === "" ? undefined : Number(raw);
    }

    function scenario() {
      const name = $("scenario").value;
      const body = { name, driver: $("driver").value };
      const fields = {
        iterations: number("iterations"),
        warmup: number("warmup"),
        min_duration_s: number("min_duration_s"),
        max_duration_s: number("max_duration_s"),
        seed: number("seed"),
      };
      if (name === "single-stream" || name === "offline") fields.batch_size = number("batch_size");
      if (name === "multi-stream") fields.samples_per_query = number("samples_per_query");
      if (name === "server") {
        fields.target_qps = number("target_qps");
        fields.latency_bound_ms = number("latency_bound_ms");
      }
      if (name === "batch-sweep" && $("batch_sizes").value.trim()) {
        fields.batch_sizes = $("batch_sizes")
          .value.split(",")
          .map((s) => s.trim())
          .filter(Boolean)
          .map(Number);
      }
      if (!$("generation").hidden) Object.assign(fields, generation(name));
      for (const [key, value] of Object.entries(fields)) if (value !== undefined) body[key] = value;
      return body;
    }

    // A length distribution as the CLI writes it, as the API takes it; the forms the
    // scenario's lengths take (shared.messages.lengths), or a problem to show at the field.
    function lengths(id) {
      const word = $(id).value.trim();
      if (word === "") return undefined;
      let match;
      if (/^\d+$/.test(word)) return { distribution: "fixed", tokens: Number(word) };
      if ((match = /^uniform:(\d+)-(\d+)$/.exec(word))) {
        return { distribution: "uniform", min: Number(match[1]), max: Number(match[2]) };
      }
      if ((match = /^normal:(\d+),(\d+(?:\.\d+)?)(?:,(\d+)-(\d+))?$/.exec(word))) {
        const normal = { distribution: "normal", mean: Number(match[1]), stddev: Number(match[2]) };
        if (match[3] !== undefined) Object.assign(normal, { min: Number(match[3]), max: Number(match[4]) });
        return normal;
      }
      throw { loc: ["scenario", id], message: "not a length distribution: give N, uniform:MIN-MAX, normal:MEAN,STDDEV or normal:MEAN,STDDEV,MIN-MAX" };
    }

    function generation(name) {
      const fields = {
        max_new_tokens: number("max_new_tokens"),
        output_tokens: lengths("output_tokens"),
        input_tokens: lengths("input_tokens"),
        ttft_bound_ms: number("ttft_bound_ms"),
        tpot_bound_ms: number("tpot_bound_ms"),
        e2e_bound_ms: number("e2e_bound_ms"),
      };
      if ($("natural").checked) fields.ignore_eos = false;
      if (name === "single-stream") fields.concurrency = number("concurrency");
      return fields;
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      clearErrors();
      const frameworks = selectedFrameworks();
      if (frameworks !== "all" && frameworks.length === 0) {
        showError(["body", "frameworks"], "choose at least one framework, or all");
        return;
      }
      const experiment = frameworks === "all" || frameworks.length !== 1;
      const model = $("model").value;
      let asked;
      try {
        asked = scenario();
      } catch (problem) {
        if (!problem.loc) throw problem;
        showError(problem.loc, problem.message);
        $(problem.loc[problem.loc.length - 1]).focus();
        return;
      }
      const common = {
        version: $("version").value,
        hardware: $("hardware").value,
        scenario: asked,
      };
      if ($("dataset").value) {
        common.dataset = $("dataset").value;
        if ($("split").value) common.split = $("split").value;
      }
      let path;
      let body;
      if (experiment) {
        path = "/v1/experiments";
        body = { model, frameworks, ...common };
      } else {
        // One framework: the model's export for it (same model, another framework's file).
        const exports = (catalog.models[model] && catalog.models[model].exports) || {};
        path = "/v1/evaluations";
        body = {
          model: exports[frameworks[0]] || model,
          framework: frameworks[0],
          trace_level: $("trace_level").value,
          ...common,
        };
      }
      const button = $("submit");
      button.disabled = true;
      button.textContent = "Launching…";
      const answer = await api("POST", path, body);
      button.disabled = false;
      button.textContent = "Launch";
      if (answer.status === 202) {
        follow(experiment ? "experiment" : "evaluation", answer.body);
        return;
      }
      if (answer.status === 422 && Array.isArray(answer.body.detail)) {
        for (const problem of answer.body.detail) showError(problem.loc || [], problem.msg);
        const first = form.querySelector("[aria-invalid=true]");
        if (first) first.focus();
        return;
      }
      $("form-error").hidden = false;
      $("form-error").textContent =
        "The gateway refused it (" + answer.status + "): " + describe(answer.body.detail);
      $("form-error").focus();
    });
  }

  // --- live progress -----------------------------------------------------------------------
  const EVENT_TYPES = [
    "evaluation.requested",
    "evaluation.scheduled",
    "evaluation.started",
    "evaluation.profiled",
    "evaluation.measured",
    "evaluation.completed",
    "evaluation.failed",
  ];
  const TERMINAL = ["evaluation.completed", "evaluation.failed"];

  function describeEvent(type, payload) {
    switch (type) {
      case "evaluation.requested":
        return "requested: " + payload.model + " on " + payload.framework;
      case "evaluation.scheduled":
        return "scheduled: version " + payload.model_version;
      case "evaluation.started":
        return "started on " + payload.agent_id + " (host " + payload.host + ")";
      case "evaluation.profiled":
        return "layers profiled (" + payload.trace_level + ")";
      case "evaluation.progress": {
        // The worker's step; how long it should take, when the worker said.
        const about = payload.expected_s ? ", about " + payload.expected_s.toFixed(1) + " s" : "";
        const most = payload.limit_s && !payload.expected_s ? ", at most " + payload.limit_s + " s" : "";
        return (payload.part || payload.phase) + about + most;
      }
      case "evaluation.measured":
        return "measured; computing the statistics";
      case "evaluation.completed":
        return "completed: p90 " + Number(payload.result.p90_ms).toPrecision(4) + " ms";
      case "evaluation.failed":
        return "failed: " + payload.stage + ": " + payload.reason;
      case "error":
        return "not followed: " + payload.detail;
      default:
        return type;
    }
  }

  // Follow one evaluation's events (server-sent events); ``onEvent(type, payload)`` each.
  function stream(evaluationId, onEvent) {
    const source = new EventSource("/v1/evaluations/" + evaluationId + "/events");
    // Progress notifications reach the gateway by another path than the stored events, in
    // no order with them: once the measurement (or the outcome) is shown, no step is.
    let measured = false;
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (message) => {
        const data = JSON.parse(message.data);
        if (type === "evaluation.measured" || TERMINAL.includes(type)) measured = true;
        onEvent(type, data.payload);
        if (TERMINAL.includes(type)) source.close();
      });
    }
    // Progress notifications are not stored events: their data is the payload itself.
    source.addEventListener("evaluation.progress", (message) => {
      if (!measured) onEvent("evaluation.progress", JSON.parse(message.data));
    });
    // The gateway's own "error" event (it has data; the browser's, on a lost connection,
    // has none and reconnects): the evaluation is not known, so stop asking.
    source.addEventListener("error", (message) => {
      if (!message.data) return;
      source.close();
      const problem = JSON.parse(message.data);
      onEvent("error", problem);
    });
    return source;
  }

  function follow(kind, accepted) {
    const panel = document.getElementById("progress");
    const status = document.getElementById("progress-status");
    const log = document.getElementById("progress-log");
    const link = document.getElementById("progress-link");
    const members = document.getElementById("progress-members");
    panel.hidden = false;
    log.innerHTML = "";
    members.innerHTML = "";
    link.hidden = true;
    document.getElementById("progress-id").textContent = kind + " " + accepted.id;
    const trace = document.getElementById("progress-trace");
    // A link only where the deployment exports its traces to a collector (Jaeger).
    trace.hidden = !accepted.trace_url;
    if (accepted.trace_url) trace.href = accepted.trace_url;
    const note = (text) => {
      const item = document.createElement("li");
      item.textContent = new Date().toLocaleTimeString() + "  " + text;
      log.appendChild(item);
    };
    const done = (state, href) => {
      status.textContent = state;
      status.className = "badge " + state;
      link.href = href;
      link.hidden = false;
      link.focus();
    };
    status.textContent = "requested";
    status.className = "badge requested";
    panel.scrollIntoView({ behavior: "smooth", block: "start" });

    if (kind === "evaluation") {
      stream(accepted.id, (type, payload) => {
        note(describeEvent(type, payload));
        if (type === "error") return;
        const state = type.split(".")[1];
        const running = ["started", "progress", "measured"].includes(state);
        status.textContent = running ? "running" : state;
        status.className = "badge " + status.textContent;
        if (TERMINAL.includes(type)) done(state, "/evaluations/" + accepted.id);
      });
      return;
    }
    // An experiment: its plan and outcome by polling its resource; each member's progress
    // by its own event stream.
    const followed = new Map();
    note("experiment requested: " + accepted.models.map((m) => m.model).join(", "));
    // Just accepted, it may take a moment to be stored (a 404 until then): not for ever.
    let missingSince = null;
    const poll = async () => {
      const answer = await api("GET", "/v1/experiments/" + accepted.id);
      if (answer.status === 404) {
        missingSince = missingSince || Date.now();
        if (Date.now() - missingSince > 60000) {
          note("not followed: " + describe(answer.body.detail));
          return;
        }
      }
      if (answer.status === 200) {
        const experiment = answer.body;
        status.textContent = experiment.status;
        status.className = "badge " + experiment.status;
        for (const member of experiment.members) {
          if (followed.has(member.evaluation_id)) continue;
          const row = document.createElement("tr");
          row.innerHTML = "<th scope='row'></th><td></td><td class='state'></td>";
          row.children[0].textContent = member.framework;
          row.children[1].textContent = member.agent_id;
          row.children[2].textContent = member.status;
          members.appendChild(row);
          followed.set(member.evaluation_id, row);
          note("member planned: " + member.framework + " on " + member.agent_id);
          stream(member.evaluation_id, (type, payload) => {
            row.children[2].textContent = describeEvent(type, payload);
          });
        }
        for (const gap of experiment.skipped) {
          if (followed.has("skip:" + gap.reason)) continue;
          followed.set("skip:" + gap.reason, null);
          note("skipped " + (gap.framework || gap.model || "") + ": " + gap.reason);
        }
        if (experiment.status === "compared" || experiment.status === "failed") {
          note(experiment.status === "compared" ? "compared" : "failed: " + experiment.error);
          done(experiment.status, "/experiments/" + accepted.id);
          return;
        }
      } else if (answer.status !== 404) {
        note("the gateway answered " + answer.status + ": " + describe(answer.body.detail));
      }
      setTimeout(poll, 1000);
    };
    poll();
  }

  document.addEventListener("DOMContentLoaded", () => {
    launchForm();
    if (window.vegaEmbed) {
      drawCharts();
    } else {
      document.body.dataset.chartsDrawn = "0";
    }
  });
})();
