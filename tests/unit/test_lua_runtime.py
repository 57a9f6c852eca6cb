"""The embedded scrun.lua runtime: the slurm table, hook calls, failures, sandboxing.

Each test writes a small scrun.lua; hook bodies use `assert` so a failing expectation shows
up as the Lua error text in the StageResult message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scrunlib import log
from scrunlib.errors import LuaError
from scrunlib.lua import api
from scrunlib.lua.commands import RecordingRunner, SubprocessRunner
from scrunlib.lua.stage import StageContext, Stager, StageResult, find_script
from scrunlib.slurm_commands import remote_command_argv

STAGE_OUT_OK = "function slurm_scrun_stage_out() return slurm.SUCCESS end\n"


def script(tmp_path: Path, stage_in_body: str, extra: str = STAGE_OUT_OK) -> str:
    path = tmp_path / "scrun.lua"
    path.write_text(
        "function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,"
        " group_id, job_env)\n" + stage_in_body + "\nend\n" + extra
    )
    return str(path)


def context(**changes: object) -> StageContext:
    values: dict[str, object] = dict(
        container_id="c1",
        bundle="/b",
        spool_dir="/spool/c1/",
        config_file="/b/config.json",
        job_id=1234,
        user_id=1000,
        group_id=100,
        job_env=["SLURM_JOB_ID=1234", "A=1", "B=x=y"],
        root_path="/b/rootfs",
        orig_bundle="/b",
    )
    values.update(changes)
    return StageContext(**values)  # type: ignore[arg-type]


def stage_in(tmp_path: Path, body: str, runner: RecordingRunner | None = None) -> StageResult:
    stager = Stager.load(script(tmp_path, body), runner=runner or RecordingRunner())
    return stager.stage_in(context())


def assert_ok(result: StageResult) -> None:
    assert result.ok, result.message


# -- the slurm table ---------------------------------------------------------------------


def test_every_api_function_and_constant_exists(tmp_path: Path) -> None:
    names = ", ".join(f'"{name}"' for name in api.FUNCTIONS)
    body = f"""
    for _, name in ipairs({{{names}}}) do
      assert(type(slurm[name]) == "function", name)
    end
    assert(slurm.SUCCESS == 0 and slurm.ERROR == -1 and slurm.FAILURE == -1)
    assert(slurm.NO_VAL == 4294967294 and math.type(slurm.NO_VAL) == "integer")
    assert(slurm.INFINITE64 > 1.8e19)  -- beyond Lua integers: a float, as upstream
    assert(slurm.MAIL_JOB_TIME890 == 0x20 and slurm.MAIL_JOB_TIME80 == 0x40)
    assert(slurm.MAIL_JOB_TIME90 == nil)  -- Slurm's Lua spells it TIME890
    assert(slurm.GRES_DISABLE_BIND == 1 << 19 and slurm.SPREAD_JOB == 1 << 8)
    assert(slurm.CLUSTER_NAME == "testcluster")
    return slurm.SUCCESS
    """
    stager = Stager.load(
        script(tmp_path, body), runner=RecordingRunner(), cluster_name="testcluster"
    )
    assert_ok(stager.stage_in(context()))


def test_log_levels_and_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    emitted: list[tuple[int, str]] = []
    monkeypatch.setattr(log, "log", lambda level, message: emitted.append((level, message)))
    body = """
    slurm.error("e1")
    slurm.log_error("e%d", 2)
    slurm.log_info("info %s", "x")
    slurm.log_verbose("verbose")
    slurm.log_debug("debug")
    slurm.log_debug2("debug2")
    slurm.log_debug3("debug3")
    slurm.log_debug4("debug4")
    slurm.log_user("user")
    slurm.log_info("100%")  -- no arguments: not a format string
    return 0
    """
    result = stage_in(tmp_path, body)
    assert_ok(result)
    assert [(r.level, r.message) for r in result.logs] == [
        (2, "e1"), (2, "e2"), (3, "info x"), (4, "verbose"), (5, "debug"),
        (6, "debug2"), (7, "debug3"), (8, "debug4"), (3, "user"), (3, "100%"),
    ]  # fmt: skip
    assert (3, "lua: info x") in emitted


def test_slurm_log_takes_both_argument_orders(tmp_path: Path) -> None:
    body = """
    slurm.log(0, "level first")
    slurm.log("message first", 2)
    slurm.log(-1, "never logged")
    slurm.log(9, "capped at debug4")
    slurm.log(1, 42)
    return 0
    """
    result = stage_in(tmp_path, body)
    assert_ok(result)
    assert [(r.level, r.message) for r in result.logs] == [
        (3, "level first"), (5, "message first"), (8, "capped at debug4"), (4, "42"),
    ]  # fmt: skip


def test_log_format_error_points_at_the_script_line(tmp_path: Path) -> None:
    result = stage_in(tmp_path, 'slurm.log_info("%d", "not a number")\nreturn 0')
    assert not result.ok
    assert f"{tmp_path}/scrun.lua:2:" in result.message
    assert "bad argument #2" in result.message


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("90", 90), ("1:30", 2), ("1-2:30:01", 1591), ("UNLIMITED", -1), ("1:2-3", -2), ("", -2)],
)
def test_time_str2mins_from_lua_returns_integers(tmp_path: Path, text: str, minutes: int) -> None:
    body = f"""
    local m = slurm.time_str2mins("{text}")
    assert(math.type(m) == "integer", math.type(m))
    assert(m == {minutes}, m)
    assert(slurm.time_str2mins(nil) == -2)
    assert(slurm.time_str2mins(90) == 90)
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


# -- JSON ----------------------------------------------------------------------------------


def test_from_json_types(tmp_path: Path) -> None:
    body = r"""
    local v = slurm.from_json('{"i": 3, "f": 1.5, "big": 1e3, "s": "é", "t": true,'
      .. ' "n": null, "a": [1, null, 3], "o": {"k": "v"}}')
    assert(math.type(v.i) == "integer" and v.i == 3)
    assert(math.type(v.f) == "float" and v.f == 1.5)
    assert(math.type(v.big) == "float")
    assert(v.s == "é" and v.t == true and v.n == nil)
    assert(v.a[1] == 1 and v.a[2] == nil and v.a[3] == 3)
    assert(v.o.k == "v")
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


def test_to_json_rules(tmp_path: Path) -> None:
    body = r"""
    local function same(value, expected)
      local text = slurm.to_json(value)
      assert(text:gsub("%s", "") == expected, text)
    end
    same({}, "[]")
    same({1, 2, 3}, "[1,2,3]")
    same({[1] = "a", [3] = "c"}, '{"1":"a","3":"c"}')
    same({a = 1, b = {c = false}}, '{"a":1,"b":{"c":false}}')
    same({uid = 1000.0, half = 0.5}, '{"half":0.5,"uid":1000}')
    same({job = job_id, user = user_id}, '{"job":1234,"user":1000}')
    -- RLIM_INFINITY (a uint64, a float in Lua) comes back as itself, not as 2**64
    same(slurm.from_json('{"hard": 18446744073709551615}'), '{"hard":18446744073709551615}')
    -- an object read from JSON stays an object when emptied; an array stays an array
    local config = slurm.from_json('{"annotations": {"x": "y"}, "list": [1], "empty": {}}')
    config.annotations.x = nil
    config.list[1] = nil
    same(config, '{"annotations":{},"empty":{},"list":[]}')
    local ok, err = pcall(slurm.to_json, {f = print})
    assert(not ok and err:find("Conversion to application/json failed", 1, true), err)
    local deep = {}
    local node = deep
    for _ = 1, 20 do node.next = {}; node = node.next end
    ok, err = pcall(slurm.to_json, deep)
    assert(not ok and err:find("nested deeper than 16", 1, true), err)
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


def test_slurm_error_codes_are_constants_and_fail_a_hook(tmp_path: Path) -> None:
    body = """
    assert(slurm.SLURM_SUCCESS == 0 and slurm.SLURM_ERROR == -1)
    assert(slurm.ESLURM_INVALID_PARTITION_NAME == 2000)
    assert(slurm.ESLURM_CONTAINER_NOT_CONFIGURED == 10000)
    return slurm.ESLURM_INVALID_JOB_ID
    """
    result = stage_in(tmp_path, body)
    assert not result.ok and result.status == 2017


def test_yaml_round_trip_and_errors(tmp_path: Path) -> None:
    body = r"""
    local v = slurm.from_yaml("root:\n  path: rootfs\nargs: [sh, -c]\nwhen: 2024-01-02\n"
      .. "n: 3\nempty: {}\n")
    assert(v.root.path == "rootfs" and v.args[2] == "-c" and v.when == "2024-01-02")
    assert(math.type(v.n) == "integer")
    local text = slurm.to_yaml(v)
    assert(text:find("  path: rootfs", 1, true), text)
    assert(text:find("empty: {}", 1, true), text)
    assert(slurm.from_yaml(text).root.path == "rootfs")
    local ok, err = pcall(slurm.from_yaml, "a: [unclosed")
    assert(not ok and err:find("Conversion from application/yaml failed", 1, true), err)
    ok, err = pcall(slurm.to_yaml, {f = print})
    assert(not ok and err:find("Conversion to application/yaml failed", 1, true), err)
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


def test_from_json_errors(tmp_path: Path) -> None:
    body = r"""
    local ok, err = pcall(slurm.from_json, "{not json")
    assert(not ok and err:find("Conversion from application/json failed", 1, true), err)
    ok, err = pcall(slurm.from_json, nil)
    assert(not ok and err:find("expected a string, got nil", 1, true), err)
    ok, err = pcall(slurm.from_json, "NaN")
    assert(not ok, "NaN is not JSON")
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


def test_from_json_refuses_with_json_loads_messages(tmp_path: Path) -> None:
    """Good documents are read without json (scrunlib.leanjson); the rest goes to json.loads,
    so a failure says what json.loads says, and a document nested deeper than leanjson reads
    is still read."""
    texts = ["{not json", "NaN", "[1, -Infinity]", '{"a": 1,}', "[" * 300 + "]" * 300]
    calls = "\n".join(
        f"ok, err = pcall(slurm.from_json, [==[{text}]==])\nslurm.log_info(ok and 'read' or err)"
        for text in texts
    )
    result = stage_in(tmp_path, f"local ok, err\n{calls}\nreturn 0")
    assert_ok(result)

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not valid JSON")

    expected = []
    for text in texts:
        try:
            json.loads(text, parse_constant=refuse)
        except ValueError as exc:
            expected.append(f"Conversion from application/json failed: {exc}")
        else:
            expected.append("read")
    assert [record.message for record in result.logs] == expected


@pytest.mark.parametrize("module", ["json", "cjson"])
def test_require_json_modules_round_trip(tmp_path: Path, module: str) -> None:
    body = f"""
    local json = require '{module}'
    local text = '{{"process": {{"env": ["A=1"], "user": {{"uid": 0}}}}, "x": [1.5, "s"]}}'
    local value = json.decode(text)
    assert(value.process.env[1] == "A=1")
    local again = json.decode(json.encode(value))
    assert(again.process.user.uid == 0 and again.x[1] == 1.5 and again.x[2] == "s")
    assert(json.encode({{a = json.null}}):gsub("%s", "") == '{{"a":null}}')
    assert(require '{module}' == json)
    slurm.log_debug(json.encode(value))
    return 0
    """
    result = stage_in(tmp_path, body)
    assert_ok(result)
    assert json.loads(result.logs[0].message) == {
        "process": {"env": ["A=1"], "user": {"uid": 0}},
        "x": [1.5, "s"],
    }


def test_to_json_output_is_pretty_and_round_trips_non_ascii(tmp_path: Path) -> None:
    body = 'slurm.log_debug(slurm.to_json({name = "naïve", n = {1, 2}}))\nreturn 0'
    result = stage_in(tmp_path, body)
    assert "\n" in result.logs[0].message
    assert json.loads(result.logs[0].message) == {"name": "naïve", "n": [1, 2]}


# -- hook arguments and results ------------------------------------------------------------


def test_log_line_with_braces_reaches_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log.configure(log.LogSettings(stderr=log.INFO))
    try:
        result = stage_in(tmp_path, "slurm.log_info(slurm.to_json({a = 1}))\nreturn 0")
        assert_ok(result)
        assert '"a": 1' in capsys.readouterr().err
    finally:
        log.configure(log.LogSettings())  # the stderr sink must not outlive capsys


def test_hook_argument_types(tmp_path: Path) -> None:
    body = """
    assert(type(id) == "string" and id == "c1")
    assert(bundle == "/b" and spool_dir == "/spool/c1/" and config_file == "/b/config.json")
    assert(math.type(job_id) == "integer" and job_id == 1234)
    assert(math.type(user_id) == "integer" and math.type(group_id) == "integer")
    assert(string.format("%d %d %d", job_id, user_id, group_id) == "1234 1000 100")
    assert(#job_env == 3, #job_env)
    local seen = {}
    for i, entry in ipairs(job_env) do seen[i] = entry end
    assert(table.concat(seen, ",") == "SLURM_JOB_ID=1234,A=1,B=x=y", table.concat(seen, ","))
    return slurm.SUCCESS
    """
    out = """
    function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                                   spool_dir, config_file, job_id, user_id, group_id)
      assert(orig_bundle == nil, "orig_bundle must be nil when create used the cwd")
      assert(bundle == "/b" and root_path == "/b/rootfs" and orig_root_path == "/b/rootfs")
      assert(math.type(job_id) == "integer" and math.type(group_id) == "integer")
      return 0
    end
    """
    stager = Stager.load(script(tmp_path, body, out), runner=RecordingRunner())
    ctx = context(orig_bundle=None)
    assert_ok(stager.stage_in(ctx))
    assert_ok(stager.stage_out(ctx))


def test_set_paths_are_reported_and_passed_to_stage_out(tmp_path: Path) -> None:
    body = """
    assert(slurm.set_bundle_path("/scratch/c1/") == "/b")
    assert(slurm.set_root_path("/scratch/c1/rootfs") == "/b/rootfs")
    return 0
    """
    out = """
    function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path)
      slurm.log_info("%s %s %s %s", bundle, orig_bundle, root_path, orig_root_path)
      return 0
    end
    """
    stager = Stager.load(script(tmp_path, body, out), runner=RecordingRunner())
    result = stager.stage_in(context())
    assert_ok(result)
    assert (result.bundle, result.root_path) == ("/scratch/c1/", "/scratch/c1/rootfs")
    assert (stager.bundle, stager.root_path) == ("/scratch/c1/", "/scratch/c1/rootfs")
    out_result = stager.stage_out(context())
    assert out_result.logs[0].message == "/scratch/c1/ /b /scratch/c1/rootfs /b/rootfs"


def test_set_bundle_path_returns_nil_without_orig_bundle(tmp_path: Path) -> None:
    body = "assert(slurm.set_bundle_path('/x') == nil)\nreturn 0"
    stager = Stager.load(script(tmp_path, body), runner=RecordingRunner())
    assert_ok(stager.stage_in(context(orig_bundle=None)))


def test_globals_persist_from_stage_in_to_stage_out(tmp_path: Path) -> None:
    body = "remembered = job_id * 2\nreturn 0"
    out = "function slurm_scrun_stage_out() return remembered - 2468 end\n"
    stager = Stager.load(script(tmp_path, body, out), runner=RecordingRunner())
    assert_ok(stager.stage_in(context()))
    assert_ok(stager.stage_out(context()))


@pytest.mark.parametrize("value", ["nil", '"done"', "true", ""])
def test_non_numeric_return_is_success(tmp_path: Path, value: str) -> None:
    result = stage_in(tmp_path, f"return {value}")
    assert result.ok and result.status == 0
    assert "not a number" in result.message


def test_hook_removed_after_loading_counts_as_success(tmp_path: Path) -> None:
    out = "function slurm_scrun_stage_out() slurm_scrun_stage_in = nil return 0 end\n"
    stager = Stager.load(script(tmp_path, "return 1", out), runner=RecordingRunner())
    assert_ok(stager.stage_out(context()))
    result = stager.stage_in(context())
    assert result.ok and "is not defined" in result.message


# -- failure modes ---------------------------------------------------------------------------


def test_error_status_carries_the_scripts_reason(tmp_path: Path) -> None:
    body = """
    slurm.log_debug("checking scratch")
    slurm.log_error("no scratch space")
    return slurm.ERROR
    """
    result = stage_in(tmp_path, body)
    assert not result.ok and result.status == -1
    assert result.message.endswith("slurm_scrun_stage_in returned -1: no scratch space")


def test_info_line_is_the_reason_when_no_error_was_logged(tmp_path: Path) -> None:
    result = stage_in(tmp_path, 'slurm.log_info("mkdir failed 1: denied")\nreturn 3')
    assert not result.ok and result.status == 3
    assert "mkdir failed 1: denied" in result.message


def test_lua_error_in_hook(tmp_path: Path) -> None:
    result = stage_in(tmp_path, 'local x = 1\nerror("staging exploded")')
    assert not result.ok and result.status == -1
    assert f"slurm_scrun_stage_in failed: {tmp_path}/scrun.lua:3: staging exploded" in (
        result.message
    )
    assert "stack traceback" in result.traceback


def test_runtime_error_in_hook(tmp_path: Path) -> None:
    result = stage_in(tmp_path, "local t = nil\nreturn t.field")
    assert not result.ok
    assert "attempt to index a nil value" in result.message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "scrun.lua"
    with pytest.raises(LuaError) as caught:
        Stager.load(str(path), runner=RecordingRunner())
    assert caught.value.message == f"unable to load {path}: the file does not exist"
    assert "No such file" not in caught.value.message  # clients turn that into exit 127


def test_syntax_error_names_path_and_line(tmp_path: Path) -> None:
    path = tmp_path / "scrun.lua"
    path.write_text("-- fine\nfunction broken(\n")
    with pytest.raises(LuaError, match=rf"^unable to load {path}: {path}:3: .*expected"):
        Stager.load(str(path), runner=RecordingRunner())


def test_top_level_error(tmp_path: Path) -> None:
    path = tmp_path / "scrun.lua"
    path.write_text("local x = 1\nerror('site config broken')\n")
    with pytest.raises(LuaError, match=rf"^unable to load {path}: {path}:2: site config broken"):
        Stager.load(str(path), runner=RecordingRunner())


@pytest.mark.parametrize("missing", [hook.name for hook in api.HOOKS])
@pytest.mark.parametrize(
    ("assignment", "problem"), [("nil", "is not defined"), ("5", "is a number, not a function")]
)
def test_missing_hook_is_named(tmp_path: Path, missing: str, assignment: str, problem: str) -> None:
    path = tmp_path / "scrun.lua"
    path.write_text(
        "".join(f"function {hook.name}() return 0 end\n" for hook in api.HOOKS)
        + f"{missing} = {assignment}\n"
    )
    with pytest.raises(LuaError, match=f"required function {missing} {problem}"):
        Stager.load(str(path), runner=RecordingRunner())


def test_before_start_is_optional_and_gets_stage_ins_arguments(tmp_path: Path) -> None:
    """scrun_before_start: a script without it starts as before; one with it is called
    with stage-in's arguments, its failure is a failed result with its words."""
    without = Stager.load(script(tmp_path, "return 0"), runner=RecordingRunner())
    assert_ok(without.before_start(context()))
    body = (
        "function scrun_before_start(id, bundle, spool_dir, config_file, job_id, user_id,"
        " group_id, job_env)\n"
        "  if id ~= 'c1' or bundle ~= '/b' or job_id ~= 1234 or job_env[2] ~= 'A=1' then\n"
        "    slurm.log_error('wrong arguments: %s %s %s', id, bundle, job_id) return -1\n"
        "  end\n"
        "  if started then slurm.log_error('the copy of /etc/hosts is gone') return -1 end\n"
        "  started = true return slurm.SUCCESS\nend\n"
    )
    stager = Stager.load(
        script(tmp_path, "return 0", STAGE_OUT_OK + body), runner=RecordingRunner()
    )
    assert_ok(stager.stage_in(context()))
    assert_ok(stager.before_start(context()))
    failed = stager.before_start(context())
    assert not failed.ok
    assert failed.message.endswith("scrun_before_start returned -1: the copy of /etc/hosts is gone")


def test_a_before_start_that_is_not_a_function_fails_the_load(tmp_path: Path) -> None:
    path = script(tmp_path, "return 0", STAGE_OUT_OK + "scrun_before_start = {}\n")
    with pytest.raises(LuaError, match=r": function scrun_before_start is a table, not a function"):
        Stager.load(path, runner=RecordingRunner())


@pytest.mark.parametrize(
    ("value", "fails"),
    [("1", True), ("-1", True), ("'2'", True), ("0", False), ("nil", False), ("'abc'", False)],
)
def test_chunk_return_value(tmp_path: Path, value: str, fails: bool) -> None:
    path = script(tmp_path, "return 0", STAGE_OUT_OK + f"return {value}\n")
    if fails:
        with pytest.raises(LuaError, match="the script returned"):
            Stager.load(path, runner=RecordingRunner())
    else:
        Stager.load(path, runner=RecordingRunner())


def test_shebang_line_is_skipped_and_lines_still_count(tmp_path: Path) -> None:
    path = tmp_path / "scrun.lua"
    path.write_text("#!/usr/bin/lua\nerror('here')\n")
    with pytest.raises(LuaError, match=f"{path}:2: here"):
        Stager.load(str(path), runner=RecordingRunner())


def test_load_logs_are_kept(tmp_path: Path) -> None:
    path = script(tmp_path, "return 0", STAGE_OUT_OK + 'slurm.log_info("initialized")\n')
    stager = Stager.load(path, runner=RecordingRunner())
    assert [(r.level, r.message) for r in stager.load_logs] == [(3, "initialized")]


def test_set_bundle_path_outside_hooks_is_an_error(tmp_path: Path) -> None:
    path = script(tmp_path, "return 0", STAGE_OUT_OK + "slurm.set_bundle_path('/x')\n")
    with pytest.raises(LuaError, match="only works inside the stage functions"):
        Stager.load(path, runner=RecordingRunner())


# -- time limits -------------------------------------------------------------------------


def test_runaway_hook_is_stopped(tmp_path: Path) -> None:
    stager = Stager.load(
        script(tmp_path, "while true do end"), runner=RecordingRunner(), timeout=0.3
    )
    result = stager.stage_in(context())
    assert not result.ok
    assert "ran past its time limit of 0.3 s" in result.message
    assert result.seconds < 5


def test_command_timeout_kills_and_fails(tmp_path: Path) -> None:
    body = 'slurm.allocator_command("sleep 30 & sleep 30")\nreturn 0'
    stager = Stager.load(script(tmp_path, body), runner=SubprocessRunner(), timeout=0.5)
    result = stager.stage_in(context(job_env=["PATH=/usr/bin:/bin"]))
    assert not result.ok
    assert "slurm.allocator_command timed out after" in result.message
    assert result.commands[0].timed_out and result.commands[0].status == -1
    assert result.seconds < 10


# -- commands ------------------------------------------------------------------------------


def test_allocator_command_runs_locally_with_the_job_env(tmp_path: Path) -> None:
    body = """
    local status, output = slurm.allocator_command("echo $A-$SLURM_JOB_ID; echo err >&2; exit 3")
    assert(math.type(status) == "integer" and status == 3, status)
    assert(output == "1-1234\\nerr\\n", output)
    status, output = slurm.allocator_command("read line; echo \\"[$line]\\"")
    assert(output == "[]\\n", output)  -- stdin is /dev/null
    status = slurm.allocator_command("kill -9 $$")
    assert(status == 137, status)
    return 0
    """
    stager = Stager.load(script(tmp_path, body), runner=SubprocessRunner())
    result = stager.stage_in(context())
    assert_ok(result)
    assert [(c.kind, c.status) for c in result.commands] == [
        ("allocator", 3), ("allocator", 0), ("allocator", 137),
    ]  # fmt: skip


def test_allocator_command_inherits_process_env_when_job_env_is_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRUN_TEST_MARKER", "inherited")
    body = 'local _, out = slurm.allocator_command("echo $SCRUN_TEST_MARKER")\nreturn out'
    stager = Stager.load(script(tmp_path, body), runner=SubprocessRunner())
    result = stager.stage_in(context(job_env=[]))
    assert result.commands[0].output == "inherited\n"


def test_allocator_command_talks_to_scruns_cluster(tmp_path: Path) -> None:
    """A script's local commands get the slurm.conf scrun uses, as its remote ones do: its
    scontrol or squeue asks the same cluster (on top of the job env, and of this process's
    environment when that is empty)."""
    body = 'local _, out = slurm.allocator_command("echo $SLURM_CONF")\nreturn out'
    runner = SubprocessRunner(slurm_conf="/etc/slurm-test/slurm.conf")
    for job_env in ([], ["A=1"]):
        stager = Stager.load(script(tmp_path, body), runner=runner)
        result = stager.stage_in(context(job_env=job_env))
        assert result.commands[0].output == "/etc/slurm-test/slurm.conf\n", job_env


def test_remote_command_runs_srun_in_the_job(tmp_path: Path, fp: object) -> None:
    srun_argv = remote_command_argv("/opt/slurm/bin/srun", 1234, "hostname")
    assert srun_argv[:3] == ["/opt/slurm/bin/srun", "--jobid", "1234"]
    assert srun_argv[-4:] == ["--", "/bin/sh", "-c", "hostname"]
    seen: dict[str, object] = {}

    def capture(process: object) -> None:
        seen.update(process.kwargs or {})  # type: ignore[attr-defined]

    fp.register(srun_argv, stdout="node1\n", stderr="warn\n", returncode=0, callback=capture)  # type: ignore[attr-defined]
    body = """
    local status, output = slurm.remote_command("hostname")
    assert(status == 0, status)
    slurm.log_info(output)
    return 0
    """
    runner = SubprocessRunner(slurm_conf="/etc/slurm-test/slurm.conf", srun="/opt/slurm/bin/srun")
    stager = Stager.load(script(tmp_path, body), runner=runner)
    result = stager.stage_in(context())
    assert_ok(result)
    assert "node1" in result.logs[0].message
    assert result.commands[0].kind == "remote"
    env = seen["env"]
    assert isinstance(env, dict)
    assert env["SLURM_CONF"] == "/etc/slurm-test/slurm.conf" and env["A"] == "1"
    assert seen["stdin"] == subprocess.DEVNULL and seen["process_group"] == 0


def test_a_commands_notices_go_to_the_user_as_they_come(tmp_path: Path) -> None:
    """A line a command writes that starts with `scrun: ` is handed to `tell_user` while the
    command runs (it waits here for the user to have been told), and is not in the output
    the script gets; other lines are."""
    told = tmp_path / "told"
    body = f"""
    local status, output = slurm.allocator_command(
        "echo before; echo 'scrun: importing image (2.0 GiB) to the cache'; "
        .. "while [ ! -e {told} ]; do sleep 0.01; done; echo after")
    assert(status == 0 and output == "before\\nafter\\n", output)
    return 0
    """
    notices: list[str] = []

    def tell_user(line: str) -> None:
        notices.append(line)
        told.touch()

    runner = SubprocessRunner(tell_user=tell_user, timeout=10)
    assert_ok(Stager.load(script(tmp_path, body), runner=runner).stage_in(context()))
    assert notices == ["scrun: importing image (2.0 GiB) to the cache"]


def test_remote_command_without_srun_reports_127(tmp_path: Path) -> None:
    body = "local status, out = slurm.remote_command('true')\nslurm.log_info(out)\nreturn status"
    runner = SubprocessRunner(srun="/nonexistent/srun")
    result = Stager.load(script(tmp_path, body), runner=runner).stage_in(context())
    assert result.status == 127 and "cannot run /nonexistent/srun" in result.message


def test_recording_runner_records_instead_of_running(tmp_path: Path) -> None:
    runner = RecordingRunner(responder=lambda kind, text: (7, f"{kind}:{text}"))
    body = """
    local s, out = slurm.allocator_command("rm -rf /definitely/not")
    assert(s == 7 and out == "allocator:rm -rf /definitely/not", out)
    s, out = slurm.remote_command("mkdir /scratch")
    assert(out == "remote:mkdir /scratch")
    return 0
    """
    result = stage_in(tmp_path, body, runner)
    assert_ok(result)
    assert [(c.kind, c.script, c.job_id) for c in runner.calls] == [
        ("allocator", "rm -rf /definitely/not", None), ("remote", "mkdir /scratch", 1234),
    ]  # fmt: skip
    assert runner.calls[0].env["A"] == "1"


# -- sandbox -------------------------------------------------------------------------------


def test_python_is_not_reachable(tmp_path: Path) -> None:
    body = """
    assert(python == nil and package.loaded.python == nil)
    assert(not pcall(require, "python"))
    -- the Python callables behind the slurm functions: callable, but no attributes
    local found = 0
    local function probe(f, depth)
      if depth > 3 then return end
      for i = 1, 255 do
        local name, value = debug.getupvalue(f, i)
        if not name then break end
        if type(value) == "function" then probe(value, depth + 1) end
        if type(value) == "userdata" then
          found = found + 1
          assert(not pcall(function() return value.__globals__ end), "__globals__")
          assert(not pcall(function() return value.__class__ end), "__class__")
        end
      end
    end
    for _, f in pairs(slurm) do if type(f) == "function" then probe(f, 0) end end
    assert(found > 0, "expected to find the wrapped Python callables")
    for _, value in pairs(debug.getregistry()) do
      if type(value) == "userdata" then  -- Lua's own file handles answer nil
        local ok, class = pcall(function() return value.__class__ end)
        assert(not ok or class == nil)
      end
    end
    assert(not pcall(os.exit, 1))
    return 0
    """
    assert_ok(stage_in(tmp_path, body))


def test_runtime_module_is_loaded_lazily() -> None:
    code = "import sys, scrunlib.lua.stage; print('lupa' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": "shared"})  # fmt: skip
    assert out.stdout.strip() == "False"


def test_find_script_is_beside_slurm_conf() -> None:
    assert find_script("/etc/slurm/slurm.conf") == "/etc/slurm/scrun.lua"
