// A click on a round of a drafting lane asks the server to open that round in the inspector, and brings the
// inspector into view (it sits below the charts, out of sight on most screens). The lane follows its newest
// tokens as every lane does (follow_lane.js, added after this).
element.addEventListener('click', (event) => {
  const round = event.target.closest('.round');
  if (!round) { return; }
  trigger('click', {round: Number(round.dataset.round)});
  window.specvizClickedRound = round;  // where the inspector's "back" button returns to
  document.querySelector('#back-to-token .back-to-token')?.removeAttribute('hidden');
  document.getElementById('inspector-section')?.scrollIntoView({block: 'start'});
});
