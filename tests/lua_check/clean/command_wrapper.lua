-- A wrapper around allocator_command: its parameters are command text chosen by its callers,
-- so they are checked where it is called (here with quoted or safe values), not inside it.
local function shell_quote(text)
	return "'" .. string.gsub(text, "'", "'\\''") .. "'"
end

local function run_cmd(prefix, cmd)
	local status, output = slurm.allocator_command(prefix .. " " .. cmd)
	if status ~= 0 then
		slurm.log_error("%s %s failed (%d): %s", prefix, cmd, status, output)
	end
	return status
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local destination = "/scratch/" .. math.floor(user_id) .. "/" .. id
	if run_cmd("mkdir", "-p " .. destination) ~= 0 then
		return slurm.ERROR
	end
	return run_cmd("rsync -a --", shell_quote(bundle) .. "/ " .. destination .. "/")
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	local status = run_cmd("rm -rf --", shell_quote(bundle))
	return status
end

return slurm.SUCCESS
