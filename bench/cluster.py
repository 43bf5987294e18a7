"""A real Airflow 3 deployment on loopback for the distributed tests and the scale benchmark.

:class:`Cluster` starts, in a temp folder and on free 127.0.0.1 ports:

* PostgreSQL (the Debian server found by ``pg_config --bindir``) as the Airflow metadata DB and
  the Celery result backend; as root it runs as the ``postgres`` (else ``nobody``) account,
  because the server refuses to run as root;
* Redis (``redis-server``) as the Celery broker;
* the Airflow components a CeleryExecutor deployment needs in Airflow 3: ``api-server`` (the
  workers' task processes talk to its execution API), ``scheduler``, ``dag-processor``;
* ``workers`` Celery workers (``airflow celery worker``), each with its own hostname.

Every setting is an environment variable (:meth:`Cluster.airflow_env`); no ``airflow.cfg`` is
edited. Every process gets the marker variable :data:`MARKER` with a token unique to this
cluster, so :meth:`Cluster.leftovers` finds anything still running that the cluster started,
including grandchildren in other sessions; :meth:`Cluster.stop` stops the process groups and
then kills whatever still carries the token.

Use: ``with Cluster(tmp_dir, workers=2) as c: c.trigger("skillpipe", run_id, conf);
c.wait_run("skillpipe", run_id, timeout_s=900)``. Times are seconds.
"""
from __future__ import annotations

import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MARKER = "SKILLPIPE_DIST_CLUSTER"
BIN = os.path.dirname(sys.executable)
AIRFLOW = os.path.join(BIN, "airflow")


class ClusterError(RuntimeError):
    """A component did not start, or a DAG run did not end in time; the message carries the tail
    of the relevant logs."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path: str, n: int = 3000) -> str:
    """The last ``n`` characters of the text file at ``path`` ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def pg_bindir() -> str:
    """Folder of the PostgreSQL server programs: ``$SKILLPIPE_PG_BIN``, else the folder holding an
    ``initdb`` on PATH, else ``pg_config --bindir`` (Debian keeps them off PATH). Raises
    :class:`ClusterError` when none is found."""
    if os.environ.get("SKILLPIPE_PG_BIN"):
        return os.environ["SKILLPIPE_PG_BIN"]
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        raise ClusterError(f"PostgreSQL server not found (install the Debian package postgresql): {e}") from e
    if not os.path.exists(os.path.join(out, "initdb")):
        raise ClusterError(f"pg_config --bindir gives {out}, which has no initdb: install postgresql")
    return out


def _stat(pid: str) -> tuple[str, int]:
    """``(state letter, session id)`` of process ``pid`` from procfs."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b") ", 1)[-1].split()
    return fields[0].decode(), int(fields[3])


def leftovers(token: str, sessions: set | frozenset = frozenset()) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every live process that is in one of ``sessions`` (each
    component leads its own) or whose environment carries ``MARKER=token`` (a descendant that
    left the session). Read from procfs; zombies and processes we may not read are skipped.
    Programs that rewrite their title (postgres, uvicorn, celery) may hide their environment,
    hence the session test."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            state, sid = _stat(d)
            if state == "Z":
                continue
            if sid not in sessions:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        found.append((int(d), cmd))
    return found


def process_tree(root_pid: int) -> set[int]:
    """Pids of the live, non-zombie processes that are ``root_pid``, in its session (``root_pid``
    leads it) or descended from it by parent pid (read from procfs): what a machine loss takes
    with a worker. The task process an Airflow 3 worker forks leads its own process group but
    stays in the worker's session."""
    parents, tree = {}, set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b") ", 1)[-1].split()
        except OSError:
            continue
        if fields[0] == b"Z":
            continue
        pid, ppid, sid = int(d), int(fields[1]), int(fields[3])
        parents[pid] = ppid
        if pid == root_pid or sid == root_pid:
            tree.add(pid)
    for pid in parents:  # descendants that left the session
        p, seen = pid, set()
        while p in parents and p not in seen and p > 1:
            if p in tree:
                tree.add(pid)
                break
            seen.add(p)
            p = parents[p]
    return tree


@dataclass
class Proc:
    """One started component: its name, process (leader of its own process group) and log file."""
    name: str
    popen: subprocess.Popen
    log: str
    stop_signal: int = signal.SIGTERM


@dataclass
class Cluster:
    """The deployment described in the module docstring, rooted at ``workdir`` (an existing,
    empty folder; AIRFLOW_HOME and the logs go there). ``workers``: Celery workers;
    ``concurrency``: task slots per worker; ``extra_env``: more variables for every component;
    ``worker_env(i)``: more variables for worker ``i`` only (e.g. its own cache folder, as on
    its own machine)."""
    workdir: str
    workers: int = 2
    concurrency: int = 1
    extra_env: dict = field(default_factory=dict)
    worker_env: Callable[[int], dict] | None = None
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    procs: list = field(default_factory=list)
    sessions: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.home = os.path.join(self.workdir, "airflow")
        self.logs = os.path.join(self.workdir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.pg_port, self.redis_port, self.api_port = free_port(), free_port(), free_port()
        self.pg_dir = ""
        self.db_url = f"postgresql+psycopg2://airflow@127.0.0.1:{self.pg_port}/postgres"
        self._secrets = (secrets.token_hex(16), secrets.token_hex(16))

    # -- environment ---------------------------------------------------------------------------
    def airflow_env(self) -> dict:
        """The environment of every Airflow component and CLI call: executor, metadata DB, broker,
        result backend, DAG folder, execution API URL, shared secrets, the cluster marker."""
        jwt, key = self._secrets
        api = f"http://127.0.0.1:{self.api_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update({
            "AIRFLOW_HOME": self.home,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url,
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://airflow@127.0.0.1:{self.pg_port}/postgres",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.concurrency),
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(REPO, "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__API__BASE_URL": api,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt,
            "AIRFLOW__API__SECRET_KEY": key,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "15",
            "PYTHONPATH": REPO,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            MARKER: self.token,
        })
        env.update(self.extra_env)
        return env

    # -- processes -----------------------------------------------------------------------------
    def _spawn(self, name: str, args: list, stop_signal=signal.SIGTERM, **kw) -> Proc:
        log = os.path.join(self.logs, f"{name}.log")
        out = open(log, "ab")
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=kw.pop("env", self.airflow_env()), start_new_session=True,
                             cwd=kw.pop("cwd", REPO), **kw)
        out.close()
        proc = Proc(name, p, log, stop_signal)
        self.procs.append(proc)
        self.sessions.add(p.pid)
        return proc

    def _wait_for(self, what: str, ready, timeout_s: float, proc: Proc | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.popen.poll() is not None:
                raise ClusterError(f"{what} exited with {proc.popen.returncode}:\n{tail(proc.log)}")
            try:
                if ready():
                    return
            except Exception:  # noqa: BLE001 - not up yet, whatever the client says
                pass
            time.sleep(1)
        raise ClusterError(f"{what} not ready after {timeout_s:.0f} s:\n{tail(proc.log) if proc else ''}")

    def _start_postgres(self) -> None:
        bindir = pg_bindir()
        self.pg_dir = tempfile.mkdtemp(prefix="skillpipe-pg-")  # the server's account must reach it
        data = os.path.join(self.pg_dir, "data")
        user = {}
        if os.geteuid() == 0:
            account = "postgres" if _has_account("postgres") else "nobody"
            pw = pwd.getpwnam(account)
            os.chown(self.pg_dir, pw.pw_uid, pw.pw_gid)
            user = {"user": pw.pw_uid, "group": pw.pw_gid}
        env = dict(self.airflow_env(), LC_ALL="C.UTF-8")
        init = subprocess.run([os.path.join(bindir, "initdb"), "-D", data, "-U", "airflow", "--auth=trust",
                               "-E", "UTF8", "--locale=C.UTF-8"], env=env, cwd=self.pg_dir,
                              capture_output=True, text=True, timeout=300, **user)
        if init.returncode:
            raise ClusterError(f"initdb failed:\n{init.stdout[-2000:]}{init.stderr[-2000:]}")
        proc = self._spawn("postgres", [os.path.join(bindir, "postgres"), "-D", data, "-h", "127.0.0.1",
                                        "-p", str(self.pg_port), "-k", "", "-F", "-c", "max_connections=300"],
                           stop_signal=signal.SIGINT, env=env, cwd=self.pg_dir, **user)
        self._wait_for("postgres", self._pg_ready, 60, proc)

    def _pg_ready(self) -> bool:
        import psycopg2
        psycopg2.connect(host="127.0.0.1", port=self.pg_port, user="airflow", dbname="postgres").close()
        return True

    def _start_redis(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise ClusterError("redis-server not found: apt-get install -y redis-server")
        proc = self._spawn("redis", [exe, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", self.workdir])

        def ping() -> bool:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        self._wait_for("redis", ping, 30, proc)

    def airflow(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        """Run ``airflow <args>`` against this cluster; raises :class:`ClusterError` on failure."""
        res = subprocess.run([AIRFLOW, *args], env=self.airflow_env(), capture_output=True, text=True,
                             timeout=timeout_s, cwd=REPO)
        if res.returncode:
            raise ClusterError(f"airflow {' '.join(args)} failed ({res.returncode}):\n"
                               f"{res.stdout[-2000:]}{res.stderr[-3000:]}")
        return res

    def start(self) -> "Cluster":
        """Start every component and wait until the API server answers and the DAG folder is
        parsed. Raises :class:`ClusterError` (after stopping what was started) on failure."""
        _exit_on_sigterm()
        try:
            self._start_postgres()
            self._start_redis()
            self.airflow("db", "migrate")
            api = self._spawn("api-server", [AIRFLOW, "api-server", "--host", "127.0.0.1",
                                             "--port", str(self.api_port), "--workers", "1"])
            self._spawn("scheduler", [AIRFLOW, "scheduler"])
            self._spawn("dag-processor", [AIRFLOW, "dag-processor"])
            for i in range(self.workers):
                self.start_worker(i)
            self._wait_for("api-server", lambda: _http_ok(f"http://127.0.0.1:{self.api_port}/api/v2/monitor/health"),
                           300, api)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, i: int) -> Proc:
        """Start Celery worker number ``i`` (hostname ``worker<i>@skillpipe``, no log server: the
        task logs are on the shared disk)."""
        env = dict(self.airflow_env(), **(self.worker_env(i) if self.worker_env else {}))
        return self._spawn(f"worker{i}", [AIRFLOW, "celery", "worker", "-H", f"worker{i}@skillpipe",
                                          "-c", str(self.concurrency), "-s", "--without-gossip"], env=env)

    def kill_worker(self, i: int) -> set[int]:
        """SIGKILL Celery worker ``i`` as a machine loss would: its main process, the pool
        processes and the task processes they run (:func:`process_tree`), all in one sweep with
        no chance to ack, flush or release anything; repeated until nothing of it is left (at most
        10 s). The worker is dropped from :attr:`procs` (so :meth:`wait_run` does not report it as
        a crashed component); its session stays in :attr:`sessions`, so :meth:`remaining` would
        still see a survivor. Returns the pids killed. Raises ``StopIteration`` when no worker
        ``i`` runs."""
        proc = next(p for p in self.procs if p.name == f"worker{i}")
        killed: set[int] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tree = process_tree(proc.popen.pid) - {os.getpid()}
            if not tree:
                break
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed |= tree
            proc.popen.poll()  # reap the main process: a zombie is not in the tree
            time.sleep(0.2)
        proc.popen.wait(timeout=30)
        self.procs.remove(proc)
        return killed

    def worker_of(self, pid: int) -> int | None:
        """Number of the running Celery worker whose process tree holds ``pid``, else ``None``."""
        for p in self.procs:
            if p.name.startswith("worker") and pid in process_tree(p.popen.pid):
                return int(p.name[len("worker"):])
        return None

    def stop(self, grace_s: float = 30) -> list[tuple[int, str]]:
        """Stop every component (workers first, PostgreSQL last): its stop signal to the process
        group, SIGKILL after ``grace_s``; then SIGKILL to any process still carrying the marker.
        Removes the PostgreSQL folder. Returns what was still running before that last sweep."""
        for proc in reversed(self.procs):
            _signal_group(proc.popen, proc.stop_signal)
            try:
                proc.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.popen, signal.SIGKILL)
                proc.popen.wait(timeout=30)
            _signal_group(proc.popen, signal.SIGKILL)  # children left in the group
        self.procs.clear()
        stray = leftovers(self.token, self.sessions)
        for pid, _ in stray:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while leftovers(self.token, self.sessions) and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.pg_dir:
            shutil.rmtree(self.pg_dir, ignore_errors=True)
            self.pg_dir = ""
        return stray

    def remaining(self) -> list[tuple[int, str]]:
        """What still runs of this cluster (see :func:`leftovers`); empty after :meth:`stop`."""
        return leftovers(self.token, self.sessions)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- DAG runs ------------------------------------------------------------------------------
    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        """Rows of ``sql`` on the metadata DB."""
        import psycopg2
        with psycopg2.connect(host="127.0.0.1", port=self.pg_port, user="airflow", dbname="postgres") as con:
            with con.cursor() as cur:
                cur.execute(sql, args)
                return cur.fetchall()

    def wait_dag(self, dag_id: str, timeout_s: float = 300) -> None:
        """Wait until the dag-processor has stored ``dag_id`` (serialized) in the metadata DB."""
        self._wait_for(f"DAG {dag_id} parsed", lambda: self.query(
            "SELECT 1 FROM serialized_dag WHERE dag_id = %s", (dag_id,)), timeout_s,
            next(p for p in self.procs if p.name == "dag-processor"))

    def trigger(self, dag_id: str, run_id: str, conf: dict) -> None:
        """Trigger ``dag_id`` with ``conf`` as DAG run ``run_id`` (``airflow dags trigger``)."""
        self.wait_dag(dag_id)
        self.airflow("dags", "trigger", dag_id, "--run-id", run_id, "--conf", json.dumps(conf))

    def task_states(self, dag_id: str, run_id: str) -> list[tuple]:
        """``(task_id, map_index, state, try_number)`` of every task instance of the run."""
        return self.query("SELECT task_id, map_index, state, try_number FROM task_instance "
                          "WHERE dag_id = %s AND run_id = %s ORDER BY task_id, map_index", (dag_id, run_id))

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float = 900) -> str:
        """Wait until DAG run ``run_id`` is ``success`` and return the state; raises
        :class:`ClusterError` with task states and log tails when it fails or times out."""
        deadline, state = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.popen.poll() is not None]
            if dead:
                raise ClusterError(f"{dead[0].name} exited with {dead[0].popen.returncode} during run "
                                   f"{run_id}\n" + self.diagnose(dag_id, run_id))
            rows = self.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
            state = rows[0][0] if rows else None
            if state in ("success", "failed"):
                break
            time.sleep(3)
        if state != "success":
            raise ClusterError(f"DAG run {run_id}: {state or 'not created'} "
                               f"({'ended' if state == 'failed' else f'after {timeout_s:.0f} s'})\n"
                               + self.diagnose(dag_id, run_id))
        return state

    def diagnose(self, dag_id: str, run_id: str) -> str:
        """Task states, the tails of the failed tasks' logs and of every component's log."""
        lines = [f"  {t}[{m}] {s} (try {n})" for t, m, s, n in self.task_states(dag_id, run_id)]
        for t, m, s, _ in self.task_states(dag_id, run_id):
            if s not in ("failed", "up_for_retry"):
                continue
            folder = os.path.join(self.home, "logs", f"dag_id={dag_id}", f"run_id={run_id}", f"task_id={t}",
                                  *([f"map_index={m}"] if m >= 0 else []))
            for log in sorted(glob.glob(os.path.join(folder, "attempt=*.log")))[-1:]:
                text = tail(log, 200_000)
                errors = [ln[:1500] for ln in text.splitlines() if '"level":"error"' in ln or "Error" in ln]
                lines.append(f"--- {log}: error lines\n" + "\n".join(errors[-4:]))
        for p in self.procs:
            lines.append(f"--- {p.name} ({p.log})\n{tail(p.log, 1200)}")
        return "\n".join(lines)


def _exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit in the main thread, so that a killed test or benchmark
    still runs its ``finally``/``with`` exits and stops the cluster (default: die at once)."""
    import threading
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _has_account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status == 200
