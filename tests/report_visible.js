// Injected by tests/test_report.py into a copy of a report page: once the page's own script
// has drawn everything (window.__reportRendered), record for every plotly chart and trace
// how many points it has, whether a marker or a line can show them and whether they lie in
// the axes' ranges, in body[data-visible] (read back from chromium --dump-dom).
document.addEventListener('DOMContentLoaded', function () {
  function num(v) { return typeof v === 'number' && isFinite(v); }
  function inAxis(ax, v) {
    if (!ax || !ax.range || (ax.type !== 'linear' && ax.type !== 'log')) { return true; }
    var u = ax.type === 'log' ? (v > 0 ? Math.log10(v) : NaN) : v;
    var lo = Math.min(ax.range[0], ax.range[1]), hi = Math.max(ax.range[0], ax.range[1]);
    return u >= lo && u <= hi;
  }
  function check() {
    var figs = [];
    document.querySelectorAll('.js-plotly-plot').forEach(function (gd) {
      var lay = gd._fullLayout, traces = [];
      (gd._fullData || []).forEach(function (t) {
        var n = 0, inside = 0, marker = false, line = false;
        if (t.type === 'heatmap') {
          (t.z || []).forEach(function (row) { row.forEach(function (v) { if (num(v)) { n++; } }); });
          inside = n; marker = n > 0;
        } else {
          var xa = lay['xaxis' + (t.xaxis || 'x').slice(1)], ya = lay['yaxis' + (t.yaxis || 'y').slice(1)];
          var xs = t.x || [], ys = t.y || [];
          for (var i = 0; i < ys.length; i++) {
            var x = xs[i], y = ys[i];
            if (x === null || x === undefined || !num(y) && typeof y !== 'string') { continue; }
            n++;
            if ((typeof x === 'string' || inAxis(xa, x)) && (typeof y === 'string' || inAxis(ya, y))) { inside++; }
          }
          var mode = t.mode || '', m = t.marker || {}, l = t.line || {};
          var size = Array.isArray(m.size) ? Math.max.apply(null, m.size) : m.size;
          marker = mode.indexOf('markers') >= 0 && size > 0 && (m.opacity === undefined || m.opacity > 0);
          line = mode.indexOf('lines') >= 0 && n >= 2 && l.width > 0;
          if (t.type === 'bar') { marker = n > 0; }
        }
        traces.push({name: t.name, visible: t.visible, n: n, inside: inside, marker: marker, line: line});
      });
      figs.push({id: gd.id, traces: traces,
                 points: gd.querySelectorAll('.scatterlayer .point').length,
                 lines: gd.querySelectorAll('.scatterlayer .js-line').length,
                 heatmaps: gd.querySelectorAll('.heatmaplayer image, .hm').length});
    });
    document.body.setAttribute('data-visible', JSON.stringify(figs));
  }
  (window.__reportRendered || Promise.resolve()).then(check, check);
});
