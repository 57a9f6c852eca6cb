"""The shipped scrun.lua scripts between users (issue 28, "safe between users"): one user
can never change what another user's container runs, or read what it stages. Each test runs
as the two test users, each one the victim once and the other the one who tries: squatting
the victim's directory before its first container, a symbolic link planted in its place,
and a swap of the victim's staged directory while its staging runs. On the scratch (both
layouts) and on a node (node-local.lua's <node_local>/scrun-<uid>), each in a scratch and
node directory of the test's own (conftest's private_staging, which also checks that
nothing staged is left there)."""

from __future__ import annotations

import fcntl
import shlex
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import node_roots, with_private_staging
from helpers import wait_for, waits_for_lock
from users import IMAGE, User, assert_users_clean, one_error, pick_users, user_site

if TYPE_CHECKING:
    import subprocess

    from conftest import Cluster, SiteRuntime

MakeSite = Callable[[str | None], "SiteRuntime"]
# the victim's containers run on n1, where the other user acts on a node's files
ON_N1 = ("-e", "SCRUN_JOB_NODELIST=n1")
# (script, where the other user acts): node-local.lua stages on the scratch, then on a node
WHERE = [("shared-scratch", "scratch"), ("node-local", "scratch"), ("node-local", "node")]


@pytest.fixture(params=["victim-first", "victim-second"])
def people(request: pytest.FixtureRequest, cluster: Cluster) -> tuple[User, User]:
    """(the victim, the other user): each test user is the victim once."""
    first, second = pick_users(cluster.exports, cluster.slurm_conf)
    return (first, second) if request.param == "victim-first" else (second, first)


def as_other(other: User, where: str, script: str) -> subprocess.CompletedProcess[str]:
    """`script` run by the other user: on the login host, or on n1 through a job of its own."""
    if where == "node":
        script = f"srun -w n1 -N1 -n1 --quiet /bin/sh -c {shlex.quote(script)}"
    return other.sh(script)


def victims_dir(where: str, staging: tuple[Path, str], victim: User) -> str:
    """The victim's first directory below the site's (one the other user could make first):
    <scratch>/<uid>, or on the nodes <node_local>/scrun-<uid>."""
    scratch, node_local = staging
    return f"{scratch}/{victim.uid}" if where == "scratch" else f"{node_local}/scrun-{victim.uid}"


@pytest.mark.parametrize("planted", ["squatted", "link"])
@pytest.mark.parametrize(("script", "where"), WHERE)
def test_a_path_another_user_planted_is_refused(
    planted: str,
    script: str,
    where: str,
    people: tuple[User, User],
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """Before the victim's first container the other user makes the victim's directory
    (squatted, mode 777), or plants a symbolic link in its place to a directory of its own
    that anyone may write: the victim's container is refused in one line naming it and
    why, nothing reaches the other user's directory, and what the other made stays (not
    the victim's to remove)."""
    victim, other = people
    site = site_runtime(with_private_staging(script, private_staging, 3))
    mine = victims_dir(where, private_staging, victim)
    # (on the login host, in the victim's rootless podman's user namespace, where no other
    # user's uid is mapped, the other's is the overflow uid)
    overflow = int(Path("/proc/sys/kernel/overflowuid").read_text())
    owner = other.uid if where == "node" else overflow
    if planted == "squatted":
        target, plant, why = mine, "", f"belongs to uid {owner}, not to you"
    else:
        target = f"{mine.rsplit('/', 1)[0]}/trap-{uuid.uuid4().hex[:10]}"
        plant, why = f" && ln -s {target} {shlex.quote(mine)}", "is not a directory"
    made = as_other(other, where, f"mkdir -m 777 {shlex.quote(target)}{plant}")
    assert made.returncode == 0, made.stderr
    env = user_site(victim, site)
    line = one_error(victim.podman("run", "--rm", *ON_N1, IMAGE, "true", env=env))
    assert f"unsafe staging path: {mine} {why}" in line, line
    left = as_other(other, where, f"ls -A {shlex.quote(target)}")
    assert (left.returncode, left.stdout) == (0, ""), left
    assert_users_clean(victim)


# what the other user tries on the victim's directory, each printing a mark when it works
SWAPS = {
    "moved": "mv {mine} {mine}-stolen",
    "replaced": "mkdir -m 777 {mine}-fake && mv -T {mine}-fake {mine}",
    "removed": "rm -rf {mine}",
    "listed": "ls -A {mine}",
}


@pytest.mark.parametrize(("script", "where"), [WHERE[0], WHERE[2]])
def test_a_swap_while_the_container_stages_fails(
    script: str,
    where: str,
    people: tuple[User, User],
    cluster: Cluster,
    site_runtime: MakeSite,
    private_staging: tuple[Path, str],
    no_leftovers: Callable[..., None],
) -> None:
    """While the victim's container stages (held at its image's lock: on the scratch's cache
    entry, or on n1's copy of it, once its staged directory exists), the other user tries to
    move, replace, remove or list the victim's directory: each is refused by the system (the
    site's sticky directory, the user's 0700 ones the script made and checked), and the
    container then runs as staged."""
    victim, other = people
    scratch, node_local = private_staging
    site = site_runtime(with_private_staging(script, private_staging, 3))
    env = user_site(victim, site)
    first = victim.podman("run", "--rm", *ON_N1, IMAGE, "true", env=env)  # the import
    assert first.returncode == 0, first.stderr
    [key] = [p.name for p in (scratch / str(victim.uid) / "scrun-cache").iterdir() if p.is_dir()]
    if where == "node":
        node = node_roots(cluster.env)["n1"] / node_local.lstrip("/")
        lock = node / f"scrun-{victim.uid}" / "cache" / f"{key}.lock"
    else:
        lock = scratch / str(victim.uid) / "scrun-cache" / f"{key}.lock"
    mine = shlex.quote(victims_dir(where, private_staging, victim))
    tries = "".join(
        f"{{ {line.format(mine=mine)}; }} >/dev/null 2>&1 && echo {mark}\n"
        for mark, line in SWAPS.items()
    )
    with ThreadPoolExecutor(1) as pool, open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        program = ["sh", "-c", "test -x /bin/busybox && echo ran"]
        staging = pool.submit(
            lambda: victim.podman("run", "--rm", *ON_N1, IMAGE, *program, env=env)
        )
        wait_for("the container's staging waits for the image's lock", lambda: waits_for_lock(lock))
        tried = as_other(other, where, tries + "true")
        held.close()
        done = staging.result()
    assert tried.returncode == 0, tried.stderr
    assert tried.stdout == "", f"the other user {tried.stdout.split()} the victim's directory"
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n", done.stdout
    assert_users_clean(victim)
