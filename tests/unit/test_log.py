"""scrunlib.log: every output gets its lines, in its format, at every level; that logging
imports nothing the hot path may not is checked with the other imports in test_lean_imports."""

import json
import re
import sys

import pytest
from scrunlib import log
from scrunlib.log import DEBUG, ERROR, INFO, LogSettings

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


def write_lines(tmp_path, stderr_level):
    """One error and one info line to stderr, a JSON --log file and a text extra file."""
    settings = LogSettings(
        stderr=stderr_level,
        file=INFO,
        log_file=str(tmp_path / "log.json"),
        extra_file=str(tmp_path / "extra.log"),
        extra_level=INFO,
        program="scrun-test",
    )
    log.configure(settings)
    log.error("it {broke}")
    log.info("just so")
    return (tmp_path / "log.json").read_text(), (tmp_path / "extra.log").read_text()


@pytest.mark.parametrize("stderr_level", [INFO, DEBUG])
def test_every_output_gets_its_lines(tmp_path, capsys, stderr_level):
    json_log, extra_log = write_lines(tmp_path, stderr_level)
    assert capsys.readouterr().err == "scrun-test: error: it {broke}\nscrun-test: just so\n"
    entries = [json.loads(line) for line in json_log.splitlines()]
    assert [(e["level"], e["msg"]) for e in entries] == [
        ("error", "it {broke}"),
        ("info", "just so"),
    ]
    assert all(re.fullmatch(STAMP, e["time"]) for e in entries)
    lines = extra_log.splitlines()
    assert re.fullmatch(rf"{STAMP} scrun-test\[\d+\]: error: it {{broke}}", lines[0])
    assert re.fullmatch(rf"{STAMP} scrun-test\[\d+\]: info: just so", lines[1])


def test_lines_above_a_threshold_are_not_written(tmp_path, capsys):
    log.configure(LogSettings(stderr=ERROR))
    log.info("not shown")
    log.debug("nor this")
    assert capsys.readouterr().err == ""


def test_the_direct_path_keeps_sys_stderr_late_bound(monkeypatch, capsys):
    log.configure(LogSettings())
    monkeypatch.setattr(sys, "stderr", sys.stdout)
    log.error("to stdout now")
    assert capsys.readouterr().out == "scrun: error: to stdout now\n"


def test_one_formatter_for_every_style():
    log.configure(LogSettings(program="scrun-test"))
    moment = 86400.25  # 1970-01-02, a quarter second past midnight UTC
    assert log.format_line("stderr", INFO, "m", moment) == "scrun-test: m\n"
    assert log.format_line("stderr", DEBUG, "m", moment) == "scrun-test: debug: m\n"
    assert log.format_line("syslog", ERROR, "m", moment) == "m"
    assert json.loads(log.format_line("json", DEBUG + 1, "m", moment)) == {
        "level": "debug",
        "msg": "m",
        "time": "1970-01-02T00:00:00.250000Z",
    }
    assert re.fullmatch(
        r"1970-01-02T00:00:00\.250000Z scrun-test\[\d+\]: error: m\n",
        log.format_line("text", ERROR, "m", moment),
    )
