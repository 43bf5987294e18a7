"""JSON extraction: the reference's failure cases (D-M1), row by row, plus the repair step."""
import pytest

from pipeline.llm.jsonparse import (JSONExtractError, extract_json, extract_json_with_method,
                                    remove_trailing_commas)


def test_extract_whole_text():
    assert extract_json_with_method('{"a":1}') == ({"a": 1}, "whole")


def test_extract_fenced_block():
    assert extract_json_with_method('```json\n{"a":1}\n```') == ({"a": 1}, "fenced")


def test_extract_two_values_takes_first_balanced():
    # The reference's greedy first-{ to last-} span gives None here (D-M1).
    assert extract_json_with_method('Here: {"a": [1,2]} and {"b":2}') == ({"a": [1, 2]}, "scan")


def test_extract_think_block_ignored():
    raw = '<think>{x}</think>{"planning_pattern":"A"}'
    assert extract_json_with_method(raw) == ({"planning_pattern": "A"}, "whole")


def test_extract_empty_is_failure():
    with pytest.raises(JSONExtractError) as e:
        extract_json("")
    assert e.value.reason == "empty"


def test_think_only_is_empty():
    with pytest.raises(JSONExtractError) as e:
        extract_json("<think>{\"a\": 1}</think>  ")
    assert e.value.reason == "empty"


def test_prose_without_json():
    with pytest.raises(JSONExtractError) as e:
        extract_json("I cannot answer [sorry] {really}")
    assert e.value.reason == "no_json"


def test_json_fence_preferred_over_earlier_plain_fence():
    raw = 'x\n```\nnot json\n```\nthen\n```json\n[1, 2]\n```'
    assert extract_json_with_method(raw) == ([1, 2], "fenced")


def test_fence_with_prose_before_and_after():
    raw = 'Sure! Here it is:\n```json\n{"k": "v"}\n```\nHope it helps {"other": 1}'
    assert extract_json_with_method(raw) == ({"k": "v"}, "fenced")


def test_scan_skips_unbalanced_candidates():
    raw = 'Step [one] then {"a": {"b": [true, null]}} done'
    assert extract_json_with_method(raw) == ({"a": {"b": [True, None]}}, "scan")


def test_array_at_top_level():
    assert extract_json('  [{"step_index": 0, "think": "go"}]  ') == [{"step_index": 0, "think": "go"}]


def test_trailing_comma_repair_in_fence():
    raw = '```json\n{"a": [1, 2,], "b": "x,]",}\n```'
    assert extract_json_with_method(raw) == ({"a": [1, 2], "b": "x,]"}, "fenced+trailing_comma")


def test_trailing_comma_on_outer_object_beats_inner_object():
    # Without the repair the scan would stop at the inner {"b": 1}, which decodes on its own.
    raw = 'Here: {"a": {"b": 1}, "c": [2,],} done'
    assert extract_json_with_method(raw) == ({"a": {"b": 1}, "c": [2]}, "scan+trailing_comma")
    fenced = '```json\n{"thinks": [{"step_index": 0, "think": "go"}],}\n```'
    assert extract_json_with_method(fenced) == ({"thinks": [{"step_index": 0, "think": "go"}]}, "fenced+trailing_comma")


def test_remove_trailing_commas_keeps_strings():
    assert remove_trailing_commas('{"s": "a, }", "t": [1,\n ],}') == '{"s": "a, }", "t": [1\n ]}'
    assert remove_trailing_commas('{"q": "say \\"hi,\\" ]",}') == '{"q": "say \\"hi,\\" ]"}'


def test_nan_is_not_json():
    with pytest.raises(JSONExtractError):
        extract_json('{"a": NaN}')
