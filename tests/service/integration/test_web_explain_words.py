"""The web page's explanation in a reader's words (issue 39, item 8): how the passage was placed and what
its score is made of in words, the settings' names only on a "Settings:" line of their own (headless
Chromium over the server on the sample corpus, extractor=ner; the page's other checks: test_web_browser.py)."""
from __future__ import annotations

from test_web_browser import QUESTION, api, browser, page, server  # noqa: F401 (fixtures)

from reproduce.web_screenshot import ask, open_explanation

CODE_WORDS = ("second_hop", "head_weight", "dense_weight", "dense_temperature", "dense_agree", "='",
              "one score =", "Placed by score", "Placed by ppr")


def test_the_explanation_says_the_score_in_words_and_the_settings_apart(page, server):  # noqa: F811
    base, _ = server
    ask(page, QUESTION, 3)
    status, want = api(base, "POST", "/retrieve", {"query": QUESTION, "top_k": 3, "explain": True})
    assert status == 200
    ex = want["results"][0]["explanations"][0]
    assert ex["walk"] and ex["walk_detail"]
    box = open_explanation(page, 1)
    summary = box.locator("p.summary").text_content()
    notes = box.locator("p.note").all_text_contents()
    settings = [t for t in box.locator("p.muted.small").all_text_contents() if t.startswith("Settings: ")]
    assert summary.startswith("Placed by its score (the parts below add up to it)")
    assert ex["walk"] in notes and notes[0].startswith("The score adds three parts: ")
    for text in (summary, *notes):
        assert not any(w in text for w in CODE_WORDS), text
    assert settings == ["Settings: " + ex["walk_detail"]] and "second_hop='wide'" in settings[0]
