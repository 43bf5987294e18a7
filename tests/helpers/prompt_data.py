"""Shared pieces of the prompt and build_pairs tests: the fixed ALFWorld texts of a step prompt
(system header, turn instruction) and TV6, a four-step ALFWorld success."""
from pipeline.core.records import Step, Trajectory


ALF_TURN = ("Now it's your turn to take an action.\nYou should first reason step-by-step about the "
            "current situation. This reasoning process MUST be enclosed within <think> </think> tags. \n"
            "Once you've finished your reasoning, you should choose an admissible action for current "
            "step and present it within <action> </action> tags.")
ALF_HEADER = "You are an expert agent operating in the ALFRED Embodied Environment."


def tv6(tid="traj-tv6"):
    """TV6's four steps, a success with reward 10 on the last step."""
    steps = [
        Step(0, None, "You are in the middle of a room. You see a countertop 1.",
             ["go to countertop 1", "inventory", "look"], line=2),
        Step(1, "go to countertop 1", "You arrive at countertop 1. You see a plate 1.",
             ["take plate 1 from countertop 1", "look"], line=5),
        Step(2, "take plate 1 from countertop 1", "You pick up the plate 1 from the countertop 1.",
             ["go to box 1", "look", "done"], line=8),
        Step(3, "move plate 1 to box 1", "You move the plate 1 to the box 1.",
             ["examine box 1", "go to countertop 1", "inventory", "look"], 10.0, True, line=11),
    ]
    return Trajectory(tid, "alfworld", "env000", "put a plate in box 1.", "pick_and_place", "success", 10.0,
                      steps, "rollouts/env000/test0.txt", "skillrl_txt", 0, 1)
