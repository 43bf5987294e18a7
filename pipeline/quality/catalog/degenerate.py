"""Rules of degenerate text in any field (checks: :mod:`pipeline.quality.text`)."""
from __future__ import annotations

from pipeline.quality.catalog.shapes import COOL_CUP, HOT_APPLE, SMALL, skill
from pipeline.quality.registry import Rule, passes, rejects

RULES = (
    Rule("no_words", "a field has no word of >= 2 letters, or letters are under quality.min_letter_share of its "
                     "visible characters (numbers or bracket soup)", (
        rejects("think", "1.25", seen=SMALL, **HOT_APPLE),
        rejects("bank_item", skill("Verify First", "**1**: 2 _Apply when: 3 },_"), seen=SMALL),
        passes("think", "The apple must be hot, so I heat apple 1 in the microwave before the fridge.", step=3,
               **HOT_APPLE),
        passes("bank_item", skill("Verify First", "buy it: B07XYZ1234 costs $12.99, below the budget"), env="webshop"))),
    Rule("not_a_phrase", "a skill title is not a short phrase (starts with a letter, <= quality.max_title_words "
                         "words, no brackets)", (
        rejects("bank_item", skill("Check [Object] twice", "Check the object twice before taking it.")),
        passes("bank_item", skill("Verify Before Acting", "Check the object twice before taking it.")))),
    Rule("ngram_loop", "a field repeats one word n-gram (quality.loop_ngram) at least quality.loop_min_repeats times", (
        rejects("think", "go to desk go to desk go to desk", **HOT_APPLE),
        rejects("bank_item", skill("Search Loop", "Search the shelf, search the shelf, search the shelf, then take "
                                                  "it.")),
        passes("think", "The apple is on countertop 1, so I go to countertop 1 to take it.", step=0, **HOT_APPLE))),
    Rule("reused_think", "two different steps of one trajectory get the same think, or thinks sharing a run of >= 6 "
                         "tokens that covers >= 60% of the later one (boilerplate with a number or tail changed; "
                         "a run of only the task's words and stop words does not count)", (
        rejects("think", "find the APPLE!", step=1, others=[(0, "Find the apple.")], **HOT_APPLE),
        rejects("episode_thinks", ["1. The environment is TextWorld Express, a text game where the agent explores "
                                   "rooms and uses objects.", "2. The environment is TextWorld Express, a text game "
                                   "where the agent explores rooms and uses objects"], env="textworld",
                seen="SmolLM2-135M-Instruct, its thinks of the TextWorld Express outcome run"),
        passes("think", "Cabinet 2 has no mug, so I try cabinet 3.", step=1,
               others=[(0, "Cabinet 1 has no mug, so I try cabinet 2.")], task="put a mug in sinkbasin.",
               actions=["go to cabinet 2", "go to cabinet 3"]),
        passes("episode_thinks", ["I need the apple first.", "The apple is in my hand, so I heat it now."]))),
    Rule("cut_off", "a field stops at its schema length bound mid-sentence (the grammar cut it)", (
        rejects("bank_item", skill("Cool Cup", "Cool the cup in the fridge before putting it on the table.",
                                   "Apply when the mug is in the micro"), bounds={"when_to_apply": 34}),
        rejects("think", "The cup is cold now, so I carry it to the diningt", step=4, max_chars=50, **COOL_CUP),
        passes("bank_item", skill("Cool Cup", "Cool the cup in the fridge before putting it on the table.",
                                  "Apply when the mug is hot, ok."), bounds={"when_to_apply": 31}))),
)
