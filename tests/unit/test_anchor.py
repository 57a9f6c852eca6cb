"""The anchor's create / serve / stop against a fake Slurm (pytest-subprocess).

Every Slurm command the anchor runs must be registered here: an unexpected one fails the
test. What is checked is what a user relies on: a failed create leaves no job and no
socket, `start` runs the step it should, `kill` signals it, the end records the exit code
and ends the job.
"""

import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_steps import FakeSteps
from scrun_anchor import container as container_module
from scrun_anchor import main as anchor_main
from scrun_anchor import step_signals
from scrun_anchor.channel import ContainerStderr
from scrun_anchor.container import Container
from scrun_anchor.creation import Cancelled, Creation
from scrun_anchor.staging import ContainerStaging
from scrunlib import bundle as bundles
from scrunlib import exit_record, protocol
from scrunlib.errors import InvalidInput, LuaError, SlurmError
from scrunlib.launch import Launch, ReadyPipe, anchor_logging
from scrunlib.log import LogSettings
from scrunlib.siteconfig import SiteConfig
from scrunlib.spool import Spool
from scrunlib.stageout import PendingStageOut
from scrunlib.state import ContainerState, Status
from scrunlib.user_queue import QUEUE_READING

JOB = 77
RUNNING = f"JobId={JOB} JobName=scrun JobState=RUNNING NodeList=n1 NumNodes=1 NumCPUs=1"


class Site:
    """A site whose Slurm commands live in `bin` (pytest-subprocess answers for them)."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        for name in ("srun", "salloc", "scancel", "scontrol", "squeue", "sacct"):
            (self.bin / name).write_text('#!/bin/sh\ntouch "$0.ran"; exit 99\n')
            (self.bin / name).chmod(0o755)
        (root / "etc").mkdir()
        self.slurm_conf = root / "etc" / "slurm.conf"
        self.slurm_conf.write_text("ClusterName=unit\n")
        self.config = SiteConfig(bin_dir=str(self.bin), slurm_conf=str(self.slurm_conf))

    def tool(self, name: str) -> str:
        return str(self.bin / name)

    def ran(self, name: str) -> bool:
        """Whether the (unfaked) command ran: salloc is spawned without subprocess, so
        pytest-subprocess never sees it."""
        return (self.bin / f"{name}.ran").exists()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Site:
    for name in list(os.environ):
        if name.startswith(("SCRUN_", "SLURM_")):
            monkeypatch.delenv(name)
    return Site(tmp_path)


@pytest.fixture
def spool(tmp_path: Path, bundle: Path) -> Spool:
    spool = Spool(str(tmp_path / "root"), "c1")
    os.makedirs(spool.root)
    spool.create()
    ContainerState(id="c1", bundle=str(bundle), rootfs=str(bundle / "rootfs")).save(spool)
    return spool


def creation(site: Site, spool: Spool, bundle: Path, ready: ReadyPipe | None = None) -> Creation:
    return Creation(
        Launch(
            spool=spool,
            bundle=bundles.load(str(bundle)),
            state=ContainerState.load(spool),
            site=site.config,
            log=anchor_logging(LogSettings(), spool.log_file),
            log_file=None,
            started=time.monotonic(),
        ),
        ready or ReadyPipe(None),
    )


# salloc as far as the anchor relies on it: run the holder after `--` in the job, with
# some of Slurm's output variables, then end the job with its exit status (here: written
# beside the script).
SALLOC_VARIABLES = f"SLURM_JOB_ID={JOB} SLURM_JOB_NODELIST=n1 SLURM_TASKS_PER_NODE=1"
FAKE_SALLOC = f"""#!/bin/sh
while [ "$1" != "--" ]; do shift; done; shift
{SALLOC_VARIABLES} "$@"; echo $? > "$0.status"
"""


def expect_allocation(fp, site: Site) -> None:
    """A real (fake) salloc; every other Slurm command answered by pytest-subprocess."""
    (site.bin / "salloc").write_text(FAKE_SALLOC)
    fp.allow_unregistered(True)
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")


def job_status(site: Site) -> str:
    """The exit status salloc ended the job with (a shell's report: 128+N for signal N)."""
    return (site.bin / "salloc.status").read_text().strip()


def saved(spool: Spool) -> ContainerState:
    return ContainerState.load(spool)


# -- create: each failure undoes what was done -------------------------------------------


def test_a_bad_variable_fails_before_any_job(fp, site, spool, bundle, monkeypatch) -> None:
    monkeypatch.setenv("SCRUN_TIMELIMIT", "soon")
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    with pytest.raises(InvalidInput, match="SCRUN_TIMELIMIT"):
        creation(site, spool, bundle).create()
    assert not site.ran("salloc")
    assert not os.path.exists(spool.socket)


def test_a_refused_allocation_leaves_no_socket(fp, site, spool, bundle) -> None:
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    (site.bin / "salloc").write_text(
        "#!/bin/sh\necho 'salloc: error: Job submit/allocate failed: "
        "Invalid partition name specified' >&2\nexit 1\n"
    )
    fp.allow_unregistered(True)
    fp.register([site.tool("scancel"), fp.any()])  # counted, had it run
    with pytest.raises(SlurmError, match=r"allocation refused: .*Invalid partition"):
        creation(site, spool, bundle).create()
    assert not os.path.exists(spool.socket)
    assert fp.call_count([site.tool("scancel"), fp.any()]) == 0  # there is no job to end
    assert not site.ran("scancel")


def test_a_refused_allocation_names_the_job_options_asked_for(
    fp, site, spool, bundle, monkeypatch
) -> None:
    monkeypatch.setenv("SCRUN_PARTITION", "nope")
    monkeypatch.setenv("SCRUN_JOB_NAME", "named")  # not an allocation option: not named
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    (site.bin / "salloc").write_text(
        "#!/bin/sh\necho 'salloc: error: Invalid partition name specified' >&2\nexit 1\n"
    )
    fp.allow_unregistered(True)
    with pytest.raises(SlurmError) as refused:
        creation(site, spool, bundle).create()
    assert refused.value.message == (
        "allocation refused: salloc: error: Invalid partition name specified "
        "(job options: SCRUN_PARTITION=nope)"
    )


@pytest.fixture(autouse=True)
def quick_reap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake salloc never learns of a (faked) scancel: kill it at once. Steps being
    ended are looked for again at once (fake_steps counts listings, not seconds). A fake
    step's signals need not wait for a process to start."""
    monkeypatch.setattr("scrun_anchor.preparation.REAP_SECONDS", 0.1)
    monkeypatch.setattr("scrunlib.slurm.STEP_POLL_SECONDS", 0.01)
    monkeypatch.setattr(step_signals, "SETTLE_SECONDS", 0.0)


def test_a_job_that_ended_before_start_fails_the_start(fp, site, spool, bundle) -> None:
    """Slurm ended it (scancel): salloc has gone, and the job's record says how."""
    expect_allocation(fp, site)
    container = Container(creation(site, spool, bundle).create())
    assert saved(spool).job_id == JOB  # what `delete` would need, had the anchor died
    allocation = container.preparation.allocation
    assert allocation is not None
    salloc = allocation.salloc
    salloc.signal_group(signal.SIGTERM)
    assert salloc.wait(5) is not None
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)],
                stdout=f"JobId={JOB} JobState=CANCELLED\n")  # fmt: skip
    assert container.handle({"op": "start"}) == {
        "ok": False,
        "error": f"job {JOB} is not running (CANCELLED)",
    }
    assert saved(spool).status == Status.CREATED
    assert container.step is None  # no srun
    container.life.stop("SIGTERM")  # what `scrun delete` sends next
    assert container.stop() == 0
    assert not os.path.exists(spool.socket)


def test_a_failed_stage_in_is_staged_out_and_its_job_cancelled(
    fp, site, spool, bundle, tmp_path, capfd
) -> None:
    marks = tmp_path / "marks"
    (site.slurm_conf.parent / "scrun.lua").write_text(
        f"""
local function mark(text) local f = io.open("{marks}", "a"); f:write(text); f:close() end
function slurm_scrun_stage_in() mark("in "); slurm.log_error("no room"); return slurm.ERROR end
function slurm_scrun_stage_out() mark("out"); slurm.log_error("nothing to remove"); return 1 end
"""
    )
    expect_allocation(fp, site)
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])
    with pytest.raises(LuaError, match=r"stage-in failed: .*no room"):
        creation(site, spool, bundle).create()
    assert marks.read_text() == "in out"
    # create reports the failure; no container ran, so the stage-out failure is only logged
    # (the anchor's log reaches this stderr in a unit test)
    assert capfd.readouterr().err.count("scrun: error: stage-out failed: nothing to remove") == 1
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == 1
    assert not os.path.exists(spool.socket)


def test_a_create_killed_during_stage_in_has_its_job_ended(
    fp, site, spool, bundle, tmp_path
) -> None:
    """`scrun create` SIGKILLed while the anchor stages: the engine was told create failed
    and will never end this container, so the anchor undoes it all at once."""
    marks = tmp_path / "marks"
    (site.slurm_conf.parent / "scrun.lua").write_text(
        f"""
local function mark(text) local f = io.open("{marks}", "a"); f:write(text); f:close() end
function slurm_scrun_stage_in() mark("in "); os.execute("sleep 2"); return slurm.SUCCESS end
function slurm_scrun_stage_out() mark("out"); return slurm.SUCCESS end
"""
    )
    expect_allocation(fp, site)
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])
    read_end, write_end = os.pipe()
    killed = threading.Timer(0.5, os.close, (read_end,))  # the waiting create dies
    killed.start()
    began = time.monotonic()
    with pytest.raises(Cancelled, match="the waiting `scrun create` was killed"):
        creation(site, spool, bundle, ReadyPipe(write_end)).create()
    killed.join()
    assert marks.read_text() == "in out"
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == 1
    assert not os.path.exists(spool.socket)
    assert time.monotonic() - began < 10  # not left for a later delete: none will come


def test_a_create_gone_before_the_report_has_nothing_kept(fp, site, spool, bundle) -> None:
    expect_allocation(fp, site)
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])
    read_end, write_end = os.pipe()
    os.close(read_end)
    with pytest.raises(Cancelled):
        creation(site, spool, bundle, ReadyPipe(write_end)).create()
    assert not os.path.exists(spool.socket)
    assert saved(spool).status != Status.CREATED


@pytest.mark.parametrize("create_waits", [True, False])
def test_a_failed_creation_leaves_the_spool_to_create_while_it_waits(
    spool, monkeypatch, create_waits
) -> None:
    read_end, write_end = os.pipe()
    if not create_waits:
        os.close(read_end)
    monkeypatch.setattr(anchor_main, "_exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    launch = Launch(
        spool=spool,
        bundle=bundles.load(ContainerState.load(spool).bundle),
        state=ContainerState.load(spool),
        site=SiteConfig(),
        log=anchor_logging(LogSettings(), spool.log_file),
        log_file=None,
        started=time.monotonic(),
    )
    with pytest.raises(SystemExit):
        anchor_main._failed(launch, ReadyPipe(write_end), "salloc: refused")
    assert os.path.isdir(spool.path) == create_waits
    if create_waits:
        assert os.read(read_end, 100) == b"error salloc: refused\n"
        os.close(read_end)


# -- created: start, kill, the end -------------------------------------------------------


@pytest.fixture
def created(fp, site, spool, bundle) -> Iterator[Container]:
    expect_allocation(fp, site)
    container = Container(creation(site, spool, bundle).create())
    assert saved(spool).status == Status.CREATED and saved(spool).job_id == JOB
    assert saved(spool).nodes == "n1"  # from salloc, when `created` is reported
    assert os.path.exists(spool.socket)
    yield container
    allocation = container.preparation.allocation
    if allocation is not None:  # a test that did not stop it: end its salloc
        allocation.reap(timeout=0)


def step_argv(site: Site, bundle: Path) -> list[str]:
    return [site.tool("srun"), "--jobid", str(JOB), "--job-name", "scrun", "--quiet", "--quiet",
            "--export=NONE", "--container", str(bundle), "--chdir=/", "--", "true"]  # fmt: skip


def test_the_job_env_is_what_salloc_gave_its_holder(fp, site, bundle, created) -> None:
    """Slurm's output variables as salloc exports them to its command, as upstream's scrun
    takes them: no `scontrol show job` for a job of our own. SLURM_CONF is scrun's."""
    env: dict[str, str] = {}
    fp.register(step_argv(site, bundle), callback=lambda process: env.update(process.kwargs["env"]))
    assert created.handle({"op": "start"}) == {"ok": True}
    assert {name: env.get(name) for name in ("SLURM_JOB_ID", "SLURM_TASKS_PER_NODE")} == {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_TASKS_PER_NODE": "1",
    }
    assert env["SLURM_CONF"] == str(site.slurm_conf)
    assert fp.call_count([site.tool("scontrol"), fp.any()]) == 0


def test_a_holder_that_could_not_say_its_env_has_the_job_record_read(
    fp, site, spool, bundle
) -> None:
    """The holder answered its job but no environment (its `env` missing): the job's
    SLURM_* variables come from its record, read once."""
    fp.allow_unregistered(True)
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    (site.bin / "salloc").write_text(
        f'#!/bin/sh\necho "{JOB} n1"; echo; exec >/dev/null\n'
        'read status; echo "$status" > "$0.status"\n'
    )
    record = [site.tool("scontrol"), "-o", "show", "job", str(JOB)]
    fp.register(record, stdout=RUNNING.replace("JobName=scrun", "JobName=from-the-record"))
    env: dict[str, str] = {}
    fp.register(step_argv(site, bundle), callback=lambda process: env.update(process.kwargs["env"]))
    container = Container(creation(site, spool, bundle).create())
    try:
        assert container.handle({"op": "start"}) == {"ok": True}
        assert (env["SLURM_JOB_ID"], env["SLURM_JOB_NAME"]) == (str(JOB), "from-the-record")
        assert fp.call_count(record) == 1
    finally:
        allocation = container.preparation.allocation
        assert allocation is not None and allocation.variables is None
        allocation.reap(timeout=0)


def test_start_launches_the_step(fp, site, spool, bundle, created) -> None:
    fp.register(step_argv(site, bundle), wait=30)
    assert created.handle({"op": "start"}) == {"ok": True}
    assert fp.call_count(step_argv(site, bundle)) == 1
    state = saved(spool)
    assert state.status == Status.RUNNING and state.step_pid == created.step.pid
    assert created.handle({"op": "start"}) == {"ok": True}  # again: nothing more to do
    assert fp.call_count(step_argv(site, bundle)) == 1


def test_kill_signals_the_step(fp, site, bundle, created) -> None:
    fp.register(step_argv(site, bundle), wait=30)
    created.handle({"op": "start"})
    fp.register([site.tool("squeue"), fp.any()], stdout=f"{JOB}.0 scrun\n{JOB}.1 other\n")
    fp.register([site.tool("scancel"), "--signal=10", f"{JOB}.0"])
    assert created.handle({"op": "kill", "signal": 10}) == {"ok": True}
    assert fp.call_count([site.tool("scancel"), "--signal=10", f"{JOB}.0"]) == 1


def test_a_signal_right_after_start_waits_for_the_steps_process(
    fp, site, bundle, created, monkeypatch
) -> None:
    """`podman run -d`, then `podman stop` at once: the step's srun has just started, and
    the container's process may not run yet on its node (a SIGTERM then would be lost, and
    `stop` would wait its whole timeout). A signal reaches Slurm once the step is
    SETTLE_SECONDS old; a SIGKILL, which no process can miss, at once."""
    monkeypatch.setattr(step_signals, "SETTLE_SECONDS", 0.5)
    fp.register(step_argv(site, bundle), wait=30)
    created.handle({"op": "start"})
    launched = created.step_started
    sent: dict[int, float] = {}
    fp.register([site.tool("squeue"), fp.any()], stdout=f"{JOB}.0 scrun\n", occurrences=2)
    for signum in (9, 15):
        fp.register(
            [site.tool("scancel"), f"--signal={signum}", f"{JOB}.0"],
            callback=lambda _process, signum=signum: sent.update(
                {signum: time.monotonic() - launched}
            ),
        )
    assert created.handle({"op": "kill", "signal": 9}) == {"ok": True}
    created.sigkill.escalate()  # what serve() does next: the SIGKILL goes once answered
    assert created.handle({"op": "kill", "signal": 15}) == {"ok": True}
    assert sent[9] < 0.3
    assert sent[15] >= 0.5


def test_the_end_records_the_exit_code_and_ends_the_job(fp, site, spool, bundle, created) -> None:
    fp.register(step_argv(site, bundle), returncode=3)
    created.handle({"op": "start"})
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    steps = FakeSteps(fp, str(site.bin), JOB, {})
    assert created.stop() == 3
    state = saved(spool)
    assert (state.status, state.exit_code, state.job_ended) == (Status.STOPPED, 3, True)
    assert state.error is None  # the container ended, not Slurm
    assert job_status(site) == "3"  # salloc ended the job with the container's code
    assert steps.events == ["squeue: none"]  # its tasks have ended: no scancel
    assert not site.ran("scancel")
    assert not os.path.exists(spool.socket)


def test_a_job_whose_salloc_was_killed_is_cancelled_at_the_end(
    fp, site, spool, bundle, created
) -> None:
    """salloc killed by a signal (the OOM killer, an admin) cannot end the job: the job
    and its step go on, and the container's end cancels the job rather than leave it to
    run to its time limit."""
    fp.register(step_argv(site, bundle), returncode=0)
    created.handle({"op": "start"})
    allocation = created.preparation.allocation
    assert allocation is not None
    allocation.salloc.signal(signal.SIGKILL)  # salloc alone: its job holder stays
    assert allocation.salloc.wait(5) == -signal.SIGKILL
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    FakeSteps(fp, str(site.bin), JOB, {})
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])
    assert created.stop() == 0
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == 1
    assert saved(spool).job_ended


def test_a_job_slurm_ended_is_reported(fp, site, spool, bundle, created) -> None:
    fp.register(step_argv(site, bundle), returncode=137)
    FakeSteps(fp, str(site.bin), JOB, {})
    created.handle({"op": "start"})
    fp.register(
        [site.tool("scontrol"), "-o", "show", "job", str(JOB)],
        stdout=f"JobId={JOB} JobState=TIMEOUT",
    )
    assert created.stop() == 137
    assert saved(spool).error == f"job {JOB} ended by Slurm: TIMEOUT"


# srun's 1 for a step Slurm says the OOM killer hit: the container's code is the one its node
# kept (scrunlib.exit_record), 137 without one; a plain 1 otherwise
SACCT = ["-n", "-P", "-j", str(JOB), "-o", "JobID,JobName,State,NTasks,NodeList"]


def read_records(site: Site, nodes: str) -> list[str]:
    return [
        site.tool("srun"), "--jobid", str(JOB), "--quiet", "--job-name", "scrun-exit",
        "--ntasks-per-node=1", "--overlap", "--chdir=/", f"--nodelist={nodes}",
        "--", "/bin/sh", "-c", exit_record.read_script(JOB),
    ]  # fmt: skip


def a_step_that_failed(
    fp, site: Site, bundle: Path, created: Container, *, job_state: str, step_state: str
) -> None:
    """`created`, started, with a step whose srun exits 1 and that accounting records in
    `step_state` (its job in `job_state`)."""
    fp.register(step_argv(site, bundle), returncode=1)
    created.handle({"op": "start"})
    FakeSteps(fp, str(site.bin), JOB, {})
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    fp.register(
        [site.tool("sacct"), *SACCT],
        stdout=f"{JOB}|scrun|{job_state}|1|n1\n{JOB}.0|scrun|{step_state}|1|n1\n",
    )


@pytest.mark.parametrize(
    ("state", "records", "code"),
    [
        ("OUT_OF_MEMORY", "77.0.n1.9 0\n", 0),  # only a child was killed: the main process's
        ("OUT_OF_MEMORY", "77.0.n1.9 3\n", 3),
        ("OUT_OF_MEMORY", "77.0.n1.9 137\n", 137),  # the main process was killed
        ("OUT_OF_MEMORY", "", 137),  # no node kept one (another RunTimeRun): the SIGKILL
        ("OUT_OF_MEMORY", "77.1.n1.9 0\n", 137),  # another step's
        ("FAILED", None, 1),  # no OOM kill: srun's 1 is the container's
    ],
)
def test_the_code_behind_slurms_out_of_memory_mark(
    fp, site, spool, bundle, created, state: str, records: str | None, code: int
) -> None:
    a_step_that_failed(fp, site, bundle, created, job_state=state, step_state=state)
    if records is not None:
        fp.register(read_records(site, "n1"), stdout=records)
    assert created.stop() == code
    assert saved(spool).exit_code == code
    assert job_status(site) == str(code)
    assert fp.call_count(read_records(site, "n1")) == (records is not None)


def test_a_step_that_failed_on_its_node_is_said_in_one_line(
    fp, site, spool, bundle, created, capfd
) -> None:
    """srun's 1 for a step accounting records NODE_FAIL (slurmstepd could not start it:
    a cgroup it could not write, say; srun's own word is silenced): the code stays 1, and
    the user reads why in one line instead of nothing; the nodes' check is not run."""
    a_step_that_failed(fp, site, bundle, created, job_state="FAILED", step_state="NODE_FAIL")
    assert created.stop() == 1
    message = (
        f"container c1's step {JOB}.0 failed on its node n1 (Slurm records NODE_FAIL; that "
        "node's slurmd log says why)"
    )
    assert saved(spool).error == message
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert f"scrun: error: {message}" in told
    assert not [call for call in fp.calls if "scrun-check" in call]


# -- the end, in order: the tasks ended, then stage-out, then `stopped` --------------------

STAGING_SCRIPT = """
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out() return slurm.SUCCESS end
"""


@pytest.fixture
def staged(fp, site, spool, bundle) -> Iterator[Container]:
    """A created container whose site stages it (a scrun.lua that does nothing)."""
    (site.slurm_conf.parent / "scrun.lua").write_text(STAGING_SCRIPT)
    expect_allocation(fp, site)
    container = Container(creation(site, spool, bundle).create())
    assert container.preparation.staging is not None
    yield container
    allocation = container.preparation.allocation
    if allocation is not None:  # a test that did not stop it: end its salloc
        allocation.reap(timeout=0)


def record_stage_out(
    monkeypatch: pytest.MonkeyPatch, spool: Spool, steps: FakeSteps
) -> list[dict[str, object]]:
    """What `scrun state` would print while stage-out runs, one document per stage-out;
    `steps.events` gets a "stage-out" where it ran."""
    seen: list[dict[str, object]] = []
    original = ContainerStaging.stage_out

    def stage_out(staging: ContainerStaging) -> None:
        steps.events.append("stage-out")
        seen.append(saved(spool).oci_state())
        original(staging)

    monkeypatch.setattr(ContainerStaging, "stage_out", stage_out)
    return seen


def test_the_container_is_running_until_stage_out_has_run(
    fp, site, spool, bundle, staged, monkeypatch
) -> None:
    """A client that acts on `stopped` (podman 4.3's `state`, a script) must not act while
    the container's files are still being copied back: stage-out sees it running, with
    the anchor's pid; stopped, with its exit code, comes after."""
    steps = FakeSteps(fp, str(site.bin), JOB, {})
    seen = record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=3)
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 3
    (during,) = seen
    assert (during["status"], during["pid"]) == ("running", os.getpid())
    assert "exitCode" not in during
    after = saved(spool).oci_state()
    assert (after["status"], after["pid"], after["exitCode"]) == ("stopped", 0, 3)
    assert steps.events == ["squeue: none", "stage-out"]  # its tasks had ended


FAILING_STAGE_OUT = """
function slurm_scrun_stage_in() return slurm.SUCCESS end
function slurm_scrun_stage_out()
    slurm.log_error("copying back failed (exit 1): rsync: open\\n  denied")
    slurm.log_info("not said")
    slurm.log_error("what the container wrote is kept in /scratch/c1")
    return slurm.ERROR
end
"""


def test_a_failed_stage_out_is_told_in_one_line_on_the_containers_stderr(
    fp, site, spool, bundle, capfd
) -> None:
    """What the container wrote did not come back: the user reads why and where it is
    kept, every error line of the script's in one line; the container's exit code stays."""
    (site.slurm_conf.parent / "scrun.lua").write_text(FAILING_STAGE_OUT)
    expect_allocation(fp, site)
    container = Container(creation(site, spool, bundle).create())
    FakeSteps(fp, str(site.bin), JOB, {})
    fp.register(step_argv(site, bundle), returncode=3)
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    assert container.handle({"op": "start"}) == {"ok": True}
    assert container.stop() == 3
    told = capfd.readouterr().err.splitlines()
    # (the anchor's log reaches this stderr too in a unit test: once as its log, once told)
    assert (
        told.count(
            "scrun: error: stage-out failed: copying back failed (exit 1): rsync: open denied; "
            "what the container wrote is kept in /scratch/c1"
        )
        == 2
    ), told


def test_a_step_that_ends_by_itself_is_waited_for_not_cancelled(
    fp, site, spool, bundle, staged, monkeypatch
) -> None:
    """srun has ended with its tasks' status, and Slurm lists the step a moment longer
    (until slurmstepd reports it complete): stage-out waits for that, without a scancel,
    which would make the step's accounting record say CANCELLED."""
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    steps.ends_by_itself(0, listings=2)
    record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=0)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 0
    assert steps.events == [f"squeue: {JOB}.0 scrun"] * 2 + ["squeue: none", "stage-out"]


def test_tasks_that_outlive_a_killed_srun_are_ended_before_stage_out(
    fp, site, spool, bundle, staged, monkeypatch
) -> None:
    """Asked to stop, the step's srun ignores SIGTERM past step_grace and is killed; the
    SIGKILL scancel sent never reached the tasks, which Slurm still lists. The step is
    cancelled in Slurm, and stage-out runs only once Slurm no longer lists it."""
    site.config.step_grace = 0.2
    (site.bin / "srun").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 30\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"}, lingers=1)
    seen = record_stage_out(monkeypatch, spool, steps)
    assert staged.handle({"op": "start"}) == {"ok": True}
    staged.life.stop("SIGTERM")  # what `scrun delete` sends
    assert staged.stop() == 128 + signal.SIGKILL
    assert steps.events == [
        f"squeue: {JOB}.0 scrun",
        f"scancel --signal=9 {JOB}.0",  # the tasks survive it (faked)
        f"squeue: {JOB}.0 scrun",
        f"scancel {JOB}.0",  # the step cancelled in Slurm
        f"squeue: {JOB}.0 scrun",  # its tasks take a moment to end
        "squeue: none",
        "stage-out",
    ]
    assert seen[0]["status"] == "running"
    assert saved(spool).status == Status.STOPPED


def test_stage_out_is_left_to_delete_while_the_tasks_may_still_run(
    fp, site, spool, bundle, staged, monkeypatch
) -> None:
    """A step Slurm still lists slurmctld_wait seconds after its cancel: stage-out is not
    run (stage.json stays, for `scrun delete` once the job's end has ended the tasks); the
    job still ends and the container is stopped."""
    site.config.step_grace, site.config.slurmctld_wait = 0.3, 0.5
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"}, lingers=999)
    seen = record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=0)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 0
    assert seen == [] and "stage-out" not in steps.events
    assert os.path.exists(spool.stage_file)
    state = saved(spool)
    assert (state.status, state.job_ended) == (Status.STOPPED, True)
    assert job_status(site) == "0"


def test_a_step_slurm_lists_past_its_cancel_is_waited_for_then_staged_out(
    fp, site, spool, bundle, staged, monkeypatch, capfd
) -> None:
    """slurmctld restarted while the container ended: it lists the step until its
    slurmstepd reports the end again (a minute later), past step_grace after the cancel.
    The anchor waits for that (up to slurmctld_wait), the user told once, then stages
    out: giving up after step_grace lost what the container wrote last (seen with a real
    slurmctld restart)."""
    site.config.step_grace = 0.3
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"}, lingers=40)  # > a step_grace
    record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=0)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 0
    assert steps.events[-2:] == ["squeue: none", "stage-out"]
    assert steps.events.count(f"scancel {JOB}.0") == 2  # the step is cancelled each round
    assert not os.path.exists(spool.stage_file)
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert told == [
        "scrun: Slurm still lists the steps of container c1 after their cancel: waiting for "
        "it to confirm that they have ended, to copy its files back"
    ]


def test_a_container_that_ends_while_slurmctld_is_down_waits_for_its_answer(
    fp, site, spool, bundle, staged, monkeypatch, capfd
) -> None:
    """slurmctld does not answer when the container ends (a restart): the anchor asks
    again until it does, the user told once, and only then stages out. Leaving stage-out
    to `scrun delete` would run it after the engine removed the container."""
    monkeypatch.setattr(container_module, "SLURM_RETRY_SECONDS", 0.01)
    steps = FakeSteps(fp, str(site.bin), JOB, {})
    steps.unanswered = 3
    record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=0)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 0
    assert steps.events == ["squeue: no answer"] * 3 + ["squeue: none", "stage-out"]
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert told == [
        "scrun: Slurm does not answer (cannot list the steps of job 77: slurm_get_job_steps "
        "error: Unable to contact slurm controller (connect failure)): waiting for it to "
        "confirm that container c1 has ended, to copy its files back"
    ]
    assert not os.path.exists(spool.stage_file)


def test_a_slurmctld_that_stays_down_leaves_stage_out_to_delete_and_says_so(
    fp, site, spool, bundle, staged, monkeypatch, capfd
) -> None:
    """Past the site's slurmctld_wait the anchor gives up: stage-out is not run (its
    tasks may still write), stage.json stays for `scrun delete`, and the user reads why
    the container's files are not back."""
    monkeypatch.setattr(container_module, "SLURM_RETRY_SECONDS", 0.01)
    site.config.slurmctld_wait = 0.2
    steps = FakeSteps(fp, str(site.bin), JOB, {})
    steps.unanswered = 10**6
    seen = record_stage_out(monkeypatch, spool, steps)
    fp.register(step_argv(site, bundle), returncode=0)
    assert staged.handle({"op": "start"}) == {"ok": True}
    assert staged.stop() == 0
    assert seen == [] and os.path.exists(spool.stage_file)
    # the engine may remove its bundle before that delete: the config's copy is read then
    pending = PendingStageOut.load(spool)
    assert pending is not None
    kept = Path(pending.context.config_file)
    assert kept == Path(spool.path) / "stage-config.json"
    assert kept.read_text() == (bundle / "config.json").read_text()
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert (
        "scrun: error: container c1's files were not copied back: Slurm cannot say whether "
        "its tasks have ended (cannot list the steps of job 77: slurm_get_job_steps error: "
        "Unable to contact slurm controller (connect failure)); `scrun delete c1` copies "
        "them once Slurm says its tasks have ended"
    ) in told, told


def test_kill_before_start_ends_the_container(fp, site, spool, created) -> None:
    assert created.handle({"op": "kill", "signal": 15}) == {"ok": True}
    assert created.life.asked_to_stop
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    assert created.stop() == 128 + 15
    assert saved(spool).exit_code == 143
    assert job_status(site) == "143"  # the holder killed itself with SIGTERM


def test_a_sigkill_before_start_ends_at_once_leaving_stage_out_and_the_job_to_delete(
    fp, site, spool, bundle, staged, monkeypatch
) -> None:
    """SIGKILL is immediate: the engine waits 5 s for the anchor's exit (podman's `rm -f`
    fails past them), more than a stage-out and the job's end may take on a login node
    busy removing hundreds. Before the step ran, the anchor leaves both to `scrun delete`
    (what the spool says is pending: stage.json, with the config's copy, and the job)."""
    steps = FakeSteps(fp, str(site.bin), JOB, {})
    seen = record_stage_out(monkeypatch, spool, steps)
    assert staged.handle({"op": "kill", "signal": 9}) == {"ok": True}
    assert staged.stop() == 137
    assert seen == []
    state = saved(spool)
    assert (state.exit_code, state.job_ended) == (137, False)
    assert state.effective_status() == Status.STOPPING  # stopped once the anchor has exited
    pending = PendingStageOut.load(spool)
    assert pending is not None
    assert pending.context.config_file == os.path.join(spool.path, "stage-config.json")
    assert not (site.bin / "salloc.status").exists()  # the job is still held
    assert fp.call_count([site.tool("scancel"), fp.any()]) == 0
    assert not os.path.exists(spool.socket)


def test_a_sigkill_during_stage_in_kills_its_commands_and_leaves_the_rest_to_delete(
    fp, site, spool, bundle, tmp_path
) -> None:
    marks = tmp_path / "marks"
    (site.slurm_conf.parent / "scrun.lua").write_text(
        f"""
local function mark(text) local f = io.open("{marks}", "a"); f:write(text); f:close() end
function slurm_scrun_stage_in()
  mark("in "); slurm.allocator_command("sleep 30"); mark("slept "); return slurm.SUCCESS
end
function slurm_scrun_stage_out() mark("out"); return slurm.SUCCESS end
"""
    )
    site.config.create_wait = 0.3
    expect_allocation(fp, site)
    container = Container(creation(site, spool, bundle).create())
    assert saved(spool).status == Status.CREATED  # reported while stage-in runs
    began = time.monotonic()
    assert container.handle({"op": "kill", "signal": 9}) == {"ok": True}
    assert container.stop() == 137
    assert time.monotonic() - began < 5
    assert marks.read_text().startswith("in ") and "out" not in marks.read_text()
    assert PendingStageOut.load(spool) is not None
    assert not saved(spool).job_ended
    allocation = container.preparation.allocation
    assert allocation is not None and allocation.held()  # for `scrun delete` to end
    allocation.reap(timeout=0)


def test_a_joined_job_runs_a_step_of_its_own_and_is_not_ended(
    fp, site, spool, bundle, monkeypatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", str(JOB))
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    fp.register(
        [site.tool("scontrol"), "-o", "show", "job", str(JOB)],
        stdout=f"{RUNNING} UserId=me({os.getuid()})\n",
    )
    container = Container(creation(site, spool, bundle).create())
    state = saved(spool)
    assert (state.existing_job, state.step_name) == (True, "scrun-c1")
    assert not site.ran("salloc")
    fp.register([site.tool("squeue"), fp.any()], stdout=f"{JOB}.4 scrun-c1\n{JOB}.0 other\n")
    fp.register([site.tool("scancel"), f"{JOB}.4"])
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])  # counted, had it run
    assert container.stop() == 0
    assert fp.call_count([site.tool("scancel"), f"{JOB}.4"]) == 1
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == 0  # not ours to end


def test_a_bug_while_serving_is_named_on_the_containers_stderr(created, capfd, monkeypatch) -> None:
    """An exception escaping the anchor's loop is a bug: the container's stderr names it in
    one line (anchor.log has the traceback), and the container ends with 255, no status
    known, instead of a silent 1."""
    monkeypatch.setattr(Container, "serve", lambda self: 1 / 0)
    assert anchor_main.serve(created) == 255
    err = capfd.readouterr().err
    assert (
        "scrun: error: internal error: ZeroDivisionError: division by zero (a bug in scrun)"
    ) in err.splitlines()


def test_unknown_requests_are_refused(created) -> None:
    assert created.handle({"op": "pause"}) == {"ok": False, "error": "unknown request 'pause'"}


# -- a job that waits in the queue ------------------------------------------------------

# salloc for a job Slurm queues: it says so on stderr, then waits until the test grants the
# job (touches salloc.grant) or Slurm ends it (salloc.revoke), as a real salloc does.
QUEUED_SALLOC = f"""#!/bin/sh
echo "salloc: Pending job allocation {JOB}" >&2
echo "salloc: job {JOB} queued and waiting for resources" >&2
trap '[ -e "$0.revokes" ] && echo "salloc: Job allocation {JOB} has been revoked." >&2
  trap - INT; kill -INT $$' INT
while [ ! -e "$0.grant" ]; do
  if [ -e "$0.revoke" ]; then echo "salloc: Job allocation {JOB} has been revoked." >&2; exit 1; fi
  sleep 0.02
done
[ -e "$0.ignores" ] && trap '' INT  # as real salloc running its command
while [ "$1" != "--" ]; do shift; done; shift
{SALLOC_VARIABLES} "$@"; echo $? > "$0.status"
"""


@pytest.fixture
def queued(fp, site, spool, bundle) -> Iterator[Container]:
    fp.allow_unregistered(True)
    fp.register([site.tool("srun"), "--version"], stdout="slurm 22.05.8\n")
    (site.bin / "salloc").write_text(QUEUED_SALLOC)
    container = Container(creation(site, spool, bundle).create())
    yield container
    (site.bin / "salloc.revoke").touch()  # a test that did not end it: end its salloc
    container.preparation.abandon()
    allocation = container.preparation.allocation
    if allocation is not None:  # granted and not stopped: end its salloc and holder
        allocation.reap(timeout=0)


def wait_for_preparation(container: Container) -> None:
    """What the anchor's loop does when the preparation's fd becomes readable."""
    fd = container.preparation.watch()
    assert fd is not None
    select.select([fd], [], [], 10)
    container._advance()


def test_a_queued_job_is_created_at_once(spool, queued) -> None:
    state = saved(spool)
    assert (state.status, state.job_id, state.job_state) == (Status.CREATED, JOB, "PENDING")
    assert state.oci_state()["jobState"] == "PENDING"
    assert queued.life.phase == "queued"


def test_start_while_queued_runs_the_step_once_granted(fp, site, spool, bundle, queued) -> None:
    assert queued.handle({"op": "start"}) == {"ok": True}  # at once, like a submission
    assert saved(spool).status == Status.RUNNING and queued.step is None
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    fp.register(step_argv(site, bundle), wait=30)
    (site.bin / "salloc.grant").touch()
    wait_for_preparation(queued)
    assert fp.call_count(step_argv(site, bundle)) == 1
    state = saved(spool)
    assert (state.job_state, state.nodes) == ("RUNNING", "n1")
    assert queued.step is not None and state.step_pid == queued.step.pid
    assert "jobState" not in state.oci_state()


def test_a_queued_job_slurm_ends_ends_the_container(site, spool, queued) -> None:
    queued.handle({"op": "start"})
    (site.bin / "salloc.revoke").touch()
    wait_for_preparation(queued)
    assert queued.life.ending
    assert queued.stop() == 1
    state = saved(spool)
    assert (
        state.error
        == f"job {JOB} ended before it started: salloc: Job allocation {JOB} has been revoked."
    )
    assert state.job_ended and state.exit_code == 1


def test_a_queued_job_whose_salloc_was_killed_is_cancelled(fp, site, spool, queued) -> None:
    """Slurm keeps the job of a killed salloc in the queue, to be granted with no one to
    hold it: the container ends, and so does the job."""
    fp.register([site.tool("scancel"), "--quiet", str(JOB)])
    submission = queued.preparation.submission
    assert submission is not None
    submission.salloc.signal(signal.SIGKILL)
    wait_for_preparation(queued)
    assert queued.life.ending
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == 1
    queued.stop()
    state = saved(spool)
    assert state.error == f"job {JOB} cancelled: its salloc was killed (signal 9)"
    assert state.job_ended


@pytest.mark.parametrize("revokes", [True, False], ids=["salloc revokes it", "salloc dies"])
@pytest.mark.parametrize("signum", [15, 9])
def test_kill_while_queued_withdraws_the_job(fp, site, spool, queued, revokes, signum) -> None:
    """SIGINT makes salloc revoke the job, which it says: nothing more is sent. A salloc
    that does not say so (it died of the signal, slurmctld did not answer it) leaves a job
    that may outlive it: scancel of its id (no listing of the user's jobs) makes sure.
    (A SIGKILL too: nothing was granted, the withdrawal is all there is to undo.)"""
    if revokes:
        (site.bin / "salloc.revokes").touch()
    fp.register([site.tool("scancel"), "--quiet", str(JOB)], returncode=1, stderr="Invalid job id")
    assert queued.handle({"op": "kill", "signal": signum}) == {"ok": True}
    assert queued.stop() == 128 + signum
    assert fp.call_count([site.tool("scancel"), "--quiet", str(JOB)]) == (0 if revokes else 1)
    assert fp.call_count([site.tool("squeue"), fp.any()]) == 0
    assert saved(spool).job_ended
    assert queued.preparation.submission is None  # salloc was told (SIGINT) and is gone


def test_a_job_granted_as_it_is_withdrawn_is_cancelled_at_once(fp, site, spool, queued) -> None:
    """Slurm grants the job a moment before the SIGKILL: salloc, running the holder by
    then, ignores SIGINT (seen in a mass removal: the withdrawal waited REFUSAL_SECONDS
    for salloc, past the 5 s podman waits). The holder's answer is read, and the job is
    cancelled at once. A salloc that Slurm's word does not end at once (here: none comes)
    is killed: the job it held is cancelled."""
    (site.bin / "salloc.ignores").touch()
    submission = queued.preparation.submission
    assert submission is not None
    cancel = [site.tool("scancel"), "--quiet", str(JOB)]
    fp.register(cancel)
    (site.bin / "salloc.grant").touch()
    assert select.select([submission.fileno()], [], [], 10)[0]  # answered, not yet read
    began = time.monotonic()
    assert queued.handle({"op": "kill", "signal": 9}) == {"ok": True}
    assert queued.stop() == 137
    assert time.monotonic() - began < 3
    assert fp.call_count(cancel) == 1
    assert saved(spool).job_ended
    assert submission.salloc.poll() is not None


def test_harmless_signals_do_not_end_a_queued_container(queued) -> None:
    assert queued.handle({"op": "kill", "signal": 28}) == {"ok": True}  # SIGWINCH
    assert not queued.life.ending


def test_the_queue_is_told_on_stderr_once_per_reason(fp, site, spool, queued) -> None:
    read_end, write_end = os.pipe()
    watch = queued.queue
    watch.stderr.use(write_end)
    watch.notices = True
    user_jobs = [site.tool("squeue"), "--me", "-h", "-o", "%i %T %r"]
    for reason in ("Priority", "Priority", "Resources"):
        fp.register(user_jobs, stdout=f"{JOB} PENDING {reason}\n")
        watch.next_reading = 0
        watch.check()
        os.unlink(os.path.join(spool.root, QUEUE_READING))  # a poll interval later
    assert saved(spool).job_reason == "Resources"
    watch.granted("n2")
    os.close(write_end)
    assert os.read(read_end, 4096).decode().splitlines() == [  # the lines written so far
        f"scrun: job {JOB} pending (Priority)",
        f"scrun: job {JOB} pending (Resources)",
        f"scrun: job {JOB} running on n2",
    ]
    assert watch.poll == 30 and watch.seconds_to_next() > 25  # the site's queue_poll


def test_a_terminal_container_is_told_on_its_terminal_not_on_our_stderr() -> None:
    """With a console socket's terminal, fd 2 becomes the null device once the container is
    served: every line for the user goes to the terminal (the channel's copy of it)."""
    master, slave = os.openpty()
    channel = ContainerStderr()
    channel.use(slave)
    os.close(slave)  # handed to the step
    channel.say("scrun: error: the nodes cannot see /x")
    said = b""
    while not said.endswith(b"\n") and select.select([master], [], [], 5)[0]:
        said += os.read(master, 4096)  # the pty may hand the line over in parts
    assert said.replace(b"\r", b"") == b"scrun: error: the nodes cannot see /x\n"
    os.close(master)


def test_scrun_luas_notices_wait_until_the_engine_listens() -> None:
    """A notice of scrun.lua's (a long import) that comes before the container is started
    is held (podman and docker read its stderr from `start` on), then said; after, at once."""
    master, slave = os.openpty()
    channel = ContainerStderr()
    channel.use(slave)
    os.close(slave)
    channel.notice("scrun: importing image (2.0 GiB) to the cache")
    assert channel.holding
    channel.listened()
    assert not channel.holding
    channel.notice("scrun: later")
    expected = b"scrun: importing image (2.0 GiB) to the cache\nscrun: later\n"
    said = b""
    # a pty hands each write on as it comes: read until both lines are there (or none come)
    while len(said) < len(expected) and select.select([master], [], [], 5)[0]:
        said += os.read(master, 4096).replace(b"\r", b"")
    assert said == expected
    os.close(master)


def test_a_notice_that_comes_while_the_held_ones_are_said_follows_them() -> None:
    """The stage-in's thread may give a notice (a node's copy) while `listened` says the
    held ones (the import): it is said after them, never before (the order a user reads)."""
    read_end, write_end = os.pipe()
    stage_in: list[threading.Thread] = []

    class Interleaving(ContainerStderr):
        def say(self, line: str) -> None:
            if line.endswith("to the cache"):  # the stage-in's thread comes in meanwhile
                late = threading.Thread(target=self.notice, args=("scrun: copying to n1",))
                stage_in.append(late)
                late.start()
                late.join(0.2)  # (it waits for the lock, or has said its line already)
            super().say(line)

    channel = Interleaving()
    channel.use(write_end)
    os.close(write_end)
    channel.notice("scrun: importing image (2.0 GiB) to the cache")
    channel.listened()
    stage_in[0].join(5)
    said = os.read(read_end, 4096)  # (both lines are in the pipe by now)
    os.close(read_end)
    assert said == b"scrun: importing image (2.0 GiB) to the cache\nscrun: copying to n1\n"


# -- serve(): the event loop, with real signals and the real socket ------------------------


@pytest.fixture
def restore_signals() -> Iterator[None]:
    """serve() installs its handlers and a wakeup fd in this (the main) thread."""
    saved = {sig: signal.getsignal(sig) for sig in SERVE_SIGNALS}
    yield
    signal.set_wakeup_fd(-1)
    for sig, handler in saved.items():
        signal.signal(sig, handler)


SERVE_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE)


def once_serving(action: Callable[[], object]) -> threading.Thread:
    """Run `action` in a thread as soon as serve() (in this, the main thread) handles
    SIGTERM: its handler is installed first thing, and a SIGTERM before it would end pytest
    itself. Past 10 s `action` runs anyway, so that a serve() that never got there fails
    the test instead of hanging it."""
    before = signal.getsignal(signal.SIGTERM)

    def wait_then_act() -> None:
        deadline = time.monotonic() + 10
        while signal.getsignal(signal.SIGTERM) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_serve_ends_on_sigterm_and_cleans_up(fp, site, spool, created, restore_signals) -> None:
    """What `scrun delete` sends: the loop ends, the container stops, its job ends."""
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    once_serving(lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert created.serve() == 0
    state = saved(spool)
    assert (state.status, state.job_ended) == (Status.STOPPED, True)
    assert not os.path.exists(spool.socket)
    assert job_status(site) == "0"


def test_serve_starts_a_queued_container_once_granted(
    fp, site, spool, bundle, queued, restore_signals
) -> None:
    """A `start` request over the socket while the job waits, the grant (salloc's answer
    wakes the loop), the step launched and its end: serve returns the step's status."""
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    fp.register(step_argv(site, bundle), returncode=5, wait=0.2)
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)
    FakeSteps(fp, str(site.bin), JOB, {})
    replies: list[dict[str, object]] = []

    def start_then_grant() -> None:  # the order the test is about: `start` while queued
        replies.append(protocol.request(spool.socket, {"op": "start"}))
        (site.bin / "salloc.grant").touch()

    once_serving(start_then_grant)
    assert queued.serve() == 5
    assert replies == [{"ok": True}]
    state = saved(spool)
    assert (state.status, state.exit_code, state.job_state) == (Status.STOPPED, 5, "RUNNING")
    assert job_status(site) == "5"  # salloc ended the job with the container's status


def test_a_step_that_outlives_a_sigkill_has_its_job_cancelled(
    fp, site, spool, created, restore_signals, capfd, monkeypatch
) -> None:
    """A `kill` SIGKILL Slurm cannot deliver (the step's slurmstepd is gone: Slurm lists
    the step and srun waits for it, until the job's time limit): SIGKILL_PATIENCE seconds
    later the anchor says so, cancels the job and kills srun, and the container ends with
    137, as the SIGKILL would have ended it (not with what srun says of a lost step)."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 0.2)
    (site.bin / "srun").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 30\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    replies: list[dict[str, object]] = []

    def start_then_kill() -> None:
        replies.append(protocol.request(spool.socket, {"op": "start"}))
        replies.append(protocol.request(spool.socket, {"op": "kill", "signal": 9}))

    once_serving(start_then_kill)
    assert created.serve() == 128 + signal.SIGKILL
    assert replies == [{"ok": True}, {"ok": True}]
    assert steps.events[:3] == [
        f"squeue: {JOB}.0 scrun",
        f"scancel --signal=9 {JOB}.0",  # the tasks never get it (faked)
        f"scancel {JOB}",  # SIGKILL_PATIENCE later: the job
    ]
    state = saved(spool)
    assert (state.status, state.exit_code, state.error) == (Status.STOPPED, 137, None)
    assert job_status(site) == "137"
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert (
        f"scrun: error: container c1's step still runs 0.2 s after SIGKILL: cancelling job {JOB}"
    ) in told


def test_a_sigkill_after_someone_elses_scancel_ends_the_container_in_time(
    fp, site, spool, bundle, staged, restore_signals, capfd, monkeypatch
) -> None:
    """The job was cancelled by someone else: Slurm refuses our SIGKILL (the job is
    "already completing") and leaves the tasks until KillWait ends them (30 s by default,
    podman waits 5). The SIGKILL is final all the same: the container ends with 137 after
    SIGKILL_PATIENCE + LOST_STEP_WAIT, and stage-out, which must not copy files a task may
    still write, is left to the `scrun delete` the engine runs next, the user told."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 0.2)
    monkeypatch.setattr(container_module, "LOST_STEP_WAIT", 0.3)
    (site.bin / "srun").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 30\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"}, lingers=10**6)
    steps.job_cancelled = True
    seen = record_stage_out(monkeypatch, spool, steps)

    def start_then_kill() -> None:
        protocol.request(spool.socket, {"op": "start"})
        protocol.request(spool.socket, {"op": "kill", "signal": 9})

    once_serving(start_then_kill)
    began = time.monotonic()
    assert staged.serve() == 128 + signal.SIGKILL
    assert time.monotonic() - began < 3.0  # not site.step_grace (10 s)
    assert seen == [] and os.path.exists(spool.stage_file)
    state = saved(spool)
    assert (state.status, state.exit_code) == (Status.STOPPED, 137)
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    # (the anchor's log reaches this stderr too in a unit test: `in`, not `==`)
    assert (
        f"scrun: error: container c1's step still runs 0.2 s after SIGKILL: cancelling job {JOB}"
    ) in told
    assert (
        f"scrun: error: container c1's files were not copied back: its steps in job {JOB} "
        "still run 0.3 s after they were cancelled; `scrun delete c1` copies them once "
        "Slurm says its tasks have ended"
    ) in told


def test_a_signal_a_suspended_job_keeps_is_no_error_and_a_sigkill_still_ends_it(
    fp, site, spool, created, restore_signals, capfd, monkeypatch
) -> None:
    """A job the scheduler suspended (preemption): Slurm keeps a SIGTERM from its step.
    `kill` succeeds all the same, as a frozen container's does through crun, the user told
    on the container's stderr, so that `podman stop` goes on to its SIGKILL, which Slurm
    delivers to the step; and a SIGKILL Slurm cannot deliver at all (slurmctld gone)
    still ends the container SIGKILL_PATIENCE later."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 0.2)
    (site.bin / "srun").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 30\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    steps.suspended = True
    replies: list[dict[str, object]] = []

    def start_then_stop() -> None:
        replies.append(protocol.request(spool.socket, {"op": "start"}))
        replies.append(protocol.request(spool.socket, {"op": "kill", "signal": 15}))
        steps.unanswered = 10**6  # slurmctld gone: the SIGKILL's squeue fails
        replies.append(protocol.request(spool.socket, {"op": "kill", "signal": 9}))
        steps.unanswered = 0

    once_serving(start_then_stop)
    assert created.serve() == 128 + signal.SIGKILL
    assert replies == [{"ok": True}] * 3
    assert f"scancel {JOB}" in steps.events  # the job cancelled: the SIGKILL is final
    told = [line for line in capfd.readouterr().err.splitlines() if line.startswith("scrun:")]
    assert (
        f"scrun: signal 15 not delivered to container c1: Slurm says its step {JOB}.0 is not "
        "running (a suspended job)"
    ) in told


def serve_a_signalled_step(
    fp, site: Site, spool: Spool, container: Container, srun: str, signum: int
) -> tuple[int, FakeSteps]:
    """Serve a container whose step (the fake `srun` script) ends by itself, once the
    engine has started it and sent it `signum`: its exit code, and Slurm's record."""
    (site.bin / "srun").write_text(srun)
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    steps.ends_by_itself(0, listings=1)
    fp.register([site.tool("scontrol"), "-o", "show", "job", str(JOB)], stdout=RUNNING)

    def start_then_kill() -> None:
        protocol.request(spool.socket, {"op": "start"})
        protocol.request(spool.socket, {"op": "kill", "signal": signum})

    once_serving(start_then_kill)
    return container.serve(), steps


def test_a_step_the_engine_signalled_is_no_failed_launch(
    fp, site, spool, created, restore_signals
) -> None:
    """A step that ends within nodecheck.LAUNCH_WINDOW of its start because the engine
    signalled it (`podman stop` right after `start`) did launch: no step checks what the
    nodes can see (one that would hang in a job the scheduler suspended)."""
    calls = site.bin / "srun.calls"
    srun = f'#!/bin/sh\necho "$*" >> {calls}\nsleep 0.5; exit 143\n'
    assert serve_a_signalled_step(fp, site, spool, created, srun, 15)[0] == 143
    assert [line for line in calls.read_text().splitlines() if "scrun-check" in line] == []


def test_a_sigkill_the_step_obeys_cancels_no_job(
    fp, site, spool, created, restore_signals, capfd, monkeypatch
) -> None:
    """The usual SIGKILL: the step ends well within SIGKILL_PATIENCE, and nothing more is
    done (no scancel of the job; the container's code is srun's)."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 5.0)
    srun = "#!/bin/sh\nsleep 1; exit 3\n"
    code, steps = serve_a_signalled_step(fp, site, spool, created, srun, 9)
    assert code == 3
    assert f"scancel --signal=9 {JOB}.0" in steps.events
    assert f"scancel {JOB}" not in steps.events
    assert not [line for line in capfd.readouterr().err.splitlines() if "after SIGKILL" in line]


# the node's runtime, as a site's exec_command names it (under scrun-cdi-run, as the
# harness's): the anchor's SIGKILL runs `crun --root=/r kill NAME KILL` on the node
NODE_EXEC = "/opt/scrun-cdi-run -- crun --root=/r exec %o %n.%u.%j.%s.%t"


def node_kill_step(site: Site, fp, code: int, killed: Path | None = None) -> list[list[str]]:
    """Answer the step that runs the node's kill (srun ... --job-name scrun-exec ...) with
    `code`, touching `killed` (what ends the fake container step); the argvs it ran."""
    ran: list[list[str]] = []

    def kill(process: Any) -> None:
        ran.append(list(process.args))
        if killed is not None:
            killed.touch()
        process.returncode = code

    fp.register(
        [site.tool("srun"), "--jobid", str(JOB), "--job-name", "scrun-exec", fp.any()],
        callback=kill,
    )
    return ran


def kill_request(spool: Spool) -> None:
    protocol.request(spool.socket, {"op": "kill", "signal": 9})


def delete_signal(spool: Spool) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # what `scrun delete --force` sends


def kill_twice(spool: Spool) -> None:
    kill_request(spool)
    kill_request(spool)  # the node's kill is under way: nothing more is sent


@pytest.mark.parametrize(
    "end", [kill_request, delete_signal, kill_twice], ids=["kill", "delete", "kill twice"]
)
def test_a_sigkill_goes_to_the_nodes_runtime_and_slurm_sends_none(
    fp, site, spool, created, restore_signals, monkeypatch, end
) -> None:
    """`kill` SIGKILL of a running container of one node, and its `delete` (SIGTERM to the
    anchor): its process is killed by the node's runtime in a step beside it, whose end then
    ends the step (Slurm's own SIGKILL of a step would make it last a second longer,
    step_signals). Slurm sends no signal; the container ends with 137, its srun not waited
    for past it (step_grace)."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 5.0)
    site.config.exec_command = NODE_EXEC
    killed = site.bin / "killed"
    (site.bin / "srun").write_text(
        f"#!/bin/sh\nwhile [ ! -e {killed} ]; do sleep 0.02; done; sleep 0.3; exit 137\n"
    )
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    steps.ends_by_itself(0, listings=1)
    ran = node_kill_step(site, fp, 0, killed)
    created.state.owner = "alice"  # %u: the user's name (create sets it)

    def start_then_end() -> None:
        protocol.request(spool.socket, {"op": "start"})
        end(spool)

    once_serving(start_then_end)
    started = time.monotonic()
    assert created.serve() == 128 + signal.SIGKILL
    assert time.monotonic() - started < site.config.step_grace / 2
    assert ran == [
        [site.tool("srun"), "--jobid", str(JOB), "--job-name", "scrun-exec", "--quiet",
         "--quiet", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--chdir=/",
         "--", "/bin/sh", "-c", f"crun --root=/r kill n1.alice.{JOB}.0.0 KILL"]
    ]  # fmt: skip
    assert not [event for event in steps.events if event.startswith("scancel --signal")]


@pytest.mark.parametrize("kill_code", [1, 0], ids=["the node's kill fails", "it is not enough"])
def test_a_sigkill_the_nodes_runtime_cannot_deliver_goes_through_slurm(
    fp, site, spool, created, restore_signals, monkeypatch, kill_code
) -> None:
    """The node's kill fails (the runtime has not created the container yet), or the step
    outlives it NODE_KILL_PATIENCE seconds (more processes than it reached): Slurm's
    SIGKILL then goes to the step, as it does without a node command."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 5.0)
    monkeypatch.setattr(step_signals, "NODE_KILL_PATIENCE", 0.2)
    site.config.exec_command = NODE_EXEC
    (site.bin / "srun").write_text("#!/bin/sh\nsleep 1; exit 3\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    steps.ends_by_itself(0, listings=2)  # the node's kill and Slurm's signal find it
    ran = node_kill_step(site, fp, kill_code)

    def start_then_kill() -> None:
        protocol.request(spool.socket, {"op": "start"})
        protocol.request(spool.socket, {"op": "kill", "signal": 9})

    once_serving(start_then_kill)
    assert created.serve() == 3  # srun's: the fake step's tasks did not die of it
    assert len(ran) == 1
    assert steps.events[:2] == [f"squeue: {JOB}.0 scrun", f"squeue: {JOB}.0 scrun"]
    assert f"scancel --signal=9 {JOB}.0" in steps.events
    assert f"scancel {JOB}" not in steps.events


def test_a_sigkill_while_slurmctld_is_gone_asks_it_once(
    fp, site, spool, created, restore_signals, monkeypatch
) -> None:
    """slurmctld gone: the node's kill cannot find the step, and Slurm is not asked again
    for its own SIGKILL (each question may take a client's whole retry); the SIGKILL is
    final all the same: SIGKILL_PATIENCE later the job is cancelled, and it ends with 137."""
    monkeypatch.setattr(step_signals, "SIGKILL_PATIENCE", 0.2)
    site.config.exec_command = NODE_EXEC
    (site.bin / "srun").write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 30\n")
    steps = FakeSteps(fp, str(site.bin), JOB, {0: "scrun"})
    ran = node_kill_step(site, fp, 0)

    def start_then_kill() -> None:
        protocol.request(spool.socket, {"op": "start"})
        steps.unanswered = 1  # slurmctld gone for the SIGKILL's question
        protocol.request(spool.socket, {"op": "kill", "signal": 9})

    once_serving(start_then_kill)
    assert created.serve() == 128 + signal.SIGKILL
    assert ran == []
    assert steps.events[:2] == ["squeue: no answer", f"scancel {JOB}"]
