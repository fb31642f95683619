// The review app's keyboard and saving without a reload (docs/review-app.md). Every control also
// works without this script: the forms are plain POSTs answered by a redirect.
"use strict";

(function () {
  const groups = () => Array.from(document.querySelectorAll("section.group"));
  let current = -1;

  function followPage(rel) {
    const link = document.querySelector("nav.pager a[rel=" + rel + "]");
    if (link) window.location.assign(link.href);
    return Boolean(link);
  }

  function focusGroup(index) {
    const all = groups();
    if (!all.length) return;
    if (index >= all.length && followPage("next")) return;  // past the page's last group
    if (index < 0 && current >= 0 && followPage("prev")) return;
    current = Math.max(0, Math.min(index, all.length - 1));
    all.forEach((g, i) => g.classList.toggle("focused", i === current));
    all[current].focus();
    all[current].scrollIntoView({ block: "nearest" });
  }

  function focusedGroup() {
    const inside = document.activeElement && document.activeElement.closest("section.group");
    if (inside) current = groups().indexOf(inside);
    return inside || groups()[current] || null;
  }

  function typing(target) {
    return target.matches("textarea, input[type=text], input[type=number], input:not([type]), select");
  }

  function toggleKeys() {
    const keys = document.getElementById("keys");
    if (!keys) return;
    keys.hidden = !keys.hidden;
    document.querySelectorAll(".keys-toggle").forEach((b) => b.setAttribute("aria-expanded", String(!keys.hidden)));
  }

  // each member's new points in the members' list (ids compared as text: never a selector)
  function showPoints(group, points) {
    group.querySelectorAll("li[data-student]").forEach((li) => {
      const shown = li.querySelector("[data-role=points]");
      if (shown && Object.prototype.hasOwnProperty.call(points, li.dataset.student)) {
        shown.textContent = points[li.dataset.student];
      }
    });
  }

  async function save(form) {
    const group = form.closest("section.group");
    const message = form.querySelector("[data-role=message]");
    const saved = form.querySelector("[data-role=saved]");
    const csrf = form.querySelector("input[name=csrf]").value;
    saved.textContent = "Saving…";
    let response;
    try {
      response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { "X-CSRF-Token": csrf, Accept: "application/json" },
        credentials: "same-origin",
      });
    } catch (err) {
      saved.textContent = "";
      message.textContent = "Not saved: the server did not answer (" + err + ").";
      message.hidden = false;
      return;
    }
    const data = await response.json().catch(() => null);
    if (!data) {
      saved.textContent = "";
      message.textContent = "Not saved: the server answered " + response.status + ".";
      message.hidden = false;
      return;
    }
    form.querySelector("input[name=expected]").value = JSON.stringify(data.expected);
    if (data.ok) {
      group.querySelector("[data-role=status]").innerHTML = data.status_html;
      showPoints(group, data.points || {});
      group.dataset.status = "uniform";
      // the saved grade is now the grade of each member's answer as it is: none is stale
      group.querySelectorAll("[data-role=member-changed]").forEach((note) => note.remove());
      message.hidden = true;
      message.textContent = "";
      saved.textContent = "Saved.";
    } else {
      saved.textContent = "";
      message.textContent = data.message;  // the grader's input stays as typed
      message.hidden = false;
    }
  }

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!form.matches("form.grade")) return;
    event.preventDefault();
    save(form);
  });

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    const target = event.target;
    if (event.key === "Enter") {
      if (target.matches("textarea, button, a, summary")) return;
      const group = focusedGroup();
      const form = group && group.querySelector("form.grade");
      if (form && (target === group || form.contains(target))) {
        event.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    if (typing(target)) return;
    const all = groups();
    if (event.key === "j") focusGroup(current + 1);
    else if (event.key === "k") focusGroup(current - 1);
    else if (event.key === "u") {
      const later = all.findIndex((g, i) => i > current && g.dataset.status !== "uniform");
      const earlier = all.findIndex((g) => g.dataset.status !== "uniform");
      if (later >= 0) focusGroup(later);
      else if (!followPage("next") && earlier >= 0) focusGroup(earlier);  // none left here: the next page
    } else if (event.key === "?") toggleKeys();
    else if (/^[1-9]$/.test(event.key)) {
      const group = focusedGroup();
      const box = group && group.querySelectorAll("form.grade input[name=item]")[Number(event.key) - 1];
      if (!box) return;
      box.checked = !box.checked;
    } else return;
    event.preventDefault();
  });

  document.addEventListener("click", (event) => {
    if (event.target.closest(".keys-toggle")) toggleKeys();
  });
})();
