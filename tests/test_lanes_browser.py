"""In a real browser: the speculative lane reads as text (rival guesses, the unsure stop's ‖ and a tree's
branch count shown only on demand, by the switch above the lanes), and a lane's first words stay in reach (a box
follows its newest tokens only while the visitor has not scrolled it up; on a phone a finished lane shows whole).

The `browser`, `page` and `app_url` fixtures are conftest.py's; the helpers test_app_browser.py's."""

from __future__ import annotations

import time

from tests.test_app_browser import (
    LONG_PROMPT, RUN_TIMEOUT_MS, choose, click_run, phone_page, run_and_wait, set_number,
)

MARKS = ".rivals, .unsure-stop, .tree-mark"  # what render.tokens.ON_DEMAND marks in a lane
SHOWN = "els => els.filter(e => e.getClientRects().length > 0).length"  # how many of them are drawn at all
OPEN_ROUND_MS = 30_000


def open_round(page, lane, nth: int) -> None:
    """Click the first token of the lane's round `nth` (0: its first; the next one if the inspector shows that round
    already); wait until the inspector shows that round."""
    round_element = lane.locator(".round").nth(nth)
    if f"Round {round_element.get_attribute('data-round')}:" in page.locator("#inspector").inner_text():
        round_element = lane.locator(".round").nth(nth + 1)
    number = round_element.get_attribute("data-round")
    round_element.locator(".tok").first.click()
    page.wait_for_function("n => document.querySelector('#inspector').innerText.includes('Round ' + n + ':')",
                           arg=number, timeout=OPEN_ROUND_MS)


def test_the_speculative_lane_reads_as_text_and_shows_rival_guesses_and_stop_marks_on_demand(page):
    """The page's own question (greedy, rival guesses on, the confidence stop): the lane read "is Scotland London
    Dublin‖ Edinburgh". By default only the kept tokens and the struck rejected drafts are drawn; the switch draws
    the rivals and the ‖ marks with no new run, and a click on a token opens its round either way."""
    run_id = run_and_wait(page)
    lane = page.locator(f'#lane-speculative .lane[data-run="{run_id}"]')
    marks = lane.locator(MARKS)
    num_marks = marks.count()
    assert lane.locator(".rivals").count() > 0 and lane.locator(".unsure-stop").count() > 0  # this run has both
    assert marks.evaluate_all(SHOWN) == 0
    text = lane.locator(".lane-text").inner_text()
    assert "‖" not in text, text
    assert lane.locator(".tok-rejected").evaluate_all(SHOWN) > 0  # the rejected drafts stay, struck
    assert lane.locator(".tok-rejected").first.evaluate("e => getComputedStyle(e).textDecorationLine") == "line-through"
    open_round(page, lane, 0)  # the inspector answers a click with the marks hidden

    switch = page.locator("#lane-marks input[type=checkbox]")
    assert not switch.is_checked()
    switch.check()
    page.wait_for_function(f"() => [...document.querySelectorAll('#lane-speculative :is({MARKS})')]"
                           ".every(e => e.getClientRects().length > 0)")
    assert marks.count() == num_marks and marks.evaluate_all(SHOWN) == num_marks  # drawn in place, no new run
    assert lane.get_attribute("data-run") == run_id and "‖" in lane.locator(".lane-text").inner_text()
    open_round(page, lane, 1)
    switch.uncheck()
    page.wait_for_function(f"() => [...document.querySelectorAll('#lane-speculative :is({MARKS})')]"
                           ".every(e => e.getClientRects().length === 0)")


def box_place(page) -> dict:
    """Where the speculative lane's text box is scrolled, and whether its first line is inside it."""
    return page.locator("#lane-speculative .lane-text").evaluate(
        "e => { const box = e.getBoundingClientRect(), first = e.querySelector('.prompt').getBoundingClientRect();"
        " return {top: e.scrollTop, scrolls: e.scrollHeight > e.clientHeight + 1,"
        " atEnd: e.scrollTop + e.clientHeight >= e.scrollHeight - 2,"
        " firstShown: first.top >= box.top - 1 && first.top < box.bottom}; }")


def num_tokens(page) -> int:
    return int(page.locator("#lane-speculative .lane").get_attribute("data-tokens") or 0)


def wait_for_more_tokens(page, than: int) -> None:
    page.wait_for_function("n => Number(document.querySelector('#lane-speculative .lane')?.dataset.tokens) > n",
                           arg=than, timeout=30_000)


def test_a_lane_keeps_the_place_its_visitor_scrolled_to_and_a_phone_shows_a_finished_lane_whole(browser, app_url):
    """At 400 px, at one round a second, a prompt taller than the lane's box: the box follows the newest tokens; a
    visitor who scrolls it up to the first words keeps them while the run writes on (each redraw snapped the box
    back to its end); scrolled back down, it follows again. Finished, the lane shows its whole text (the box sat at
    its end, the prompt and the answer's first words above it)."""
    with phone_page(browser, app_url) as page:
        choose(page, "pair", "tiny-code")
        page.locator("#prompt textarea").fill(LONG_PROMPT)
        set_number(page, "max-new-tokens", 40)
        page.locator("#pace label", has_text="1 round/s").click()
        run_id = click_run(page)
        page.wait_for_function(  # the speculative lane is writing, its prompt already taller than its box
            "run => { const lane = document.querySelector(`#lane-speculative .lane[data-run='${run}']`);"
            " return lane && lane.dataset.done === 'false' && Number(lane.dataset.tokens) > 0; }",
            arg=run_id, timeout=RUN_TIMEOUT_MS)
        place = box_place(page)
        assert place["scrolls"] and place["atEnd"] and not place["firstShown"], place  # it follows the newest tokens
        for _ in range(3):  # the visitor scrolls up to the first words (a redraw in the same frame may undo a try)
            page.locator("#lane-speculative .lane-text").evaluate("e => { e.scrollTop = 0; }")
            time.sleep(0.3)
            if box_place(page)["top"] == 0:
                break
        before = num_tokens(page)
        wait_for_more_tokens(page, before)
        wait_for_more_tokens(page, num_tokens(page))
        place = box_place(page)
        assert place["top"] == 0 and place["firstShown"], place  # the first words stay in view as the run writes on
        page.locator("#lane-speculative .lane-text").evaluate("e => { e.scrollTop = e.scrollHeight; }")
        time.sleep(0.3)
        wait_for_more_tokens(page, num_tokens(page))
        assert box_place(page)["atEnd"], box_place(page)  # scrolled back down, it follows again
        page.wait_for_selector(f'#status .status-done[data-run="{run_id}"]', timeout=RUN_TIMEOUT_MS)
        place = box_place(page)
        assert not place["scrolls"] and place["firstShown"], place  # finished: the whole lane, its first words first
