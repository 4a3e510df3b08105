// The way back from the inspector, shown once a token was clicked: to its round (outlined a moment), else the lanes.
element.addEventListener('click', (event) => {
  if (!event.target.closest('.back-to-token')) { return; }
  const round = window.specvizClickedRound;
  const target = round && round.isConnected ? round : document.getElementById('lane-speculative');
  target?.scrollIntoView({block: 'center'});
  if (target === round) {
    round.style.outline = '2px solid #f97316';
    setTimeout(() => { round.style.outline = ''; }, 1500);
  }
});
