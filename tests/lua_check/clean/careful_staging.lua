-- Stages the bundle onto scratch the careful way: every path is quoted for the shell,
-- every command's status is checked, root.path is updated and the config written back.
local json = require("json")

local SCRATCH <const> = "/scratch"
local RSYNC_OPTIONS = "--numeric-ids --delete-after -a"

-- 'it'\''s' style quoting: safe for any byte string.
local function shell_quote(text)
	return "'" .. string.gsub(text, "'", "'\\''") .. "'"
end

local function read_file(path)
	local file <close> = assert(io.open(path, "rb"))
	return file:read("a")
end

local function write_file(path, contents)
	local file, problem = io.open(path, "wb")
	if not file then
		return nil, problem
	end
	file:write(contents)
	file:close()
	return true
end

local function run(command)
	local status, output = slurm.allocator_command(command)
	if status ~= 0 then
		slurm.log_error("command failed (%d): %s: %s", status, command, output)
	end
	return status
end

local staged = {}

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local config = json.decode(read_file(config_file))
	local destination = string.format("%s/%d/%s", SCRATCH, user_id, id)
	local rootfs = destination .. "/rootfs"
	local source = config.root.path
	if source:sub(1, 1) ~= "/" then
		source = bundle .. "/" .. source
	end
	if run("mkdir -p " .. shell_quote(rootfs)) ~= 0 then
		return slurm.ERROR
	end
	if run(string.format("rsync %s -- %s/ %s/", RSYNC_OPTIONS, shell_quote(source), shell_quote(rootfs))) ~= 0 then
		return slurm.ERROR
	end
	config.root.path = rootfs
	config.process.env = config.process.env or {}
	for index = 0, #job_env do
		local entry = job_env[index]
		if entry ~= nil then
			table.insert(config.process.env, entry)
		end
	end
	local ok, problem = write_file(destination .. "/config.json", json.encode(config))
	if not ok then
		slurm.log_error("cannot write config.json: %s", problem)
		return slurm.ERROR
	end
	slurm.set_bundle_path(destination)
	slurm.set_root_path(rootfs)
	staged[id] = destination
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	if bundle == orig_bundle then
		return slurm.SUCCESS
	end
	local status = run(string.format("rsync %s -- %s/ %s/", RSYNC_OPTIONS,
		shell_quote(root_path), shell_quote(orig_root_path)))
	if status == 0 then
		status = run("rm -rf -- " .. shell_quote(staged[id] or bundle))
	end
	return status
end

slurm.log_debug("loaded scrun.lua for cluster %s", slurm.CLUSTER_NAME)
return slurm.SUCCESS
