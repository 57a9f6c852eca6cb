-- unknown_error_code: see unknown_error_code.expect (Slurm's Lua spells it MAIL_JOB_TIME890)
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	slurm.log_debug("mail flags %d", slurm.MAIL_JOB_TIME90)
	return slurm.ESLURM_INVALID_JOB_IDS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
