"""scrun-cdi-run's entry point: from here on signals wait (scrun_cdi.wrapper says why), and
only then is the wrapper imported, so that a signal finds the wrapper's interpreter starting
for as short a time as can be."""

from __future__ import annotations

import sys

from scrunlib import signals

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    deferred = signals.defer()
    from scrun_cdi import wrapper

    return wrapper.run(sys.argv[1:] if argv is None else argv, deferred)
