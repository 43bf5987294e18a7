"""Best-of-n thinks: which candidates count, which one wins, and what is replaced."""
from types import SimpleNamespace

from pipeline.llm.types import JSONResult
from pipeline.stages.distill_bestof import BASE_SEED, Choice, candidates, run_best_of


def ok(thinks):
    return JSONResult("k", True, value={"thinks": [{"step_index": i, "think": t} for i, t in thinks]})


def test_candidates_keep_distills_think_first_then_distinct_passing_samples():
    kept = [{"step_index": 0, "think": "I need the  mug."}, {"step_index": 1, "think": "Heat it."}]
    samples = [ok([(0, "I need the mug."), (1, "The microwave heats.")]), ok([(0, "Bad one"), (1, "Heat it.")]),
               JSONResult("k", False, error="schema_invalid")]
    got = candidates(kept, samples, lambda t, _v: t["think"] != "Bad one")
    assert got == {0: ["I need the mug."], 1: ["Heat it.", "The microwave heats."]}


def test_choice_takes_the_highest_gain_and_keeps_distills_on_a_tie():
    assert Choice(0, ["a", "b", "c"], [0.1, 0.3, 0.2]).best == "b"
    assert Choice(0, ["a", "b"], [0.2, 0.2]).best == "a"


def test_run_best_of_asks_n_minus_1_seeded_samples_and_replaces_the_chosen_thinks():
    job = SimpleNamespace(rejected=None, failed=[], results=[ok([(0, "greedy"), (1, "greedy two")])])
    seen = []

    def request_for(j, k, sampling):
        seen.append(sampling["seed"])
        return ("req", k, sampling["seed"])

    def send(asked):
        return [[ok([(0, f"sample {r[2]}"), (1, "greedy two")]) for r in reqs] for reqs in asked]

    gains = {"greedy": 0.0, f"sample {BASE_SEED + 1}": 0.4, f"sample {BASE_SEED + 2}": 0.1}
    stats = run_best_of([job], 3, 0.7, request_for, send, lambda j, k: lambda t, v: True,
                        lambda j, i, thinks: [gains[t] for t in thinks])
    assert seen == [BASE_SEED + 1, BASE_SEED + 2]
    assert job.results[0].value["thinks"] == [{"step_index": 0, "think": f"sample {BASE_SEED + 1}"},
                                              {"step_index": 1, "think": "greedy two"}]
    assert stats == {"samples": 2, "steps": 1, "chosen_sampled": 1}
