-- os_execute_echo: see os_execute_echo.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	os.execute("echo staging " .. id)
	os.execute("echo staged >> /tmp/scrun-staging.log")
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
