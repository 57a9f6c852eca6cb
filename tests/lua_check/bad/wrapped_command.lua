-- wrapped_command: see wrapped_command.expect (the wrapper is followed to its callers)
local function run_cmd(prefix, cmd)
	local status, output = slurm.allocator_command(prefix .. " " .. cmd)
	if status ~= 0 then
		slurm.log_error("%s failed: %s", prefix, output)
	end
	return status
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	run_cmd("mkdir -p", spool_dir .. "/rootfs")
	local status = run_cmd("rsync -a --", bundle .. "/ " .. spool_dir .. "/rootfs/")
	return status
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
