/* The live console: keeps the job list, a job's page and the dashboard current without reloading
   them (one small JSON request every 2 s while the tab is visible; none once a job has ended),
   and counts every relative time ("in 8 s", "3 min ago") on, second by second. */
"use strict";
(function () {
    const INTERVAL_MS = 2000;
    const MINUTE = 60, HOUR = 3600, DAY = 86400;
    const gettext = window.gettext || function (text) { return text; };
    const ngettext = window.ngettext || function (one, many, n) { return n === 1 ? one : many; };
    const interpolate = window.interpolate || function (text, values) {
        return text.replace(/%\((\w+)\)s/g, function (match, name) { return String(values[name]); });
    };
    let clockOffsetMs = 0;  // the server's clock minus the browser's, from the page as served

    // The same rules as django_durajobs.engine.moments.span() and relative().
    function span(seconds) {
        const whole = Math.floor(Math.abs(seconds));
        if (whole < MINUTE) {
            return interpolate(ngettext("%(count)s s", "%(count)s s", whole), {count: whole}, true);
        }
        if (whole < HOUR) {
            const minutes = Math.floor(whole / MINUTE);
            return interpolate(ngettext("%(count)s min", "%(count)s min", minutes), {count: minutes}, true);
        }
        if (whole < 2 * DAY) {
            const hours = Math.floor(whole / HOUR);
            return interpolate(ngettext("%(count)s h", "%(count)s h", hours), {count: hours}, true);
        }
        const days = Math.floor(whole / DAY);
        return interpolate(ngettext("%(count)s d", "%(count)s d", days), {count: days}, true);
    }

    function relative(moment, nowMs) {
        const seconds = (moment.getTime() - nowMs) / 1000;
        if (Math.abs(seconds) < 1) {
            return gettext("just now");
        }
        if (seconds > 0) {
            return interpolate(gettext("in %(span)s"), {span: span(seconds)}, true);
        }
        return interpolate(gettext("%(span)s ago"), {span: span(seconds)}, true);
    }

    function serverNow() {
        return Date.now() + clockOffsetMs;
    }

    function refreshRelativeTimes() {
        const now = serverNow();
        document.querySelectorAll("time[data-relative]").forEach(function (element) {
            const moment = new Date(element.getAttribute("datetime"));
            if (!isNaN(moment.getTime())) {
                element.textContent = relative(moment, now);
            }
        });
    }

    function rowId(row) {
        const box = row.querySelector("input.action-select");
        if (box) {
            return box.value;
        }
        const link = row.querySelector("a[href*='/change/']");
        const found = link && link.getAttribute("href").match(/\/(\d+)\/change\//);
        return found ? found[1] : null;
    }

    function listRows() {
        const rows = {};
        document.querySelectorAll("#result_list tbody tr").forEach(function (row) {
            const id = rowId(row);
            if (id) {
                rows[id] = row;
            }
        });
        return rows;
    }

    function replaceFragments(fragments) {
        Object.keys(fragments || {}).forEach(function (id) {
            const current = document.getElementById(id);
            if (!current) {
                return;
            }
            const holder = document.createElement("div");
            holder.innerHTML = fragments[id];
            const fresh = holder.firstElementChild;
            if (fresh) {
                current.replaceWith(fresh);
            }
        });
    }

    // Says a change to a screen reader: the region is polite, so it waits for a pause.
    function announce(text) {
        const region = document.getElementById("durajobs-announce");
        if (region && text && region.textContent !== text) {
            region.textContent = text;
        }
    }

    // The breadcrumb's last item: Django 6 puts it in an <li aria-current="page">, older versions
    // leave it as the text after the last "›".
    function setLastCrumb(text) {
        const crumbs = document.querySelector(".breadcrumbs");
        const current = crumbs && crumbs.querySelector("[aria-current='page']");
        if (current) {
            current.textContent = text;
            return;
        }
        const last = crumbs && crumbs.lastChild;
        if (last && last.nodeType === Node.TEXT_NODE) {
            last.textContent = last.textContent.replace(/\u203a[\s\S]*$/, "\u203a " + text + "\n");
        }
    }

    // The job page's heading, the tab's title and the breadcrumb's last item name the job and its
    // status: all three change together, and the change is announced.
    function retitle(subtitleHtml, breadcrumb) {
        // Django 6.1 moved the subtitle into .titles; older versions keep it under #content.
        const subtitle = document.querySelector("#content > h2, #content .titles > h2");
        if (!subtitle) {
            return;
        }
        const before = subtitle.textContent;
        subtitle.innerHTML = subtitleHtml;  // escaped by the server
        const after = subtitle.textContent;
        if (before === after) {
            return;
        }
        document.title = document.title.split(before).join(after);
        if (breadcrumb !== undefined) {
            const holder = document.createElement("template");  // inert: escaped text, read as text
            holder.innerHTML = breadcrumb;
            setLastCrumb(holder.content.textContent);
        }
        announce(after);
    }

    function announceRowChanges(rows, changes) {
        Object.keys(changes).forEach(function (id) {
            const row = rows[id];
            const badge = changes[id].status_badge;
            if (!row || badge === undefined) {
                return;
            }
            const cell = row.querySelector(".field-status_badge");
            if (cell && cell.innerHTML !== badge) {
                const holder = document.createElement("template");
                holder.innerHTML = badge;
                const name = row.querySelector("th a, td a");
                announce((name ? name.textContent + ": " : "") + holder.content.textContent);
            }
        });
    }

    function apply(live, answer) {
        replaceFragments(answer.fragments);
        if (answer.rows) {
            const rows = listRows();
            announceRowChanges(rows, answer.rows);
            Object.keys(answer.rows).forEach(function (id) {
                const row = rows[id];
                if (!row) {
                    return;
                }
                Object.keys(answer.rows[id]).forEach(function (column) {
                    const cell = row.querySelector(".field-" + column);
                    if (cell && cell.innerHTML !== answer.rows[id][column]) {
                        cell.innerHTML = answer.rows[id][column];
                    }
                });
            });
            (answer.gone || []).forEach(function (id) {
                if (rows[id]) {
                    rows[id].classList.add("durajobs-gone");
                }
            });
        }
        if (answer.subtitle !== undefined) {
            retitle(answer.subtitle, answer.breadcrumb);
        }
        Object.keys(answer.fields || {}).forEach(function (name) {
            const field = document.querySelector(".field-" + name + " .readonly");
            if (field && field.innerHTML !== answer.fields[name]) {
                field.innerHTML = answer.fields[name];
            }
        });
        if (answer.terminal) {
            live.dataset.terminal = "true";
        }
        if (answer.version) {
            live.dataset.version = answer.version;
        }
        const updated = live.querySelector("time");
        if (updated) {
            updated.setAttribute("datetime", new Date(serverNow()).toISOString());
        }
        live.classList.remove("durajobs-live-failing");
        refreshRelativeTimes();
    }

    function liveUrl(live) {
        const url = new URL(live.dataset.liveUrl, window.location.href);
        if (document.getElementById("result_list")) {
            url.searchParams.set("ids", Object.keys(listRows()).join(","));
        } else {
            // The job page's sections are paginated: ask for the pages it shows.
            new URLSearchParams(window.location.search).forEach(function (value, name) {
                url.searchParams.set(name, value);
            });
            if (live.dataset.version) {  // the sections come back only when they changed
                url.searchParams.set("version", live.dataset.version);
            }
        }
        return url;
    }

    function schedule(live) {
        if (live.dataset.terminal !== "true") {
            window.setTimeout(function () { poll(live); }, INTERVAL_MS);
        }
    }

    function poll(live) {
        if (document.hidden) {  // nobody is looking: ask again later, without a request
            schedule(live);
            return;
        }
        fetch(liveUrl(live), {credentials: "same-origin", headers: {"Accept": "application/json"}})
            .then(function (response) {
                if (!response.ok) {
                    throw new Error(response.status);
                }
                return response.json();
            })
            .then(function (answer) { apply(live, answer); })
            .catch(function () { live.classList.add("durajobs-live-failing"); })
            .then(function () { schedule(live); });
    }

    document.addEventListener("DOMContentLoaded", function () {
        const live = document.getElementById("durajobs-live");
        if (live) {
            const served = new Date(live.querySelector("time").getAttribute("datetime"));
            if (!isNaN(served.getTime())) {
                clockOffsetMs = served.getTime() - Date.now();
            }
            schedule(live);
        }
        refreshRelativeTimes();
        window.setInterval(refreshRelativeTimes, 1000);
    });
})();
