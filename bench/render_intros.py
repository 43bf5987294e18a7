"""The words of ``docs/benchmarks.md`` above each kind's runs: how to run it and what its figures
mean. No measured figure belongs here (those come from ``bench/results/*.json``)."""

INTROS = {
    "make_run": """
`make run` on the shipped sample (`data/samples/`, 19 trajectories) with the embedded default
teacher: the nine data stages (`skillpipe run`), then `sft fit`, `rl grpo` and the report. After
a `make run`, `python bench/results.py make-run [--wall-s SECONDS]` records its figures from the
stage manifests. *data stages* is the wall time of `skillpipe run` (the three LLM stages shown on
their own); *tokens* are prompt plus completion tokens of the LLM stages, with the prompt tokens
the server served from its prefix cache in brackets; *memory kept* counts trajectories with a
memory; *distill kept* counts verified successes that got thinks, in brackets those with at least
one think the model wrote (the others keep recorded thoughts). Greedy answers change with the
build of the server and with the code, so content figures move from run to run.
""",
    "make_install": """
The first `make install` (or `make test`, or the CI script `.ci/run`: a fresh clone with an empty
HOME, then `make test`) builds `.venv`, compiles llama.cpp's server, fetches and verifies the
teacher and, as root on Debian, installs the system packages.
""",
    "sample_rerun": """
Stages of an existing sample run rerun one by one (`skillpipe run --run-id ID --stages ...`) after
a prompt or rule change; the LLM cache answers every request that did not change, so only the
changed calls reach the teacher. These measure one change at a time.
""",
    "skills_experiment": """
The skills stage rerun on the memories of a sample run with one setting or prompt changed, to
decide a default.
""",
    "embedded_engine": """
Which program serves the embedded model, and how fast. `bench/llm_cost.py --parts c` times the
same memory prompts through llama-cpp-python's server and llama.cpp's `llama-server`
(`server_ratio`: calls per minute of the latter over the former). The settings measured one by
one are in [LLM endpoints](llm_endpoints.md).
""",
    "teacher": """
`python bench/teacher.py` (or `make teacher`): the data stages on the sample once per embedded
teacher, in fresh roots; per teacher the rows kept by memory, skills and distill, the pairs, and
completion tokens per second.
""",
    "outcome": """
`make outcome` (`bench/outcome.py`) asks whether distilled thinks and a skill bank make a better
agent than the same demonstrations without them. Gold and noisy rollouts of TextWorld Express go
through the data pipeline with the embedded teacher, and four arms are built from the same
trajectories, memories and bank, trained with the same student and steps, and evaluated greedily
on the same held-out dev seeds (design: [Outcome experiment](outcome.md)):
`base` (not trained), `actions` (empty thinks), `thinks` (thinks written without the bank, no bank
in any prompt), `skills` (thinks written with the bank, the bank in every prompt: SkillRL).
*success* is wins over held-out games with the 95 % Wilson interval; *skill use* the share of the
pairs' thinks sharing two or more content words with a bank skill shown for the task; *q distill*
and *q pairs* the shares quarantined by distill and build_pairs. Each run also writes
`<root>/outcome.json`, which `skillpipe report` of an arm's run shows.
""",
    "outcome_pilot": """
`python bench/outcome_pilot.py` trains the action-only arm alone (no LLM: the memory and skills
stages meet a loopback stub, so the bank is empty) on candidate game settings and evaluates it on
held-out games. A setting is worth the four arms when that success is clearly between 0 and 1.
""",
    "outcome_grpo": """
`bench/outcome.py --grpo` (or `skillpipe rl grpo` on an arm's checkpoint), then the arms'
evaluation on the same held-out games.
""",
    "outcome_speedup": """
Where the outcome experiment's evaluation time goes, and changes measured one at a time on a
few games.
""",
    "verify": """
`python bench/verify.py [--real DIR]` corrupts clean trajectories on purpose (drop a `take`,
rename a receptacle, swap two steps, click what is not shown, ...) and scores each verify rule's
precision and recall; TextWorld Express corruptions are labelled by a second engine replaying the
changed record. *findings on uncorrupted gold* must be 0. See [Verify](verify.md).
""",
    "parse_dedupe": """
`python bench/parse_dedupe.py` times parse + remove_loops on a generated SkillRL tree
(`--envs 3000`: 12,000 files, 182 MB), paired run by run with the reference: the real SkillRL
scripts (`--reference-scripts DIR`) or, without them, `bench/reference_model.py`, our
re-implementation of their written description. *ratio_to_reference* is our median wall time over
the reference's (target 0.5x); *CPU ratio* the same in CPU seconds. The reference keeps 300 of the
12,000 trajectories by default, ours keeps every instance it can and quarantines the rest, so the
work differs. On a shared machine the ratio follows the load: our two workers then share the
cores with other work while the single-process reference does not. `--phases` shows where our CPU
goes.
""",
    "soak": """
`python bench/soak.py --runs 100` runs `skillpipe run --stages parse,remove_loops --force` on the
3,000-environment tree in fresh processes, each under a watchdog that records a hang's stacks
(`py-spy dump`) and kills it; it also counts failed runs and processes left behind. Targets:
no hang over 100 runs, p99 at most 1.5x p50. Section 5 of `bench/reliability.py` is the short
version (20 runs).
""",
    "llm_stage": """
`python bench/llm_stage.py`: 200 structured requests against a loopback stub with 0.5 s latency
at concurrency 16; `ratio_to_ideal` is wall time over requests x latency / concurrency.
""",
    "llm_cost": """
`python bench/llm_cost.py`: (a) tokens per minute achieved against a rate-limited loopback
endpoint and the share of 429s, (b) the billed cost of batch mode with prompt caching against
online calls, (c) the embedded server's calls per minute. Details: [LLM endpoints](llm_endpoints.md).
""",
    "scale": """
`python bench/scale.py`: (a) LLM-stage throughput with 1 and 2 Celery workers on a loopback
deployment, (b) the cost of one shard. Details: [Scaling](scaling.md).
""",
    "reliability": """
`python bench/reliability.py`: the kill -9 matrix, corrupt inputs, secrets and path escapes, the
LLM fault storm and the soak. Details: [Reliability](reliability.md).
""",
    "usefulness_validation": """
`python bench/usefulness_validate.py [--scorer FOLDER]`: the usefulness score against the labelled
set (`tests/data/usefulness/`: 331 thinks, 55 bank items, each *helps*, *empty* or *harmful*).
AUROC is helps against the rest (in brackets: helps against harmful); precision and recall are
those of keeping an item (gain above the threshold, 0) against the *helps* label, for the score
alone and the content rules alone. Targets: AUROC 0.80 on thinks, 0.75 on bank items. What the
scorer gets wrong: [Usefulness](usefulness.md).
""",
    "usefulness_overhead": """
`python bench/usefulness_overhead.py --run-dir ROOT/runs/RUN_ID` after a run with the usefulness
gate on: the scoring time (the usefulness stage, and the bank items' held-out steps in the skills
stage) over the data stages' wall time without it. Target: at most 0.25 on the shipped sample.
""",
}
