// The page's lane boxes (gr.HTML js_on_load): after each redraw, show the newest tokens. The text box scrolls,
// not the page component, so the lane's head never sits over its tokens. When a new run starts and the lanes are
// below the window (Run sits at the top of the page, the lanes under the settings), the page brings them into view
// once; a refused run draws no lanes, so its message under Run stays in view.
const runOf = () => element.querySelector('.lane[data-run]')?.dataset.run;
let shownRun = runOf();
const follow = () => {
  element.querySelectorAll('.lane-text').forEach((box) => { box.scrollTop = box.scrollHeight; });
  const run = runOf();
  if (run === undefined || run === shownRun) return;
  shownRun = run;
  const lanes = document.getElementById('lane-baseline');
  if (lanes && lanes.getBoundingClientRect().top > window.innerHeight - 160)
    document.getElementById('legend')?.scrollIntoView({block: 'start', behavior: 'smooth'});
};
watch('value', follow);
follow();
