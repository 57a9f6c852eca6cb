"""scrun-cdi: what a login host (where podman and docker run, without GPUs) needs so that the
engines' own GPU options reach scrun, which turns them into the job's request or refuses them
in one line (scrunlib.engine_gpus):

    scrun-cdi login-spec --output /etc/cdi/scrun-gpu.json
        the marker CDI spec: podman's `--device nvidia.com/gpu=…` (and podman 5's `--gpus`),
        docker's with CDI on, resolve to it instead of failing in the engine
    scrun-cdi docker-hook --output /usr/local/bin/nvidia-container-runtime-hook
        a stub of that name on dockerd's PATH: dockerd offers `--gpus` only with one
        (restart dockerd after)

Both fail any runtime but scrun that is asked to run a container with them. Neither belongs
on a GPU node: login-spec refuses a host that has a spec of the kind already.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from scrunlib import cdi, engine_gpus
from scrunlib.errors import ScrunError, UsageError, print_error
from scrunlib.files import write_atomically

PROGRAM = "scrun-cdi"
USAGE = (
    f"usage: {PROGRAM} login-spec [--kind KIND] [--count N] [--cdi-dir DIR]... "
    f"[--output FILE] | {PROGRAM} docker-hook [--output FILE]"
)
# The docker stub: never run by scrun (it drops the hook); any other runtime fails here
DOCKER_HOOK_SCRIPT = f"""#!/bin/sh
# {engine_gpus.DOCKER_HOOK}, written by `{PROGRAM} docker-hook`: dockerd offers
# `docker run --gpus` only when a program of this name is on its PATH. scrun turns --gpus N
# into its job's GPU request and drops this hook; any other runtime that runs it fails here.
echo "{engine_gpus.DOCKER_HOOK}: this host has no GPU; a container gets one through \\
scrun (--runtime scrun, --gpus N)" >&2
exit 1
"""


def parse(argv: Sequence[str]) -> tuple[str, dict[str, list[str]]]:
    """The command and its options (each a list of the values given, in order)."""
    if not argv or argv[0] not in ("login-spec", "docker-hook"):
        raise UsageError(USAGE)
    command, args = argv[0], list(argv[1:])
    names = ("--kind", "--count", "--cdi-dir", "--output") if command == "login-spec" else ()
    values: dict[str, list[str]] = {}
    while args:
        name, has_value, value = args.pop(0).partition("=")
        if name not in (*names, "--output"):
            raise UsageError(f"{command}: unknown option {name!r}; {USAGE}")
        if not has_value:
            if not args:
                raise UsageError(f"{name} needs a value; {USAGE}")
            value = args.pop(0)
        values.setdefault(name, []).append(value)
    return command, values


def login_spec(values: dict[str, list[str]]) -> str:
    """The marker spec's JSON, after checking this host has no spec of the kind."""
    kind = values.get("--kind", [cdi.DEFAULT_KIND])[-1]
    vendor, _, kind_class = kind.partition("/")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
    if not vendor or not kind_class or not set(vendor + kind_class) <= allowed:
        raise UsageError(f"--kind {kind!r}: CDI's vendor/class, e.g. {cdi.DEFAULT_KIND}")
    count_text = values.get("--count", [str(engine_gpus.MARKER_DEVICES)])[-1]
    if not count_text.isdigit() or not 0 < int(count_text) <= 1024:
        raise UsageError(f"--count {count_text!r}: the GPUs a node may have, 1 to 1024")
    dirs = tuple(values.get("--cdi-dir", [])) or cdi.DEFAULT_SPEC_DIRS
    output = values.get("--output", [""])[-1]
    try:
        found = cdi.load_spec(os.uname().nodename, kind, dirs)
    except cdi.CdiError as exc:
        raise ScrunError(str(exc)) from None
    others = [
        f for f in found.files if not output or os.path.realpath(f) != os.path.realpath(output)
    ]
    if others:
        raise ScrunError(
            f"this host has a CDI spec of {kind} already ({', '.join(others)}): the marker "
            "spec is for login hosts without GPUs"
        )
    return json.dumps(engine_gpus.marker_spec(kind, int(count_text)), indent=2) + "\n"


def write(text: str, output: str, mode: int) -> None:
    if not output:
        sys.stdout.write(text)
        return
    try:
        write_atomically(output, text)
        os.chmod(output, mode)
    except OSError as exc:
        raise ScrunError(f"{output}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(f"{USAGE}\n\n{__doc__}", end="")
        return 0
    try:
        command, values = parse(argv)
        output = values.get("--output", [""])[-1]
        if command == "login-spec":
            write(login_spec(values), output, 0o644)
        else:
            write(DOCKER_HOOK_SCRIPT, output, 0o755)
    except ScrunError as exc:  # UsageError: exit 2
        print_error(PROGRAM, exc.message)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
