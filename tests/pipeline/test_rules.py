"""pipeline.rules: distill, validate and the rollout judge tags and CJK text alike."""
from pipeline import rules
from pipeline.stages import distill
from pipeline.stages.build_pairs import _TAG_PARTS


def test_cjk_punctuation_and_scripts_are_cjk():
    for text in ("go to the desk\u3001then look", "\u3053\u3093\u306b\u3061\u306f", "\u4f60\u597d",
                 "\ud55c\uad6d\uc5b4", "full\uff01width"):
        assert rules.has_cjk(text), text
    assert not rules.has_cjk("caf\u00e9 na\u00efve \u2014 plain Latin")


def test_every_protocol_tag_in_any_spelling():
    for text in ("<information>x</information>", "< /Think >", "<action id=1>", "</SEARCH>", "<answer>"):
        assert rules.has_tag(text), text
    assert not rules.has_tag("a <b> tag and an <informational> word")
    assert _TAG_PARTS is rules.TAG_PART  # validate's target parser uses the same pattern


def test_distill_rejects_what_validate_would_quarantine():
    check = distill.check_thinks([0], max_chars=200)
    assert check({"thinks": [{"step_index": 0, "think": "I should open the drawer next."}]}) is None
    # both slipped through distill's old copies (no U+3000-303F, no <information>)
    assert "CJK" in check({"thinks": [{"step_index": 0, "think": "open the drawer\u3002"}]})
    assert "tag" in check({"thinks": [{"step_index": 0, "think": "per <information> open it"}]})
