"""scrun-lua-check: lint and dry-run a site's scrun.lua."""
