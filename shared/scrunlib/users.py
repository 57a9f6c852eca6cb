"""Names of users and groups, for state.json's owner and the SCRUN_USER/SCRUN_GROUP
variables."""

from __future__ import annotations

import grp
import pwd


def user_name(uid: int) -> str:
    """The account name of `uid`, or "" when it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def group_name(gid: int) -> str:
    """The group name of `gid`, or "" when it has none."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""
