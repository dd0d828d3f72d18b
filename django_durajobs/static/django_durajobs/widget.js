/* The job widget ({% job_widget job %}): renders one job's describe() and keeps it current from
   the job's event stream. Every text comes from the page (translated there) or from the job,
   and is set as text, never as HTML. No dependencies. */
(function () {
  "use strict";

  function fill(text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_match, name) {
      return values[name] === undefined || values[name] === null ? "" : String(values[name]);
    });
  }

  function moment(iso) {
    var lang = document.documentElement.lang || undefined;
    return new Intl.DateTimeFormat(lang, { dateStyle: "medium", timeStyle: "short" }).format(new Date(iso));
  }

  // Whether ``container`` holds the buttons of ``offered`` already; if not, it is marked as holding them.
  function alreadyOffered(container, offered) {
    var key = JSON.stringify(offered.map(function (offer) { return [offer.id, offer.label]; }));
    if (container.dataset.offered === key) return true;
    container.dataset.offered = key;
    return false;
  }

  function element(tag, className, text) {
    var made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  function Widget(root) {
    var data = JSON.parse(root.querySelector("script[type='application/json']").textContent);
    this.root = root;
    this.texts = data.texts;
    this.urls = data.urls;
    this.may = data.may;
    this.csrf = root.querySelector("input[name=csrfmiddlewaretoken]").value;
    this.part = function (name) { return root.querySelector(".durajobs-" + name); };
    this.render(data.summary);
    if (!data.summary.terminal) this.listen();
  }

  Widget.prototype.listen = function () {
    var widget = this;
    var source = new EventSource(this.urls.events);
    source.addEventListener("job", function (event) { widget.render(JSON.parse(event.data)); });
    source.addEventListener("end", function () { source.close(); });
    // Under WSGI every answer closes and the browser asks again: one error between two opens is
    // that polling, not a lost connection. Two in a row are.
    var failures = 0;
    source.onopen = function () {
      failures = 0;
      if (widget.part("problem").textContent === widget.texts.reconnecting) widget.problem("");
    };
    source.onerror = function () {
      failures += 1;
      if (failures > 1 && source.readyState === EventSource.CONNECTING && !widget.summary.terminal) {
        widget.problem(widget.texts.reconnecting);
      }
    };
  };

  Widget.prototype.problem = function (text) {
    var shown = this.part("problem");
    shown.textContent = text;
    shown.hidden = !text;
  };

  Widget.prototype.render = function (job) {
    var texts = this.texts;
    this.summary = job;
    this.root.dataset.status = job.status;
    this.part("title").textContent = job.label;
    var status = texts.statuses[job.status] || job.status;
    this.part("status").textContent = job.cancel_requested ? status + " · " + texts.cancel_requested : status;
    var bar = this.part("bar");
    bar.setAttribute("aria-valuenow", job.progress);
    bar.setAttribute("aria-valuetext", job.progress + " %");
    this.part("fill").style.width = job.progress + "%";
    this.part("timing").textContent = this.timing(job);
    this.part("reason").textContent = job.wait_reason || "";
    this.renderSteps(job);
    this.renderQuestion(job);
    var error = this.part("error");
    error.textContent = job.error || "";
    error.hidden = !job.error;
    this.renderControls(job);
  };

  Widget.prototype.timing = function (job) {
    var texts = this.texts;
    var parts = [];
    if (job.attempt > 1 || job.error) parts.push(fill(texts.attempt, job));
    if (job.status === "queued" && job.error && job.next_run_at) {
      parts.push(fill(texts.next_try, { when: moment(job.next_run_at) }));
    } else if (job.eta_at) {
      parts.push(fill(texts.eta, { when: moment(job.eta_at) }));
    } else if (job.eta_unknown_reason) {
      parts.push(job.eta_unknown_reason);
    }
    return parts.join(" · ");
  };

  Widget.prototype.renderSteps = function (job) {
    var list = this.part("steps");
    var current = job.current_step && job.current_step.id;
    var texts = this.texts;
    list.replaceChildren.apply(list, job.steps.filter(function (step) {
      return step.phase === job.phase;
    }).map(function (step) {
      var item = element("li", "durajobs-step durajobs-step-" + step.state);
      item.appendChild(element("span", "durajobs-step-title", step.title));
      item.appendChild(element("span", "durajobs-step-state", texts.step_states[step.state] || step.state));
      if (step.id === current && !job.terminal) item.setAttribute("aria-current", "step");
      return item;
    }));
  };

  Widget.prototype.renderQuestion = function (job) {
    var widget = this;
    var asking = job.status === "needs_user" && job.can_resume && (job.actions || []).length > 0;
    this.part("question").hidden = !asking;
    this.part("question").setAttribute("aria-label", this.texts.question);
    this.part("message").textContent = asking ? job.user_message || "" : "";
    var answers = this.part("answers");
    var offered = asking && this.may.answer ? job.actions : [];
    // An update that offers the same answers keeps their buttons, and the keyboard's focus on one.
    if (alreadyOffered(answers, offered)) return;
    answers.replaceChildren();
    offered.forEach(function (action) {
      var button = element("button", "durajobs-answer", action.label || action.id);
      button.type = "button";
      button.addEventListener("click", function () { widget.post("answer", { action: action.id }); });
      answers.appendChild(button);
    });
  };

  Widget.prototype.renderControls = function (job) {
    var widget = this;
    var controls = this.part("controls");
    var offered = [["cancel", job.can_cancel && !job.cancel_requested], ["retry", job.can_retry]].filter(
      function (pair) { return pair[1] && widget.may[pair[0]]; }
    ).map(function (pair) { return { id: pair[0], label: widget.texts[pair[0]] }; });
    if (alreadyOffered(controls, offered)) return;
    controls.replaceChildren();
    offered.forEach(function (offer) {
      var button = element("button", "durajobs-" + offer.id, offer.label);
      button.type = "button";
      button.addEventListener("click", function () { widget.post(offer.id, {}); });
      controls.appendChild(button);
    });
  };

  Widget.prototype.post = function (act, body) {
    var widget = this;
    widget.root.querySelectorAll("button").forEach(function (button) { button.disabled = true; });
    fetch(this.urls[act], {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": this.csrf },
      body: JSON.stringify(body)
    }).then(function (response) {
      return response.json().then(function (answer) {
        if (!response.ok) throw new Error(answer.error || widget.texts.failed_request);
        widget.problem("");
        widget.render(answer);
        if (!answer.terminal && act === "retry") widget.listen();
      });
    }).catch(function (error) {
      widget.problem(error.message || widget.texts.failed_request);
      widget.render(widget.summary);
    });
  };

  function start() {
    document.querySelectorAll("[data-durajobs-widget]:not([data-durajobs-started])").forEach(function (root) {
      root.setAttribute("data-durajobs-started", "");
      new Widget(root);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
