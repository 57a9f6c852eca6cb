-- step_gpus_from_job_env: see step_gpus_from_job_env.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, env)
	if env.CUDA_VISIBLE_DEVICES ~= nil then
		slurm.log_info("container %s has GPUs %s", id, env["SLURM_STEP_GPUS"])
	end
	slurm.log_info("job %s", env.SLURM_JOB_ID)
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
