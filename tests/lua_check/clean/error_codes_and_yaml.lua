-- Slurm's error codes are slurm constants, and the YAML helpers exist beside the JSON ones.
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local file = io.open(config_file, "rb")
	if file == nil then
		return slurm.ESLURM_CONTAINER_NOT_CONFIGURED
	end
	local config = slurm.from_json(file:read("a"))
	file:close()
	slurm.log_debug("config as YAML:\n%s", slurm.to_yaml(config))
	if config.process == nil then
		return slurm.ESLURM_INVALID_CONTAINER_ID
	end
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SLURM_SUCCESS
end

return slurm.SUCCESS
