"""skillpipe: SkillRL-style SFT data production for LLM agents (stage library; no Airflow import)."""
__version__ = "0.2.0"
