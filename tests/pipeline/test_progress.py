"""pipeline.progress: bars that stay readable when stderr is a log file, not a terminal."""
import io

from pipeline.progress import bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_stream_gets_one_plain_line_per_update():
    buf = io.StringIO()
    b = bar(3, "grpo", unit="step", stream=buf, log_interval_s=0)
    for _ in range(3):
        b.set_postfix(loss="0.5", refresh=False)
        b.update(1)
    b.close()
    out = buf.getvalue()
    assert "\r" not in out
    lines = out.splitlines()
    assert [ln.split("|")[2].split()[0] for ln in lines] == ["0/3", "1/3", "2/3", "3/3"]  # close adds no repeat
    assert lines[-1].startswith("grpo: 100%") and "loss=0.5" in lines[-1]


def test_log_stream_lines_are_rate_limited():
    buf = io.StringIO()
    b = bar(1000, "memory", unit="req", stream=buf, log_interval_s=3600)
    for _ in range(1000):
        b.update(1)
    b.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and "0/1000" in lines[0] and "1000/1000" in lines[1]


def test_terminal_keeps_tqdm_redraws():
    tty = _Tty()
    b = bar(2, "memory", unit="req", stream=tty, mininterval=0)
    b.update(2)
    b.close()
    assert "\r" in tty.getvalue()
