"""scrunlib.admin_output: loguru writes the admin tools' stderr in the runtime's line shape,
scrunlib.log's lines up to the chosen level and every error; the colours only at a
terminal."""

from scrunlib import admin_output, log
from scrunlib.errors import internal_error


def test_log_lines_up_to_the_level_in_the_runtimes_shape(capsys):
    admin_output.configure("scrun-stage", log.VERBOSE)
    log.error("it {broke} <red>")  # neither loguru's fields nor its colour tags
    log.info("just so")
    log.verbose("in detail")
    log.debug("too detailed")
    assert capsys.readouterr().err == (
        "scrun-stage: error: it {broke} <red>\n"
        "scrun-stage: just so\n"
        "scrun-stage: verbose: in detail\n"
    )


def test_an_error_is_written_whatever_the_level(capsys):
    admin_output.configure("scrun-stage", 0)
    log.error("a log line: not at level 0")
    admin_output.error("scrun-lua-check", "cannot read x")
    assert capsys.readouterr().err == "scrun-lua-check: error: cannot read x\n"


def test_the_bug_reports_removal_of_every_handler_leaves_errors_written(capsys):
    """The --debug report (scrunlib.errors) replaces loguru's handlers with its own."""
    try:
        raise ValueError("a bug")
    except ValueError as exc:
        error = internal_error(exc, traceback=True)
    admin_output.error("scrun-stage", error.message)
    err = capsys.readouterr().err
    assert "the traceback with its values" in err and "ValueError: a bug" in err
    assert err.endswith("scrun-stage: error: internal error: ValueError: a bug (a bug in scrun)\n")
