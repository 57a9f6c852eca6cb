"""A job's step list as Slurm keeps it, faked with pytest-subprocess for the unit tests of
the container's end (imported as `fake_steps`: pytest puts this folder on sys.path).

`squeue -h -s -j JOB -o "%i %j"` lists the steps still running. A plain `scancel JOB.N`
ends step N once squeue has listed it `lingers` more times (its tasks take that long to
die on the node); `scancel --signal=...` ends nothing (a signal the tasks survive, or
that never reaches them). `scancel JOB` ends every step at once, unless the job was
already being cancelled (`job_cancelled`: someone else's scancel, whose tasks live on
until KillWait ends them): then nothing. The next `unanswered` listings fail, as while
slurmctld is down. While `suspended`, a signal but SIGKILL fails as Slurm's does for a
suspended job's step. `scontrol show config` says KillWait is `kill_wait` seconds. `events`
says what happened, in order, for a test to check that stage-out came only after the
steps were gone.
"""

from __future__ import annotations

from typing import Any

from scrunlib.slurm_commands import steps_argv

UNANSWERED = b"slurm_get_job_steps error: Unable to contact slurm controller (connect failure)\n"


class FakeSteps:
    def __init__(
        self,
        fp: Any,
        bin_dir: str,
        job_id: int,
        running: dict[int, str],
        lingers: int = 0,
        kill_wait: int = 0,
    ) -> None:
        self.job_id, self.running, self.lingers = job_id, dict(running), lingers
        self.unanswered = 0  # listings left that fail as squeue does while slurmctld is down
        self.job_cancelled = False
        self.suspended = False
        self.events: list[str] = []
        self._ending: dict[int, int] = {}  # step -> listings left before it is gone
        fp.register(
            steps_argv(f"{bin_dir}/squeue", job_id, "%i %j"), callback=self._list, occurrences=999
        )
        fp.register([f"{bin_dir}/scancel", fp.any()], callback=self._cancel, occurrences=999)
        fp.register(
            [f"{bin_dir}/scontrol", "show", "config"],
            stdout=f"KillTimeout = 0 sec\nKillWait                = {kill_wait} sec\n",
            occurrences=999,
        )

    def ends_by_itself(self, step: int, listings: int) -> None:
        """Step `step` (its tasks have exited) is listed `listings` more times, then gone."""
        self._ending[step] = listings

    def listing(self) -> str:
        return "".join(f"{self.job_id}.{step} {name}\n" for step, name in self.running.items())

    def _list(self, process: Any) -> None:
        if self.unanswered > 0:
            self.unanswered -= 1
            self.events.append("squeue: no answer")
            process.stderr.write(UNANSWERED)
            process.returncode = 1
            return
        for step, left in list(self._ending.items()):
            if left <= 0:
                del self.running[step], self._ending[step]
            else:
                self._ending[step] = left - 1
        self.events.append(f"squeue: {self.listing().strip() or 'none'}")
        process.stdout.write(self.listing().encode())

    def _cancel(self, process: Any) -> None:
        *options, target = (arg for arg in process.args[1:] if arg != "--quiet")
        self.events.append(f"scancel {' '.join([*options, target])}")
        job, _, step = target.partition(".")
        if self.suspended and options and options != ["--signal=9"]:
            process.stderr.write(
                b"scancel: error: Kill job error on job step id 1: Job step not running\n"
            )
            process.returncode = 187
        if options or int(job) != self.job_id:
            return
        if not step:
            if not self.job_cancelled:
                self.running.clear()  # the whole job
        elif int(step) in self.running:
            self._ending.setdefault(int(step), self.lingers)
