() => {
  // The page's script (launch js). Narrower than the width a chart is laid out at (LAID_OUT_PX, a phone), each chart
  // is scaled to its box, whole: scrolling in its box, a chart showed rounds 1–4 of 6 and the theory explorer lost
  // its c–α panel. And a click on a node of the inspector's tree picks that node's row.
  const LAID_OUT_PX = PHONE_CHART_PX;
  const fit = () => document.querySelectorAll('[id^=chart-] .js-plotly-plot').forEach((plot) => {
    const box = plot.closest('[id^=chart-]'), style = getComputedStyle(box);
    const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const zoom = room > 0 && room < LAID_OUT_PX ? String(Math.floor(1000 * room / LAID_OUT_PX) / 1000) : '';
    if (plot.style.zoom !== zoom) plot.style.zoom = zoom;
  });
  // A click on a node of the inspector's tree picks that node's row: highlighted, scrolled to,
  // and its line (why kept, rejected or never examined) written above the table.
  const pick = (index) => {
    const rows = document.querySelectorAll('#inspector tr.tree-row');
    rows.forEach((row) => row.classList.toggle('tree-row-picked', row.dataset.node === String(index)));
    const row = document.querySelector(`#inspector tr.tree-row[data-node="${index}"]`);
    const said = document.querySelector('#inspector .tree-picked');
    if (!row || !said) return;
    const cells = row.querySelectorAll('td');
    said.textContent = `${cells[1].innerText.trim()} (node ${cells[0].innerText.trim()}): ${cells[cells.length - 1].innerText.trim()}`;
    row.scrollIntoView({ block: 'nearest' });
  };
  const listen = () => document.querySelectorAll('#chart-inspector .js-plotly-plot').forEach((plot) => {
    if (plot.dataset.treeClicks || typeof plot.on !== 'function') return;
    plot.dataset.treeClicks = '1';
    plot.on('plotly_click', (event) => {
      const point = (event.points || [])[0];
      if (point && point.customdata !== undefined && point.customdata !== null) pick(point.customdata);
    });
  });
  new MutationObserver(() => { fit(); listen(); }).observe(document.body, { childList: true, subtree: true });
  window.addEventListener('resize', fit);
  fit();
  listen();
}
