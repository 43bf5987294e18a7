"""The engine, the floor above the stages: it plans a run into shards, runs each stage (or shard)
of the registry :mod:`pipeline.stages` under the run's lock, fingerprints, skips, checks counts and
writes its artifact, and keeps an object-storage run in step with its local mirror. The CLI and
the Airflow DAG call it (:mod:`pipeline.engine.runner`); nothing below it imports it."""
