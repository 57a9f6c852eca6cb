-- before_start_parameters: scrun_before_start is optional, but one that is defined is a
-- hook like the others: scrun passes stage-in's parameters, in stage-in's order
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

function scrun_before_start(id, job_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
