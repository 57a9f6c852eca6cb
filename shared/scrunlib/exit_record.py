"""The container's own exit code, kept on its node for the steps where Slurm hides it.

When the cgroup OOM killer kills any process of a step, slurmstepd replaces its tasks'
statuses with its out-of-memory mark: srun exits 1 and sacct says OUT_OF_MEMORY (0:125)
whatever the container's main process did, so a main process that exits 0 after only a
child was killed looks like one the limit killed. (Measured alike on Slurm 22.05, 24.11
and 26.05; no field of srun's, sacct's or `scontrol show step`'s keeps the task's own.)

So its node keeps it. scrun-cdi-run, oci.conf's RunTimeRun, stays the runtime's parent and
learns its exit code, the container's main process's (crun: 128+N for signal N). When the
task's memory cgroup counted an OOM kill meanwhile (`OomWatch`), it writes that code to the
record `<job>.<step>.<node>.<pid>` (the task: Slurm 22.05 writes no SLURM_PROCID into the
config) in the user's runtime directory on that node (RECORD_DIR, beside oci.conf's runtime
root). A step without an OOM kill leaves nothing behind. The anchor asks only when srun
says 1 and sacct OUT_OF_MEMORY: one step on the step's nodes runs `read_script` (prints and
removes the job's records), and the container's code is srun's rule over its tasks' (the
highest, `container_code`); without one for every task (another RunTimeRun, a kernel
before 4.13) it is 137, the OOM killer's SIGKILL, as before.

Standard library only, and no more of it than `os` and `stat`: both scrun-cdi-run (every
container step of a node) and the anchor import it.
"""

from __future__ import annotations

import os
import stat

# The records of one user on a node (uid: the job's user, the one the task runs as). Also
# in read_script, with $(id -u) for {uid}.
RECORD_DIR = "/run/user/{uid}/scrun-exit"
# What counts the OOM kills of a memory cgroup and its descendants: cgroup v1, v2
_COUNTERS = {"cgroup": "memory.oom_control", "cgroup2": "memory.events"}
# the step's identity in the environment Slurm writes into the task's config.json
_IDENTITY = (b"SLURM_JOB_ID", b"SLURM_STEP_ID")


def record_name(job: int, step: int, node: str, pid: int) -> str:
    """The record of the task whose runtime's parent is process `pid` on node `node`."""
    return f"{job}.{step}.{node}.{pid}"


# ----------------------------------------------------------------------------- the node


def oom_kill_counter(cgroups: str, mountinfo: str) -> str | None:
    """The file that counts the OOM kills in the memory cgroup of the process whose
    /proc/PID/cgroup is `cgroups` and /proc/PID/mountinfo `mountinfo`: cgroup v1's
    memory.oom_control, else v2's memory.events (an `oom_kill N` line in both, counting
    the cgroup's descendants too). None when neither hierarchy is mounted."""
    paths = {}  # the filesystem type of a hierarchy -> the process's cgroup in it
    for line in cgroups.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            paths["cgroup"] = path
        elif number == "0" and not controllers:
            paths["cgroup2"] = path
    for fstype, counter in _COUNTERS.items():
        if fstype not in paths:
            continue
        for root, point in _mounts(mountinfo, fstype):
            inside = paths[fstype] if root == "/" else _below(paths[fstype], root)
            if inside is not None:
                return os.path.join(point, inside.lstrip("/"), counter)
    return None


def _mounts(mountinfo: str, fstype: str) -> list[tuple[str, str]]:
    """(root inside the hierarchy, mount point) of each mount of `fstype` in `mountinfo`
    (cgroup v1: the memory controller's)."""
    found = []
    for line in mountinfo.splitlines():
        fields, _, after = line.partition(" - ")
        mount, kind = fields.split(), after.split()
        if len(mount) < 5 or len(kind) < 3 or kind[0] != fstype:
            continue
        if fstype == "cgroup" and "memory" not in kind[2].split(","):
            continue
        found.append((_unescape(mount[3]), _unescape(mount[4])))
    return found


def _below(path: str, root: str) -> str | None:
    """`path` relative to `root` (a mount's root inside its hierarchy), None outside it."""
    if path == root:
        return "/"
    return path[len(root) :] if path.startswith(root.rstrip("/") + "/") else None


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 for a space, \\134 for a backslash) undone."""
    head, *escaped = field.split("\\")
    parts = [head]
    for part in escaped:
        code = part[:3]
        if len(code) == 3 and all(digit in "01234567" for digit in code):
            parts.append(chr(int(code, 8)) + part[3:])
        else:
            parts.append("\\" + part)
    return "".join(parts)


def oom_kills(counter: str) -> int | None:
    """The count in `counter` (oom_kill_counter's file); None when it cannot be read or
    has none (a kernel before 4.13)."""
    try:
        with open(counter, encoding="ascii", errors="replace") as stream:
            text = stream.read()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


class OomWatch:
    """Whether the OOM killer killed a process of this process's memory cgroup (its task's,
    where the runtime and the container run) between `start()` and `killed()`."""

    __slots__ = ("before", "counter")

    def __init__(self, counter: str | None, before: int | None) -> None:
        self.counter, self.before = counter, before

    @classmethod
    def start(cls) -> OomWatch:
        try:
            with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as stream:
                cgroups = stream.read()
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as stream:
                mountinfo = stream.read()
        except OSError:
            return cls(None, None)
        counter = oom_kill_counter(cgroups, mountinfo)
        return cls(counter, oom_kills(counter) if counter else None)

    def killed(self) -> bool:
        if self.counter is None or self.before is None:
            return False
        after = oom_kills(self.counter)
        return after is not None and after > self.before


def step_identity(config: bytes) -> tuple[int, int] | None:
    """(job, step) from the environment Slurm wrote into the task's config.json (the last
    of each: Slurm 22.05 appends the step's environment to the config's own)."""
    found = []
    for name in _IDENTITY:
        start = config.rfind(b'"' + name + b"=")
        end = config.find(b'"', start + len(name) + 2) if start >= 0 else -1
        value = config[start + len(name) + 2 : end] if end >= 0 else b""
        if not value.isdigit():
            return None
        found.append(int(value))
    job, step = found
    return job, step


def write(directory: str, name: str, code: int) -> bool:
    """Keep `code` as the record `name` in `directory` (made, mode 0700, where its parent,
    the user's runtime directory, exists). Only in a directory of our own that no one else
    may write to, and never through a link. Whether it was written."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(os.path.join(directory, name), flags, 0o600)
        try:
            os.write(fd, f"{code}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------- the anchor


def read_script(job: int) -> str:
    """A shell script for the step's nodes (as the job's user): `<record> <code>` a line
    for each record of job `job` there, each removed once printed."""
    directory = RECORD_DIR.format(uid="$(id -u)")
    return (
        f'for f in "{directory}"/{job}.*; do [ -f "$f" ] || continue; '
        'printf "%s %s\\n" "${f##*/}" "$(cat "$f")"; rm -f "$f"; done'
    )


def step_codes(listing: str, job: int, step: int) -> dict[str, int]:
    """Each task's exit code (by the rest of its record's name), from read_script's output
    on every node, for step `step` of job `job`."""
    codes = {}
    for line in listing.splitlines():
        name, _, code = line.strip().partition(" ")
        job_id, _, rest = name.partition(".")
        step_id, _, task = rest.partition(".")
        if (job_id, step_id) == (str(job), str(step)) and task and code.isdigit():
            codes[task] = int(code)
    return codes


def container_code(codes: dict[str, int], tasks: int) -> int | None:
    """What srun would have exited with, had Slurm passed the tasks' own codes on: the
    highest (crun's are exit codes, 128+N for signal N). None unless each of the step's
    `tasks` has one."""
    if tasks < 1 or len(codes) != tasks:
        return None
    return max(codes.values())
