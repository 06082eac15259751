// dlprof/report/viewer.hpp: what makes the report page a viewer, as TensorBoard's profiler
// plugin was: its views (Overview, Operator, Kernel, Trace, Memory, Module, Distributed, Flame
// graph, Roofline, Diff) as tabs, each one reachable by a link (the URL's hash), the data of the
// interactive ones as JSON inside the page, and the plain JavaScript that draws them. Nothing is
// fetched: the page opens from a file, years later, without network.
//
// The data (write_views_data) is one JSON object per rank, each with a table of texts that the
// rest index:
//   {"version": 1, "origin_ns", "ranks": [{"rank", "texts": [...],
//     "ops": {"memory", "device_memory", "rows": [[name, input dims, call site, category, calls,
//             self ns, total ns, device self ns, device total ns, FLOPs, CPU mem, self CPU mem,
//             device mem, self device mem]]}  (text indexes, -1 for none),
//     "op_kernels": [[op, input dims, kernel, calls, ns]],
//     "kernels": {"units", "rows": [[kernel, op, module, line, pass, input dims, type, grid, block,
//                 occupancy %, calls, ns, FLOPs, TFLOP/s, bound, of peak %, time lost ns]]},
//     "modules": [[name, parent index, calls, host ns, host self ns, device ns]],
//     "timeline": {"left_out", "steps": [[number, start, end]], "rows": [{"label", "device",
//                  "s": starts (each from the one before, the first from origin_ns), "d": durations,
//                  "n": names, "z": depths, "k": kinds (SliceKind), "a": details, "x": External
//                  ids, "c": correlation ids, "q": sequence numbers, "b": backward (0/1)}]}}]}
// The times are ns from origin_ns. A timeline row leaves out "a", "x", "c", "q" and "b" where
// all its slices have none. The text `<` is written \u003c, so that no name closes the script
// element that holds the data.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "dlprof/analysis/kernel_attribution.hpp"
#include "dlprof/analysis/roofline.hpp"
#include "dlprof/config.hpp"
#include "dlprof/format/json_text.hpp"
#include "dlprof/report/detail/limits.hpp"
#include "dlprof/report/make_report.hpp"
#include "dlprof/report/timeline.hpp"
#include "dlprof/report/views.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// The views as tabs: the hash names the view shown; without scripts every view shows, one
/// after the other.
inline constexpr std::string_view kViewerStyle = R"(
nav.tabs{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #d9d9df;display:flex;flex-wrap:wrap;gap:2px;padding:6px 0 0;margin:8px 0 12px}
nav.tabs a{padding:6px 12px;border-radius:6px 6px 0 0;color:#3b5bab;text-decoration:none;font-weight:500}
nav.tabs a.active{background:#eef2fb;color:#1d1d1f;border-bottom:2px solid #3b73d9}
body.tabbed section.view{display:none}body.tabbed section.view.active{display:block}
body.tabbed{max-width:none}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 4px}.card{border:1px solid #e3e3e8;border-radius:8px;padding:8px 14px;min-width:150px}
.card .figure{font-size:22px;font-weight:600}.card .what{color:#6e6e73;font-size:12.5px}
p.top-action{border-left:4px solid #3b73d9;background:#eef2fb;padding:6px 10px}
.controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:6px 0}
.controls input[type=search]{min-width:280px;padding:4px 6px}.controls button{padding:3px 9px}
table.interactive th.sortable{cursor:pointer;user-select:none}table.interactive tr.clickable{cursor:pointer}
table.interactive tr.clickable:hover td{background:#f3f6fc}table.interactive tr.selected td{background:#e3ebfa}
table.interactive td.label{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:120px;max-width:520px}
table.modules td.module{white-space:nowrap}table.modules .toggle{cursor:pointer;display:inline-block;width:14px}
.master-detail{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.master-detail>.table-box{flex:3 1 640px;min-width:0;overflow-x:auto}
.master-detail>.detail{flex:2 1 360px;min-width:0;position:sticky;top:48px;max-height:calc(100vh - 60px);overflow:auto;border-top:none;margin-top:0}
.master-detail>.detail:empty{display:none}
.detail{border-top:2px solid #e3e3e8;margin-top:10px}.detail h3{overflow-wrap:anywhere;font-size:14px;max-height:6em;overflow-y:auto}
table.facts th{background:none;text-align:left;color:#555}table.facts td.label{white-space:normal;overflow-wrap:anywhere;max-width:900px}
.steps{display:flex;flex-wrap:wrap;gap:3px;margin:4px 0}.steps button.step{font-size:11.5px;padding:1px 6px}
.axis-row{display:flex}.axis-pad{width:220px;flex:none}
.scroller{display:flex;max-height:62vh;overflow-y:auto;overflow-x:hidden;border:1px solid #e3e3e8}
.labels{width:220px;flex:none;font-size:11.5px;border-right:1px solid #e3e3e8}
.labels .label{box-sizing:border-box;padding:3px 6px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;border-bottom:1px solid #f0f0f3}
.labels .label.gpu{color:#7a3b9a}canvas.tracks{display:block;cursor:default}canvas.tracks:focus{outline:none}
ul.links{margin:2px 0;padding-left:20px;font-size:12.5px}ul.links a{cursor:pointer}
)";

/// The views' script, in pieces of under 16,000 characters (the longest string literal some
/// compilers take). It draws the Operator, Kernel, Module and Trace views from the data the first
/// time each is shown and switches views as the URL's hash changes.
inline constexpr std::string_view kViewerScript[] = {
R"js((function () {
  'use strict';
  var payload = document.getElementById('dlprof-views');
  var data = payload ? JSON.parse(payload.textContent) : {ranks: []};
  var views = Array.prototype.slice.call(document.querySelectorAll('section.view'));
  var built = {};

  function el(tag, attributes, children) {
    var node = document.createElement(tag);
    if (attributes) for (var key in attributes) {
      if (key === 'text') node.textContent = attributes[key];
      else if (key === 'class') node.className = attributes[key];
      else if (key.slice(0, 2) === 'on') node.addEventListener(key.slice(2), attributes[key]);
      else node.setAttribute(key, attributes[key]);
    }
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }
  function duration(ns) {
    if (ns === null || ns === undefined) return '-';
    var a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
    if (a >= 1e3) return (ns / 1e3).toFixed(3) + ' us';
    return ns + ' ns';
  }
  function bytes(n) {
    if (n === null || n === undefined) return '-';
    var a = Math.abs(n), units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], u = 0;
    while (a >= 1024 && u < units.length - 1) { a /= 1024; n /= 1024; u++; }
    return (u === 0 ? n : n.toFixed(2)) + ' ' + units[u];
  }
  function count(n) {
    if (n === null || n === undefined) return '-';
    var a = Math.abs(n);
    if (a >= 1e12) return (n / 1e12).toFixed(2) + 'T';
    if (a >= 1e9) return (n / 1e9).toFixed(2) + 'G';
    if (a >= 1e6) return (n / 1e6).toFixed(2) + 'M';
    if (a >= 1e3) return (n / 1e3).toFixed(2) + 'K';
    return String(n);
  }
  function hue(text) {
    var h = 0;
    for (var i = 0; i < text.length; i++) h = (h * 31 + text.charCodeAt(i)) | 0;
    return Math.abs(h) % 360;
  }
  function rankPicker(onChange) {
    if (data.ranks.length < 2) return null;
    var select = el('select', {'class': 'rank', 'aria-label': 'rank', onchange: function () { onChange(Number(select.value)); }},
      data.ranks.map(function (rank, i) { return el('option', {value: i, text: 'rank ' + rank.rank}); }));
    return el('label', {text: 'Rank '}, [select]);
  }
  function note(parent, text) { parent.appendChild(el('p', {'class': 'muted', text: text})); }

  // A sortable table: columns [{title, value(row), text(row)?, numeric}], rows of any shape.
  function SortableTable(columns, onRow) {
    this.columns = columns;
    this.onRow = onRow;
    this.sortColumn = -1;
    this.descending = true;
    this.limit = 300;
    this.node = el('div', {'class': 'table-box'});
  }
  SortableTable.prototype.show = function (rows) {
    this.rows = rows;
    this.render();
  };
  SortableTable.prototype.sortBy = function (column) {
    if (this.sortColumn === column) this.descending = !this.descending;
    else { this.sortColumn = column; this.descending = this.columns[column].numeric !== false; }
    this.render();
  };
  SortableTable.prototype.render = function () {
    var self = this, columns = this.columns, rows = this.rows.slice();
    if (this.sortColumn >= 0) {
      var value = columns[this.sortColumn].value, sign = this.descending ? -1 : 1;
      rows.sort(function (a, b) {
        var x = value(a), y = value(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * sign;
      });
    }
    var head = el('tr', null, columns.map(function (column, i) {
      var arrow = i === self.sortColumn ? (self.descending ? ' \u25BC' : ' \u25B2') : '';
      return el('th', {'class': column.numeric === false ? 'label sortable' : 'sortable', text: column.title + arrow,
                       title: 'sort by ' + column.title, onclick: function () { self.sortBy(i); }});
    }));
    var body = el('tbody');
    rows.slice(0, this.limit).forEach(function (row) {
      var tr = el('tr', {'class': self.onRow ? 'clickable' : ''}, columns.map(function (column) {
        var text = column.text ? column.text(row) : column.value(row);
        var cell = el('td', {'class': column.numeric === false ? 'label' : '', text: text === null || text === undefined ? '-' : String(text)});
        if (column.numeric === false && String(text).length > 90) { cell.title = text; cell.textContent = String(text).slice(0, 88) + '..'; }
        return cell;
      }));
      if (self.onRow) tr.addEventListener('click', function () {
        Array.prototype.forEach.call(body.querySelectorAll('tr.selected'), function (r) { r.classList.remove('selected'); });
        tr.classList.add('selected');
        self.onRow(row);
      });
      body.appendChild(tr);
    });
    this.node.textContent = '';
    this.node.appendChild(el('table', {'class': 'interactive'}, [el('thead', null, [head]), body]));
    if (rows.length > this.limit)
      this.node.appendChild(el('p', {'class': 'muted', text: (rows.length - this.limit) + ' more rows: narrow them with the filter.'}));
  };

  // ---- Operator view ----
  function buildOperator(section) {
    var host = section.querySelector('.interactive-view');
    var rank = 0, group = 'name', filter = '';
    var controls = el('div', {'class': 'controls'});
    var picker = rankPicker(function (r) { rank = r; refresh(); });
    if (picker) controls.appendChild(picker);
    var filterBox = el('input', {type: 'search', 'class': 'filter', 'aria-label': 'filter ops'});
    filterBox.addEventListener('input', function () { filter = filterBox.value; refresh(); });
    controls.appendChild(el('label', {text: 'Name matches (regular expression) '}, [filterBox]));
    var groupBy = el('select', {'class': 'group', 'aria-label': 'group by'}, [
      el('option', {value: 'name', text: 'group by name'}), el('option', {value: 'shape', text: 'group by name and input shape'}),
      el('option', {value: 'site', text: 'group by name and call site'})]);
    groupBy.addEventListener('change', function () { group = groupBy.value; refresh(); });
    controls.appendChild(groupBy);
    var summary = el('p', {'class': 'muted'});
    var detail = el('div', {'class': 'detail'});
    var table;
    host.appendChild(controls);
    host.appendChild(summary);
    function columnsFor(r) {
      var m = r.ops ? r.ops.device_memory : 'Device';
      var columns = [
        {title: 'Name', value: function (o) { return o.name; }, numeric: false},
        {title: 'Calls', value: function (o) { return o.calls; }},
        {title: 'Host self', value: function (o) { return o.self; }, text: function (o) { return duration(o.self); }},
        {title: 'Host total', value: function (o) { return o.total; }, text: function (o) { return duration(o.total); }},
        {title: 'Device self', value: function (o) { return o.gpu; }, text: function (o) { return duration(o.gpu); }},
        {title: 'Device total', value: function (o) { return o.gpuTotal; }, text: function (o) { return duration(o.gpuTotal); }},
        {title: 'FLOPs', value: function (o) { return o.flops; }, text: function (o) { return o.flops ? count(o.flops) : '-'; }}];
      if (r.ops && r.ops.memory) columns.push(
        {title: 'CPU Mem', value: function (o) { return o.cpuMem; }, text: function (o) { return bytes(o.cpuMem); }},
        {title: 'Self CPU Mem', value: function (o) { return o.selfCpuMem; }, text: function (o) { return bytes(o.selfCpuMem); }},
        {title: m + ' Mem', value: function (o) { return o.devMem; }, text: function (o) { return bytes(o.devMem); }},
        {title: 'Self ' + m + ' Mem', value: function (o) { return o.selfDevMem; }, text: function (o) { return bytes(o.selfDevMem); }});
      if (group === 'shape') columns.splice(1, 0, {title: 'Input shapes', value: function (o) { return o.dims; }, numeric: false});
      if (group === 'site') columns.splice(1, 0, {title: 'Call site', value: function (o) { return o.site; }, numeric: false});
      return columns;
    }
    function grouped(r) {
      var rows = {}, list = [], texts = r.texts, pattern = null;
      try { pattern = filter ? new RegExp(filter, 'i') : null; } catch (e) { pattern = null; }
      r.ops.rows.forEach(function (o) {
        var name = texts[o[0]];
        if (pattern ? !pattern.test(name) : filter && name.toLowerCase().indexOf(filter.toLowerCase()) < 0) return;
        var dims = o[1] >= 0 ? texts[o[1]] : '', site = o[2] >= 0 ? texts[o[2]] : '';
        var key = name + (group === 'shape' ? '\n' + dims : group === 'site' ? '\n' + site : '');
        var row = rows[key];
        if (!row) {
          row = rows[key] = {name: name, dims: group === 'shape' ? dims : '', site: group === 'site' ? site : '', calls: 0, self: 0,
                             total: 0, gpu: 0, gpuTotal: 0, flops: 0, cpuMem: 0, selfCpuMem: 0, devMem: 0, selfDevMem: 0};
          list.push(row);
        }
        row.calls += o[4]; row.self += o[5]; row.total += o[6]; row.gpu += o[7]; row.gpuTotal += o[8]; row.flops += o[9];
        row.cpuMem += o[10]; row.selfCpuMem += o[11]; row.devMem += o[12]; row.selfDevMem += o[13];
      });
      return list;
    }
    function showDetail(r, op) {
      detail.textContent = '';
      detail.appendChild(el('h3', {text: op.name + (op.dims ? ' ' + op.dims : '') + (op.site ? ' at ' + op.site : '')}));
      var kernels = r.op_kernels.filter(function (k) {
        return r.texts[k[0]] === op.name && (!op.dims || (k[1] >= 0 ? r.texts[k[1]] : '') === op.dims);
      }).map(function (k) { return {name: r.texts[k[2]], calls: k[3], ns: k[4]}; });
      kernels.sort(function (a, b) { return b.ns - a.ns; });
      if (kernels.length) {
        detail.appendChild(el('h4', {text: 'Kernels it launched (' + kernels.length + ')'}));
        var kt = new SortableTable([
          {title: 'Kernel', value: function (k) { return k.name; }, numeric: false},
          {title: 'Calls', value: function (k) { return k.calls; }},
          {title: 'Device time', value: function (k) { return k.ns; }, text: function (k) { return duration(k.ns); }}]);
        kt.show(kernels);
        detail.appendChild(kt.node);
      } else {
        note(detail, 'It launched no GPU work itself (the work of the ops inside it counts in its device total).');
      }
      var sites = {}, siteList = [];
      r.ops.rows.forEach(function (o) {
        if (r.texts[o[0]] !== op.name || (op.dims && (o[1] >= 0 ? r.texts[o[1]] : '') !== op.dims)) return;
        var site = o[2] >= 0 ? r.texts[o[2]] : '';
        if (!sites[site]) siteList.push(sites[site] = {site: site, calls: 0, self: 0, total: 0});
        sites[site].calls += o[4]; sites[site].self += o[5]; sites[site].total += o[6];
      });
      var known = siteList.filter(function (s) { return s.site; });
      if (known.length) {
        detail.appendChild(el('h4', {text: 'Call sites (' + known.length + ')'}));
        var st = new SortableTable([
          {title: 'Call site', value: function (s) { return s.site || '(no stack)'; }, numeric: false},
          {title: 'Calls', value: function (s) { return s.calls; }},
          {title: 'Host self', value: function (s) { return s.self; }, text: function (s) { return duration(s.self); }},
          {title: 'Host total', value: function (s) { return s.total; }, text: function (s) { return duration(s.total); }}]);
        st.show(siteList);
        detail.appendChild(st.node);
      } else {
        note(detail, 'No call sites: the trace has no call stacks (record with with_stack).');
      }
      detail.appendChild(el('p', null, [el('a', {href: '#trace', text: 'Find it in the timeline', onclick: function () {
        pendingSearch = op.name;
      }})]));
    }
    function refresh() {
      var r = data.ranks[rank];
      if (!r || !r.ops) { summary.textContent = 'This page holds no op table for this rank.'; return; }
      if (!table || table.group !== group) {
        var previous = table;
        table = new SortableTable(columnsFor(r), function (op) { showDetail(r, op); });
        table.group = group;
        table.sortColumn = group === 'name' ? 2 : 3;
        if (previous) previous.node.replaceWith(table.node);
        else host.appendChild(el('div', {'class': 'master-detail'}, [table.node, detail]));
      }
      var rows = grouped(r);
      summary.textContent = rows.length + (rows.length === 1 ? ' row' : ' rows') +
        '. Click a column to sort by it, a row for its kernels and call sites.';
      table.show(rows);
    }
    refresh();
  }

)js",
R"js(  // ---- Kernel view ----
  function buildKernel(section) {
    var host = section.querySelector('.interactive-view');
    var rank = 0, filter = '';
    var controls = el('div', {'class': 'controls'});
    var picker = rankPicker(function (r) { rank = r; refresh(); });
    if (picker) controls.appendChild(picker);
    var filterBox = el('input', {type: 'search', 'class': 'filter', 'aria-label': 'filter kernels'});
    filterBox.addEventListener('input', function () { filter = filterBox.value.toLowerCase(); refresh(); });
    controls.appendChild(el('label', {text: 'Kernel, op or module holds '}, [filterBox]));
    var summary = el('p', {'class': 'muted'}), detail = el('div', {'class': 'detail'});
    host.appendChild(controls);
    host.appendChild(summary);
    var table = null;
    function refresh() {
      var r = data.ranks[rank];
      if (!r || !r.kernels) { summary.textContent = 'This page holds no kernel table for this rank.'; return; }
      var t = r.texts, k = r.kernels;
      var columns = [
        {title: 'Kernel', value: function (x) { return t[x[0]]; }, numeric: false},
        {title: 'Op', value: function (x) { return x[1] >= 0 ? t[x[1]] : '-'; }, numeric: false},
        {title: 'Module', value: function (x) { return x[2] >= 0 ? t[x[2]] : '-'; }, numeric: false},
        {title: k.units.charAt(0).toUpperCase() + k.units.slice(1), value: function (x) { return x[6]; }, numeric: false},
        {title: 'Grid', value: function (x) { return x[7]; }, numeric: false},
        {title: 'Block', value: function (x) { return x[8]; }, numeric: false},
        {title: 'Occupancy', value: function (x) { return x[9]; }, text: function (x) { return x[9] === null ? '-' : x[9].toFixed(1) + '%'; }},
        {title: 'Calls', value: function (x) { return x[10]; }},
        {title: 'Time', value: function (x) { return x[11]; }, text: function (x) { return duration(x[11]); }},
        {title: 'FLOPs', value: function (x) { return x[12]; }, text: function (x) { return x[12] === null ? '-' : count(x[12]); }},
        {title: 'TFLOP/s', value: function (x) { return x[13]; }, text: function (x) { return x[13] === null ? '-' : x[13].toFixed(2); }},
        {title: 'Bound', value: function (x) { return x[14]; }, numeric: false},
        {title: 'Of peak', value: function (x) { return x[15]; }, text: function (x) { return x[15] === null ? '-' : x[15].toFixed(1) + '%'; }},
        {title: 'Time lost', value: function (x) { return x[16]; }, text: function (x) { return duration(x[16]); }}];
      if (!table) {
        table = new SortableTable(columns, function (x) { showDetail(r, x); });
        table.sortColumn = 8;
        host.appendChild(el('div', {'class': 'master-detail'}, [table.node, detail]));
      }
      table.columns = columns;
      var rows = k.rows.filter(function (x) {
        return !filter || [x[0], x[1], x[2]].some(function (i) { return i >= 0 && t[i].toLowerCase().indexOf(filter) >= 0; });
      });
      summary.textContent = rows.length + ' of ' + k.rows.length + ' kernels by launch shape and caller. Click one for what launched it.';
      table.show(rows);
    }
    function showDetail(r, x) {
      var t = r.texts;
      detail.textContent = '';
      detail.appendChild(el('h3', {text: t[x[0]]}));
      var lines = [['Launched by op', x[1] >= 0 ? t[x[1]] : 'no op (a runtime call outside every op)'],
                   ['In module', x[2] >= 0 ? t[x[2]] : 'no annotated module'], ['At line', x[3] >= 0 ? t[x[3]] : 'unknown (no call stacks)'],
                   ['Pass', x[4]], ['Input shapes', x[5] >= 0 ? t[x[5]] : '-'], ['Grid and block', x[7] + ' and ' + x[8]]];
      detail.appendChild(el('table', {'class': 'facts'}, lines.map(function (line) {
        return el('tr', null, [el('th', {'class': 'label', text: line[0]}), el('td', {'class': 'label', text: line[1]})]);
      })));
      if (x[1] >= 0) detail.appendChild(el('p', null, [el('a', {href: '#operator', text: 'See ' + t[x[1]] + ' in the Operator view', onclick: function () {
        var box = document.querySelector('#operator input.filter');
        pendingFilter = '^' + t[x[1]].replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$';
        if (box) { box.value = pendingFilter; box.dispatchEvent(new Event('input')); pendingFilter = null; }
      }})]));
      detail.appendChild(el('p', null, [el('a', {href: '#trace', text: 'Find it in the timeline', onclick: function () { pendingSearch = t[x[0]]; }})]));
    }
    refresh();
  }

  // ---- Module view ----
  function buildModule(section) {
    var host = section.querySelector('.interactive-view');
    var rank = 0;
    var picker = rankPicker(function (r) { rank = r; refresh(); });
    if (picker) host.appendChild(el('div', {'class': 'controls'}, [picker]));
    var box = el('div');
    host.appendChild(box);
    function refresh() {
      box.textContent = '';
      var r = data.ranks[rank];
      if (!r || !r.modules) {
        note(box, 'This page holds no module tree for this rank.');
        return;
      }
      if (!r.modules.length) {
        note(box, 'No module ranges in this trace: annotate LibTorch modules (dlprof::annotate_modules) or record torch.profiler with with_modules=True.');
        return;
      }
      var nodes = r.modules.map(function (m, i) { return {index: i, name: r.texts[m[0]], parent: m[1], calls: m[2], host: m[3], self: m[4], device: m[5], children: []}; });
      var roots = [];
      nodes.forEach(function (n) { if (n.parent >= 0) nodes[n.parent].children.push(n); else roots.push(n); });
      var body = el('tbody');
      function add(node, depth, visible) {
        var toggle = el('span', {'class': 'toggle', text: node.children.length ? '\u25BE ' : '  '});
        var tr = el('tr', {'data-depth': depth}, [
          el('td', {'class': 'label module', style: 'padding-left:' + (8 + 16 * depth) + 'px'}, [toggle, document.createTextNode(node.name)]),
          el('td', {text: node.calls}), el('td', {text: duration(node.host)}), el('td', {text: duration(node.self)}),
          el('td', {text: duration(node.device)})]);
        if (!visible) tr.hidden = true;
        body.appendChild(tr);
        var rows = [];
        node.children.forEach(function (child) { rows = rows.concat(add(child, depth + 1, visible)); });
        if (node.children.length) toggle.addEventListener('click', function () {
          var open = toggle.textContent[0] === '\u25BE';
          toggle.textContent = (open ? '\u25B8' : '\u25BE') + ' ';
          rows.forEach(function (row) { row.hidden = open; });
        });
        return [tr].concat(rows);
      }
      roots.forEach(function (root) { add(root, 0, true); });
      box.appendChild(el('table', {'class': 'interactive modules'}, [el('thead', null, [el('tr', null, [
        el('th', {'class': 'label', text: 'Module'}), el('th', {text: 'Calls'}), el('th', {text: 'Host total'}), el('th', {text: 'Host self'}),
        el('th', {text: 'Device time'})])]), body]));
      note(box, 'Host self: less the time of the modules inside it. Device time: the kernels, copies and fills launched inside it. Click \u25BE to fold a module.');
    }
    refresh();
  }

  // ---- Trace view ----
  var pendingSearch = null, pendingFilter = null, timeline = null;
  var kKinds = ['step', 'op', 'range', 'python', 'runtime', 'kernel', 'copy', 'fill', 'annotation'];
  function decodeRows(r) {
    var tl = r.timeline;
    return tl.rows.map(function (row) {
      var n = row.n.length, start = new Float64Array(n), t = 0;
      for (var i = 0; i < n; i++) { t += row.s[i]; start[i] = t; }
      var depth = 0;
      for (var j = 0; j < n; j++) if (row.z[j] > depth) depth = row.z[j];
      return {label: row.label, device: row.device, start: start, dur: row.d, name: row.n, depth: row.z, kind: row.k,
              details: row.a, ext: row.x, corr: row.c, seq: row.q, back: row.b, levels: depth + 1, top: 0};
    });
  }
  function Timeline(section) {
    var self = this;
    this.section = section;
    var host = section.querySelector('.interactive-view');
    this.rank = 0;
    var controls = el('div', {'class': 'controls'});
    var picker = rankPicker(function (r) { self.load(r); });
    if (picker) controls.appendChild(picker);
    this.search = el('input', {type: 'search', 'class': 'search', 'aria-label': 'search the timeline'});
    this.search.addEventListener('input', function () { self.find(self.search.value); });
    this.search.addEventListener('keydown', function (e) { if (e.key === 'Enter') { e.preventDefault(); self.next(e.shiftKey ? -1 : 1); } });
    this.matchesText = el('span', {'class': 'muted matches'});
    controls.appendChild(el('label', {text: 'Search names (Enter: the next match) '}, [this.search]));
    controls.appendChild(this.matchesText);
    [['\u2212', 'zoom out (S)', function () { self.zoom(1.6, 0.5); }], ['+', 'zoom in (W)', function () { self.zoom(1 / 1.6, 0.5); }],
     ['\u2190', 'pan left (A)', function () { self.pan(-0.25); }], ['\u2192', 'pan right (D)', function () { self.pan(0.25); }],
     ['reset', 'the whole timeline (0)', function () { self.reset(); }]].forEach(function (b) {
      controls.appendChild(el('button', {type: 'button', title: b[1], 'class': 'zoom', text: b[0], onclick: b[2]}));
    });
    host.appendChild(controls);
    this.steps = el('div', {'class': 'steps'});
    host.appendChild(this.steps);
    this.leftOut = el('p', {'class': 'muted'});
    host.appendChild(this.leftOut);
    this.axis = el('canvas', {'class': 'axis', height: 22});
    this.labels = el('div', {'class': 'labels'});
    this.canvas = el('canvas', {'class': 'tracks', tabindex: 0, 'aria-label': 'timeline'});
    this.scroller = el('div', {'class': 'scroller'}, [this.labels, this.canvas]);
    host.appendChild(el('div', {'class': 'axis-row'}, [el('div', {'class': 'axis-pad'}), this.axis]));
    host.appendChild(this.scroller);
    this.detail = el('div', {'class': 'detail event'});
    host.appendChild(el('p', {'class': 'muted', text: 'Drag to pan, Ctrl+wheel or W/S to zoom, A/D to pan; click a slice for its details and the slices it links to.'}));
    host.appendChild(this.detail);
    this.bind();
    this.load(0);
  }
)js",
R"js(  Timeline.prototype.load = function (rank) {
    this.rank = rank;
    var r = data.ranks[rank];
    this.r = r;
    this.selected = null;
    this.matches = [];
    this.detail.textContent = '';
    this.labels.textContent = '';
    this.steps.textContent = '';
    if (!r || !r.timeline || !r.timeline.rows.length) {
      this.rows = [];
      this.leftOut.textContent = 'This page holds no timeline for this rank.';
      this.draw();
      return;
    }
    var self = this;
    this.rows = decodeRows(r);
    this.leftOut.textContent = r.timeline.left_out || '';
    var top = 0, lo = Infinity, hi = -Infinity;
    this.rows.forEach(function (row) {
      row.top = top;
      row.height = row.levels * 16 + 6;
      top += row.height;
      self.labels.appendChild(el('div', {'class': row.device ? 'label gpu' : 'label', style: 'height:' + row.height + 'px', title: row.label, text: row.label}));
      for (var i = 0; i < row.start.length; i++) {
        if (row.start[i] < lo) lo = row.start[i];
        if (row.start[i] + row.dur[i] > hi) hi = row.start[i] + row.dur[i];
      }
    });
    this.height = top;
    this.lo = lo;
    this.hi = Math.max(hi, lo + 1);
    r.timeline.steps.forEach(function (step) {
      self.steps.appendChild(el('button', {type: 'button', 'class': 'step', text: step[0] >= 0 ? '#' + step[0] : 'step',
                                           title: 'zoom to step ' + step[0] + ' (' + duration(step[2] - step[1]) + ')',
                                           onclick: function () { self.show(step[1], step[2]); }}));
    });
    this.index = null;
    this.reset();
  };
  Timeline.prototype.reset = function () {
    var margin = (this.hi - this.lo) * 0.01;
    this.show(this.lo - margin, this.hi + margin);
  };
  Timeline.prototype.show = function (from, to) {
    var span = Math.max(to - from, 1000);
    this.t0 = from;
    this.t1 = from + span;
    this.draw();
  };
  Timeline.prototype.zoom = function (factor, at) {
    var span = this.t1 - this.t0, pivot = this.t0 + span * at, next = Math.max(span * factor, 1000);
    this.show(pivot - next * at, pivot - next * at + next);
  };
  Timeline.prototype.pan = function (fraction) {
    var shift = (this.t1 - this.t0) * fraction;
    this.show(this.t0 + shift, this.t1 + shift);
  };
  Timeline.prototype.width = function () { return Math.max(this.scroller.clientWidth - this.labels.offsetWidth - 2, 200); };
  Timeline.prototype.bind = function () {
    var self = this, canvas = this.canvas, drag = null;
    canvas.addEventListener('mousedown', function (e) { drag = {x: e.clientX, t0: self.t0, t1: self.t1, moved: false}; });
    window.addEventListener('mousemove', function (e) {
      if (!drag) return;
      var dx = e.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      var shift = -dx * (drag.t1 - drag.t0) / self.width();
      self.show(drag.t0 + shift, drag.t1 + shift);
    });
    window.addEventListener('mouseup', function (e) {
      if (drag && !drag.moved && e.target === canvas) {
        var box = canvas.getBoundingClientRect();
        self.pick(e.clientX - box.left, e.clientY - box.top);
      }
      drag = null;
    });
    canvas.addEventListener('wheel', function (e) {
      if (!e.ctrlKey && !e.metaKey) return;
      e.preventDefault();
      var box = canvas.getBoundingClientRect();
      self.zoom(e.deltaY > 0 ? 1.25 : 0.8, (e.clientX - box.left) / self.width());
    }, {passive: false});
    canvas.addEventListener('keydown', function (e) {
      var key = e.key.toLowerCase();
      if (key === 'w') self.zoom(1 / 1.25, 0.5);
      else if (key === 's') self.zoom(1.25, 0.5);
      else if (key === 'a') self.pan(-0.1);
      else if (key === 'd') self.pan(0.1);
      else if (key === '0') self.reset();
      else return;
      e.preventDefault();
    });
    window.addEventListener('resize', function () { if (self.section.classList.contains('active')) self.draw(); });
  };
  Timeline.prototype.color = function (row, i) {
    var kind = row.kind[i], name = this.r.texts[row.name[i]];
    switch (kKinds[kind]) {
      case 'step': return '#c9d6ea';
      case 'runtime': return '#b7c9a8';
      case 'copy': return '#f2a65a';
      case 'fill': return '#e8c547';
      case 'annotation': return '#d9d2e9';
      case 'python': return 'hsl(' + (90 + hue(name) % 60) + ',40%,78%)';
      case 'kernel': return 'hsl(' + hue(name) + ',55%,62%)';
      default: return 'hsl(' + hue(name) + ',50%,74%)';
    }
  };
  Timeline.prototype.draw = function () {
    var canvas = this.canvas, axis = this.axis, ratio = window.devicePixelRatio || 1;
    var width = this.width(), height = Math.max(this.height || 0, 40);
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    axis.style.width = width + 'px';
    axis.width = Math.round(width * ratio);
    axis.height = Math.round(22 * ratio);
    var ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    var t0 = this.t0, scale = width / (this.t1 - this.t0), self = this;
    var texts = this.r ? this.r.texts : [], matched = this.matchSet;
    (this.rows || []).forEach(function (row, r) {
      ctx.fillStyle = r % 2 ? '#fafafc' : '#ffffff';
      ctx.fillRect(0, row.top, width, row.height);
      var lastX = new Float64Array(row.levels).fill(-1);
      for (var i = 0; i < row.start.length; i++) {
        var x0 = (row.start[i] - t0) * scale, x1 = x0 + row.dur[i] * scale;
        if (x1 < 0 || x0 > width) continue;
        var level = row.depth[i], y = row.top + 3 + level * 16;
        if (x1 - x0 < 1) {
          var px = Math.floor(x0);
          if (px === lastX[level]) continue;
          lastX[level] = px;
          ctx.fillStyle = self.color(row, i);
          ctx.fillRect(px, y, 1, 15);
          continue;
        }
        var left = Math.max(x0, 0), right = Math.min(x1, width);
        ctx.fillStyle = self.color(row, i);
        ctx.fillRect(left, y, Math.max(right - left - 0.5, 0.5), 15);
        if (matched && matched[r] && matched[r].has(i)) {
          ctx.strokeStyle = '#d64541';
          ctx.lineWidth = 2;
          ctx.strokeRect(left + 1, y + 1, Math.max(right - left - 2, 1), 13);
        }
        if (right - left > 24) {
          var name = texts[row.name[i]], fit = Math.floor((right - left - 6) / 6.2);
          ctx.fillStyle = '#1d1d1f';
          ctx.fillText(name.length <= fit ? name : name.slice(0, Math.max(fit - 2, 1)) + '..', left + 3, y + 8);
        }
      }
    });
    if (this.selected) {
      var sel = this.selected, row = this.rows[sel.row];
      var sx0 = (row.start[sel.index] - t0) * scale, sx1 = sx0 + Math.max(row.dur[sel.index] * scale, 2);
      var sy = row.top + 3 + row.depth[sel.index] * 16;
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.strokeRect(sx0, sy, sx1 - sx0, 15);
      ctx.strokeStyle = 'rgba(214,69,65,0.85)';
      ctx.lineWidth = 1.5;
      (this.links || []).slice(0, 200).forEach(function (link) {
        var lr = self.rows[link.row], lx = (lr.start[link.index] - t0) * scale, ly = lr.top + 3 + lr.depth[link.index] * 16 + 8;
        ctx.beginPath();
        ctx.moveTo(sx0, sy + 8);
        ctx.lineTo(lx, ly);
        ctx.stroke();
        ctx.beginPath();
        ctx.arc(lx, ly, 3, 0, 2 * Math.PI);
        ctx.stroke();
      });
    }
    var actx = axis.getContext('2d');
    actx.setTransform(ratio, 0, 0, ratio, 0, 0);
    actx.clearRect(0, 0, width, 22);
    actx.font = '11px system-ui, sans-serif';
    actx.fillStyle = '#333';
    actx.strokeStyle = '#bbb';
    var span = this.t1 - this.t0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    if (span / step > 12) step *= 5; else if (span / step > 6) step *= 2;
    for (var tick = Math.ceil(this.t0 / step) * step; tick <= this.t1; tick += step) {
      var x = (tick - t0) * scale;
      actx.beginPath();
      actx.moveTo(x, 14);
      actx.lineTo(x, 22);
      actx.stroke();
      actx.fillText(duration(tick), x + 2, 10);
    }
  };
  Timeline.prototype.hit = function (x, y) {
    var time = this.t0 + x * (this.t1 - this.t0) / this.width(), slack = 2 * (this.t1 - this.t0) / this.width();
    for (var r = 0; r < this.rows.length; r++) {
      var row = this.rows[r];
      if (y < row.top || y >= row.top + row.height) continue;
      var level = Math.floor((y - row.top - 3) / 16), best = null;
      for (var i = 0; i < row.start.length; i++) {
        if (row.depth[i] !== level) continue;
        if (row.start[i] - slack <= time && time <= row.start[i] + row.dur[i] + slack)
          if (best === null || row.dur[i] < row.dur[best]) best = i;
      }
      return best === null ? null : {row: r, index: best};
    }
    return null;
  };
)js",
R"js(  Timeline.prototype.pick = function (x, y) {
    var found = this.hit(x, y);
    if (found) this.select(found, false);
  };
  Timeline.prototype.buildIndex = function () {
    var index = {ext: new Map(), corr: new Map(), seq: new Map()};
    function add(map, key, entry) { var list = map.get(key); if (!list) map.set(key, list = []); list.push(entry); }
    this.rows.forEach(function (row, r) {
      for (var i = 0; i < row.start.length; i++) {
        if (row.ext && row.ext[i]) add(index.ext, row.ext[i], {row: r, index: i});
        if (row.corr && row.corr[i]) add(index.corr, row.corr[i], {row: r, index: i});
        if (row.seq && row.seq[i] >= 0) add(index.seq, row.seq[i], {row: r, index: i});
      }
    });
    this.index = index;
  };
  // The slices a slice links to: an op's GPU work (by External id), a runtime call's work and a
  // GPU slice's launch (by correlation id), a forward op's backward and back (by sequence number).
  Timeline.prototype.linked = function (at) {
    if (!this.index) this.buildIndex();
    var row = this.rows[at.row], i = at.index, out = [], rows = this.rows, kind = kKinds[row.kind[i]];
    function push(list, label, keep) {
      (list || []).forEach(function (entry) {
        if ((entry.row !== at.row || entry.index !== i) && keep(rows[entry.row], entry.index)) out.push({row: entry.row, index: entry.index, label: label});
      });
    }
    if (row.device) {
      if (row.corr && row.corr[i]) push(this.index.corr.get(row.corr[i]), 'launched by', function (other) { return !other.device; });
      // The innermost op around each launching call.
      out.slice().forEach(function (launch) {
        var callRow = rows[launch.row], j = launch.index, at = callRow.start[j];
        for (var k = j - 1, steps = 0; k >= 0 && steps < 20000; k--, steps++) {
          if (callRow.depth[k] < callRow.depth[j] && callRow.start[k] + callRow.dur[k] >= at && kKinds[callRow.kind[k]] === 'op') {
            out.push({row: launch.row, index: k, label: 'launched inside op'});
            break;
          }
        }
      });
      if (row.ext && row.ext[i]) push(this.index.ext.get(row.ext[i]), 'launched inside', function (other, j) { return !other.device && kKinds[other.kind[j]] !== 'runtime'; });
    } else if (kind === 'runtime') {
      if (row.corr && row.corr[i]) push(this.index.corr.get(row.corr[i]), 'launched', function (other) { return other.device; });
    } else {
      if (row.ext && row.ext[i]) push(this.index.ext.get(row.ext[i]), 'launched', function (other) { return other.device; });
      // The work launched by the runtime calls inside it, at any depth.
      var end = row.start[i] + row.dur[i], seen = new Set(out.map(function (link) { return link.row + ':' + link.index; }));
      for (var j = i + 1; j < row.start.length && row.start[j] < end && out.length < 2000; j++) {
        if (kKinds[row.kind[j]] !== 'runtime' || !row.corr || !row.corr[j]) continue;
        (this.index.corr.get(row.corr[j]) || []).forEach(function (entry) {
          var key = entry.row + ':' + entry.index;
          if (!rows[entry.row].device || seen.has(key)) return;
          seen.add(key);
          out.push({row: entry.row, index: entry.index, label: 'launched inside it'});
        });
      }
      if (row.seq && row.seq[i] >= 0) {
        var backward = row.back && row.back[i];
        push(this.index.seq.get(row.seq[i]), backward ? 'its forward' : 'its backward', function (other, j) {
          return !other.device && !!(other.back && other.back[j]) !== !!backward && kKinds[other.kind[j]] === 'op';
        });
      }
    }
    return out;
  };
  Timeline.prototype.select = function (at, center) {
    this.selected = at;
    this.links = this.linked(at);
    var row = this.rows[at.row], i = at.index, self = this, texts = this.r.texts;
    if (center) {
      var span = Math.max(row.dur[i] * 3, 2000);
      this.show(row.start[i] + row.dur[i] / 2 - span / 2, row.start[i] + row.dur[i] / 2 + span / 2);
      var y = row.top + row.depth[i] * 16;
      if (y < this.scroller.scrollTop || y > this.scroller.scrollTop + this.scroller.clientHeight - 20) this.scroller.scrollTop = Math.max(y - 40, 0);
    } else {
      this.draw();
    }
    var detail = this.detail;
    detail.textContent = '';
    detail.appendChild(el('h3', {text: texts[row.name[i]]}));
    var facts = [['Kind', kKinds[row.kind[i]] + (row.back && row.back[i] ? ' (backward)' : '')], ['Row', row.label],
                 ['Start', duration(row.start[i]) + ' from the report\u2019s origin'], ['Duration', duration(row.dur[i])]];
    if (row.ext && row.ext[i]) facts.push(['External id', String(row.ext[i])]);
    if (row.corr && row.corr[i]) facts.push(['Correlation id', String(row.corr[i])]);
    if (row.seq && row.seq[i] >= 0) facts.push(['Sequence number', String(row.seq[i])]);
    if (row.details && row.details[i] >= 0) {
      var details = JSON.parse(texts[row.details[i]]);
      Object.keys(details).forEach(function (key) {
        var value = details[key];
        facts.push([key, typeof value === 'string' ? value : JSON.stringify(value)]);
      });
    }
    detail.appendChild(el('table', {'class': 'facts'}, facts.map(function (fact) {
      return el('tr', null, [el('th', {'class': 'label', text: fact[0]}), el('td', {'class': 'label', text: fact[1]})]);
    })));
    if (this.links.length) {
      detail.appendChild(el('h4', {text: 'Linked slices (' + this.links.length + ')'}));
      if (this.links.length > 200) detail.appendChild(el('p', {'class': 'muted', text: 'The first 200 of them:'}));
      detail.appendChild(el('ul', {'class': 'links'}, this.links.slice(0, 200).map(function (link) {
        var lr = self.rows[link.row];
        return el('li', null, [document.createTextNode(link.label + ': '), el('a', {href: '#trace', 'class': 'link', text: texts[lr.name[link.index]],
          onclick: function (e) { e.preventDefault(); self.select({row: link.row, index: link.index}, true); }}),
          document.createTextNode(' (' + duration(lr.dur[link.index]) + ', ' + lr.label + ')')]);
      })));
    } else {
      detail.appendChild(el('p', {'class': 'muted', text: 'No flows: it launched no GPU work and has no forward or backward partner in this trace.'}));
    }
  };
  Timeline.prototype.find = function (text) {
    this.matches = [];
    this.matchSet = null;
    this.current = -1;
    var needle = text.trim().toLowerCase();
    if (needle) {
      var texts = this.r.texts, hits = texts.map(function (t) { return t.toLowerCase().indexOf(needle) >= 0; });
      var set = [], matches = this.matches;
      this.rows.forEach(function (row, r) {
        set.push(new Set());
        for (var i = 0; i < row.name.length; i++) if (hits[row.name[i]]) { matches.push({row: r, index: i}); set[r].add(i); }
      });
      var rows = this.rows;
      matches.sort(function (a, b) { return rows[a.row].start[a.index] - rows[b.row].start[b.index]; });
      this.matchSet = set;
    }
    this.matchesText.textContent = needle ? this.matches.length + ' matches' : '';
    this.draw();
  };
  Timeline.prototype.next = function (direction) {
    if (this.search.value && !this.matches.length && this.matchSet === null) this.find(this.search.value);
    if (!this.matches.length) return;
    this.current = (this.current + direction + this.matches.length) % this.matches.length;
    this.matchesText.textContent = (this.current + 1) + ' of ' + this.matches.length + ' matches';
    this.select(this.matches[this.current], true);
  };

  function buildTrace(section) {
    timeline = new Timeline(section);
  }

  var builders = {operator: buildOperator, kernel: buildKernel, module: buildModule, trace: buildTrace};
  function showView(event) {
    var id = (location.hash || '#overview').slice(1);
    if (!document.getElementById(id) || !document.getElementById(id).classList.contains('view')) id = 'overview';
    views.forEach(function (view) { view.classList.toggle('active', view.id === id); });
    document.querySelectorAll('nav.tabs a').forEach(function (tab) { tab.classList.toggle('active', tab.getAttribute('href') === '#' + id); });
    var view = document.getElementById(id);
    if (event) window.scrollTo(0, 0);
    if (builders[id] && !built[id]) { built[id] = true; builders[id](view); }
    if (id === 'trace' && timeline) {
      timeline.draw();
      if (pendingSearch) { timeline.search.value = pendingSearch; timeline.find(pendingSearch); timeline.next(1); pendingSearch = null; }
    }
    if (id === 'operator' && pendingFilter) {
      var box = view.querySelector('input.filter');
      box.value = pendingFilter;
      box.dispatchEvent(new Event('input'));
      pendingFilter = null;
    }
  }
  document.body.classList.add('tabbed');
  window.addEventListener('hashchange', showView);
  showView();
})();

)js"};

/// A cell of the views' data that is an index into the rank's texts (-1 for an empty text).
struct TextCell {
  std::string_view text;
};

/// The interactive views' data, JSON (see the top of this file).
class ViewsData {
 public:
  ViewsData(fmt::memory_buffer& out, const Report& report) : json_(out), origin_ns_(report.origin_ns) {}

  void write(const Report& report) {
    json_.raw("{\"version\": 1, \"origin_ns\": ");
    json_.integer(origin_ns_);
    json_.raw(", \"ranks\": [");
    for (std::size_t i = 0; i < report.ranks.size(); ++i) {
      if (i != 0) json_.raw(",\n");
      rank(report.ranks[i]);
    }
    json_.raw("]}");
  }

 private:
  /// The rank's views; its texts come first in the JSON, so the rest is written aside.
  void rank(const RankReport& rank) {
    json_.raw("{\"rank\": ");
    json_.integer(rank.rank);
    if (!rank.views) {
      json_.raw(", \"texts\": []}");
      return;
    }
    const RankViews& views = *rank.views;
    std::vector<std::string> texts;
    TextIndex index(texts);
    for (const std::string& text : views.timeline.texts) index.index(text);  // the timeline's indexes stay
    fmt::memory_buffer body;
    Rows rows(body, index);
    JsonWriter& json = rows.json;

    json.raw(", \"ops\": {\"memory\": ");
    json.raw(rank.memory_activity ? "true" : "false");
    json.raw(", \"device_memory\": ");
    json.string(rank.device_memory_name);
    json.raw(", \"rows\": [");
    for (const OpRow& op : views.ops)
      rows.row(TextCell{op.name}, TextCell{op.input_dims}, TextCell{op.call_site}, to_string(op.category), op.calls, op.self_ns,
               op.total_ns, op.gpu_ns, op.gpu_total_ns, op.flops, op.memory.cpu_bytes, op.memory.self_cpu_bytes,
               op.memory.device_bytes, op.memory.self_device_bytes);
    json.raw("]},\n\"op_kernels\": [");
    rows.restart();
    for (const OpKernel& launched : views.op_kernels)
      rows.row(TextCell{launched.op}, TextCell{launched.input_dims}, TextCell{launched.kernel}, launched.calls, launched.ns);
    json.raw("],\n\"kernels\": {\"units\": ");
    json.string(analysis::to_string(rank.steps.matrix_units));
    json.raw(", \"rows\": [");
    rows.restart();
    for (std::size_t i = 0; i < views.kernels.rows.size(); ++i) {
      const analysis::KernelTableRow& row = views.kernels.rows[i];
      rows.row(TextCell{row.kernel}, TextCell{row.op}, TextCell{row.layer}, TextCell{row.line}, analysis::to_string(row.direction),
               TextCell{row.input_dims}, precision_cell(row, rank.steps.matrix_units),
               fmt::format("{}x{}x{}", row.grid[0], row.grid[1], row.grid[2]),
               fmt::format("{}x{}x{}", row.block[0], row.block[1], row.block[2]), views.kernel_occupancy[i], row.calls, row.kernel_ns,
               row.flops ? std::optional<double>(static_cast<double>(*row.flops)) : std::nullopt,
               row.flops ? std::optional<double>(row.tflops()) : std::nullopt, analysis::to_string(row.bound),
               row.efficiency ? std::optional<double>(100.0 * *row.efficiency) : std::nullopt, row.time_lost_ns);
    }
    json.raw("]},\n\"modules\": [");
    rows.restart();
    for (const analysis::ModuleNode& node : views.modules.nodes)
      rows.row(TextCell{node.name}, node.parent == analysis::ModuleNode::kRoot ? std::int64_t{-1} : static_cast<std::int64_t>(node.parent),
               node.calls, node.host_ns, node.self_host_ns(), node.device_ns);
    json.raw("],\n\"timeline\": ");
    timeline(json, views.timeline);

    json_.raw(", \"texts\": [");
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (i != 0) json_.character(',');
      json_.string(texts[i]);
    }
    json_.raw("]");
    json_.raw(std::string_view(body.data(), body.size()));
    json_.character('}');
  }

  /// Rows of cells as JSON arrays, one a line: texts by their index, strings, integers and
  /// numbers (none: null).
  struct Rows {
    Rows(fmt::memory_buffer& out, TextIndex& texts) : json(out), texts_(texts) {}

    void restart() { first_ = true; }
    template <class... Cells>
    void row(const Cells&... cells) {
      json.raw(first_ ? "\n[" : ",\n[");
      first_ = false;
      bool comma = false;
      ((comma ? json.character(',') : void(), cell(cells), comma = true), ...);
      json.character(']');
    }

    JsonWriter json;

   private:
    void cell(const TextCell& value) { json.integer(value.text.empty() ? -1 : static_cast<std::int64_t>(texts_.index(value.text))); }
    void cell(std::string_view value) { json.string(value); }
    void cell(const std::string& value) { json.string(value); }
    void cell(const std::optional<double>& value) {
      if (value) json.number(*value);
      else json.raw("null");
    }
    template <class Integer, class = std::enable_if_t<std::is_integral_v<Integer>>>
    void cell(Integer value) {
      json.integer(static_cast<std::int64_t>(value));
    }

    TextIndex& texts_;
    bool first_ = true;
  };

  void timeline(JsonWriter& json, const Timeline& timeline) {
    json.raw("{\"left_out\": ");
    json.string(timeline.left_out);
    json.raw(", \"steps\": [");
    for (std::size_t i = 0; i < timeline.steps.size(); ++i) {
      const TimelineStep& step = timeline.steps[i];
      json.raw(i == 0 ? "[" : ",[");
      json.integer(step.number);
      json.character(',');
      json.integer(step.start_ns - origin_ns_);
      json.character(',');
      json.integer(step.end_ns - origin_ns_);
      json.character(']');
    }
    json.raw("], \"rows\": [");
    for (std::size_t r = 0; r < timeline.rows.size(); ++r) {
      const TimelineRow& row = timeline.rows[r];
      json.raw(r == 0 ? "\n{\"label\": " : ",\n{\"label\": ");
      json.string(row.label);
      json.raw(row.device ? ", \"device\": true" : ", \"device\": false");
      const auto column = [&](std::string_view key, auto value_of, std::int64_t absent) {
        if (absent != INT64_MIN &&
            std::none_of(row.slices.begin(), row.slices.end(),
                         [&](const TimelineSlice& slice) { return static_cast<std::int64_t>(value_of(slice)) != absent; }))
          return;
        json.raw(", \"");
        json.raw(key);
        json.raw("\": [");
        for (std::size_t i = 0; i < row.slices.size(); ++i) {
          if (i != 0) json.character(',');
          json.integer(static_cast<std::int64_t>(value_of(row.slices[i])));
        }
        json.character(']');
      };
      std::int64_t previous = origin_ns_;
      column("s", [&](const TimelineSlice& slice) { const std::int64_t delta = slice.start_ns - previous; previous = slice.start_ns; return delta; },
             INT64_MIN);
      column("d", [](const TimelineSlice& slice) { return slice.end_ns - slice.start_ns; }, INT64_MIN);
      column("n", [](const TimelineSlice& slice) { return slice.name; }, INT64_MIN);
      column("z", [](const TimelineSlice& slice) { return slice.depth; }, INT64_MIN);
      column("k", [](const TimelineSlice& slice) { return static_cast<int>(slice.kind); }, INT64_MIN);
      column("a", [](const TimelineSlice& slice) {
        return slice.details == TimelineSlice::kNoDetails ? std::int64_t{-1} : static_cast<std::int64_t>(slice.details);
      }, -1);
      column("x", [](const TimelineSlice& slice) { return static_cast<std::int64_t>(slice.external_id); }, 0);
      column("c", [](const TimelineSlice& slice) { return slice.correlation; }, 0);
      column("q", [](const TimelineSlice& slice) { return slice.sequence; }, -1);
      column("b", [](const TimelineSlice& slice) { return slice.backward ? 1 : 0; }, 0);
      json.character('}');
    }
    json.raw("]}");
  }

  JsonWriter json_;
  std::int64_t origin_ns_;
};

/// The views' data as the text of a <script type="application/json"> element: the JSON with
/// every `<` written \u003c (it only appears inside strings), so that no name ends the element,
/// and DEL and the C1 controls, which JSON lets through but HTML forbids in a page, escaped too.
inline void write_views_data(fmt::memory_buffer& out, const Report& report) {
  fmt::memory_buffer json;
  ViewsData(json, report).write(report);
  const std::string_view text(json.data(), json.size());
  const auto escape = [&out](unsigned code) { fmt::format_to(std::back_inserter(out), "\\u{:04x}", code); };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '<' || byte == 0x7F) {
      escape(byte);
    } else if (byte == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      escape(static_cast<unsigned char>(text[++i]));
    } else {
      out.push_back(text[i]);
    }
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
