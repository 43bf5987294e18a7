"""The training sections of the run config (sft:, grpo:, eval:): defaults, coercion, range checks,
run-set keys, and the overrides the CLI options and DAG params apply."""
import pytest

from pipeline.core.config import ConfigError, PipelineConfig, from_dict, load_config, to_dict
from pipeline.core.train_config import EVAL_SMOKE, GRPO_SMOKE, GRPOConfig, EvalConfig, SFTFitConfig, with_overrides
from pipeline.runconfig import training_config


def _err(data) -> str:
    with pytest.raises(ConfigError) as e:
        from_dict(data)
    return str(e.value)


def test_defaults_are_the_cpu_budget_of_make_run_and_the_dag():
    cfg = PipelineConfig()
    assert cfg.sft == SFTFitConfig() and cfg.sft.max_steps == 3
    assert (cfg.grpo.max_steps, cfg.grpo.num_generations, cfg.grpo.tasks_per_step, cfg.grpo.lora_r) == (2, 2, 1, 8)
    assert cfg.grpo.beta == GRPOConfig().beta == 0.01  # the fields outside GRPO_SMOKE keep SkillRL's
    assert (cfg.eval.episodes, cfg.eval.max_steps, cfg.eval.max_new_tokens, cfg.eval.torch_threads) == (4, 5, 48, 1)
    assert (EvalConfig().episodes, EvalConfig().max_steps) == (8, 10)  # skillpipe eval without --config
    assert {k: getattr(cfg.grpo, k) for k in GRPO_SMOKE} == GRPO_SMOKE
    assert {k: getattr(cfg.eval, k) for k in EVAL_SMOKE} == EVAL_SMOKE


def test_sections_are_read_coerced_and_given_the_runs_prompt():
    cfg = from_dict({"sft": {"max_steps": "5", "learning_rate": "1e-4", "lora": "false"},
                     "grpo": {"num_generations": 4.0, "games": ["coin", "twc"]},
                     "eval": {"episodes": 6, "games": ["coin"]}, "prompt": {"history_length": 4}})
    assert (cfg.sft.max_steps, cfg.sft.learning_rate, cfg.sft.lora) == (5, 1e-4, False)
    assert (cfg.grpo.num_generations, cfg.grpo.games, cfg.grpo.max_steps) == (4, ["coin", "twc"], 2)
    assert (cfg.eval.episodes, cfg.eval.games, cfg.eval.max_steps) == (6, ["coin"], 5)
    assert cfg.grpo.prompt.history_length == cfg.eval.prompt.history_length == 4


@pytest.mark.parametrize("data,msg", [
    ({"sft": {"max_steps": 0}}, "sft.max_steps: must be >= 1, got 0"),
    ({"sft": {"lora_r": 0}}, "sft.lora_r: must be >= 1 when lora is on, got 0"),
    ({"sft": {"precision": "fp16"}}, "sft.precision: must be one of auto, bf16, fp32, got 'fp16'"),
    ({"sft": {"max_stepz": 3}}, "unknown config key sft.max_stepz; known: ["),
    ({"sft": {"output_dir": "x"}}, "sft.output_dir: not a config key: set by the run (runs/<run_id>/...)"),
    ({"grpo": {"num_generations": 1}}, "grpo.num_generations: must be >= 2, got 1"),
    ({"grpo": {"learning_rate": "fast"}}, "grpo.learning_rate: expected a finite number, got 'fast' (str)"),
    ({"grpo": {"games": ["bogus"]}}, "grpo.games: unknown TextWorld Express game(s) 'bogus'; known: arithmetic"),
    ({"grpo": {"temperature": 0}}, "grpo.temperature: must be > 0, got 0.0"),
    ({"grpo": {"prompt": {"history_length": 1}}}, "grpo.prompt: not a config key: set by the run's prompt: section"),
    ({"grpo": {"skill_bank": "b.json"}}, "grpo.skill_bank: not a config key: set by the run"),
    ({"eval": {"episodes": 0}}, "eval.episodes: must be >= 1, got 0"),
    ({"eval": {"games": []}}, "eval.games: unknown TextWorld Express game(s) (none); known: arithmetic"),
    ({"eval": {"fold": "train"}}, "eval.fold: must be one of test, dev, got 'train'"),
    ({"eval": [1]}, "eval: expected a mapping of keys to values, got list [1]"),
])
def test_bad_values_are_one_clear_error_naming_section_and_key(data, msg):
    assert _err(data).startswith(msg)


def test_overrides_skip_unset_values_and_are_checked_like_the_file():
    base = PipelineConfig().eval
    cfg = with_overrides("eval", base, {"episodes": 2, "games": "coin, twc", "max_steps": None})
    assert (cfg.episodes, cfg.games, cfg.max_steps) == (2, ["coin", "twc"], 5)
    assert base.episodes == 4  # the section itself is left alone
    with pytest.raises(ConfigError, match=r"^sft\.max_steps: must be >= 1, got 0$"):
        with_overrides("sft", SFTFitConfig(), {"max_steps": 0})
    with pytest.raises(ConfigError, match=r"^unknown sft config keys \['epochs'\]"):
        with_overrides("sft", SFTFitConfig(), {"epochs": 1})


def test_training_config_reads_the_file_and_applies_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("sft:\n  max_steps: 7\n  lora_r: 4\ngrpo:\n  learning_rate: 2.0e-5\n")
    sft = training_config(str(path), "sft", {"max_steps": 9})
    assert (sft.max_steps, sft.lora_r) == (9, 4)
    assert training_config(str(path), "grpo").learning_rate == 2e-5
    assert training_config(None, "grpo").max_steps == 2
    # the data sections are unchanged by the training sections
    assert to_dict(load_config(str(path)))["export"] == to_dict(PipelineConfig())["export"]
