"""The spool directory: one 0700 directory per container under the runtime root.

Layout of `<root>/<container dir>/`:
  state.json     the container state, replaced atomically at every transition
  anchor.sock    the anchor's control socket (gone once the anchor has exited)
  anchor.log     the anchor's own log (text), so nothing lands in the container's stdio
  bundle/        the bundle slurmd runs (config.json + a `rootfs` link), when the given one
                 will not do as it is (scrunlib.bundle.runnable_by_slurm)
  stage.json     what scrun.lua's stage-out needs, from stage-in until stage-out has run
  config.json    the container's config with the engine's own GPU option made its job's
                 request (scrunlib.engine_gpus), when the engine gave one: what runs
  paused         present while `scrun pause` has the container's steps frozen

The root also holds per-user caches (scrunlib.filecache), dot files that no container id
can name: `.slurm-version` (srun's version) and `.site-config` (the parsed site file); and
`.queue` (with `.queue.lock`), the reading of the user's jobs their queued containers share
(scrunlib.user_queue).

Container ids are never trusted: they are checked before any path is built from them.
"""

from __future__ import annotations

import os

from scrunlib.errors import ContainerExists, InvalidInput, ScrunError, reason
from scrunlib.files import remove_tree
from scrunlib.ownership import check_private_dir
from scrunlib.userns import real_ids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# A container id: [A-Za-z0-9][A-Za-z0-9_.+-]* (sets of characters, not a regular
# expression: every scrun call would import re, see lint_tree/hotpath.py).
_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ID_FIRST | frozenset("_.+-")
MAX_ID_LENGTH = 1024
# File names are limited to 255 bytes; longer ids get a readable prefix plus a hash.
_MAX_PLAIN_NAME = 128
# sun_path holds 108 bytes; longer socket paths are reached through /proc/self/fd.
_MAX_SOCKET_PATH = 100


SITE_CONFIG_CACHE = ".site-config"
PAUSED_MARKER = "paused"
SLURM_VERSION_CACHE = ".slurm-version"


def validate_id(container_id: str) -> str:
    """Refuse anything but `[A-Za-z0-9][A-Za-z0-9_.+-]*`, at most 1024 characters."""
    if not container_id:
        raise InvalidInput("container id is empty")
    if len(container_id) > MAX_ID_LENGTH:
        raise InvalidInput(f"container id is longer than {MAX_ID_LENGTH} characters")
    if container_id[0] not in _ID_FIRST or not _ID_REST.issuperset(container_id):
        shown = container_id.encode("unicode_escape").decode("ascii")[:80]
        raise InvalidInput(
            f"invalid container id {shown!r}: use letters, digits and _.+- (not first)"
        )
    return container_id


def default_root(environ: Mapping[str, str]) -> str:
    """Every command agrees on this without being told (podman never passes --root):
    `$XDG_RUNTIME_DIR/scrun` when set and non-empty, else `/run/user/<uid>/scrun`, with the
    real uid (in rootless podman's user namespace, uid 0 is the user)."""
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "scrun")
    return f"/run/user/{real_ids()[0]}/scrun"


def dir_name(container_id: str) -> str:
    if len(container_id) <= _MAX_PLAIN_NAME:
        return container_id
    import hashlib

    digest = hashlib.sha256(container_id.encode()).hexdigest()[:24]
    return f"{container_id[:100]}-{digest}"


class Spool:
    """Paths of one container's spool directory."""

    __slots__ = ("container_id", "root")

    def __init__(self, root: str, container_id: str) -> None:
        self.root = root
        self.container_id = container_id

    @property
    def path(self) -> str:
        return os.path.join(self.root, dir_name(self.container_id))

    @property
    def dir_for_scripts(self) -> str:
        """`<root>/<id>/`, with the trailing slash scrun.lua and SCRUN_SPOOL_DIR promise."""
        return os.path.join(self.path, "")

    @property
    def state_file(self) -> str:
        return os.path.join(self.path, "state.json")

    @property
    def socket(self) -> str:
        return os.path.join(self.path, "anchor.sock")

    @property
    def log_file(self) -> str:
        return os.path.join(self.path, "anchor.log")

    @property
    def stage_file(self) -> str:
        return os.path.join(self.path, "stage.json")

    @property
    def config_file(self) -> str:
        return os.path.join(self.path, "config.json")

    @property
    def paused_file(self) -> str:
        return os.path.join(self.path, PAUSED_MARKER)

    def create(self) -> None:
        """Make the directory (0700), failing if the id is already in use."""
        make_root(self.root)
        try:
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            raise ContainerExists(self.container_id) from None
        except OSError as exc:
            raise ScrunError(f"cannot create spool directory {self.path}: {reason(exc)}") from exc

    def remove(self) -> None:
        remove_tree(self.path)


def make_root(root: str) -> None:
    """Create the runtime root (0700) and its parents when missing; refuse one that is not
    the caller's private directory (scrunlib.ownership)."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ScrunError(f"cannot create runtime root {root}: {reason(exc)}") from exc
    check_private_dir(root, "runtime root", missing_ok=False)


def socket_address(path: str) -> tuple[str, int | None]:
    """An address `bind`/`connect` accept for `path`, and a directory fd to close afterwards.

    Paths too long for sun_path are reached as /proc/self/fd/<dirfd>/<name>."""
    if len(path.encode()) <= _MAX_SOCKET_PATH:
        return path, None
    directory, name = os.path.split(path)
    dirfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{dirfd}/{name}", dirfd
