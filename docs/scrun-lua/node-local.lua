-- scrun.lua: run each container from a copy on the local disk of each of its compute nodes.
-- The recommended layout where a job's nodes share a scratch filesystem that is slow or
-- busy to run containers from: the container's files are read from the node's own disk.
-- Install it beside slurm.conf on the host where podman or docker runs; set `scratch` to a
-- filesystem the login host and every node share (used only to carry the copy over) and
-- `node_local` to a directory on each node's own disk.
--
-- Stage-in copies the container's root filesystem, and the files podman or docker
-- bind-mount into it (/etc/hosts, /etc/resolv.conf, /run/.containerenv, /dev/shm, ...), to
-- <scratch>/<uid>/scrun/<id>/ on the login host (slurm.allocator_command), with a config
-- that names their node-local paths; then every node of the job copies it to
-- <node_local>/scrun-<uid>/<id>/ (slurm.remote_command: one task on each node, as the user),
-- and the container runs from there. It drops the config's hooks (the engine's own programs
-- for the login host) and its cgroup path (the engine's cgroup on the login host; Slurm
-- places the step on the node). Bind-mount sources under `shared_sources` (the homes, the
-- scratch) are left alone: the nodes see them. Stage-out copies what the container wrote on
-- its first node back into podman's or docker's copy of the root filesystem and removes
-- the copies, on the nodes and in the scratch.
-- Plain Lua 5.1 (no table.unpack): Debian builds Slurm's own scrun against Lua 5.1.
local scratch = "/scratch"
local node_local = "/tmp"
local shared_sources = { "/home", scratch }

local function quote(s)
	return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

local function run(what, command)
	local rc, output = slurm.allocator_command(command)
	if rc ~= 0 then
		slurm.log_error("%s failed (exit %d): %s", what, rc, string.sub(output, 1, 300))
	end
	return rc == 0
end

local function run_on_nodes(what, command)
	local rc, output = slurm.remote_command(command)
	if rc ~= 0 then
		slurm.log_error("%s on the nodes failed (exit %d): %s", what, rc, string.sub(output, 1, 300))
	end
	return rc == 0
end

local function under(path, dirs)
	for _, dir in ipairs(dirs) do
		if path == dir or string.sub(path, 1, #dir + 1) == dir .. "/" then
			return true
		end
	end
	return false
end

-- the kernel's file systems and the shared ones: the nodes have their own or the same
local function seen_by_nodes(path)
	return under(path, { "/dev", "/proc", "/sys" }) or under(path, shared_sources)
end

local function read_config(path)
	local file = io.open(path, "rb")
	if not file then
		return nil
	end
	local text = file:read("*a")
	file:close()
	return slurm.from_json(text)
end

local function carried(id, user_id)
	return string.format("%s/%d/scrun/%s", scratch, math.floor(user_id), id)
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local config = read_config(config_file)
	if config == nil then
		slurm.log_error("%s", "cannot read " .. config_file)
		return slurm.ERROR
	end
	local rootfs = config["root"]["path"]
	if string.sub(rootfs, 1, 1) ~= "/" then
		rootfs = bundle .. "/" .. rootfs
	end
	local carry = carried(id, user_id)
	local here = string.format("%s/scrun-%d/%s", node_local, math.floor(user_id), id)
	if not run("mkdir", "mkdir -p -m 700 " .. quote(carry .. "/rootfs") .. " " .. quote(carry .. "/mounts")) then
		return slurm.ERROR
	end
	if not run("copying the root filesystem", "rsync -a --numeric-ids -- " .. quote(rootfs .. "/") .. " " .. quote(carry .. "/rootfs/")) then
		return slurm.ERROR
	end
	for i, mount in ipairs(config["mounts"] or {}) do
		local source = mount["source"]
		if mount["type"] == "bind" and source ~= nil and not seen_by_nodes(source) then
			if not run("copying " .. source, "cp -a -- " .. quote(source) .. " " .. quote(string.format("%s/mounts/%d", carry, i))) then
				return slurm.ERROR
			end
			mount["source"] = string.format("%s/mounts/%d", here, i)
		end
	end
	config["root"]["path"] = here .. "/rootfs"
	config["hooks"] = nil
	if config["linux"] ~= nil then
		config["linux"]["cgroupsPath"] = nil
	end
	local file = io.open(carry .. "/config.json", "wb")
	if not file then
		slurm.log_error("%s", "cannot write " .. carry .. "/config.json")
		return slurm.ERROR
	end
	file:write(slurm.to_json(config))
	file:close()
	local copy = string.format("umask 077 && mkdir -p %s && cp -a -- %s/. %s/", quote(here), quote(carry), quote(here))
	if not run_on_nodes("copying the container", copy) then
		return slurm.ERROR
	end
	slurm.set_bundle_path(here)
	slurm.set_root_path(here .. "/rootfs")
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	if bundle == orig_bundle then
		return slurm.SUCCESS
	end
	local carry = carried(id, user_id)
	-- the first node's copy is the container's task 0: what it wrote goes back
	local back = string.format("if [ \"$SLURM_NODEID\" = 0 ]; then rsync -a --numeric-ids --delete -- %s/ %s/; fi; s=$?; rm -rf -- %s; exit $s",
		quote(root_path), quote(carry .. "/rootfs"), quote(bundle))
	local fetched = run_on_nodes("copying the root filesystem back", back)
	local synced = fetched and run("copying the root filesystem back",
		"rsync -a --numeric-ids --delete -- " .. quote(carry .. "/rootfs/") .. " " .. quote(orig_root_path .. "/"))
	local removed = run("removing the carried copy", "rm -rf -- " .. quote(carry))
	if synced and removed then
		return slurm.SUCCESS
	end
	return slurm.ERROR
end

return slurm.SUCCESS
