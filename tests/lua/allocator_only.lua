-- A scrun.lua that stages nothing and only talks to the local host: for scrun-stage tests
-- that must run without a cluster.
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local status, output = slurm.allocator_command("echo staging $SCRUN_CONTAINER_ID in job $SLURM_JOB_ID")
	slurm.log_info("allocator said: %s", output)
	return status
end
function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	slurm.log_info("stage_out %s %d", bundle, job_id)
	return slurm.SUCCESS
end
slurm.log_info("allocator_only loaded")
return slurm.SUCCESS
