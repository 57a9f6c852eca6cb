"""docs/scrun-variables.md is generated from the SCRUN_* table and kept in sync with it."""

import os
import subprocess
import sys
from pathlib import Path

from scrunlib.job_options import VARIABLES
from scrunlib.variables_doc import markdown_table

REPO = Path(__file__).resolve().parents[2]


def test_docs_are_generated_from_the_table():
    doc = (REPO / "docs" / "scrun-variables.md").read_text()
    assert doc == markdown_table(), (
        "run: python -m scrunlib.variables_doc > docs/scrun-variables.md"
    )


def test_module_entry_prints_the_docs_and_imports_only_the_standard_library():
    code = (
        "import runpy, sys; runpy.run_module('scrunlib.variables_doc', run_name='__main__');"
        "import scrunlib.jobenv;"
        "others = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names);"
        "others -= {'__main__', 'scrunlib'}; assert not others, others"
    )
    source = {**os.environ, "PYTHONPATH": str(REPO / "shared")}  # this tree, not the venv's copy
    out = subprocess.run(  # -S: no site-packages, so no installed package can be imported
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, env=source
    )
    assert out.stdout == markdown_table()


def test_every_variable_is_a_row_of_the_docs():
    doc = markdown_table()
    for v in VARIABLES:
        assert f"| `{v.name}` | `{v.option}` | {v.kind.name} |" in doc
