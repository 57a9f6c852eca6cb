"""config.json is parsed and validated before anything is submitted."""

import json
import os
import re

import pytest
from scrunlib import bundle as bundles
from scrunlib.errors import InvalidInput

GOOD = {
    "ociVersion": "1.0.2",
    "process": {"args": ["sh"], "env": ["A=1"], "terminal": False},
    "root": {"path": "rootfs"},
    "annotations": {"k": "v"},
}


def write(tmp_path, config):
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(tmp_path)


def test_good_bundle(tmp_path):
    bundle = bundles.load(write(tmp_path, GOOD))
    assert bundle.rootfs == str(tmp_path / "rootfs")
    assert bundle.args == ("sh",)
    assert bundle.annotations == {"k": "v"}
    assert bundle.oci_version == "1.0.2"


def rlimit(kind: object = "RLIMIT_NOFILE", soft: object = 8, hard: object = 8) -> dict[str, object]:
    return {"type": kind, "soft": soft, "hard": hard}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["process"].update(args="sh"), "process.args"),
        (lambda c: c["process"].update(args=[]), "process.args"),
        (lambda c: c["process"].update(env="A=1"), "process.env"),
        (lambda c: c["process"].update(env=[1]), "process.env"),
        (lambda c: c["process"].update(terminal="yes"), "process.terminal"),
        (lambda c: c["root"].update(path=5), "root.path"),
        (lambda c: c["process"].update(user=[0]), "process.user must be an object"),
        (lambda c: c["process"].update(user={"uid": -1, "gid": 0}), "process.user.uid must be"),
        (lambda c: c["process"].update(user={"uid": 0, "gid": 1 << 32}), "process.user.gid"),
        (lambda c: c["process"].update(user={"uid": 1.5, "gid": 0}), "process.user.uid"),
        (lambda c: c["process"].update(user={"uid": True}), "process.user.uid"),
        (lambda c: c["process"].update(user={"umask": "022"}), "process.user.umask"),
        (lambda c: c["process"].update(user={"additionalGids": 5}), "additionalGids must be a"),
        (lambda c: c["process"].update(user={"additionalGids": [1, -3]}), "additionalGids[1]"),
        (lambda c: c["process"].update(rlimits={}), "process.rlimits must be a list"),
        (lambda c: c["process"].update(rlimits=[rlimit("RLIMIT_TEST")]), "'RLIMIT_TEST' is not"),
        (lambda c: c["process"].update(rlimits=[{"soft": 1, "hard": 1}]), "None is not a Linux"),
        (lambda c: c["process"].update(rlimits=[rlimit(["RLIMIT_CORE"])]), "['RLIMIT_CORE'] is"),
        (lambda c: c["process"].update(rlimits=[rlimit(soft=-1)]), "rlimits[0].soft must be"),
        (lambda c: c["process"].update(rlimits=[rlimit(hard=1 << 64)]), "rlimits[0].hard"),
        (lambda c: c["process"].update(rlimits=[rlimit(hard="8")]), "rlimits[0].hard"),
        (lambda c: c["process"].update(rlimits=[rlimit(soft=9, hard=8)]), "soft 9 is above"),
        (lambda c: c.pop("root"), "root"),
        (lambda c: c.update(annotations=[]), "annotations"),
        (lambda c: c.update(annotations={"k": 1}), "annotations"),
        (lambda c: c.update(ociVersion=1), "ociVersion"),
        (lambda c: c.update(mounts={"a": 1}), "mounts must be a list"),
        (lambda c: c.update(mounts=["/tmp"]), "mounts[0] must be an object"),
        (lambda c: c.update(mounts=[{"type": "bind", "source": "/tmp"}]), "mounts[0] has no dest"),
        (lambda c: c.update(mounts=[{"destination": 5}]), "mounts[0].destination"),
        (lambda c: c.update(mounts=[{"destination": "/a", "options": "ro"}]), "mounts[0].options"),
        (lambda c: c.update(mounts=[{"destination": "/a", "source": None}]), "mounts[0].source"),
    ],
)
def test_wrong_types_are_rejected(tmp_path, mutate, message):
    config = json.loads(json.dumps(GOOD))
    mutate(config)
    with pytest.raises(InvalidInput, match=re.escape(message)):
        bundles.load(write(tmp_path, config))


def test_a_well_formed_user_passes(tmp_path):
    user = {"uid": 4294967295, "gid": 0, "umask": 18, "additionalGids": [5, 27], "x": "y"}
    config = json.loads(json.dumps(GOOD))
    config["process"]["user"] = user
    assert bundles.load(write(tmp_path, config)).config["process"]["user"] == user


def test_linux_resource_limits_pass(tmp_path):
    rlimits = [rlimit("RLIMIT_CORE", 0, 0), rlimit(soft=1024, hard=(1 << 64) - 1)]
    config = json.loads(json.dumps(GOOD))
    config["process"]["rlimits"] = rlimits
    assert bundles.load(write(tmp_path, config)).config["process"]["rlimits"] == rlimits


def test_well_formed_mounts_pass(tmp_path):
    config = {
        **GOOD,
        "mounts": [
            {"destination": "/proc"},
            {"destination": "/a", "type": "bind", "source": "/b", "options": ["ro"]},
        ],
    }
    assert bundles.load(write(tmp_path, config)).config["mounts"] == config["mounts"]


def test_missing_and_malformed(tmp_path):
    with pytest.raises(InvalidInput, match=r"has no config\.json"):
        bundles.load(str(tmp_path))
    with pytest.raises(InvalidInput, match="not valid JSON"):
        bundles.load(write(tmp_path, "{nope"))
    with pytest.raises(InvalidInput, match="not a directory"):
        bundles.load(str(tmp_path / "missing"))


def test_messages_never_say_no_such_file(tmp_path):
    """Podman and docker turn that phrase into 'command not found' (exit 127)."""
    with pytest.raises(InvalidInput) as caught:
        bundles.load(str(tmp_path / "missing"))
    assert "No such file" not in str(caught.value)


def test_slurm_runnable_bundle_links_rootfs(tmp_path):
    source = tmp_path / "podman"
    source.mkdir()
    elsewhere = tmp_path / "merged"
    elsewhere.mkdir()
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(elsewhere)
    config["linux"] = {"cgroupsPath": "/libpod_parent/libpod-x", "namespaces": []}
    write(source, config)
    target = tmp_path / "spool" / "bundle"
    assert bundles.runnable_by_slurm(str(source), str(target)).path == str(target)
    assert os.readlink(target / "rootfs") == str(elsewhere)
    written = json.loads((target / "config.json").read_text())
    assert written["root"]["path"] == str(elsewhere)
    assert written["linux"] == {"namespaces": []}  # the caller's cgroup is not the node's


def test_the_nodes_copy_lives_in_the_bundle_and_goes_with_remove_node_copy(tmp_path):
    """Not in the runtime root (/run/user/<uid>/scrun): the nodes are other hosts and read
    only what they read of the bundle itself."""
    source = tmp_path / "podman"
    source.mkdir()
    (tmp_path / "merged").mkdir()
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path / "merged")
    write(source, config)
    target = bundles.node_copy_dir(str(source), "ctr-1")
    assert os.path.dirname(target) == str(source)
    assert bundles.node_copy_dir(str(source), "ctr-2") != target
    node_bundle = bundles.runnable_by_slurm(str(source), target)
    assert node_bundle.path == target and os.path.isfile(os.path.join(target, "config.json"))
    bundles.remove_node_copy(node_bundle, str(source))
    assert sorted(os.listdir(source)) == ["config.json"]


def test_remove_node_copy_keeps_a_bundle_used_as_it_is(tmp_path):
    (tmp_path / "rootfs").mkdir()
    path = write(tmp_path, GOOD)
    node_bundle = bundles.runnable_by_slurm(path, bundles.node_copy_dir(path, "c"))
    bundles.remove_node_copy(node_bundle, path + "/")
    assert (tmp_path / "rootfs").is_dir() and (tmp_path / "config.json").is_file()


def test_an_unwritable_bundle_is_one_clear_error(tmp_path):
    source = tmp_path / "podman"
    source.mkdir()
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path)
    write(source, config)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InvalidInput, match="cannot write the bundle the nodes run in"):
        bundles.runnable_by_slurm(str(source), str(blocker / "sub"))


def test_bundle_with_its_own_rootfs_is_used_as_is(tmp_path):
    (tmp_path / "rootfs").mkdir()
    path = write(tmp_path, GOOD)
    assert bundles.runnable_by_slurm(path, str(tmp_path / "unused")).path == path
    assert not (tmp_path / "unused").exists()


def test_terminal_bundle_sees_the_nodes_ptys(tmp_path):
    (tmp_path / "rootfs").mkdir()
    config = json.loads(json.dumps(GOOD))
    config["mounts"] = [{"destination": "/dev/pts", "type": "devpts", "source": "devpts"}]
    path = write(tmp_path, config)
    target = tmp_path / "spool"
    assert bundles.runnable_by_slurm(path, str(target), node_pty=True).path == str(target)
    mounts = json.loads((target / "config.json").read_text())["mounts"]
    assert mounts == [bundles.HOST_PTS_MOUNT]


def test_a_runtime_made_terminal_keeps_the_containers_own_ptys(tmp_path):
    """Slurm 23.02+: the runtime makes the pty in the container's /dev/pts (the node's
    ptmx is closed to a rootless runtime)."""
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path / "elsewhere")
    config["process"]["terminal"] = True
    devpts = {"destination": "/dev/pts", "type": "devpts", "source": "devpts"}
    config["mounts"] = [devpts]
    target = tmp_path / "spool"
    assert bundles.runnable_by_slurm(write(tmp_path, config), str(target)).path == str(target)
    assert json.loads((target / "config.json").read_text())["mounts"] == [devpts]


def test_hooks_of_the_submitting_host_are_dropped(tmp_path):
    source = tmp_path / "docker"
    source.mkdir()
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path / "elsewhere")
    setkey = {"path": "/proc/4242/exe", "args": ["libnetwork-setkey", "-exec-root=/x", "id"]}
    site_hook = {"path": "/usr/libexec/site-hook"}
    config["hooks"] = {"prestart": [setkey, site_hook], "poststop": [site_hook]}
    write(source, config)
    target = tmp_path / "spool"
    bundles.runnable_by_slurm(str(source), str(target))
    hooks = json.loads((target / "config.json").read_text())["hooks"]
    assert hooks == {"prestart": [site_hook], "poststop": [site_hook]}


def test_malformed_hooks_are_left_to_the_nodes_runtime(tmp_path):
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path / "elsewhere")
    config["hooks"] = {"prestart": ["not-an-object", None, {"args": []}], "poststop": "x"}
    write(tmp_path, config)
    bundles.runnable_by_slurm(str(tmp_path), str(tmp_path / "spool"))
    hooks = json.loads((tmp_path / "spool" / "config.json").read_text())["hooks"]
    assert hooks == config["hooks"]


def alpine_like(tmp_path):
    """/bin/sh and /bin/busybox only; PATH lists /usr/bin before /bin."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "bin" / "busybox").write_text("")
    (rootfs / "bin" / "busybox").chmod(0o755)
    (rootfs / "bin" / "sh").symlink_to("busybox")
    config = json.loads(json.dumps(GOOD))
    config["process"]["env"] = ["PATH=/usr/bin:/bin"]
    return config


def test_the_nodes_run_the_program_the_container_path_finds(tmp_path):
    config = alpine_like(tmp_path)
    config["process"]["args"] = ["sh", "-c", "exit 3"]
    node = bundles.runnable_by_slurm(write(tmp_path, config), str(tmp_path / "unused"))
    assert node.args == ("/bin/sh", "-c", "exit 3")


def test_a_relative_program_is_found_from_the_cwd(tmp_path):
    config = alpine_like(tmp_path)
    config["process"].update(args=["./prog", "x"], cwd="/work")
    node = bundles.runnable_by_slurm(write(tmp_path, config), str(tmp_path / "unused"))
    assert node.args == ("/work/prog", "x")


def test_a_program_missing_from_the_rootfs_is_left_to_the_node(tmp_path):
    config = alpine_like(tmp_path)
    config["process"]["args"] = ["from-a-mount"]
    node = bundles.runnable_by_slurm(write(tmp_path, config), str(tmp_path / "unused"))
    assert node.args == ("from-a-mount",)


def test_a_rootfs_not_readable_here_leaves_the_command_alone(tmp_path):
    config = json.loads(json.dumps(GOOD))
    config["root"]["path"] = str(tmp_path / "staged-on-the-nodes")
    source = tmp_path / "bundle"
    source.mkdir()
    node = bundles.runnable_by_slurm(write(source, config), str(tmp_path / "spool"))
    assert node.args == ("sh",)


def test_process_cwd_must_be_absolute(tmp_path):
    config = json.loads(json.dumps(GOOD))
    config["process"]["cwd"] = "work"
    with pytest.raises(InvalidInput, match=r"process\.cwd"):
        bundles.load(write(tmp_path, config))


def with_other_config(tmp_path):
    """A bundle with its rootfs, config.json and other.json (which runs `other`)."""
    (tmp_path / "rootfs").mkdir()
    other = json.loads(json.dumps(GOOD))
    other["process"]["args"] = ["other"]
    (tmp_path / "other.json").write_text(json.dumps(other))
    return write(tmp_path, GOOD)


def test_config_file_replaces_config_json(tmp_path):
    """crun's --config: relative to the bundle, or absolute."""
    path = with_other_config(tmp_path)
    for config_file in ("other.json", str(tmp_path / "other.json")):
        bundle = bundles.load(path, config_file)
        assert bundle.args == ("other",)
        assert bundle.config_file == str(tmp_path / "other.json")
        assert not bundle.own_config
    assert bundles.load(path).own_config
    with pytest.raises(InvalidInput, match=r"has no missing\.json"):
        bundles.load(path, "missing.json")
    with pytest.raises(InvalidInput, match=r"config file /nonexistent/c\.json does not exist"):
        bundles.load(path, "/nonexistent/c.json")


def test_slurmd_gets_a_copy_of_another_config_file(tmp_path):
    """slurmd reads <bundle>/config.json: another file is copied into the spool bundle."""
    path = with_other_config(tmp_path)
    target = tmp_path / "spool"
    node = bundles.runnable_by_slurm(path, str(target), config_file="other.json")
    assert node.path == str(target)
    assert json.loads((target / "config.json").read_text())["process"]["args"] == ["other"]
    assert os.readlink(target / "rootfs") == str(tmp_path / "rootfs")


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"process": {"args": ["sh", "a\0b"]}}, "process.args[1]"),
        ({"process": {"args": ["\ud800"]}}, "process.args[0]"),
        ({"process": {"args": ["sh"], "env": ["A=\udcff"]}}, "process.env[0]"),
        ({"process": {"args": ["sh"], "cwd": "/\0"}}, "process.cwd"),
        ({"root": {"path": "rootfs\ud800"}}, "root.path"),
        ({"annotations": {"a": "\ud800"}}, "an annotation"),
    ],
)
def test_text_no_file_or_command_can_hold_is_refused(change, where):
    config = {"root": {"path": "rootfs"}, "process": {"args": ["sh"]}, **change}
    with pytest.raises(InvalidInput, match=re.escape(where)):
        bundles.parse("/b", config)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "network", "path": "/proc/4242/ns/net"}, "network namespace of another process"),
        ({"type": "ipc", "path": "/proc/4242/ns/ipc"}, "(/proc/4242/ns/ipc: a pod's"),
        ({"type": "network", "path": "/run/netns/netns-5e1f"}, "podman's network namespace"),
        ({"type": "network", "path": "/run/user/1001/netns/netns-9a"}, "--network host"),
    ],
)
def test_a_namespace_of_this_host_is_refused(tmp_path, entry, message):
    """Joining a pod's or another container's namespace, or podman's own network: none of
    them is on the compute node that runs the container."""
    config = {**GOOD, "linux": {"namespaces": [{"type": "pid"}, entry]}}
    with pytest.raises(InvalidInput, match=re.escape(message)) as caught:
        bundles.load(write(tmp_path, config))
    assert str(caught.value).startswith("config.json: linux.namespaces[1] ")


def test_new_namespaces_and_a_sites_own_path_pass(tmp_path):
    """Namespaces the node's runtime makes, and one a site keeps at the same path on every
    node, are left as they are."""
    namespaces = [
        {"type": "network"},
        {"type": "mount", "path": ""},
        {"type": "network", "path": "/var/run/netns/hpc"},
        {"type": "time"},
    ]
    config = {**GOOD, "linux": {"namespaces": namespaces}}
    assert bundles.load(write(tmp_path, config)).config["linux"]["namespaces"] == namespaces


@pytest.mark.parametrize(
    ("linux", "message"),
    [
        ("x", "linux must be an object"),
        ({"namespaces": {"type": "pid"}}, "linux.namespaces must be a list"),
        ({"namespaces": ["uts"]}, "linux.namespaces[0] must be an object"),
        ({"namespaces": [{"type": "bogus"}]}, "linux.namespaces[0].type 'bogus' is not a Linux"),
        ({"namespaces": [{"path": "/x"}]}, "linux.namespaces[0].type None is not a Linux"),
        ({"namespaces": [{"type": "user", "path": 5}]}, "linux.namespaces[0].path must be a"),
    ],
)
def test_a_malformed_linux_block_is_refused_at_create(tmp_path, linux, message):
    """crun refuses these too, but on the node: only after the job was granted and staged."""
    with pytest.raises(InvalidInput, match=re.escape(f"config.json: {message}")):
        bundles.load(write(tmp_path, {**GOOD, "linux": linux}))
