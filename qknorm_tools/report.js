// The interactive part of qknorm_tools.report's page (inlined into every page; plotly.js
// from the plotly package is inlined before it). Renders the figure specs embedded as JSON
// and the attention viewer; records script errors in body[data-errors] for the browser test.
window.__reportErrors = [];
window.addEventListener('error', function (e) { window.__reportErrors.push(String(e.message)); });
// resolves once plotly.js has drawn every figure and the attention heatmaps (a test waits on it)
window.__reportRendered = null;
function reportMain() {
  var data = JSON.parse(document.getElementById('qknorm-report-data').textContent);
  var drawn = data.figures.map(function (f) {
    return Plotly.newPlot(document.getElementById('fig-' + f.id), f.spec.data, f.spec.layout,
                          {responsive: true, displaylogo: false});
  });
  if (data.attention) { drawn.push(attentionViewer(data.attention)); }
  return Promise.all(drawn).then(function () {
    document.body.setAttribute('data-rendered', String(data.figures.length));
  });
}
function esc(t) {  // plotly reads pseudo-HTML in labels: a token such as </s> must be escaped
  return String(t).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
function opt(sel, values, labels) {
  sel.innerHTML = '';
  values.forEach(function (v, i) {
    var o = document.createElement('option'); o.value = v; o.textContent = labels ? labels[i] : v;
    sel.appendChild(o);
  });
}
function attentionViewer(att) {
  var models = att.models || [];
  if (!models.length) { return Promise.resolve(); }
  var sSel = document.getElementById('att-sentence'), mSel = document.getElementById('att-module'),
      hSel = document.getElementById('att-head'), vSel = document.getElementById('att-value'),
      aSel = document.getElementById('att-model-a'), bSel = document.getElementById('att-model-b');
  var names = models.map(function (m) { return m.name; });
  opt(aSel, names.map(function (n, i) { return i; }), names);
  opt(bSel, ['-1'].concat(names.map(function (n, i) { return i; })), ['(none)'].concat(names));
  aSel.value = 0; bSel.value = models.length > 1 ? 1 : -1;
  var first = models[0];
  opt(sSel, first.sentences.map(function (s, i) { return i; }),
      first.sentences.map(function (s) { return 'sentence ' + s.index; }));
  var mods = Object.keys(first.sentences[0].modules);
  opt(mSel, mods, mods.map(function (k) {
    return k + ' (' + first.sentences[0].modules[k].kind + ')';
  }));
  opt(vSel, ['probs', 'logits'], ['probabilities', 'logits (pre-softmax)']);
  function heads() {
    var m = first.sentences[+sSel.value].modules[mSel.value];
    var n = m.probs.length, v = [], l = [];
    for (var h = 0; h < n; h++) { v.push(h); l.push('head ' + h); }
    var keep = hSel.value; opt(hSel, v, l); if (keep !== '' && +keep < n) { hSel.value = keep; }
  }
  function draw(div, mi) {
    var el = document.getElementById(div);
    if (mi < 0 || !models[mi]) { Plotly.purge(el); el.innerHTML = ''; return Promise.resolve(); }
    var model = models[mi], s = model.sentences[+sSel.value], m = s.modules[mSel.value];
    if (!m) { el.textContent = model.name + ': no module ' + mSel.value; return Promise.resolve(); }
    var h = +hSel.value, z = m[vSel.value][h], ent = m.entropy[h];
    var isEnc = mSel.value.indexOf('enc') === 0, isCross = mSel.value.indexOf('cross') >= 0;
    var qTok = (isEnc ? s.src_tokens : s.tgt_tokens).map(esc);
    var kTok = (isEnc || isCross ? s.src_tokens : s.tgt_tokens).map(esc);
    var text = z.map(function (row, i) { return row.map(function (v, j) {
      return 'query ' + i + ' ' + qTok[i] + '<br>key ' + j + ' ' + kTok[j] + '<br>' +
             vSel.value + ' ' +
             (v === null ? 'masked' : v.toFixed(4)) + '<br>row entropy ' + ent[i].toFixed(3) + ' nats'; }); });
    var meanEnt = ent.reduce(function (a, b) { return a + b; }, 0) / ent.length;
    var g = m.g === null ? '' : ', g ' + (Array.isArray(m.g) ? m.g[h].toFixed(2) : m.g.toFixed(2));
    return Plotly.react(el, [{type: 'heatmap', z: z, text: text, hoverinfo: 'text', colorscale: 'Blues', reversescale: true,
                       zmin: vSel.value === 'probs' ? 0 : null, zmax: vSel.value === 'probs' ? 1 : null}],
      {title: {text: model.name + ': ' + mSel.value + ' head ' + h + ' (' + m.qk_norm_type + g +
               ', mean entropy ' + meanEnt.toFixed(2) + ')', font: {size: 13}},
       xaxis: {tickmode: 'array', tickvals: kTok.map(function (t, i) { return i; }), ticktext: kTok,
               title: {text: 'key'}},
       yaxis: {tickmode: 'array', tickvals: qTok.map(function (t, i) { return i; }), ticktext: qTok,
               autorange: 'reversed', title: {text: 'query'}},
       margin: {t: 60, l: 90, b: 90}}, {responsive: true, displaylogo: false});
  }
  function all() { return Promise.all([draw('att-a', +aSel.value), draw('att-b', +bSel.value)]); }
  [sSel, mSel].forEach(function (e) { e.addEventListener('change', function () { heads(); all(); }); });
  [hSel, vSel, aSel, bSel].forEach(function (e) { e.addEventListener('change', all); });
  heads(); return all();
}
document.addEventListener('DOMContentLoaded', function () {
  function record(e) { window.__reportErrors.push(String(e && e.stack || e)); }
  try { window.__reportRendered = reportMain().catch(record); } catch (e) {
    record(e); window.__reportRendered = Promise.resolve();
  }
  window.__reportRendered = window.__reportRendered.then(function () {
    document.body.setAttribute('data-errors', JSON.stringify(window.__reportErrors));
  });
});
