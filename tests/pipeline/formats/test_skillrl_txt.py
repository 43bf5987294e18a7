"""SkillRL rollout txt reader: the reference's example file read with our fixes (D-P1..D-P4, D-P7), D-P2 lists, generated trees."""
import json
import os
import subprocess
import sys

from pipeline.formats import skillrl_txt
from pipeline.formats.discover import list_input_files, read_file
from pipeline.core.records import QuarantineRow, Trajectory
from tests.helpers.paths import FIXTURES

FIX = os.path.join(FIXTURES, "formats")
# the project's synthetic rollout-tree generator, copied in (fixtures/tools/SOURCE.md)
TOOL = os.path.join(FIXTURES, "tools", "make_skillrl_rollouts.py")


def test_tv1_ours_exact():
    (t,) = list(read_file(os.path.join(FIX, "env005", "test0.txt")))
    assert (t.env, t.env_instance, t.task, t.category) == ("alfworld", "env005", "put a clean plate in box", "clean")
    assert (t.outcome, t.reward, t.source_format, t.source_line) == ("success", 10.0, "skillrl_txt", 1)
    assert [s.action for s in t.steps] == [None, "go to countertop 1", "take plate 1 from countertop 1",
                                           "move plate 1 to box 1"]  # D-P4 null, D-P1 step 01 kept
    assert [s.reward for s in t.steps] == [0.0, 0.0, -0.1, 10.0]
    assert [s.done for s in t.steps] == [False, False, False, True]
    assert [s.line for s in t.steps] == [2, 18, 23, 26]
    assert t.steps[0].observation == ("You are in the middle of a room. Looking quickly around you, you see a "
                                      "cabinet 1, a countertop 1, and a sinkbasin 1.")
    assert t.steps[0].admissible_actions == ["go to cabinet 1", "go to countertop 1", "inventory"]
    assert t.steps[1].observation == "You arrive at countertop 1. On the countertop 1, you see a plate 1."
    assert t.steps[1].admissible_actions == ["take plate 1 from countertop 1", "go to cabinet 1"]
    assert t.steps[2].admissible_actions == []
    assert t.steps[3].admissible_actions == ["go to cabinet 1", "examine box 1", "look"]  # D-P2
    assert t.trajectory_id.startswith("traj-") and t.trajectory_id == next(read_file(os.path.join(FIX, "env005", "test0.txt"))).trajectory_id


def test_admissible_lists_d_p2():
    assert skillrl_txt.parse_admissible("'a', 'b', 'c'", "alfworld") == ["a", "b", "c"]
    assert skillrl_txt.parse_admissible("a, b, c", "alfworld") == ["a", "b", "c"]
    # WebShop titles contain commas: never split unquoted WebShop items on commas
    body = "'search[red shoes]',\n'click[b0 - Nike Shoe, Red, Size 9]',\n"
    assert skillrl_txt.parse_admissible(body, "webshop") == ["search[red shoes]", "click[b0 - Nike Shoe, Red, Size 9]"]
    assert skillrl_txt.parse_admissible("click[men's shirt, blue]", "webshop") == ["click[men's shirt, blue]"]


def test_webshop_prompt_boilerplate_removed_d_p7():
    payload = ("Obs: You are an expert autonomous agent operating in the WebShop e-commerce platform.\n"
               "Your task is to: Find me a red shoe.\nYour current observation is: 'Search'.\n"
               "Your admissible actions of the current situation are: [\n'search[<your query>]',\n'click[search]',\n].\n\n"
               "Now it's your turn to take one action for the current step.\nYou should first reason ... shopping goal.")
    obs, adm = skillrl_txt.clean_observation(payload, "webshop")
    assert (obs, adm) == ("'Search'.", ["search[<your query>]", "click[search]"])


def test_bad_header_is_quarantined_with_line():
    (q,) = list(read_file(os.path.join(FIX, "corrupt", "bad_header.txt")))
    assert isinstance(q, QuarantineRow) and (q.reason, q.line) == ("bad_step_header", 5)
    assert q.raw == "Step 00 | Action: go to sink 1 | Reward: n/a | Done: False"


def test_shipped_sample_record():
    (t,) = list(read_file("data/samples/skillrl-rollouts/env000/test2.txt"))
    assert (t.task, t.category, t.outcome, t.reward, len(t.steps)) == (
        "cool some vase and put it in fridge.", "cool", "failure", 0.0, 15)
    assert (t.steps[1].action, t.steps[1].observation, t.steps[1].line) == (
        "go to fridge 1", "You arrive at fridge 1. On the fridge 1, you see a vase 1.", 24)
    assert t.steps[14].action == "examine desk 4" and t.steps[14].observation == "Nothing happens."


def test_generated_tree(tmp_path):
    subprocess.run([sys.executable, TOOL, str(tmp_path), "--envs", "5", "--seed", "1"], check=True)
    files = list_input_files(str(tmp_path))
    assert len(files) == 20
    for path in files:
        items = list(read_file(path))
        assert len(items) == 1 and isinstance(items[0], Trajectory), path
        t = items[0]
        raw = open(path, encoding="utf-8").read()
        headers = [ln for ln in raw.split("\n") if ln.startswith("Step ")]
        assert len(t.steps) == len(headers)
        assert t.env == "alfworld" and t.env_instance == os.path.basename(os.path.dirname(path))
        assert t.outcome == ("success" if headers[-1].endswith("Reward: 10.000 | Done: True") else "failure")
        for s in t.steps:
            assert "go to" in s.admissible_actions[0] and s.admissible_actions[-2:] == ["inventory", "look"]
            for junk in ("Your admissible actions", "Now it's your turn", "ALFRED", "Your task is to", "Prior to this step"):
                assert junk not in s.observation


def test_model_output_lines_d_p8():
    (t,) = list(read_file(os.path.join(FIX, "skillrl_txt_validity", "env007", "test1.txt")))
    assert [s.action for s in t.steps] == [None, "go to drawer 1", "i should take the pen from it now",
                                           "take pen 1 from drawer 1", "move pen 1 to desk 1"]
    # the <think> of Raw Model Output (multi-line) becomes the step's thought
    assert [s.thought for s in t.steps[:3]] == [None, "The pen is probably in the drawer.\nI will check it first.",
                                                "The pen is here."]
    assert t.steps[0].admissible_actions == ["go to desk 1", "go to drawer 1", "look"]  # one-line comma list
    assert t.steps[1].observation == "You arrive at drawer 1. On the drawer 1, you see a pen 1."
    assert t.steps[2].observation == "Nothing happens." and t.steps[2].reward == -0.1
    assert json.loads(t.metadata)["invalid_actions"] == [
        {"index": 2, "line": 23, "parsed_action": "i should take the pen from it now",
         "reason": "no <action> tag; the projection kept the last 30 characters"}]
    assert (t.outcome, t.env_instance) == ("success", "env007")


def test_file_cut_inside_its_last_block_is_quarantined(tmp_path):
    """A cut success must not read as a failed episode: cut inside the last block's Obs (before
    or inside its admissible list, or right after its header) -> ``truncated_file``; cut after
    the list closed -> the full episode; cut between two blocks -> indistinguishable (documented)."""
    src = open("data/samples/skillrl-rollouts/env000/test1.txt", encoding="utf-8").read()
    (full,) = list(read_file("data/samples/skillrl-rollouts/env000/test1.txt"))
    last = src.rindex("\nStep ") + 1
    header_end = src.index("\n", last)
    lead = src.index("Your admissible actions", last)
    closed = src.index("].", lead) + 2
    d = tmp_path / "env000"
    d.mkdir()

    def read_cut(n):
        p = d / "test1.txt"
        p.write_text(src[:n], encoding="utf-8")
        return list(read_file(str(p)))
    for cut in (header_end + 1, lead - 10, lead + 40, closed - 1):
        (q,) = read_cut(cut)
        assert isinstance(q, QuarantineRow) and (q.reason, q.line) == ("truncated_file", full.steps[-1].line), cut
    (t,) = read_cut(closed + 5)
    assert (t.outcome, len(t.steps), t.steps[-1].admissible_actions) == ("success", len(full.steps),
                                                                         full.steps[-1].admissible_actions)
    (t,) = read_cut(last)  # between blocks: one step fewer, an unfinished episode
    assert (t.outcome, len(t.steps)) == ("failure", len(full.steps) - 1)


def test_environment_comes_from_the_first_block_else_the_window(tmp_path):
    """The Step -1 prompt names the environment: a later ``click[...]`` written by an ALFWorld
    policy does not make the file a WebShop rollout; a first block with no sign of any
    environment falls back to the first 8 KB of the file."""
    src = open("data/samples/skillrl-rollouts/env000/test1.txt", encoding="utf-8").read()
    second = src.index("\nStep 00 | Action: ") + len("\nStep 00 | Action: ")
    clicked = src[:second] + "click[buy now]" + src[src.index(" | Reward:", second):]
    d = tmp_path / "env000"
    d.mkdir()
    (d / "test1.txt").write_text(clicked, encoding="utf-8")
    (t,) = list(read_file(str(d / "test1.txt")))
    assert (t.env, t.steps[1].action) == ("alfworld", "click[buy now]")
    bare = ("Step -1 | Action: None | Reward: 0.000 | Done: False\nObs: You see nothing in particular.\n"
            "Step 00 | Action: go to desk 1 | Reward: 0.000 | Done: True\nObs: You arrive at desk 1.\n")
    (d / "test2.txt").write_text(bare, encoding="utf-8")
    (t,) = list(read_file(str(d / "test2.txt")))
    assert t.env == "alfworld"  # "go to desk 1" in the second block
    (d / "test3.txt").write_text(bare.replace("go to desk 1", "wait"), encoding="utf-8")
    (t,) = list(read_file(str(d / "test3.txt")))
    assert t.env == "other"


def test_payloads_cleaned_in_place_equal_the_copied_path():
    """``_clean_span`` (offsets into the whole ASCII file) gives what ``_clean_payload`` gives
    for the payload's own copy, over combinations of every part the cleaning looks at."""
    import itertools
    leads = ["", "Obs: ", "Obs:", " \n Obs:  ", "\x0bObs: Obs: "]
    prompts = ["", "You are an agent.\nYour task is to: put a pen in box.\n",
               "YOUR CURRENT OBSERVATION IS: early\n", "-= Welcome to TextWorld, ALFRED! =-\n"]
    observations = ["Your current observation is: You see a desk 1.", "You are now at step 3 and your current "
                    "observation is: Nothing happens.\nYour task is to: again", "plain text only",
                    "your current observation is: now it's your turn to take an action. Go."]
    lists = ["", "\nYour admissible actions of the current situation are: ['go to desk 1'\n 'look'].",
             "\nYour admissible actions of the current situation are: [\n'a', 'b'\n].  ",
             "\nYour admissible actions of the current situation are: ['x].y' 'z'].\t\x0b",
             "\nYour admissible actions of the current situation are: ['never closed'",
             "\nYour admissible actions of the current situation are: no list\n"
             "Your admissible actions of the current situation are: ['later']."]
    tails = ["", "\n\nNow it's your turn to take an action.\nYou should first reason.", "\n\n", " \x0c\n"]
    n = 0
    for parts in itertools.product(leads, prompts, observations, lists, tails):
        payload = "".join(parts)
        text = "Step 00 | Action: look | Reward: 0.000 | Done: False\n" + payload + "Step 01 | x"
        a = text.index("\n") + 1
        b = a + len(payload)
        for env in ("alfworld", "webshop"):
            assert skillrl_txt._clean_span(text, text.lower(), a, b, env) == \
                skillrl_txt._clean_payload(text[a:b], env), (payload, env)
            n += 1
    assert n == 2 * 5 * 4 * 4 * 6 * 4
