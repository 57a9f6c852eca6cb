"""The harness itself: the private Slurm cluster runs containers, and podman works with
the private containers.conf. If these fail, every other integration test is moot."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from scrunlib import siteconfig

if TYPE_CHECKING:
    from conftest import Cluster, Podman


def test_sinfo_shows_both_partitions(cluster: Cluster) -> None:
    done = cluster.run(["sinfo", "-h", "-o", "%P %a"])
    assert done.returncode == 0, done.stderr
    partitions = dict(line.split() for line in done.stdout.splitlines())
    assert partitions == {"debug*": "up", "second": "up"}


def test_two_nodes_for_multi_node_jobs(cluster: Cluster) -> None:
    done = cluster.run(["srun", "-Q", "-N2", "-l", "printenv", "SLURMD_NODENAME"])
    assert done.returncode == 0, done.stderr
    assert len({line.split()[-1] for line in done.stdout.splitlines()}) == 2


def test_srun_container_echo(cluster: Cluster) -> None:
    done = cluster.run(["srun", "-Q", "--container", cluster.bundle, "busybox", "echo", "hi"])
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr


def test_srun_container_exit_code(cluster: Cluster) -> None:
    done = cluster.run(["srun", "-Q", "--container", cluster.bundle, "sh", "-c", "exit 3"])
    assert done.returncode == 3, done.stderr


def test_srun_partition_second(cluster: Cluster) -> None:
    done = cluster.run(["srun", "-Q", "-p", "second", "printenv", "SLURM_JOB_PARTITION"])
    assert (done.returncode, done.stdout) == (0, "second\n"), done.stderr


def test_podman_crun_with_private_config(podman: Podman) -> None:
    done = podman("--runtime", "crun", "run", "--rm", "localhost/busybox", "echo", "hi")
    assert (done.returncode, done.stdout) == (0, "hi\n"), done.stderr


def test_podman_knows_the_scrun_runtime(cluster: Cluster) -> None:
    conf = Path(cluster.containers_conf).read_text()
    assert f'scrun = ["{sys.prefix}/bin/scrun"]' in conf


def test_site_config_points_at_the_cluster(cluster: Cluster) -> None:
    # what scrun sees when podman runs it with an empty environment
    site = siteconfig.load({})
    assert site.path == f"{sys.prefix}/etc/scrun/scrun.toml"
    assert site.slurm_conf_path(None, {}) == cluster.slurm_conf
    assert site.command("srun") == "/usr/bin/srun"


def test_readmes_oci_conf_is_the_clusters(cluster: Cluster) -> None:
    """README step 3's oci.conf is what the tests run, but for where scrun-cdi-run is and
    the GPU lookup only Slurm 22.05 needs (`--job %j --node %n`)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    [block] = re.findall(r"^   ```\n(   RunTimeQuery=.*?)^   ```$", readme, re.S | re.M)
    documented = dict(line.strip().split("=", 1) for line in block.splitlines())
    conf = (Path(cluster.slurm_conf).parent / "oci.conf").read_text()
    running = {
        key: re.sub(r"\S*/scrun-cdi-run(.*?)(?: --job %j --node %n)?(?= -- )",
                    r"/opt/scrun/bin/scrun-cdi-run\1", value)
        for key, value in (line.split("=", 1) for line in conf.splitlines() if "=" in line)
    }  # fmt: skip
    assert documented == running
