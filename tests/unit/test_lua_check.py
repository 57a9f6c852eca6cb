"""scrun-lua-check: lexer, parser, scopes, every check (corpus), CLI, dry run.

The corpus under tests/lua_check/ is the specification of the checks: `bad/<name>.lua` holds
one mistake and `bad/<name>.expect` the exact diagnostics (`line:CODE`, one per line);
`clean/*.lua` must produce none; so must the man pages' example scripts the other tests run
too (tests/lua/), except for the warnings their `.expect` lists (they splice paths unquoted
into rsync commands).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from scrun_lua_check import nodes as n
from scrun_lua_check.answers import NodeAnswers
from scrun_lua_check.codes import CODES
from scrun_lua_check.config import load_settings
from scrun_lua_check.dryrun import DryRunOptions, dry_run, render_dry_run
from scrun_lua_check.jsondiff import diff
from scrun_lua_check.lexer import Kind, LuaSyntaxError, tokenize
from scrun_lua_check.lint import lint
from scrun_lua_check.luaenv import lua_env
from scrun_lua_check.main import main
from scrun_lua_check.parser import parse
from scrun_lua_check.scope import VarKind, resolve
from scrunlib.errors import UsageError

CORPUS = Path(__file__).resolve().parent.parent / "lua_check"
BAD = sorted((CORPUS / "bad").glob("*.lua"))
MAN_PAGE_EXAMPLES = CORPUS.parent / "lua"
SEED = MAN_PAGE_EXAMPLES / "seed_scrun.lua"
SITE_SCRIPTS = CORPUS.parents[1] / "docs" / "scrun-lua"
CLEAN = [
    *sorted((CORPUS / "clean").glob("*.lua")),
    SEED,
    MAN_PAGE_EXAMPLES / "man_26_05_scrun.lua",
]


def codes_of(source: str) -> list[str]:
    return [d.code for d in lint("test.lua", source.encode())]


def expected(script: Path) -> Counter[str]:
    return Counter(script.with_suffix(".expect").read_text().split())


def found(script: Path) -> Counter[str]:
    return Counter(f"{d.line}:{d.code}" for d in lint(str(script), script.read_bytes()))


HOOKS = """
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
    job_env)
  {body}
  return slurm.SUCCESS
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
    config_file, job_id, user_id, group_id)
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


def in_hook(body: str) -> list[str]:
    """Codes for a complete, otherwise clean script with `body` at the start of stage_in."""
    return codes_of(HOOKS.format(body=body))


# ---- corpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("script", BAD, ids=lambda p: p.stem)
def test_bad_script_gets_exactly_its_diagnostics(script: Path) -> None:
    assert expected(script), f"{script.name}: empty .expect"
    assert found(script) == expected(script)


@pytest.mark.parametrize("script", CLEAN, ids=lambda p: p.stem)
def test_clean_script(script: Path) -> None:
    diagnostics = lint(str(script), script.read_bytes())
    assert [d for d in diagnostics if d.severity == "error"] == []
    allowed = expected(script) if script.with_suffix(".expect").exists() else Counter()
    assert found(script) == allowed


def test_corpus_covers_every_code() -> None:
    covered = {entry.split(":")[1] for script in BAD for entry in expected(script)}
    assert set(CODES) - covered == {"E002"}  # the checker's own limitation: see below


def test_seed_gets_only_the_listed_warnings() -> None:
    diagnostics = lint(str(SEED), SEED.read_bytes())
    assert {d.severity for d in diagnostics} == {"warning"}
    splices = [d for d in diagnostics if d.code == "W803"]
    # dst_rootfs is built from a literal, math.floor(user_id) and the container id: safe
    assert [d.line for d in splices] == [41, 137, 185, 192]
    assert "'src_rootfs' spliced unquoted" in splices[0].message
    assert "dst_rootfs" not in splices[0].message
    # `id -un %d` with a number is not a splice
    assert not any(d.line == 20 for d in diagnostics)
    # the user name `id -un` returns is never used: the command runs for nothing
    [dead] = [d for d in diagnostics if d.code == "W311" and d.line == 24]
    assert "'user'" in dead.message
    # rsync's messages for the bind mounts are never looked at
    [lost] = [d for d in diagnostics if d.code == "W311" and d.line == 137]
    assert "the OUTPUT of slurm.allocator_command() stored in 'output'" in lost.message


def test_seed_is_copied_verbatim_from_the_man_page() -> None:
    text = SEED.read_text()
    assert text.startswith("local open = io.open\n")
    assert text.endswith('slurm.log_info("initialized scrun.lua")\nreturn slurm.SUCCESS\n')


# ---- lexer ---------------------------------------------------------------------------------


def test_tokens_have_positions_and_values() -> None:
    tokens, comments = tokenize('local x = 0x10 -- note\n  y = "a\\tb\\65\\u{48}\\z\n   c"')
    assert [(t.kind, t.line, t.col) for t in tokens[:4]] == [
        (Kind.KEYWORD, 1, 1),
        (Kind.NAME, 1, 7),
        (Kind.SYMBOL, 1, 9),
        (Kind.NUMBER, 1, 11),
    ]
    assert tokens[3].value == 16
    assert tokens[4].text == "y" and (tokens[4].line, tokens[4].col) == (2, 3)
    assert tokens[6].value == "a\tbAHc"
    assert comments[0].text == " note" and comments[0].line == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), ("3.0", 3.0), ("1e2", 100.0), (".5", 0.5), ("0xff", 255), ("0x1p4", 16.0),
     ("0xffffffffffffffff", -1)],
)  # fmt: skip
def test_numbers(text: str, value: float) -> None:
    assert tokenize(text)[0][0].value == value


def test_long_strings_and_comments() -> None:
    tokens, comments = tokenize("--[==[ x ]] ]==] s = [[\nfirst\nsecond]]")
    assert comments[0].text == " x ]] "
    assert tokens[2].value == "first\nsecond" and tokens[2].line == 1


def test_shebang_line_is_skipped() -> None:
    tokens, _ = tokenize("#!/usr/bin/lua\nreturn 0")
    assert (tokens[0].text, tokens[0].line) == ("return", 2)


@pytest.mark.parametrize(
    ("source", "message", "col"),
    [
        ('x = "abc', "unfinished string near <eof>", 9),
        ("x = 3x", "malformed number near '3x'", 5),
        ('x = "\\q"', "invalid escape sequence near '\"\\q'", 6),
        ("x = [[abc", "unfinished long string (starting at line 1) near <eof>", 10),
        ("x = @", "unexpected symbol near '@'", 5),
    ],
)
def test_lexical_errors(source: str, message: str, col: int) -> None:
    with pytest.raises(LuaSyntaxError) as error:
        tokenize(source)
    assert (error.value.message, error.value.col) == (message, col)


# ---- parser --------------------------------------------------------------------------------


def expression(source: str) -> n.Node:
    chunk, _ = parse(f"return {source}")
    statement = chunk.body.body[0]
    assert isinstance(statement, n.Return)
    return statement.values[0]


def shape(node: n.Node) -> object:
    """A compact nested form of an expression, to compare trees."""
    if isinstance(node, n.BinOp):
        return (node.op, shape(node.left), shape(node.right))
    if isinstance(node, n.UnOp):
        return (node.op, shape(node.operand))
    if isinstance(node, n.Number):
        return node.value
    if isinstance(node, n.Name):
        return node.name
    return type(node).__name__


@pytest.mark.parametrize(
    ("source", "tree"),
    [
        ("1 + 2 * 3", ("+", 1, ("*", 2, 3))),
        ("2 ^ 3 ^ 2", ("^", 2, ("^", 3, 2))),
        ("-2 ^ 2", ("-", ("^", 2, 2))),
        ("a .. b .. c", ("..", "a", ("..", "b", "c"))),
        ("a or b and c", ("or", "a", ("and", "b", "c"))),
        ("not a == b", ("==", ("not", "a"), "b")),
        ("1 | 2 ~ 3 & 4 << 5", ("|", 1, ("~", 2, ("&", 3, ("<<", 4, 5))))),
        ("a // b % c", ("%", ("//", "a", "b"), "c")),
        ("1 < 2 .. 3", ("<", 1, ("..", 2, 3))),
    ],
)
def test_operator_precedence(source: str, tree: object) -> None:
    assert shape(expression(source)) == tree


def test_statements_and_positions() -> None:
    chunk, _ = parse(
        "local a <const>, b = 1\nfunction t.x.y:m(p, ...) return self end\n"
        "for i = 1, 10, 2 do end\nfor k, v in pairs(t) do goto done end\n::done::\n"
        "repeat local z = 1 until z\nt[1], t.b = f{1, x = 2; [3] = 4}, g'str'\n"
    )
    local, func, numeric, generic, label, repeat, assign = chunk.body.body
    assert isinstance(local, n.Local) and local.names[0].attrib == "const"
    assert isinstance(func, n.FunctionStat) and func.is_method and func.func.name == "t.x.y:m"
    assert [p.name for p in func.func.params] == ["self", "p"] and func.func.is_vararg
    assert isinstance(numeric, n.NumericFor) and numeric.step is not None
    assert isinstance(generic, n.GenericFor) and [x.name for x in generic.names] == ["k", "v"]
    assert isinstance(label, n.Label) and isinstance(repeat, n.Repeat)
    assert isinstance(assign, n.Assign) and len(assign.targets) == 2
    call = assign.values[0]
    assert isinstance(call, n.Call) and isinstance(call.args[0], n.Table)
    assert [e.key is None for e in call.args[0].entries] == [True, False, False]
    assert (call.line, call.col) == (7, 13)  # a call starts where its function expression does


def test_nodes_are_linked_to_parent_and_function() -> None:
    chunk, _ = parse("function f() return g() end")
    statement = chunk.body.body[0]
    assert isinstance(statement, n.FunctionStat)
    ret = statement.func.body.body[0]
    assert isinstance(ret, n.Return)
    assert ret.function is statement.func and ret.values[0].parent is ret
    assert statement.function is None


@pytest.mark.parametrize(
    ("source", "message", "line", "col"),
    [
        ("x = = 1", "unexpected symbol near '='", 1, 5),
        ("function f()\n  return 1",
         "'end' expected (to close 'function' at line 1) near <eof>", 2, 11),
        ("if x then", "'end' expected near <eof>", 1, 10),
        ("f() = 1", "syntax error near '='", 1, 5),
        ("x", "syntax error near <eof>", 1, 2),
        ("local x <fancy> = 1", "unknown attribute 'fancy'", 1, 10),
        ("return 1 x = 2", "'<eof>' expected near 'x'", 1, 10),
        ("break", "break outside a loop at line 1", 1, 1),
        ("for i do end", "'=' or 'in' expected near 'do'", 1, 7),
    ],
)  # fmt: skip
def test_syntax_errors(source: str, message: str, line: int, col: int) -> None:
    with pytest.raises(LuaSyntaxError) as error:
        parse(source)
    assert (error.value.message, error.value.line, error.value.col) == (message, line, col)


SNIPPETS = [
    "a.b.c = 1", "local function f(...) return ... end", "x = #t + -y ^ 2", "f{}", "f''",
    "a:b'c':d{}", "return", "return;", ";;", "do end", "while x do break end",
    "x = function() end", "goto l ::l::", "x = a[b][c](d)(e)", "local t = {f = function() end,}",
    "x = 1 // 2 >> 3", "x = ~y", "return (f())", "x = a.b:c(d).e",
    "x =", "local 1 = 2", "f() g()", "x = }", "return return", "a.b:c = 1", "x = (1)()", "(f)()",
    "for a, b = 1, 2 do end", "local function a.b() end", "x = {[1] 2}", "if x then else else end",
    "function f(a, ...) end", "function f(..., a) end", "x = ... ", "repeat until x",
    "local x <close> = nil", "x = 0x", "x = 1..2", "function f() return ... end",
]  # fmt: skip


@pytest.mark.parametrize("source", SNIPPETS)
def test_parser_agrees_with_lua_on_what_compiles(source: str) -> None:
    lua_accepts = lua_env().compile_error(source.encode()) is None
    try:
        parse(source)
        parsed = True
    except LuaSyntaxError:
        parsed = False
    assert parsed == lua_accepts


# ---- scopes --------------------------------------------------------------------------------


def test_scope_resolution_rules() -> None:
    chunk, _ = parse(
        "local x = 1\nlocal x = x\n"
        "local function f() return f end\n"
        "repeat local done = true until done\n"
        "function t:m() return self end\n"
        "y = x\n"
    )
    info = resolve(chunk)
    first, second = (v for v in info.variables if v.name == "x")
    assert first.reads and second.reads  # `local x = x` read the first one
    f = next(v for v in info.variables if v.name == "f")
    assert f.kind is VarKind.FUNCTION and f.reads  # visible in its own body
    done = next(v for v in info.variables if v.name == "done")
    assert done.reads  # `until` sees the body's locals
    assert next(v for v in info.variables if v.name == "self").kind is VarKind.SELF
    assert [a.write for a in info.globals["y"]] == [True]
    assert "t" in info.globals
    assert info.shadowings[0].same_scope


# ---- individual checks beyond the corpus ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "codes"),
    [
        ("local s = slurm.allocator_command('x')\n  if s ~= 0 then return s end", []),
        ("local _, out = slurm.allocator_command('x')\n  slurm.log_info(out)", []),
        ("local s\n  for _ = 1, 2 do\n    if s then break end\n"
         "    s = slurm.remote_command('x')\n  end", []),
        ("local q = '\\'' .. bundle .. '\\''\n  os.execute('touch ' .. q)", []),
        ("os.execute(\"touch '\" .. bundle .. \"'\")", []),
        ("os.execute(string.format('touch %q', bundle))", ["W803"]),
        ("os.execute(string.format(\"touch '%s' %d\", bundle, job_id))", []),
        ("local cmd = 'rm -rf ' .. bundle\n  os.execute(cmd)", ["W803"]),
        ("local opts = '-a'\n  os.execute('rsync ' .. opts)", []),
        # the script's own command builders: safe when each value they return is
        ("local function quote(s) return \"'\" .. s .. \"'\" end\n"
         "  local function rm(d) return 'rm -rf -- ' .. quote(d) end\n"
         "  os.execute(rm(bundle))", []),
        ("local function rm(d) return 'rm -rf -- ' .. d end\n  os.execute(rm(bundle))", ["W803"]),
        ("local function nice(c) return 'nice ' .. c end\n  os.execute(nice('ls'))", []),
        ("local function nice(c) return 'nice ' .. c end\n"
         "  local c = 'a' .. 'b' .. 'c' .. 'd' .. 'e' .. 'f'\n  os.execute(nice(c))", []),
        ("local function nice(c) return 'nice ' .. c end\n  os.execute(nice('ls ' .. bundle))",
         ["W803"]),
        ("local function f() return f() end\n  os.execute('x ' .. f())", ["W803"]),
        # a long chain is followed to its end: its operators are no hops
        ("local function quote(s) return \"'\" .. s .. \"'\" end\n"
         "  local c = 'a ' .. quote(bundle) .. ' b ' .. quote(bundle) .. ' c ' .. quote(bundle)\n"
         "  c = c .. ' d ' .. quote(bundle) .. ' e ' .. quote(bundle) .. ' f ' .. quote(bundle)\n"
         "  os.execute(c)", []),
        ("local function quote(s) return \"'\" .. s .. \"'\" end\n"
         "  local c = 'a ' .. quote(bundle) .. ' b ' .. quote(bundle) .. ' c ' .. bundle\n"
         "  os.execute(c)", ["W803"]),
        # a command grown piece by piece from safe pieces, or not
        ("local c = ''\n  for _ = 1, 2 do c = c .. 'x; ' end\n  os.execute(c)", []),
        ("local c = ''\n  for _ = 1, 2 do c = c .. bundle end\n  os.execute(c)", ["W803"]),
        # `a and b or c` splices b or c: a only when it is nil or false, which `..` refuses
        ("os.execute('x ' .. (bundle and '1' or '0'))", []),
        ("os.execute('x ' .. (bundle or '0'))", ["W803"]),
        ("io.popen('ls ' .. shell_escape(bundle))", ["W113"]),
        ("slurm.log_info('%s', job_id)\n  slurm.log_debug4('x', 1, 2, 3)", []),
        ("slurm.log_info(table.unpack({}))", []),
        ("slurm.set_bundle_path()", ["E703"]),
        ("slurm:log_info('x')", ["E701"]),
        ("slurm.SUCCESS()", ["E701"]),
        ("slurm.log_info(slurm.CLUSTER_NAME .. slurm.NO_VAL)", []),
        ("if job_id == 0 then return slurm.ESLURM_INVALID_JOB_ID end", []),
        ("slurm.log_info(slurm.to_yaml(slurm.from_yaml('a: 1')))", []),
        ("slurm.log_info('%d', slurm.MAIL_JOB_TIME90)", ["E702"]),
        ("local json = require('cjson')\n  json.encode({})", []),
        ("local lpeg = require(name_from_somewhere)", ["W113", "W211"]),
        ("local c = {}\n  if c.p == nil then c.p = {} end\n  c.p.x = 1", []),
        ("local c = {}\n  if c.p then c.p.x = 1 end\n  c.p.y = 2", ["W806"]),
        # the step's GPUs are the node's to know, at launch; the request is in the config
        ("slurm.log_info('%s', job_env.CUDA_VISIBLE_DEVICES)", ["W807"]),
        ("slurm.log_info('%s', job_env['SLURM_STEP_GPUS'])", ["W807"]),
        ("slurm.log_info('%s', job_env.SLURM_JOB_ID)", []),
        ("local c = {}\n  slurm.log_info(tostring(c.p and c.p.x))", []),
        ("local c = {}\n  if not c.p then return 1 end\n  c.p.x = 1", []),
        ("local c = {}\n  if c.p == nil then c.q = 1 else c.p.x = 1 end", []),
        ("os.execute('echo hi > /dev/null')", []),
        ("os.execute('/usr/bin/printf x')", ["W905"]),
        ("print('x') -- scrun-lua-check: ignore W904", []),
        ("print('x') -- scrun-lua-check: ignore", []),
        ("print('x') -- scrun-lua-check: ignore W1", ["W904"]),
    ],
)  # fmt: skip
def test_check_details(body: str, codes: list[str]) -> None:
    assert sorted(in_hook(body)) == sorted(codes)


@pytest.mark.parametrize(
    ("body", "codes"),
    [
        ("local x = 1\n  x = 2\n  slurm.log_info('%d', x)", ["W311"]),
        ("local x = 1\n  if job_id then x = 2 end\n  slurm.log_info('%d', x)", []),
        ("local x = 1\n  while x < 5 do x = x + 1 end", []),
        ("local x = 1\n  goto skip\n  x = 2\n  ::skip::\n  slurm.log_info('%d', x)", []),
        ("local x = 1\n  local function f() return x end\n  x = 2\n  f()", []),
        ("local x = 1\n  do x = 2 end\n  slurm.log_info('%d', x)", ["W311"]),
        ("local x = 0\n  for i = 1, 3 do if i == 2 then break end x = i end\n"
         "  slurm.log_info('%d', x)", []),
        ("local s, out = slurm.allocator_command('x')\n  if s ~= 0 then return s end\n"
         "  s, out = slurm.allocator_command('y')\n  slurm.log_info(out)", ["W802", "W311"]),
        ("local _x = 1\n  _x = 2\n  slurm.log_info('%d', _x)", []),
        ("local x = nil\n  x = 2\n  slurm.log_info('%d', x)", []),
        ("id = 'x'", []),  # a hook parameter scrun passes: never reported unused
        ("bundle = bundle .. '/x'", ["W311"]),
    ],
)  # fmt: skip
def test_value_flow(body: str, codes: list[str]) -> None:
    assert sorted(in_hook(body)) == sorted(codes)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("os.execute('touch \"' .. bundle .. '\"')", "inside double quotes"),
        ("os.execute(string.format('touch %q', bundle))", "%q quotes for Lua, not for the shell"),
        ("os.execute('touch ' .. bundle)", "spliced unquoted"),
    ],
)
def test_shell_splice_messages_say_what_is_wrong(body: str, words: str) -> None:
    [diagnostic] = lint("t.lua", HOOKS.format(body=body).encode())
    assert diagnostic.code == "W803" and words in diagnostic.message
    assert "'\\''" in diagnostic.message  # the safe form


def test_hooks_defined_through_g_or_as_locals() -> None:
    script = HOOKS.replace("function slurm_scrun_stage_in(", "_G.slurm_scrun_stage_in = function(")
    assert codes_of(script.format(body="")) == []
    script = HOOKS.replace(
        "function slurm_scrun_stage_in(", "local slurm_scrun_stage_in = function("
    )
    assert codes_of(script.format(body="")) == ["E502"]


def test_hook_return_paths() -> None:
    script = HOOKS.replace(
        "  return slurm.SUCCESS\nend\nfunction slurm_scrun_stage_out",
        "end\nfunction slurm_scrun_stage_out",
        1,
    )
    for body, codes in [
        ("if x then return 1 else error('no') end", []),
        ("while true do return 0 end", []),
        ("while true do if y then break end end", ["W601"]),
        ("do return 0 end", []),
        ("repeat return 0 until false", []),
        ("for _ = 1, 2 do return 0 end", ["W601"]),
        ("return", ["W602"]),
        ("return nil", ["W602"]),
        ("return true", ["W602"]),
        ("return rc", []),
    ]:
        found_codes = [c for c in codes_of(script.format(body=body)) if c != "W113"]
        assert found_codes == codes, body


@pytest.mark.parametrize(
    ("ending", "codes"),
    [
        ("if broken then return slurm.ERROR end\nreturn slurm.SUCCESS", []),
        ("do return slurm.ERROR end", ["E603"]),
        ("for _ = 1, 2 do return 1 end\nreturn 0", []),
        ("return 0", []),
    ],
)
def test_only_a_chunk_return_that_always_runs_is_an_error(ending: str, codes: list[str]) -> None:
    script = HOOKS.format(body="")[: -len("return slurm.SUCCESS\n")] + ending + "\n"
    assert [c for c in codes_of(script) if c != "W113"] == codes


def test_e001_column_and_message_when_only_lua_rejects() -> None:
    diagnostics = lint("t.lua", b"local x <const> = 1\nx = 2\n")
    assert [(d.line, d.code) for d in diagnostics] == [(2, "E001")]
    assert "attempt to assign to const variable 'x'" in diagnostics[0].message


def test_e002_when_the_parser_fails_on_valid_lua(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(source: str) -> None:
        raise LuaSyntaxError("pretend limitation near 'x'", 1, 3)

    monkeypatch.setattr("scrun_lua_check.lint.parse", refuse)
    [diagnostic] = lint("t.lua", b"return 0")
    assert (diagnostic.code, diagnostic.col) == ("E002", 3)


# ---- command line --------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory (no pyproject.toml), and no site configuration."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCRUN_SITE_CONFIG", str(tmp_path / "none.toml"))
    return tmp_path


def test_exit_codes(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean, warn, error = CORPUS / "clean/minimal.lua", SEED, CORPUS / "bad/os_exit.lua"
    assert run_cli([str(clean)], capsys) == (0, "", "")
    status, out, _ = run_cli([str(warn)], capsys)
    warnings = sum(expected(SEED).values())
    assert status == 1 and out.splitlines()[-1] == f"0 errors, {warnings} warnings"
    assert out.splitlines()[0].startswith(f"{warn}:23:13: W802 ")
    assert run_cli([str(error)], capsys)[0] == 2
    assert run_cli(["--strict", str(warn)], capsys)[0] == 2
    assert run_cli(["--ignore", "W8,W111,W3", "--ignore", "w213", str(warn)], capsys)[0] == 0


def test_json_output(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(["--format", "json", str(SEED)], capsys)
    document = json.loads(out)
    assert status == 1 and document["errors"] == 0
    assert document["warnings"] == sum(expected(SEED).values())
    first = document["diagnostics"][0]
    assert first == {"path": str(SEED), "line": 23, "col": 13, "code": "W802",
                     "message": first["message"], "severity": "warning"}  # fmt: skip


@pytest.mark.parametrize("name", ["pyproject.toml", "scrun-lua-check.toml"])
def test_config_file(workdir: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    (workdir / name).write_text(
        '[tool.scrun-lua-check]\nignore = ["W8", "W111", "W3"]\nstrict = true\n'
    )
    assert run_cli([str(SEED)], capsys)[0] == 2  # W213 left, and strict
    (workdir / name).write_text('[tool.scrun-lua-check]\nignore = ["W8", "W111", "W213", "W3"]\n')
    assert run_cli([str(SEED)], capsys)[0] == 0


# ---- --lua51 ---------------------------------------------------------------------------------

NEWER_THAN_LUA51 = """local first = table.unpack({1})
  local kind = math.type(first)
  local text = utf8.char(72)
  slurm.log_info("%s %s %s", first, kind, text)"""
LUA51_NOTE = "(Lua 5.2 and later only; Slurm's own scrun built against Lua 5.1 has none)"


def test_lua51_reports_the_names_lua_5_1_lacks() -> None:
    """This scrun's Lua 5.4 has them; with --lua51 each is undefined, with why."""
    assert in_hook(NEWER_THAN_LUA51) == []
    source = HOOKS.format(body=NEWER_THAN_LUA51).encode()
    found = [(d.line, d.code, d.message) for d in lint("test.lua", source, lua51=True)]
    assert [(line, code) for line, code, _ in found] == [(4, "W143"), (5, "W143"), (6, "W113")]
    assert all(message.endswith(LUA51_NOTE) for _, _, message in found), found
    assert "field 'unpack' of global 'table'" in found[0][2]


@pytest.mark.parametrize(
    "script",
    [*sorted(SITE_SCRIPTS.glob("*.lua")), SEED, MAN_PAGE_EXAMPLES / "man_26_05_scrun.lua"],
    ids=lambda p: p.stem,
)  # fmt: skip
def test_shipped_scripts_and_man_page_examples_need_nothing_lua_5_1_lacks(script: Path) -> None:
    """docs/scrun-lua's scripts and both man page examples run under Slurm's own scrun
    where it embeds Lua 5.1: --lua51 finds nothing more than the default check."""
    with_lua51 = Counter(
        f"{d.line}:{d.code}" for d in lint(str(script), script.read_bytes(), lua51=True)
    )
    assert with_lua51 == found(script)


def test_lua51_from_the_command_line_and_the_config(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = workdir / "newer.lua"
    script.write_text(HOOKS.format(body=NEWER_THAN_LUA51))
    assert run_cli([str(script)], capsys)[0] == 0
    status, out, _ = run_cli(["--lua51", str(script)], capsys)
    assert status == 1 and out.count(LUA51_NOTE) == 3, out
    (workdir / "scrun-lua-check.toml").write_text("[tool.scrun-lua-check]\nlua51 = true\n")
    assert run_cli([str(script)], capsys)[0] == 1


def test_explicit_config_and_its_errors(workdir: Path) -> None:
    config = workdir / "ci.toml"
    config.write_text('[tool.scrun-lua-check]\nignore = ["W2"]\n')
    assert load_settings(str(config)).ignore == frozenset({"W2"})
    for text, needle in [
        ('[tool.scrun-lua-check]\nignroe = ["W2"]\n', "unknown key 'ignroe'"),
        ('[tool.scrun-lua-check]\nignore = ["Z9"]\n', "unknown code 'Z9'"),
        ("[tool.scrun-lua-check]\nstrict = 1\n", "strict must be true or false"),
        ("[tool.scrun-lua-check]\nlua51 = 'yes'\n", "lua51 must be true or false"),
        ("[tool.scrun-lua-check\n", "invalid TOML"),
        ('[[tool.scrun-lua-check.answers]]\ncommand = "("\n', "is not a regular expression"),
        ("[[tool.scrun-lua-check.answers]]\ncommand = 'x'\nstatus = 300\n", "status must be"),
        ("[[tool.scrun-lua-check.answers]]\ncommand = 'x'\nouput = ''\n", "unknown key 'ouput'"),
    ]:
        config.write_text(text)
        with pytest.raises(UsageError, match=needle):
            load_settings(str(config))


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus", "x.lua"], "unrecognized arguments: --bogus"),
        (["missing.lua"], "cannot read missing.lua: No such file or directory"),
        (["--ignore", "X1", "x.lua"], "--ignore: unknown code 'X1'"),
        (["--bundle", ".", "x.lua"], "--bundle and --execute need --dry-run"),
        (["--dry-run", "x.lua"], "--dry-run needs --bundle DIR and exactly one FILE"),
        (["--format", "xml", "x.lua"], "argument --format: invalid choice"),
        (["--dry-run", "--bundle", ".", "--id", "../x", str(SEED)], "invalid container id"),
        (["--dry-run", "--bundle", ".", str(SEED)], "--bundle: cannot read ./config.json"),
        (["--timeout", "-1", "x.lua"], "argument --timeout: invalid seconds value: '-1'"),
        (["--timeout", "nan", "x.lua"], "argument --timeout: invalid seconds value: 'nan'"),
        (["--str", "x.lua"], "unrecognized arguments: --str"),  # no abbreviation of --strict
    ],
)
def test_usage_errors_are_one_line(
    workdir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    status, out, err = run_cli(argv, capsys)
    assert status == 2 and out == ""
    assert err.startswith("scrun-lua-check: error: ") and err.count("\n") == 1 and needle in err


def test_default_file_is_beside_slurm_conf(
    workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(CORPUS / "clean/minimal.lua", workdir / "scrun.lua")
    monkeypatch.setenv("SLURM_CONF", str(workdir / "slurm.conf"))
    assert run_cli([], capsys) == (0, "", "")


def test_help_version_and_codes(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(["--help"], capsys)
    assert status == 0 and "--dry-run" in out and "exit status: 0 clean" in out
    status, out, _ = run_cli(["--version"], capsys)
    assert status == 0 and out.startswith("scrun-lua-check ") and "Lua 5.4" in out
    status, out, _ = run_cli(["--list-codes"], capsys)
    assert status == 0 and len(out.splitlines()) == len(CODES)


def test_docs_describe_every_code() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "scrun-lua-check.md").read_text()
    assert [code for code in CODES if f"| {code} |" not in docs] == []


# ---- dry run -------------------------------------------------------------------------------

PODMAN_CONFIG = {
    "ociVersion": "1.0.2-dev",
    "process": {"user": {"uid": 0, "gid": 0, "additionalGids": [10]}, "args": ["sh"],
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
    "root": {"path": "rootfs"},
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/etc/hosts", "type": "bind", "source": "/tmp/h", "options": ["bind"]},
    ],
    "linux": {"namespaces": [{"type": "pid"}], "cgroupsPath": "user.slice:libpod:x"},
}  # fmt: skip


@pytest.fixture
def bundle_config() -> Mapping[str, object]:
    """The dry run's bundle (conftest's `bundle`): what podman writes."""
    return PODMAN_CONFIG


def test_dry_run_of_the_seed_shows_commands_and_config_changes(bundle: Path) -> None:
    report = dry_run(str(SEED), DryRunOptions(str(bundle), "ctr1", 42))
    load, stage_in, stage_out = report.phases
    assert not report.failed and [p.name for p in report.phases] == [
        "load", "slurm_scrun_stage_in", "slurm_scrun_stage_out"]  # fmt: skip
    assert load.logs[0].message == "initialized scrun.lua"
    scripts = [c.script for c in stage_in.commands]
    staged = f"/run/user/{os.getuid()}/slurm/scrun//ctr1/"
    assert scripts[1] == f"mkdir -p {staged}rootfs/"
    assert scripts[2].endswith(f"-a -- {bundle}/rootfs/ {staged}rootfs//")
    assert scripts[3].endswith(f"-a -- /tmp/h {staged}rootfs//etc/hosts")
    assert (stage_in.bundle, stage_in.root_path) == (staged, staged + "rootfs/")
    [written] = stage_in.writes
    assert written.path == f"/run/user/{os.getuid()}/slurm/scrun/ctr1/config.json"
    changes = {c.path: c for c in written.changes or []}
    assert changes["root.path"].new == staged + "rootfs/"
    assert changes["ociVersion"].new == "1.0.0"
    assert changes["linux.cgroupsPath"].op == "-" and changes["mounts[1]"].op == "-"
    assert changes["process.env[1]"].new == "SLURM_JOB_ID=42"
    assert [c.script.split()[1] for c in stage_out.commands] == ["rsync", "--preserve-root=all"]
    # nothing real was touched: not the staging directory, not the bundle's config
    assert not os.path.exists(written.path)
    assert json.loads((bundle / "config.json").read_text()) == PODMAN_CONFIG
    text = render_dry_run(report)
    assert '~ root.path: "rootfs" -> ' in text and "allocator_command (recorded" in text


def test_dry_run_notes_paths_with_an_empty_component(bundle: Path) -> None:
    report = dry_run(str(SEED), DryRunOptions(str(bundle), "ctr1", 42))
    staged = f"/run/user/{os.getuid()}/slurm/scrun//ctr1"
    notes = report.phases[1].notes
    assert f"path with an empty component (an empty value spliced in?): {staged}" in notes
    assert "  note: path with an empty component" in render_dry_run(report)


ID_SCRIPT = """
  local status, user = slurm.allocator_command(string.format("id -un %d", user_id))
  if status ~= 0 or user == "" then
    slurm.log_error("no user name")
    return slurm.ERROR
  end
  user = string.gsub(user, "%s+", "")
  local root = "/home/" .. user .. "/containers/" .. id
  status = slurm.allocator_command("mkdir -p " .. root)
  if status ~= 0 then return slurm.ERROR end
  slurm.set_bundle_path(root)
"""


def test_dry_run_answers_commands_as_a_node_would(bundle: Path, tmp_path: Path) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text(HOOKS.format(body=ID_SCRIPT))
    report = dry_run(str(script), DryRunOptions(str(bundle), "ctr1"))
    stage_in = report.phases[1]
    name = pwd.getpwuid(os.getuid()).pw_name
    assert not report.failed and stage_in.commands[0].output == name + "\n"
    assert stage_in.bundle == f"/home/{name}/containers/ctr1" and stage_in.notes == []


def test_dry_run_runs_before_start_between_stage_in_and_out_when_there_is_one(
    bundle: Path, tmp_path: Path
) -> None:
    script = tmp_path / "scrun.lua"
    script.write_text(BEFORE_START + HOOKS.format(body=""))
    report = dry_run(str(script), DryRunOptions(str(bundle), "ctr1"))
    assert [p.name for p in report.phases] == [
        "load", "slurm_scrun_stage_in", "scrun_before_start", "slurm_scrun_stage_out"]  # fmt: skip
    assert [c.script for c in report.phases[2].commands] == ["true ctr1"]


BEFORE_START = """
function scrun_before_start(id, bundle, spool_dir, config_file, job_id, user_id, group_id,
    job_env)
  slurm.allocator_command("true " .. id)
  return slurm.SUCCESS
end
"""


def test_dry_run_configured_answers_come_first(bundle: Path, workdir: Path) -> None:
    config = workdir / "scrun-lua-check.toml"
    config.write_text('[[tool.scrun-lua-check.answers]]\ncommand = "^id -un"\noutput = " \\n"\n')
    answers = load_settings(str(config)).answers
    script = workdir / "scrun.lua"
    script.write_text(HOOKS.format(body=ID_SCRIPT))
    stage_in = dry_run(str(script), DryRunOptions(str(bundle), "ctr1", answers=answers)).phases[1]
    assert stage_in.bundle == "/home//containers/ctr1"
    assert stage_in.notes == [
        "path with an empty component (an empty value spliced in?): /home//containers/ctr1"
    ]


@pytest.mark.parametrize(
    ("script", "status", "output"),
    [
        ("id -u", 0, f"{os.getuid()}\n"),
        ("/usr/bin/env LANG=C id -gn root", 0, f"{grp.getgrgid(0).gr_name}\n"),
        ("id -un no-such-user-here && echo x", 1, "id: 'no-such-user-here': no such user\n"),
        ("getent passwd root", 0, ":".join(map(str, pwd.getpwnam("root"))) + "\n"),
        ("getent group no-such-group-here", 2, ""),
        ("echo a  b; rm -rf /", 0, "a b\n"),
        ("mkdir -p /x && rsync -a /a/ /x/", 0, ""),
        ("test -d /nowhere", 0, ""),
        ("false", 1, ""),
        ("echo 'unbalanced", 0, ""),
    ],
)
def test_builtin_answers(script: str, status: int, output: str) -> None:
    assert NodeAnswers((), os.getuid())("allocator", script) == (status, output)


def test_dry_run_cli_exit_status_and_json(
    bundle: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--dry-run", "--bundle", str(bundle), "--format", "json", str(SEED)]
    status, out, err = run_cli(argv, capsys)
    document = json.loads(out)
    assert status == 1 and err == ""  # the seed's warnings; the hooks succeed
    assert document["dry_run"]["failed"] is False
    phases = document["dry_run"]["phases"]
    assert phases[1]["writes"][0]["config_changes"]


def test_dry_run_reports_a_script_that_does_not_load(
    bundle: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = CORPUS / "bad/missing_hook.lua"
    status, out, _ = run_cli(["--dry-run", "--bundle", str(bundle), str(script)], capsys)
    assert status == 2
    assert "load: FAILED" in out and "slurm_scrun_stage_out is not defined" in out


def test_dry_run_sandbox_records_instead_of_touching(bundle: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = tmp_path / "scrun.lua"
    script.write_text(
        HOOKS.format(
            body=f"""
  os.execute("touch {marker}")
  local f = assert(io.open(config_file, "w"))
  f:write('{{"ociVersion": "9"}}')
  f:close()
  local again = io.open(config_file):read("a")
  slurm.log_info("%s", again)
  os.remove(config_file)
"""
        )
    )
    report = dry_run(str(script), DryRunOptions(str(bundle)))
    stage_in = report.phases[1]
    assert not marker.exists() and (bundle / "config.json").exists()
    assert [e.kind for e in stage_in.effects] == ["os.execute", "os.remove"]
    assert stage_in.logs[0].message == '{"ociVersion": "9"}'  # reads see the sandboxed write
    [written] = stage_in.writes
    assert written.path == str(bundle / "config.json")
    assert {c.path for c in written.changes or []} >= {"ociVersion", "root", "process"}


def test_dry_run_execute_runs_commands(bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "ran"
    script = tmp_path / "scrun.lua"
    script.write_text(
        HOOKS.format(
            body=f"""
  local status, output = slurm.allocator_command("echo hello; touch {target}")
  if status ~= 0 then return status end
  slurm.log_info("%s", output)
"""
        )
    )
    report = dry_run(str(script), DryRunOptions(str(bundle), execute=True))
    assert target.exists()
    assert report.phases[1].commands[0].output == "hello\n"


# ---- JSON diff -----------------------------------------------------------------------------


def test_json_diff() -> None:
    old = {"a": 1, "env": ["A=1", "B=2"], "m": [{"o": ["x", "y"]}, {"k": 1}], "gone": True}
    new = {"a": 1.0, "env": ["A=1", "B=2", "C=3"], "m": [{"o": ["y"]}], "n": None}
    assert [c.text() for c in diff(old, new)] == [
        "~ a: 1 -> 1.0",
        '+ env[2]: "C=3"',
        '- m[0].o[0]: "x"',
        '- m[1]: {"k": 1}',
        "- gone: true",
        "+ n: null",
    ]
