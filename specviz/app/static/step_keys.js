// Step mode's Next on the N key (not while typing), named on the button.
if (!window.specvizStepKeys) {
  window.specvizStepKeys = true;
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'n' && event.key !== 'N') return;
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (event.target.closest('input, textarea, select, [contenteditable="true"]')) return;
    const next = document.querySelector('#step-next');
    if (next && !next.disabled && next.offsetParent !== null) { event.preventDefault(); next.click(); }
  });
}
const next = document.querySelector('#step-next');
if (next) { next.setAttribute('aria-keyshortcuts', 'N'); next.title = 'Next round (N)'; }
