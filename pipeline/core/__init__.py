"""The ground floor: the run config, the records and their Arrow schemas, the artifacts of a run and
its layout, freshness and step manifests, object storage, deadlines and atomic files. Every other
floor builds on it; it imports only itself and :mod:`pipeline.envs` (tests/test_house_imports.py)."""
