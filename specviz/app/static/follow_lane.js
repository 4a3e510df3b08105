// The page's lane boxes (gr.HTML js_on_load): after each redraw, show the newest tokens, unless the visitor scrolled
// the box up to read: then the box keeps their place (each redraw replaces the box, at its top, so the place is put
// back) until they scroll down to its end again or a new run starts. The text box scrolls, not the page component, so
// the lane's head never sits over its tokens. When a new run starts and the lanes are below the window (Run sits at
// the top of the page, the lanes under the settings), the page brings them into view once; a refused run draws no
// lanes, so its message under Run stays in view.
const AT_END_PX = 8;  // this close to its end, a box counts as following
const runOf = () => element.querySelector('.lane[data-run]')?.dataset.run;
let shownRun = runOf();
let readingAt = {};  // lane → where the visitor scrolled its box to, while it is above the newest tokens
const laneOf = (box) => box.closest('.lane')?.dataset.lane;
const atEnd = (box) => box.scrollTop + box.clientHeight >= box.scrollHeight - AT_END_PX;
// scroll does not bubble: caught on its way down. The page's own scrolls land at the end or at a kept place.
element.addEventListener('scroll', (event) => {
  const box = event.target;
  if (!(box instanceof Element) || !box.classList.contains('lane-text')) return;
  if (atEnd(box)) delete readingAt[laneOf(box)];
  else readingAt[laneOf(box)] = box.scrollTop;
}, true);
const follow = () => {
  const run = runOf();
  const newRun = run !== undefined && run !== shownRun;
  if (newRun) readingAt = {};
  element.querySelectorAll('.lane-text').forEach((box) => {
    const place = readingAt[laneOf(box)];
    box.scrollTop = place === undefined ? box.scrollHeight : place;
  });
  if (!newRun) return;
  shownRun = run;
  const lanes = document.getElementById('lane-baseline');
  if (lanes && lanes.getBoundingClientRect().top > window.innerHeight - 160)
    document.getElementById('legend')?.scrollIntoView({block: 'start', behavior: 'smooth'});
};
watch('value', follow);
follow();
