-- shadowing: see shadowing.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local count = 0
	for _, entry in pairs(job_env) do
		local count = #entry
		slurm.log_debug("%d", count)
	end
	return count
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
