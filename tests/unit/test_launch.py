"""The contract between `scrun create` and the anchor: the Launch (scrun-anchor builds it
from its command line) and the ready pipe."""

import json
import os

from scrun_anchor.main import launch_from_options
from scrunlib.launch import OPTIONS, ReadyPipe, Report, anchor_logging, read_report
from scrunlib.log import INFO, LogSettings
from scrunlib.options import parse
from scrunlib.spool import Spool
from scrunlib.state import ContainerState


def test_scrun_anchor_builds_from_its_options_the_launch_create_hands_over(tmp_path):
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["x"]}}
    (bundle / "alt.json").write_text(json.dumps(config))
    spool = Spool(str(tmp_path / "root"), "c1")
    os.makedirs(spool.root)
    spool.create()
    ContainerState(id="c1", bundle=str(bundle), rootfs=str(bundle / "rootfs")).save(spool)
    argv = [
        *("--root", spool.root, "--bundle", str(bundle), "--ready-fd", "5"),
        *("--stderr-level=4", "--syslog-level=0", "--file-level=2", "--log-format=text"),
        *("--log=/l.json", "--bundle-is-cwd", "--config", str(bundle / "alt.json")),
        *("--pid-file", "/p", "--console-socket", "/s", "--slurm-conf", "/etc/slurm.conf"),
        *("--", "c1"),
    ]
    values, words = parse(argv, OPTIONS, "usage")
    launch = launch_from_options(values, words, 5)
    assert launch.spool.container_id == "c1" and launch.state.id == "c1"
    assert launch.bundle.config_file == str(bundle / "alt.json")
    assert list(launch.bundle.args) == ["x"]
    assert launch.ready_fd == 5 and not launch.bundle_given
    assert (launch.pid_file, launch.console_socket) == ("/p", "/s")
    assert launch.slurm_conf_option == "/etc/slurm.conf"
    assert launch.log_file == "/l.json" and launch.log.log_file is None  # once created
    assert (launch.log.stderr, launch.log.extra_file, launch.log.extra_level) == (
        0,
        spool.log_file,
        4,
    )
    assert launch.log.log_format == "text" and launch.log.program == "scrun-anchor"


def test_the_anchor_logs_to_its_own_log_at_least_at_info():
    caller = LogSettings(stderr=0, syslog=5, file=2, log_file="/l.json")
    settings = anchor_logging(caller, "/spool/anchor.log")
    assert (settings.stderr, settings.syslog, settings.file) == (0, 5, 2)
    assert (settings.extra_file, settings.extra_level) == ("/spool/anchor.log", INFO)
    assert settings.log_file is None


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
    assert not pipe.create_gone  # a bad fd says nothing of create


def test_ready_pipe_knows_when_create_has_gone() -> None:
    read_end, write_end = os.pipe()
    pipe = ReadyPipe(write_end)
    assert not pipe.check_create()
    os.close(read_end)  # create was killed
    assert pipe.check_create()


def test_a_report_nobody_reads_says_create_has_gone() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    pipe = ReadyPipe(write_end)
    pipe.created(42)
    assert pipe.create_gone
    assert not ReadyPipe(None).check_create()  # nobody waits: nobody has gone
