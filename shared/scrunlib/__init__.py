"""The common library behind scrun, scrun-anchor, scrun-stage and scrun-lua-check.

Modules are small and import only what they need: the runtime's hot path
(`scrun state`, `create`, `start`, `kill`, `delete`) must not pay for plumbum or lupa,
nor for most of the standard library; the rules and their measured reasons are one
table, tools/lint-tree/lint_tree/hotpath.py, which `make lint` and test_lean_imports read.
"""

__version__ = "0.1.0"
OCI_VERSION = "1.0.2"
