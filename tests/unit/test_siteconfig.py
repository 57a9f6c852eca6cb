"""The site file: parsed once per change, then read from the per-user cache."""

import os
from pathlib import Path

import pytest
from scrunlib import siteconfig
from scrunlib.errors import InvalidInput


@pytest.fixture
def site_file(tmp_path):
    path = tmp_path / "scrun.toml"
    path.write_text('bin_dir = "/opt/slurm/bin"\nstep_grace = 3\n')
    return path, {"SCRUN_SITE_CONFIG": str(path)}, str(tmp_path / "cache")


def test_the_parsed_file_is_cached_until_it_changes(site_file):
    path, environ, cache = site_file
    assert siteconfig.load(environ, cache=cache).bin_dir == "/opt/slurm/bin"
    # Prove the next load reads the cache: plant a different (valid) entry under its key.
    key, _, text = Path(cache).read_text().partition("\n")
    with open(cache, "w", encoding="utf-8") as stream:
        stream.write(f"{key}\n{text.replace('/opt/slurm/bin', '/from/cache')}")
    assert siteconfig.load(environ, cache=cache).bin_dir == "/from/cache"
    path.write_text('bin_dir = "/usr/local/slurm/bin"\n')  # another size: another key
    config = siteconfig.load(environ, cache=cache)
    assert (config.bin_dir, config.step_grace) == ("/usr/local/slurm/bin", 10.0)


def test_a_damaged_cache_is_ignored(site_file):
    _, environ, cache = site_file
    siteconfig.load(environ, cache=cache)
    key = Path(cache).read_text().partition("\n")[0]
    with open(cache, "w", encoding="utf-8") as stream:
        stream.write(f"{key}\n{{not json")
    assert siteconfig.load(environ, cache=cache).step_grace == 3.0


def test_a_bad_file_is_an_error_and_never_cached(site_file):
    path, environ, cache = site_file
    path.write_text("bogus_key = 1\n")
    with pytest.raises(InvalidInput, match="unknown key 'bogus_key'"):
        siteconfig.load(environ, cache=cache)
    assert not os.path.exists(cache)


def test_an_unwritable_cache_is_not_an_error(site_file):
    _, environ, _ = site_file
    assert siteconfig.load(environ, cache="/nonexistent/dir/cache").step_grace == 3.0


def test_a_site_config_that_is_not_a_file_is_an_error(tmp_path):
    """A directory named by SCRUN_SITE_CONFIG is a mistake, not "no site file" (whose
    defaults would run whatever Slurm /usr/bin holds)."""
    with pytest.raises(InvalidInput, match="is not a regular file"):
        siteconfig.load({"SCRUN_SITE_CONFIG": str(tmp_path)})
    assert siteconfig.load({"SCRUN_SITE_CONFIG": str(tmp_path / "none.toml")}).bin_dir is None


def test_queue_settings_have_defaults_and_bounds(tmp_path):
    path = tmp_path / "scrun.toml"
    path.write_text("pending_notice = 0\nqueue_poll = 1\ncreate_wait = 2.5\n")
    config = siteconfig.load({"SCRUN_SITE_CONFIG": str(path)})
    assert config.pending_notice == 0  # notices off
    assert config.queue_poll == siteconfig.MIN_QUEUE_POLL  # never faster than the scheduler
    assert config.create_wait == 2.5
    assert siteconfig.SiteConfig().pending_notice == 5 and siteconfig.SiteConfig().queue_poll == 30
    path.write_text("create_wait = 0\n")
    with pytest.raises(InvalidInput, match="create_wait must be between 0 and 1e6 seconds"):
        siteconfig.load({"SCRUN_SITE_CONFIG": str(path)})
