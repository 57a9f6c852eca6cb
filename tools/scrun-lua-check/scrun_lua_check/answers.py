"""What the dry run answers when a script runs a command: what a compute node would say.

Scripts look at what their commands print: the man page's example asks `id -un` for the
user name and builds paths from it, so an empty answer sends the dry run down a path no
real run takes (`/home//containers/<id>`). Without --execute nothing runs; instead the
first program of the command is answered from this machine's user and group databases the
way a node sharing them would (`id`, `getent`, `whoami`, `echo`), commands that change files
(`mkdir`, `rsync`, `cp`, `rm`, ...) and `test` succeed silently, and so does anything else.
Sites add or override answers with `[[tool.scrun-lua-check.answers]]` entries (config.py):
the first whose `command` regular expression matches the command wins.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from scrunlib import users

OPERATORS = frozenset({";", "&&", "||", "|", "&"})


@dataclass(frozen=True)
class Answer:
    """A configured answer: status and output for commands matching `command`."""

    command: re.Pattern[str]
    status: int = 0
    output: str = ""


@dataclass(frozen=True)
class NodeAnswers:
    """A RecordingRunner responder: configured answers first, then the built-in ones for
    the user `uid` (the hooks' user_id)."""

    configured: Sequence[Answer]
    uid: int

    def __call__(self, kind: str, script: str) -> tuple[int, str]:
        for answer in self.configured:
            if answer.command.search(script):
                return answer.status, answer.output
        return builtin_answer(first_command(script), self.uid)


def first_command(script: str) -> list[str]:
    """The words of the first simple command, without leading `env` and VAR=value."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    words: list[str] = []
    try:
        for word in lexer:
            if word in OPERATORS:
                break
            words.append(word)
    except ValueError:  # unbalanced quotes: the shell would refuse it too
        return []
    while words and (os.path.basename(words[0]) == "env" or re.match(r"\w+=", words[0])):
        words = words[1:]
    return words


def builtin_answer(words: list[str], uid: int) -> tuple[int, str]:
    if not words:
        return 0, ""
    program, args = os.path.basename(words[0]), words[1:]
    if program == "id":
        return answer_id(args, uid)
    if program == "getent":
        return answer_getent(args)
    if program == "whoami":
        return answer_id(["-un"], uid)
    if program == "hostname":
        return 0, socket.gethostname() + "\n"
    if program == "echo":
        newline = "" if args[:1] == ["-n"] else "\n"
        return 0, " ".join(args[1:] if newline == "" else args) + newline
    if program == "false":
        return 1, ""
    return 0, ""  # mkdir, rsync, test, ...: what changes files or checks succeeds silently


def answer_id(args: list[str], uid: int) -> tuple[int, str]:
    flags = "".join(arg.lstrip("-") for arg in args if arg.startswith("-"))
    names = [arg for arg in args if not arg.startswith("-")]
    try:
        user = lookup_user(names[0]) if names else pwd.getpwuid(uid)
    except KeyError:
        return 1, f"id: '{names[0]}': no such user\n"
    groups = sorted({user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)})
    named = "n" in flags
    if "u" in flags:
        return 0, (user.pw_name if named else str(user.pw_uid)) + "\n"
    if "g" in flags:
        return 0, (group_name(user.pw_gid) if named else str(user.pw_gid)) + "\n"
    if "G" in flags:
        return 0, " ".join(group_name(g) if named else str(g) for g in groups) + "\n"
    listed = ",".join(f"{g}({group_name(g)})" for g in groups)
    return 0, (
        f"uid={user.pw_uid}({user.pw_name}) gid={user.pw_gid}({group_name(user.pw_gid)})"
        f" groups={listed}\n"
    )


def answer_getent(args: list[str]) -> tuple[int, str]:
    """`getent passwd|group [KEY]`: exit 2 for a key that is not there, as getent does."""
    if not args or args[0] not in ("passwd", "group"):
        return 0, ""
    try:
        if args[0] == "passwd":
            users = [lookup_user(key) for key in args[1:]] or pwd.getpwall()
            return 0, "".join(":".join(map(str, user)) + "\n" for user in users)
        groups = [lookup_group(key) for key in args[1:]] or grp.getgrall()
        return 0, "".join(
            f"{g.gr_name}:{g.gr_passwd}:{g.gr_gid}:{','.join(g.gr_mem)}\n" for g in groups
        )
    except KeyError:
        return 2, ""


def lookup_user(key: str) -> pwd.struct_passwd:
    return pwd.getpwuid(int(key)) if key.isdigit() else pwd.getpwnam(key)


def lookup_group(key: str) -> grp.struct_group:
    return grp.getgrgid(int(key)) if key.isdigit() else grp.getgrnam(key)


def group_name(gid: int) -> str:
    """As `id` shows a group: its name, or its number when it has none."""
    return users.group_name(gid) or str(gid)
