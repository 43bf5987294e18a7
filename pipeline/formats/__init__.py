"""Input formats: one reader module per format, and :mod:`~pipeline.formats.discover`, which lists
input files, sniffs their format and dispatches to the reader.

Every reader has the same signature, ``read(src: common.Source) -> Iterator[Trajectory |
QuarantineRow]``: ``src`` carries the path, the env hint, the success threshold, the URI to record
and (for files read whole) the decoded text. A reader never raises for bad input: it yields a
quarantine row (``common.bad``) for what it cannot read and keeps going.

How to add a reader:
1. Write ``pipeline/formats/<name>.py`` with ``read(src)``; get the text with ``src.read_text()``
   (or stream it with ``src.open()``; a JSON array of records: ``common.read_json_members``) and
   build each trajectory with ``common.reader_trajectory``, recording ``source_uri=src.source_uri``.
2. Register it in ``discover.READERS`` under ``<name>`` and teach ``discover.detect_format`` its shape.
3. Add a sample under ``tests/fixtures/formats/`` and a test in ``tests/pipeline/formats/``.
"""
