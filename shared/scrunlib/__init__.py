"""The common library behind scrun, scrun-anchor, scrun-stage and scrun-lua-check.

Modules are small and import only what they need: the runtime's hot path
(`scrun state`, `kill`, `start`) must not pay for plumbum, loguru or lupa.
"""

__version__ = "0.1.0"
OCI_VERSION = "1.0.2"
