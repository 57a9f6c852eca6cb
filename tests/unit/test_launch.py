"""The contract between `scrun create` and the anchor: command line and ready pipe."""

import os

from scrunlib.launch import OPTIONS, Launch, ReadyPipe, Report, read_report
from scrunlib.log import LogSettings
from scrunlib.options import parse


def test_the_anchor_parses_what_create_builds():
    launch = Launch(
        root="/run/scrun",
        bundle="/b",
        container_id="-odd-id",
        ready_fd=5,
        log_args=LogSettings(stderr=4, log_file="/l.json").as_args(),
        bundle_is_cwd=True,
        config_file="/b/alt.json",
        pid_file="/p",
        console_socket="/s",
        slurm_conf="/etc/slurm.conf",
    )
    values, words = parse(launch.argv(), OPTIONS, "usage")
    assert words == ["-odd-id"]  # after `--`: an id that looks like an option stays an id
    assert values["root"] == "/run/scrun" and values["bundle"] == "/b"
    assert values["ready-fd"] == "5" and values["bundle-is-cwd"]
    assert (values["pid-file"], values["console-socket"]) == ("/p", "/s")
    assert values["slurm-conf"] == "/etc/slurm.conf"
    assert values["config"] == "/b/alt.json"
    assert (values["stderr-level"], values["log"]) == ("4", "/l.json")


def test_optional_parts_are_left_out():
    argv = Launch(root="/r", bundle="/b", container_id="c", ready_fd=3, log_args=[]).argv()
    assert argv == ["--root", "/r", "--bundle", "/b", "--ready-fd", "3", "--", "c"]


def report_of(send: str | None) -> Report:
    read_end, write_end = os.pipe()
    pipe = ReadyPipe(write_end)
    if send == "created":
        pipe.created(42)
    elif send is not None:
        pipe.error(send)
    else:
        os.close(write_end)  # the anchor died without a word
    return read_report(read_end)


def test_ready_pipe_reports():
    created = report_of("created")
    assert created.created and created.error == ""
    failed = report_of("salloc: refused")
    assert not failed.created and failed.error == "salloc: refused"
    silent = report_of(None)
    assert not silent.created and silent.error == ""


def test_ready_pipe_with_an_invalid_fd_does_not_raise():
    # An anchor started with a closed or bogus --ready-fd must still go on to end its job.
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    pipe = ReadyPipe(write_end)
    pipe.error("salloc: refused")
    pipe.created(42)  # and a second report is a no-op
