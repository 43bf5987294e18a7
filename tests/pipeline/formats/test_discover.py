"""Input discovery, sniffing, and corrupt inputs: each quarantined with a reason and line."""
import json
import os
import shutil

from pipeline.formats.discover import detect_format, list_input_files, read_file
from pipeline.core.records import QuarantineRow, Trajectory
from tests.helpers.paths import FIXTURES

FIX = os.path.join(FIXTURES, "formats")


def test_list_input_files_skips_docs_and_hidden(tmp_path):
    (tmp_path / "b").mkdir()
    for name in ("b/x.txt", "a.json", "SOURCE.md", "README", ".hidden", "b/README.md"):
        (tmp_path / name).write_text("x")
    assert list_input_files(str(tmp_path)) == [str(tmp_path / "a.json"), str(tmp_path / "b" / "x.txt")]
    assert list_input_files(str(tmp_path / "a.json")) == [str(tmp_path / "a.json")]


def test_list_input_files_follows_links_once(tmp_path):
    """Linked files and folders are inputs; a cycle or a second path to the same data adds
    nothing (the plain path wins); a broken link is listed so read_file quarantines it."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("x")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "y.txt").write_text("y")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "z.txt").write_text("z")
    inp = tmp_path / "in"
    inp.mkdir()
    os.symlink(tmp_path / "d", inp / "dlink")  # a folder outside the input: entered
    os.symlink(tmp_path / "d" / "x.txt", inp / "same.txt")  # same file again: links go in path order
    os.symlink(tmp_path / "elsewhere" / "z.txt", inp / "zlink.txt")
    os.symlink(inp, inp / "dlink_loop")  # a cycle back to the input root
    os.symlink(tmp_path / "missing", inp / "broken.txt")
    os.symlink(tmp_path / ".git", inp / ".hidden_link")
    assert list_input_files(str(inp)) == [str(inp / "broken.txt"), str(inp / "dlink" / "x.txt"),
                                          str(inp / "zlink.txt")]
    # the same file under its plain path and a link: the plain path is kept
    os.symlink(tmp_path / "d" / "x.txt", tmp_path / "d" / "0link.txt")
    assert list_input_files(str(tmp_path / "d")) == [str(tmp_path / "d" / "x.txt")]


def test_folder_of_links_to_datasets_reads_them_and_quarantines_dangling(tmp_path):
    # the tester's repro: --input is a folder holding only links to dataset folders (it used
    # to be "no input files"), plus one dangling link (it used to vanish without a row)
    os.symlink(os.path.abspath("data/samples/react-webshop"), tmp_path / "webshop")
    os.symlink(os.path.abspath("data/samples/eto-alfworld"), tmp_path / "eto")
    os.symlink(tmp_path / "gone", tmp_path / "gone_link")
    files = list_input_files(str(tmp_path))
    assert files == [str(tmp_path / "eto" / "alfworld_sft_sample.json"), str(tmp_path / "gone_link"),
                     str(tmp_path / "webshop" / "webshop_react_episodes_sample.txt")]
    got = [[(i.reason, i.line) if isinstance(i, QuarantineRow) else i.source_format for i in read_file(p)]
           for p in files]
    assert got == [["chat_json"] * 4, [("unreadable_file", None)], ["react_webshop_log"] * 4]
    (q,) = list(read_file(files[1]))
    assert q.detail.startswith("FileNotFoundError: [Errno 2] No such file or directory")


def test_detect_format_on_samples():
    got = {p.split("samples/")[1].split("/")[0]: detect_format(p, open(p, "rb").read(65536))
           for p in list_input_files("data/samples")}
    assert got == {"eto-alfworld": "chat_json", "react-alfworld": "react_alfworld_json",
                   "react-webshop": "react_webshop_log", "reflexion-fewshot-failures": "reflexion_txt",
                   "skillrl-rollouts": "skillrl_txt"}


def test_corrupt_inputs_quarantined_others_parse(tmp_path):
    shutil.copytree(os.path.join(FIX, "corrupt"), tmp_path / "in")
    shutil.copy("data/samples/react-webshop/webshop_react_episodes_sample.txt", tmp_path / "in" / "good.txt")
    got = {}
    for p in list_input_files(str(tmp_path / "in")):
        items = list(read_file(p))
        got[os.path.basename(p)] = [(i.reason, i.line) if isinstance(i, QuarantineRow) else "traj" for i in items]
    assert got == {
        "bad_header.txt": [("bad_step_header", 5)],
        "binary.dat": [("binary_file", 1)],
        "empty.txt": [("empty_file", 1)],
        "good.txt": ["traj"] * 4,
        "headerless.txt": [("unrecognised_format", 1)],
        "not_utf8.txt": [("not_utf8", 2)],
        "truncated_chat.json": ["traj", ("invalid_json", 14)],
        "wrong_format.txt": [("unrecognised_format", 1)],
    }


def test_forced_wrong_reader_gives_no_records():
    (q,) = list(read_file("data/samples/react-webshop/webshop_react_episodes_sample.txt", fmt="skillrl_txt"))
    assert isinstance(q, QuarantineRow) and q.reason == "no_steps"
    items = list(read_file("data/samples/react-webshop/webshop_react_episodes_sample.txt", fmt="chat_json"))
    assert [i.reason for i in items] == ["invalid_json"]
    assert not any(isinstance(i, Trajectory) for i in items)


def test_header_less_rollout_forced_as_skillrl_txt():
    (q,) = list(read_file(os.path.join(FIX, "corrupt", "headerless.txt"), fmt="skillrl_txt"))
    assert (q.reason, q.line) == ("no_steps", 1)


def _jsonl(messages_text):
    return json.dumps({"messages": [{"role": "user", "content": "Are both bands from the same country?"},
                                    {"role": "assistant", "content": messages_text}]})


def test_20mb_single_line_is_quarantined_and_the_rest_read(tmp_path):
    # > WHOLE_READ_BYTES, so the streaming UTF-8 check and the JSONL line reader both see it
    p = tmp_path / "big.jsonl"
    with open(p, "w", encoding="utf-8") as f:
        f.write(_jsonl("Thought: a.\nAction: search[x]") + "\n")
        f.write('{"messages": [' + "x" * (20 << 20) + "\n")
        f.write(_jsonl("Thought: b.\nAction: finish[yes]") + "\n")
    items = list(read_file(str(p)))
    assert [(i.reason, i.line, len(i.raw)) if isinstance(i, QuarantineRow) else "traj" for i in items] == [
        "traj", ("invalid_json", 2, 4000), "traj"]


def test_not_utf8_deep_in_a_large_file_has_its_line(tmp_path):
    p = tmp_path / "late.txt"
    p.write_bytes(b"Step -1 | Action: None | Reward: 0.000 | Done: False\n" + b"Obs: ok\n" * (3 << 20) + b"\xff\n")
    (q,) = list(read_file(str(p)))
    assert (q.reason, q.line) == ("not_utf8", 1 + 1 + (3 << 20))


def test_read_file_feeds_the_digest_whole_and_streamed(monkeypatch):
    """The digest gets exactly the file's bytes on both read paths (the parse stage hashes its
    inputs with it), also for a file that is quarantined."""
    import hashlib

    from pipeline.formats import discover
    from pipeline.core.fsutil import sha256_file
    rollout = "data/samples/skillrl-rollouts/env000/" + sorted(os.listdir("data/samples/skillrl-rollouts/env000"))[0]
    empty = os.path.join(FIX, "corrupt", "empty.txt")
    for limit in (discover.WHOLE_READ_BYTES, 100):  # 100 bytes: the file is checked in blocks first
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        for path in (rollout, empty):
            h = hashlib.sha256()
            list(read_file(path, digest=h))
            assert h.hexdigest() == sha256_file(path)


BOM_SOURCES = {  # one file per reader that opens files itself -> its exact trajectories, quarantine rows
    "data/samples/eto-alfworld/alfworld_sft_sample.json": (4, []),
    "data/samples/react-alfworld/alfworld_3prompts_react_sample.json": (3, []),
    "data/samples/react-webshop/webshop_react_episodes_sample.txt": (4, []),
    "data/samples/reflexion-fewshot-failures/webshop_reflection_few_shot_examples.txt": (2, []),
    "tests/fixtures/formats/real/fireact_hotpotqa_head.jsonl": (4, []),
    "tests/fixtures/formats/real/reflexion_hotpotqa_excerpt.txt": (4, []),
    "tests/fixtures/formats/real/memory_search.json": (1, [("memory_without_steps", 32), ("memory_without_steps", 60)]),
}


def _units(path):
    return [(i.reason, i.line) if isinstance(i, QuarantineRow) else
            (i.source_format, i.task, i.outcome, i.source_line, [(s.action, s.line) for s in i.steps])
            for i in read_file(path)]


def test_utf8_bom_is_invisible_to_every_reader(tmp_path, monkeypatch):
    """A leading BOM (EF BB BF) changes nothing: same units, same lines, on both read paths
    (whole-file text and readers opening the file themselves). It used to cost ETO JSON all its
    records, a JSONL its line 1, and the log readers their first block."""
    from pipeline.formats import discover
    for limit in (discover.WHOLE_READ_BYTES, 100):  # 100 bytes: the large-file path
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        for src, (n_traj, rows) in BOM_SOURCES.items():
            p = tmp_path / os.path.basename(src)
            p.write_bytes(b"\xef\xbb\xbf" + open(src, "rb").read())
            with_bom = _units(str(p))
            assert with_bom == _units(src), src
            assert (len(with_bom) - len(rows), [u for u in with_bom if len(u) == 2]) == (n_traj, rows), src
    # the skillrl_txt reader gets its text from read_file: its lines are unchanged too
    rollout = "data/samples/skillrl-rollouts/env000/" + sorted(os.listdir("data/samples/skillrl-rollouts/env000"))[0]
    p = tmp_path / "env000" / os.path.basename(rollout)
    p.parent.mkdir()
    p.write_bytes(b"\xef\xbb\xbf" + open(rollout, "rb").read())
    (a,), (b,) = list(read_file(rollout)), list(read_file(str(p)))
    assert [s.line for s in b.steps] == [s.line for s in a.steps] and b.task == a.task != ""
    (q,) = list(read_file(str(_bom_only(tmp_path))))
    assert (q.reason, q.line) == ("empty_file", 1)


def _bom_only(tmp_path):
    p = tmp_path / "bom_only.txt"
    p.write_bytes(b"\xef\xbb\xbf\n")
    return p


FIREACT = "tests/fixtures/formats/real/fireact_hotpotqa_head.jsonl"


def _fireact_with_latin1(tmp_path, *line_nos):
    """The real FireAct head (4 JSONL records) with a Latin-1 'ä' (byte E4, invalid UTF-8) put
    into each of ``line_nos`` (1-based), e.g. an editor re-saving one line in Latin-1."""
    lines = open(FIREACT, "rb").read().split(b"\n")
    for no in line_nos:
        lines[no - 1] = lines[no - 1].replace(b'"role": "user"', b'"role": "us\xe4r"', 1)
    p = tmp_path / "fireact_latin1.jsonl"
    p.write_bytes(b"\n".join(lines))
    return p


def test_jsonl_bad_byte_quarantines_only_its_line(tmp_path, monkeypatch):
    """The tester's repro (a large JSONL with one Latin-1 byte on its last line was one
    whole-file not_utf8 row, every good record lost): now only that line is quarantined, on
    both read paths, and the other records are exactly those of the clean file."""
    from pipeline.formats import discover
    p = _fireact_with_latin1(tmp_path, 4)
    for limit in (discover.WHOLE_READ_BYTES, 100):  # 100 bytes: the streamed large-file path
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        items = list(read_file(str(p)))
        assert [(i.reason, i.line) if isinstance(i, QuarantineRow) else (i.source_line, i.record_index)
                for i in items] == [(1, 0), (2, 1), (3, 2), ("not_utf8", 4)]
        assert _units(str(p))[:3] == _units(FIREACT)[:3]
        q = items[3]
        assert q.detail == "invalid UTF-8 in this JSONL line (bytes E4); the other lines are read"
        assert q.raw.startswith('{"messages": [{"role": "us\ufffdr", "content": "Which actress played')


def test_jsonl_several_bad_lines_and_a_cut_last_sequence(tmp_path, monkeypatch):
    # lines 1 and 3 damaged, and the file ends inside a 3-byte sequence (E2 80 of U+2026) on an
    # extra line 5: four records + one cut line = five units, three of them not_utf8
    from pipeline.formats import discover
    p = _fireact_with_latin1(tmp_path, 1, 3)
    p.write_bytes(p.read_bytes() + b'{"messages": []}\xe2\x80')
    for limit in (discover.WHOLE_READ_BYTES, 100):
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        items = list(read_file(str(p)))
        assert [(i.reason, i.line) if isinstance(i, QuarantineRow) else (i.source_line, i.record_index)
                for i in items] == [("not_utf8", 1), (2, 1), ("not_utf8", 3), (4, 3), ("not_utf8", 5)]
        assert (items[4].detail, items[4].raw) == (
            "invalid UTF-8 in this JSONL line (bytes E2 80); the other lines are read", '{"messages": []}\ufffd')


def test_json_document_with_a_bad_byte_stays_one_row(tmp_path, monkeypatch):
    # a JSON list cannot be split safely: the whole file is one not_utf8 row at the bad byte's line
    from pipeline.formats import discover
    data = open("data/samples/eto-alfworld/alfworld_sft_sample.json", "rb").read()
    p = tmp_path / "eto.json"
    p.write_bytes(data.replace(b"toiletpaperhanger 1, you see nothing", b"toiletpaperhanger 1, you see n\xf6thing", 1))
    for limit in (discover.WHOLE_READ_BYTES, 100):
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        (q,) = list(read_file(str(p)))
        assert (q.reason, q.line) == ("not_utf8", 24)


UTF16_TEXT = "Step -1 | Action: None | Reward: 0.000 | Done: False\nObs: You are in the middle of a room.\n"


def test_utf16_is_not_utf8_with_the_conversion(tmp_path, monkeypatch):
    """UTF-16 text used to be binary_file ("NUL bytes"); it is not_utf8 naming iconv."""
    from pipeline.formats import discover
    cases = {  # encoding written -> (how it is recognised, the iconv source name)
        "utf-16-le": ("byte-order mark FF FE", "UTF-16"), "utf-16-be": ("byte-order mark FE FF", "UTF-16"),
        "utf-16le": ("NUL every other byte", "UTF-16LE"), "utf-16be": ("NUL every other byte", "UTF-16BE")}
    for limit in (discover.WHOLE_READ_BYTES, 100):
        monkeypatch.setattr(discover, "WHOLE_READ_BYTES", limit)
        for enc, (how, name) in cases.items():
            p = tmp_path / f"{enc}.txt"
            bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}.get(enc, b"")
            p.write_bytes(bom + UTF16_TEXT.encode(enc.replace("-le", "le").replace("-be", "be")))
            (q,) = list(read_file(str(p)))
            assert (q.reason, q.line, q.detail) == (
                "not_utf8", 1, f"file looks like UTF-16 text ({how}), not UTF-8; convert it, "
                               f"e.g. iconv -f {name} -t UTF-8 FILE > FILE.utf8"), enc


def test_binary_with_nul_every_other_byte_stays_binary(tmp_path):
    # little-endian 16-bit integers 1..299: NUL in every odd byte, but control characters when
    # read as UTF-16, so it is no text file
    p = tmp_path / "ints.bin"
    p.write_bytes(b"".join(i.to_bytes(2, "little") for i in range(1, 300)))
    (q,) = list(read_file(str(p)))
    assert (q.reason, q.line) == ("binary_file", 1)


def test_every_reader_takes_one_source_and_uses_its_text_and_uri(tmp_path):
    """One signature for all readers: ``read(Source)``. Given the text, a reader does not open
    the file (here a path that does not exist) and records ``Source.uri`` on its trajectories."""
    from pipeline.formats.common import Source
    from pipeline.formats.discover import READERS
    seen = {}
    for p in list_input_files("data/samples") + list_input_files(FIX):
        fmt = detect_format(p, open(p, "rb").read(65536))
        if fmt and fmt not in seen and any(isinstance(i, Trajectory) for i in read_file(p, fmt)):
            seen[fmt] = p
    assert set(seen) == set(READERS) - {"skillrl_bank_json"}  # a bank is never trajectories
    for fmt, p in seen.items():
        via_discover = list(read_file(p, fmt, source_uri="u/x.txt"))
        text = open(p, encoding="utf-8-sig", newline=None).read()
        direct = list(READERS[fmt](Source(p, text=text, uri="u/x.txt")))
        assert direct == via_discover, fmt
        moved = list(READERS[fmt](Source(str(tmp_path / "gone" / os.path.basename(p)), text=text, uri="u/x.txt")))
        trajs = [t for t in moved if isinstance(t, Trajectory)]
        assert len(trajs) == sum(isinstance(t, Trajectory) for t in direct) > 0, fmt
        assert {t.source_uri for t in trajs} == {"u/x.txt"}, fmt
