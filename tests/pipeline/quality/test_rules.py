"""pipeline.quality: each content rule on tiny literal inputs, exact reasons.

The degenerate examples are from an export of the embedded 135M model (thinks ``1.25``, skills
``**1**: 2 _Apply when: 3 },_``)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import quality
from pipeline.core.config import ConfigError, QualityConfig, from_dict
from pipeline.quality import QUALITY_RULES, Tally, Violation, grounding, text, topic
from tests.helpers.llm_stage_data import cool_apple
from tests.helpers.quality_data import parsed_sample

Q = QualityConfig()


def test_flag_rules_are_checked_against_the_registry():
    """The config may name every registered rule and no other (checked where a run reads its config)."""
    from pipeline.quality.rulebook import REGISTRY
    from pipeline.runconfig import check_quality_rules
    assert tuple(quality.REASONS) == QUALITY_RULES == REGISTRY.reasons()
    check_quality_rules(from_dict({"quality": {"flag_rules": list(QUALITY_RULES)}}).quality)
    assert from_dict({"quality": {"flag_rules": ["off_topic"]}}).quality.flag_rules == ["off_topic"]
    with pytest.raises(ConfigError, match=r"quality.flag_rules: unknown rules \['offtopic'\]"):
        check_quality_rules(from_dict({"quality": {"flag_rules": ["offtopic"]}}).quality)


@pytest.mark.parametrize("value,bad", [
    ("1.25", True), ("3.75", True), ("**4**: 5, 6 }]} ]{ 10, 11, 12", True), ("**1**: 2 _Apply when: 3 },_", True),
    ("T1", True), ("open the fridge to cool the apple", False), ("buy it: B07XYZ1234 costs $12.99", False),
    ("die Tür öffnen", False)])
def test_no_words(value, bad):
    assert text.no_words(value, Q.min_letter_share) is bad


def test_letter_share_of_the_issue_example():
    # visible characters: **1**: 2 _Apply when: 3 },_  -> 22, of which 9 letters
    assert text.letter_share("**1**: 2 _Apply when: 3 },_") == pytest.approx(9 / 22)


@pytest.mark.parametrize("title,ok", [("Verify Before Acting", True), ("**Search First**", True), ("**1**", False),
                                      ("2 }", False), ("Check [Object] twice", False),
                                      ("one two three four five six seven eight nine ten eleven twelve thirteen", False),
                                      ("Step 1 2 3", False), ("Heat Object 1", True)])
def test_is_phrase(title, ok):
    assert text.is_phrase(title, Q.max_title_words) is ok


def test_ngram_loop():
    assert text.ngram_loop("go to desk go to desk go to desk", 3, 3) == "go to desk"
    assert text.ngram_loop("go to desk go to desk then stop", 3, 3) is None
    assert text.ngram_loop("go go go go", 1, 4) == "go"
    assert text.ngram_loop("go to desk go to desk go to desk", 3, 0) is None  # rule off


def test_field_violations_order_and_messages():
    got = text.field_violations("skills[0].principle", "1 2 3 1 2 3 1 2 3", Q)
    assert [v.reason for v in got] == ["no_words", "ngram_loop"]
    assert got[1].detail == "skills[0].principle repeats '1 2 3' 3+ times; write it once"
    assert text.field_violations("x", "   ", Q) == []  # blank is a form error, reported by the stage


def test_reused_think_ignores_case_and_punctuation():
    got = text.reused([(0, "Find the egg."), (1, "open it"), (2, "find the EGG"), (3, "open it!")])
    assert [v.message() for v in got] == [
        "reused_think: the think for step 2 repeats the think for step 0; explain each step on its own",
        "reused_think: the think for step 3 repeats the think for step 1; explain each step on its own"]


def test_reused_think_catches_numbered_and_tailed_boilerplate():
    """The outcome run's 135M thinks: one sentence numbered per step, or with a different tail."""
    env = "The environment is TextWorld Express, a text game where the agent explores rooms and uses objects"
    got = text.reused([(1, f"1. {env}."), (2, f"2. {env}"), (3, f"{env}. The actions taken are: (6) take coin"),
                       (4, "The coin is in the pantry, so I move west to reach it.")])
    assert [v.message() for v in got] == [
        "reused_think: the think for step 2 repeats the think for step 1; explain each step on its own",
        "reused_think: the think for step 3 repeats the think for step 1; explain each step on its own"]
    assert text.shared_run(text._tokens(f"(3) {env}"), text._tokens(f"3: {env}")) == 16


def test_reused_think_keeps_thinks_that_differ_in_numbers_or_quote_a_phrase():
    """ReAct-style thoughts that differ only in an object number, and a later, longer think that
    quotes 6 tokens of an earlier one, are not reuse (6 of its 23 tokens < REUSE_SHARE); the same
    quote as most of a later short think is."""
    assert text.reused([(1, "Nothing in cabinet 1. Next, I need to go to cabinet 2."),
                        (2, "Nothing in cabinet 2. Next, I need to go to cabinet 3.")]) == []
    search = [(1, "Cabinet 1 has no mug, so I try cabinet 2."), (2, "Cabinet 2 has no mug, so I try cabinet 3."),
              (3, "Nothing useful in drawer 1. I will check drawer 2 next."),
              (4, "Nothing useful in drawer 2. I will check drawer 3 next.")]
    assert text.shared_run(text._tokens(search[1][1]), text._tokens(search[0][1])) == 7  # of 10: over the share
    assert text.reused(search) == []
    assert [v.reason for v in text.reused([*search, (5, "Cabinet 1 has no mug, so I try cabinet 2.")])] == [
        "reused_think"]  # the very same sentence again is reuse
    # the teacher's search of the pen episode: "a" then "the", another drawer; the same drawer is reuse
    pen = [(1, "I need a pen first. Pens are usually in drawers, so I will look at drawer 1."),
           (3, "I need the pen first. Pens are usually in drawers, so I will look at drawer 2.")]
    assert text.reused(pen) == []
    assert [v.reason for v in text.reused([*pen, (5, "I need the pen first. Pens are usually in drawers, "
                                                     "so I will look at drawer 1.")])] == ["reused_think"]
    quote = "the mug is on the desk"
    long = f"Now {quote}, but I still have to find a lamp, then turn it on and look at the mug under it."
    assert text.reused([(1, f"I see that {quote}."), (2, long)]) == []
    assert [v.reason for v in text.reused([(1, long), (2, f"I see that {quote}.")])] == ["reused_think"]
    assert text.REUSE_MIN_RUN == 6 and text.REUSE_SHARE == 0.6



def test_reuse_against_thinks_from_other_calls_reports_only_this_calls_repeats():
    """A one-step call's think is judged with the thinks its trajectory already has from other
    calls, in step order: a repeat of one of them is reuse, while repeats among the others alone
    (not this call's business) are not reported."""
    others = [(5, "I need the pen; drawer 4 is left, so I will look at drawer 4."),
              (8, "Drawer 1 is empty. I go on."), (9, "Drawer 1 is empty. I go on.")]
    got = text.reused_with([(6, "I need the pen; drawer 4 is left, so I will look at drawer 4.")], others)
    assert [v.detail for v in got] == [
        "the think for step 6 repeats the think for step 5; explain each step on its own"]
    assert text.reused_with([(6, "Drawer 4 is closed, so I open it to see whether the pen is inside.")],
                            others) == []
    # an earlier step of this call repeated by later kept thinks counts too (each names the first)
    assert [v.detail for v in text.reused_with([(4, "Drawer 1 is empty. I go on.")], others)] == [
        f"the think for step {i} repeats the think for step 4; explain each step on its own" for i in (8, 9)]

def test_recorded_thoughts_of_the_samples_are_never_reused(tmp_path):
    """The 39 recorded thoughts of the ReAct/ETO samples: no trajectory reuses one, and the longest
    run two thoughts of one trajectory share is 9 tokens (a WebShop product phrase)."""
    longest, n = 0, 0
    for sample in ("react-alfworld", "eto-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        for t in trajs:
            th = [(k, s.thought) for k, s in enumerate(t.steps) if (s.thought or "").strip()]
            n += len(th)
            assert text.reused(th) == []
            toks = [text._tokens(x) for _, x in th]
            longest = max([longest] + [text.shared_run(a, b) for i, a in enumerate(toks) for b in toks[i + 1:]])
    assert (n, longest) == (39, 9)


@pytest.mark.parametrize("claimed,recorded,ok", [
    ("take apple 1 from countertop 1", "take apple 1 from countertop 1", True),
    (" Take Apple 1 from countertop 1.", "take apple 1 from countertop 1", True),
    ("take apple from countertop", "take apple 1 from countertop 1", True),
    ("go to cabinet 2", "go to cabinet 1", False),
    ("take toiletpaper 1 from toilet 1's trash can", "go to toilet 1", False),
    ("click[buy now]", "click[Buy Now]", True), ("", "look", False)])
def test_action_matches(claimed, recorded, ok):
    assert grounding.action_matches(claimed, recorded) is ok


def test_span_coverage():
    obs = "On the countertop 1, you see a apple 1, and a knife 1."
    assert grounding.span_coverage("you see a apple 1", obs) == 1.0
    assert grounding.span_coverage("apple 1 on countertop 1", obs) == pytest.approx(3 / 5)  # in order: apple 1 ... 1
    assert grounding.span_coverage("a childhood diet", obs) == pytest.approx(1 / 3)  # only "a"
    assert grounding.span_coverage("", obs) == 0.0


def test_memory_step_grounding_on_cool_apple():
    traj = cool_apple()  # step 2: take apple 1 from countertop 1; step 1's observation shows the apple
    good = {"step_index": 2, "action": "take apple 1 from countertop 1",
            "critical_observation": "you see a apple 1", "reasoning": "r"}
    assert grounding.memory_step_violations([good], traj, 0.6) == []
    wrong_action = dict(good, action="take toiletpaper 1 from toilet 1's trash can")
    start = dict(good, step_index=0)
    made_up = dict(good, critical_observation="the toilet has a trash can")
    got = grounding.memory_step_violations([wrong_action, start, made_up], traj, 0.6)
    assert [(v.reason, v.detail.split(":")[0].split(" cites")[0]) for v in got] == [
        ("ungrounded_step", "refined_trajectory[0]"), ("ungrounded_step", "refined_trajectory[1]"),
        ("ungrounded_observation", "refined_trajectory[2].critical_observation 'the toilet has a trash can' is not in "
                                   "the observation of step 1 or 2 (0.33 of its words found in order, need 0.6); quote the observation")]
    assert got[0].detail.startswith("refined_trajectory[0]: step 2's recorded action is 'take apple 1 from countertop 1'")


def test_future_leak():
    traj = cool_apple()
    # entry 0 shows the room (no apple yet) and explains "go to countertop 1"; the apple is seen at step 1
    assert grounding.future_entities(traj, 0) == {"apple 1", "knife 1"}
    assert [v.reason for v in grounding.future_leak("go to the countertop to get apple 1", traj, 0)] == ["future_leak"]
    assert grounding.future_leak("go to countertop 1, where the apple may be", traj, 0) == []
    assert grounding.future_leak("take apple 1 now", traj, 1) == []  # seen in observation 1


@pytest.mark.parametrize("think,fires", [
    ("This action helps me complete the task.", True),   # fits any step of any trajectory
    ("Let me think about it.", True),
    ("I need to do this to finish.", True),
    ("The answer is 42.", True),
    ("1.25", False),                                      # no content word: no_words' case, not this rule's
    ("The apple is cold now, so it goes back on the countertop.", False),
    ("Nothing useful here; the fridge may have something.", False),  # 'fridge' is an admissible action's
    ("I pick it up before anything else.", False),        # 'pick' is a word of observation 2
])
def test_ungrounded_think(think, fires):
    traj = cool_apple()
    # entry 2 shows observation 2 ("You pick up the apple 1 ...") and explains "go to fridge 1"
    got = grounding.ungrounded_think(think, traj, 2, "go to fridge 1", traj.steps[2].admissible_actions)
    assert [v.reason for v in got] == (["ungrounded_think"] if fires else [])


def test_ungrounded_think_sees_only_observations_up_to_its_step():
    traj = cool_apple()
    # "cool" is in the task; "closed" first appears in observation 3: grounded at entry 3, not at entry 0
    assert grounding.ungrounded_think("It is closed.", traj, 3, "cool apple 1 with fridge 1", []) == []
    assert [v.reason for v in grounding.ungrounded_think("It is closed.", traj, 0, "go to countertop 1", [])] == [
        "ungrounded_think"]


def test_ungrounded_think_on_the_recorded_thoughts_of_the_samples_and_fixtures(tmp_path):
    """Measured: of the 39 recorded thoughts of the ReAct/ETO ALFWorld and ReAct WebShop samples,
    none fires (each against its distill entry: the task, observations so far, the action and
    the admissible list shown)."""
    n, fired = 0, []
    for sample in ("react-alfworld", "eto-alfworld", "react-webshop"):
        _, trajs = parsed_sample(tmp_path / sample, sample, sample)
        for t in trajs:
            for k in range(1, len(t.steps)):
                if (t.steps[k].thought or "").strip():
                    n += 1
                    fired += grounding.ungrounded_think(t.steps[k].thought, t, k - 1, t.steps[k].action or "",
                                                        t.steps[k - 1].admissible_actions)
    assert (n, fired) == (39, [])


@pytest.mark.parametrize("think,claim", [
    # the 1.5B teacher's think for click[Buy Now] on the sample's microphone episode
    ("The price of this product is $32.99, which exceeds the instruction's constraint of 'price lower than 50.00 "
     "dollars', so I click Buy Now.", "the think says 32.99 is above 50 ('exceeds')"),
    ("B01 costs $45.00, which is lower than 40.00 dollars.", "the think says 45 is below 40 ('lower than')"),
    ("It is $32.99, under my $50 limit.", None),
    ("The price is $60, above the 50 dollars limit, so I go back.", None),
    ("the price is 46.99 dollars which is lower than 50.00 dollars.", None),  # a ReAct WebShop thought
    ("It comes in a pack of 2 for 8.5 ounce, less than 12 of the other.", None),  # no money
])
def test_false_comparison(think, claim):
    got = grounding.false_comparisons(think)
    assert [v.detail.split(";")[0] for v in got] == ([claim] if claim else [])
    assert all(v.reason == "false_comparison" for v in got)


def test_skill_sources():
    mems = {"m1": {"category": "cool"}, "m2": {"category": "heat"}}
    ok = {"skill_id": "s", "kind": "task_specific", "category": "cool", "source_memory_ids": ["m1"]}
    assert grounding.skill_source_violations(ok, mems) == []
    assert [v.reason for v in grounding.skill_source_violations(dict(ok, source_memory_ids=["m9"]), mems)] == \
        ["unknown_source_memory"]
    assert [v.reason for v in grounding.skill_source_violations(dict(ok, source_memory_ids=["m1", "m2"]), mems)] == \
        ["category_mismatch"]
    general = dict(ok, kind="general", category="", source_memory_ids=["m1", "m2"])
    assert grounding.skill_source_violations(general, mems) == []


def _fake_encoder(texts):
    """Bag of two topics: kitchen words vs diet words (unit vectors)."""
    vecs = np.array([[t.count("apple") + t.count("fridge") + 0.01, t.count("diet") + t.count("childhood")]
                     for t in texts], dtype=np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def test_off_topic_with_an_injected_encoder():
    named = [("mistakes[0]", "a childhood diet"), ("mistakes[1]", "cool the apple in the fridge"), ("x", " ")]
    got = topic.off_topic(named, [["apple fridge"]] * 3, 0.5, _fake_encoder)
    assert [v.detail.split(" (")[0] for v in got] == ["mistakes[0] 'a childhood diet' is off topic"]
    assert topic.off_topic(named, [["apple"]] * 3, -1, None) == []  # off: the model is never loaded
    assert topic.best_similarity(["a"], [[]], _fake_encoder) == [1.0]


@pytest.mark.slow
def test_off_topic_threshold_on_minilm():
    """The figures behind quality.off_topic_threshold's help text, on the real MiniLM."""
    episode = ["cool some apple and put it in countertop.",
               "go to countertop 1; take apple 1 from countertop 1; go to microwave 1"]
    mistake = ["when holding an object to cool: went to the microwave"]
    step = ["The cabinet 1 is open. In it, you see a mug 1. take mug 1 from cabinet 1",
            "heat some mug and put it in cabinet."]
    cases = [("Eating too much sugar as a child leads to a poor childhood diet", mistake, 0.0, 0.05),
             ("The weather is nice today and I like football", episode, 0.0, 0.05),
             ("because of 0", step, 0.05, 0.1),
             ("Wrong appliance. Verb misread. Reread the goal", mistake, 0.25, 0.3),
             ("an object must be cooled: used the microwave", episode, 0.45, 0.55)]
    sims = topic.best_similarity([c[0] for c in cases], [c[1] for c in cases])
    assert [lo <= s <= hi for s, (_, _, lo, hi) in zip(sims, cases)] == [True] * len(cases), sims
    assert max(sims[:3]) < Q.off_topic_threshold < min(sims[3:])


def test_tally_policy_and_record():
    t = Tally(flag_rules=["off_topic"])
    assert t.gate([Violation("off_topic", "d1"), Violation("no_words", "d2"), Violation("ngram_loop", "d3")]) == \
        "no_words: d2"
    assert t.gate([Violation("off_topic", "d4")]) is None
    rec = t.record(4, __import__("collections").Counter({"no_words": 1, "length": 2}))
    assert rec == {"items": 4, "quarantined": {"no_words": 1}, "rate": {"no_words": 0.25},
                   "rejected_answers": {"no_words": 1}, "flagged": {"off_topic": 2}, "repaired": {}}
    assert quality.reason_of("check_failed", "ungrounded_step: x") == "ungrounded_step"
    assert quality.reason_of("check_failed", "contextual_description is blank") == "check_failed"
    assert quality.reason_of("", "") == "llm_failed"
