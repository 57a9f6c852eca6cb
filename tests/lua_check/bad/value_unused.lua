-- value_unused: see value_unused.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local status, output = slurm.allocator_command("rsync -a /src/ /dst/")
	if status ~= 0 then
		return slurm.ERROR
	end
	local user = "nobody"
	if job_id > 0 then
		user = "job"
	else
		user = "none"
	end
	slurm.log_info("user %s", user)
	local last
	for _, entry in ipairs(job_env) do
		last = entry
	end
	slurm.log_info("last %s", tostring(last))
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	local count = 0
	repeat
		count = count + 1
	until count > 3
	local message = "stage_out"
	slurm.log_debug(message)
	message = "done"
	return slurm.SUCCESS
end

return slurm.SUCCESS
