// The scoreboard's op x dtype table: drawn from the JSON in #scoreboard-data, filtered by the form
// above it, a row's detail in a dialog. Report text only ever reaches the page through textContent.
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("scoreboard-data").textContent);
  var ops = data.ops;
  var S = ops.strings;
  var impls = data.impls.filter(function (n) { return ops.impls[n]; });
  // grid[entry][impl][dtype] = cell
  var grid = ops.entries.map(function () { return {}; });
  impls.forEach(function (name) {
    ops.impls[name].cells.forEach(function (c) {
      var byImpl = grid[c[0]][name] || (grid[c[0]][name] = []);
      byImpl[c[1]] = c;
    });
  });

  var table = document.getElementById("ops-table");
  var status = document.getElementById("ops-status");
  var form = document.getElementById("ops-filters");
  var fVerdict = document.getElementById("f-verdict");
  var fDtype = document.getElementById("f-dtype");
  var fImpl = document.getElementById("f-impl");
  var fText = document.getElementById("f-text");
  var dialog = document.getElementById("op-detail");

  function slug(s) { return String(s).toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, ""); }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function selection() {
    var dt = fDtype.value, im = fImpl.value;
    return {
      verdict: fVerdict.value === "" ? -1 : ops.verdicts.indexOf(fVerdict.value),
      dtypes: ops.dtypes.map(function (_, i) { return i; }).filter(function (i) { return dt === "" || ops.dtypes[i] === dt; }),
      impls: impls.filter(function (n) { return im === "" || n === im; }),
      text: fText.value.trim().toLowerCase()
    };
  }

  function textMatches(e, sel) {
    if (!sel.text) return true;
    if (ops.entries[e].toLowerCase().indexOf(sel.text) !== -1) return true;
    return sel.impls.some(function (n) {
      var row = grid[e][n] || [];
      return sel.dtypes.some(function (d) {
        var c = row[d];
        return c && (S[c[3]].toLowerCase().indexOf(sel.text) !== -1 || S[c[5]].toLowerCase().indexOf(sel.text) !== -1);
      });
    });
  }

  function verdictMatches(e, sel) {
    if (sel.verdict < 0) return true;
    return sel.impls.some(function (n) {
      var row = grid[e][n] || [];
      return sel.dtypes.some(function (d) { return row[d] && row[d][2] === sel.verdict; });
    });
  }

  function drawHead(sel) {
    var thead = table.tHead;
    thead.textContent = "";
    var top = el("tr"), sub = el("tr");
    top.appendChild(el("th", { scope: "col", rowspan: "2" }, "OpInfo entry"));
    sel.impls.forEach(function (n) {
      top.appendChild(el("th", { scope: "colgroup", colspan: String(sel.dtypes.length), "class": "impl group-start", "data-impl": n }, n));
      sel.dtypes.forEach(function (d, i) {
        sub.appendChild(el("th", { scope: "col", "class": i === 0 ? "group-start" : "" }, ops.dtypes[d]));
      });
    });
    thead.appendChild(top);
    thead.appendChild(sub);
  }

  function draw() {
    var sel = selection();
    drawHead(sel);
    var body = table.tBodies[0];
    var frag = document.createDocumentFragment();
    var shown = 0;
    for (var e = 0; e < ops.entries.length; e++) {
      if (!verdictMatches(e, sel) || !textMatches(e, sel)) continue;
      shown++;
      var tr = el("tr", { "data-entry": ops.entries[e] });
      var th = el("th", { scope: "row" });
      th.appendChild(el("button", { type: "button", "class": "entry", "data-entry-index": String(e) }, ops.entries[e]));
      tr.appendChild(th);
      sel.impls.forEach(function (n) {
        var row = grid[e][n] || [];
        sel.dtypes.forEach(function (d, i) {
          var c = row[d];
          var cls = "cell" + (i === 0 ? " group-start" : "");
          if (!c) {
            tr.appendChild(el("td", { "class": cls + " absent" }, ""));
            return;
          }
          var v = ops.verdicts[c[2]];
          var other = sel.verdict >= 0 && c[2] !== sel.verdict;
          cls += other ? " other" : " v-" + slug(v);
          tr.appendChild(el("td", { "class": cls, "data-verdict": v, "data-impl": n, title: n + ", " + ops.dtypes[d] + ": " + v }, ops.abbr[v]));
        });
      });
      frag.appendChild(tr);
    }
    body.textContent = "";
    body.appendChild(frag);
    status.textContent = "Showing " + shown + " of " + ops.entries.length + " entries" +
      (sel.verdict >= 0 ? " with a " + ops.verdicts[sel.verdict] + " cell" : "") +
      (sel.impls.length < impls.length ? " for " + sel.impls.join(", ") : "") +
      (sel.dtypes.length < ops.dtypes.length ? " in " + sel.dtypes.map(function (d) { return ops.dtypes[d]; }).join(", ") : "") + ".";
  }

  var DETAIL_COLUMNS = ["dtype", "verdict", "error or detail", "sample", "known cause", "evidence"];

  // The entry's every cell, a table per implementation; the clicked cell's row is marked.
  function detail(e, chosenImpl, chosenDtype) {
    var title = document.getElementById("op-detail-title");
    var bodyNode = document.getElementById("op-detail-body");
    title.textContent = ops.entries[e];
    bodyNode.textContent = "";
    impls.forEach(function (n) {
      var row = grid[e][n] || [];
      bodyNode.appendChild(el("h4", null, n));
      var cells = ops.dtypes.map(function (_, d) { return row[d]; }).filter(Boolean);
      if (!cells.length) {
        bodyNode.appendChild(el("p", { "class": "none" }, "no row for this entry"));
        return;
      }
      var t = el("table", { "class": "row-detail" });
      var head = el("tr");
      DETAIL_COLUMNS.forEach(function (c) { head.appendChild(el("th", { scope: "col" }, c)); });
      t.appendChild(el("thead")).appendChild(head);
      var tbody = t.appendChild(el("tbody"));
      cells.forEach(function (c) {
        var v = ops.verdicts[c[2]];
        var evidence = [];
        if (c[7] !== null) evidence.push(c[7] + (c[7] === 1 ? " sample" : " samples"));
        if (S[c[6]]) evidence.push(S[c[6]]);
        if (S[c[8]]) evidence.push(S[c[8]]);
        var chosen = n === chosenImpl && ops.dtypes[c[1]] === chosenDtype;
        var tr = el("tr", chosen ? { "class": "chosen", "aria-current": "true" } : null);
        tr.appendChild(el("th", { scope: "row" }, ops.dtypes[c[1]]));
        tr.appendChild(el("td", { "class": "v-" + slug(v) }, v));
        [S[c[3]], S[c[4]], S[c[5]], evidence.join("; ")].forEach(function (text) { tr.appendChild(el("td", null, text)); });
        tbody.appendChild(tr);
      });
      bodyNode.appendChild(t);
    });
    if (typeof dialog.showModal === "function") dialog.showModal(); else dialog.setAttribute("open", "");
  }

  table.addEventListener("click", function (ev) {
    var tr = ev.target.closest("tbody tr");
    if (!tr) return;
    var button = tr.querySelector("button.entry");
    var cell = ev.target.closest("td.cell");
    var dtype = cell ? table.tHead.rows[1].cells[cell.cellIndex - 1].textContent : null;
    detail(Number(button.getAttribute("data-entry-index")), cell && cell.getAttribute("data-impl"), dtype);
  });
  document.getElementById("op-detail-close").addEventListener("click", function () { dialog.close(); });
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  [fVerdict, fDtype, fImpl].forEach(function (node) { node.addEventListener("change", draw); });
  var pending = null;
  fText.addEventListener("input", function () {
    clearTimeout(pending);
    pending = setTimeout(draw, 120);
  });

  // a link to a failure inside a closed <details> opens it
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    for (var node = target; node; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
    }
    if (target) target.scrollIntoView();
  }
  window.addEventListener("hashchange", openTarget);

  draw();
  openTarget();
})();
