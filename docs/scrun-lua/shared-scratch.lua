-- scrun.lua: stage each container into a scratch filesystem that the compute nodes share
-- with the login host, and back. Install it beside slurm.conf on the host where podman or
-- docker runs; set `scratch` to the shared filesystem's path (the same on every node).
--
-- The nodes cannot read the login host's container storage (podman's /var/lib/containers,
-- a rootless user's graphroot, docker's data root), its /run or its /tmp. So stage-in copies
-- the container's root filesystem, and the files podman or docker bind-mount into it
-- (/etc/hosts, /etc/resolv.conf, /etc/hostname, /run/.containerenv, /dev/shm, ...), to
-- <scratch>/<uid>/scrun/<id>/, and points the container's config at the copies. It drops the
-- config's hooks, which are the engine's own programs for the login host (docker's network
-- setup runs /proc/<dockerd's pid>/exe) and fail on a node or act on the wrong host, and its
-- cgroup path, the engine's cgroup on the login host (Slurm places the step on the node).
-- Nothing else in the config changes: the container runs as podman or docker made it.
-- Bind-mount sources under `shared_sources` (the homes, the scratch itself) are left alone:
-- the nodes see them.
-- Stage-out copies the root filesystem back (what the container wrote shows up in podman's
-- or docker's copy, e.g. for `podman commit` or `podman cp`) and removes the staged copy.
-- Its commands run on the login host (slurm.allocator_command), as the user.
-- Plain Lua 5.1 (no table.unpack): Debian builds Slurm's own scrun against Lua 5.1.
local scratch = "/scratch"
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
	local staged = string.format("%s/%d/scrun/%s", scratch, math.floor(user_id), id)
	if not run("mkdir", "mkdir -p -m 700 " .. quote(staged .. "/rootfs") .. " " .. quote(staged .. "/mounts")) then
		return slurm.ERROR
	end
	if not run("copying the root filesystem", "rsync -a --numeric-ids -- " .. quote(rootfs .. "/") .. " " .. quote(staged .. "/rootfs/")) then
		return slurm.ERROR
	end
	for i, mount in ipairs(config["mounts"] or {}) do
		local source = mount["source"]
		if mount["type"] == "bind" and source ~= nil and not seen_by_nodes(source) then
			local copy = string.format("%s/mounts/%d", staged, i)
			if not run("copying " .. source, "cp -a -- " .. quote(source) .. " " .. quote(copy)) then
				return slurm.ERROR
			end
			mount["source"] = copy
		end
	end
	config["root"]["path"] = staged .. "/rootfs"
	config["hooks"] = nil
	if config["linux"] ~= nil then
		config["linux"]["cgroupsPath"] = nil
	end
	local file = io.open(staged .. "/config.json", "wb")
	if not file then
		slurm.log_error("%s", "cannot write " .. staged .. "/config.json")
		return slurm.ERROR
	end
	file:write(slurm.to_json(config))
	file:close()
	slurm.set_bundle_path(staged)
	slurm.set_root_path(staged .. "/rootfs")
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	if bundle == orig_bundle then
		return slurm.SUCCESS
	end
	local synced = run("copying the root filesystem back",
		"rsync -a --numeric-ids --delete -- " .. quote(root_path .. "/") .. " " .. quote(orig_root_path .. "/"))
	local removed = run("removing the staged copy", "rm -rf -- " .. quote(bundle))
	if synced and removed then
		return slurm.SUCCESS
	end
	return slurm.ERROR
end

return slurm.SUCCESS
