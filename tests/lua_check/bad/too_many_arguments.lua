-- too_many_arguments: see too_many_arguments.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local minutes = slurm.time_str2mins("1:00", 60)
	return minutes > 0 and slurm.SUCCESS or slurm.ERROR
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
