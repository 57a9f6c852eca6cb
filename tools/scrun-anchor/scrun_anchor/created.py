"""What creation (scrun_anchor.creation) hands to serving (scrun_anchor.container): its own
module, so that neither of the two imports the other for it."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _socket import socket as raw_socket

    from scrunlib.bundle import Bundle
    from scrunlib.phases import PhaseClock
    from scrunlib.siteconfig import SiteConfig
    from scrunlib.slurm import Slurm
    from scrunlib.spool import Spool
    from scrunlib.state import ContainerState

    from scrun_anchor.channel import ContainerStderr
    from scrun_anchor.life import Life
    from scrun_anchor.preparation import Preparation


class Created:
    """What creation leaves to serving (scrun_anchor.container.Container): the container
    in state `created`, its job submitted or held, its preparation ready or under way, the
    socket listening."""

    def __init__(
        self,
        *,
        spool: Spool,
        life: Life,
        state: ContainerState,
        bundle: Bundle,
        preparation: Preparation,
        step_args: tuple[str, ...],
        slurm: Slurm,
        site: SiteConfig,
        server: raw_socket,
        pty_slave: int | None,
        clock: PhaseClock,
        notices: bool,
        stderr: ContainerStderr,
    ) -> None:
        self.spool, self.life, self.state, self.bundle = spool, life, state, bundle
        self.preparation = preparation
        self.step_args = step_args  # SCRUN_* options for the step's srun
        self.slurm, self.site, self.server = slurm, site, server
        self.pty_slave = pty_slave  # the console socket's pty, for the step
        self.clock = clock  # the state's phase timings
        self.notices = notices  # say on the container's stderr why its job waits
        self.stderr = stderr  # the one channel to the user (scrun.lua's notices too)
