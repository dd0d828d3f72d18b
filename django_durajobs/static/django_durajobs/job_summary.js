/* Keeps a running or waiting job's summary current without reloading the page; stops once the job has ended. */
"use strict";
(function () {
    const INTERVAL_MS = 2000;

    function schedule(summary) {
        if (!summary || summary.dataset.terminal === "true") {
            return;
        }
        window.setTimeout(function () { refresh(summary); }, INTERVAL_MS);
    }

    function refresh(summary) {
        if (document.hidden) {  // nobody is looking: ask again later, without a request
            schedule(summary);
            return;
        }
        fetch(summary.dataset.refreshUrl, {credentials: "same-origin", headers: {"X-Requested-With": "XMLHttpRequest"}})
            .then(function (response) {
                if (!response.ok) {
                    throw new Error(response.status);
                }
                return response.text();
            })
            .then(function (html) {
                const holder = document.createElement("div");
                holder.innerHTML = html;
                const fresh = holder.querySelector("#durajobs-summary");
                if (fresh) {
                    summary.replaceWith(fresh);
                    schedule(fresh);
                }
            })
            .catch(function () { schedule(summary); });
    }

    document.addEventListener("DOMContentLoaded", function () {
        schedule(document.getElementById("durajobs-summary"));
    });
})();
