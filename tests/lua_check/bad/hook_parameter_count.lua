-- hook_parameter_count: see hook_parameter_count.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path)
	return slurm.SUCCESS
end

return slurm.SUCCESS
