// pytest-graphbudget HTML report: sorting, filtering, the icicle switch, tooltips and the graph
// search. Plain DOM scripting, no library, no request to any network address.
(function () {
  "use strict";
  var tip = document.getElementById("tip");

  // Tooltips: an SVG <title> becomes data-tip, shown in one floating box.
  var tipped = "svg.roofline circle.point, svg.icicle g.cell, svg.growth circle.point";
  document.querySelectorAll(tipped).forEach(function (el) {
    var title = el.querySelector("title");
    if (!title) return;
    el.setAttribute("data-tip", title.textContent);
    title.remove();
    el.addEventListener("mousemove", function (event) {
      tip.textContent = el.getAttribute("data-tip");
      tip.style.display = "block";
      // Beside the pointer, on whichever side has room.
      var left = event.clientX + 14;
      if (left + tip.offsetWidth > window.innerWidth - 8) left = event.clientX - tip.offsetWidth - 14;
      var top = event.clientY + 14;
      if (top + tip.offsetHeight > window.innerHeight - 8) top = event.clientY - tip.offsetHeight - 14;
      tip.style.left = Math.max(left, 4) + "px";
      tip.style.top = Math.max(top, 4) + "px";
    });
    el.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  });

  // Per-layer tables: a click on a heading sorts (numbers largest first), a second reverses.
  document.querySelectorAll("table.layers").forEach(function (table) {
    var body = table.tBodies[0];
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.addEventListener("click", function () {
        var key = th.getAttribute("data-sort");
        var descending = !th.classList.contains("sorted-desc");
        if (key === "module" && !th.classList.contains("sorted-asc")) descending = false;
        table.querySelectorAll("th[data-sort]").forEach(function (other) {
          other.classList.remove("sorted-asc", "sorted-desc");
        });
        th.classList.add(descending ? "sorted-desc" : "sorted-asc");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.getAttribute("data-" + key), y = b.getAttribute("data-" + key);
          var order = key === "module" ? x.localeCompare(y, undefined, { numeric: true })
                                       : Number(x) - Number(y);
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  // Filters: rows whose module path holds every word typed.
  document.querySelectorAll("input.filter").forEach(function (input) {
    var box = input.closest(".layer-box");
    var count = box.querySelector(".count");
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0, rows = box.querySelectorAll("tr[data-module]");
      rows.forEach(function (row) {
        var path = row.getAttribute("data-module").toLowerCase();
        var keep = words.every(function (w) { return path.indexOf(w) >= 0; });
        row.style.display = keep ? "" : "none";
        shown += keep ? 1 : 0;
      });
      count.textContent = shown + " of " + rows.length + " modules";
    });
  });

  // The icicle's switch: FLOPs, params or peak memory.
  document.querySelectorAll(".icicle-box").forEach(function (box) {
    box.querySelectorAll("input[type=radio]").forEach(function (radio) {
      radio.addEventListener("change", function () {
        box.querySelectorAll("svg.icicle").forEach(function (svg) {
          svg.style.display = svg.getAttribute("data-figure") === radio.value ? "" : "none";
        });
      });
    });
  });

  // Graph search: Graphviz nodes and clusters whose text holds the query are outlined.
  function search(box, query) {
    var groups = box.querySelectorAll("g.node, g.cluster");
    var hits = [];
    query = query.trim().toLowerCase();
    groups.forEach(function (g) {
      var hit = query !== "" && g.textContent.toLowerCase().indexOf(query) >= 0;
      g.classList.toggle("hit", hit);
      g.classList.toggle("dim", query !== "" && !hit && g.classList.contains("node"));
      if (hit) hits.push(g);
    });
    if (hits.length) hits[0].scrollIntoView({ block: "center", inline: "center" });
    return hits.length;
  }
  document.querySelectorAll("input.graph-search").forEach(function (input) {
    var section = input.closest(".graph");
    var box = section.querySelector(".graph-box");
    var count = section.querySelector(".count");
    input.addEventListener("input", function () {
      var n = search(box, input.value);
      count.textContent = input.value.trim() ? n + " found" : "";
    });
  });

  // Graph zoom: the drawing at its own size, scaled by the buttons, or fitted to the width.
  document.querySelectorAll(".graph").forEach(function (section) {
    var box = section.querySelector(".graph-box");
    var svg = box && box.querySelector("svg");
    if (!svg) return;
    var natural = svg.getBoundingClientRect().width, scale = 1;
    section.querySelectorAll("button[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var zoom = button.getAttribute("data-zoom");
        scale = zoom === "fit" ? (box.clientWidth - 4) / natural : scale * Number(zoom);
        svg.style.width = natural * scale + "px";
        svg.style.height = "auto";
      });
    });
  });

  // A grown layer's link finds it in the table and in the graph.
  document.querySelectorAll("a[data-find]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      var model = link.closest("section.model");
      var module = link.getAttribute("data-find");
      var filter = model.querySelector("input.filter");
      if (filter) {
        filter.value = module;
        filter.dispatchEvent(new Event("input"));
        filter.scrollIntoView({ block: "center" });
      }
      var graph = model.querySelector("input.graph-search");
      if (graph) {
        graph.value = module;
        graph.dispatchEvent(new Event("input"));
      }
    });
  });
})();
