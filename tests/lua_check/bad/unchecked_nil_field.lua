-- unchecked_nil_field: see unchecked_nil_field.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local file = assert(io.open(config_file, "rb"))
	local config = slurm.from_json(file:read("a"))
	file:close()
	if config.process ~= nil and config.process.user ~= nil then
		config.process.user.additionalGids = nil
	end
	if config.linux then
		config.linux.cgroupsPath = nil
	end
	config.process.env = config.process.env or {}
	if config.hooks == nil then
		return slurm.SUCCESS
	end
	config.hooks.prestart = nil
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
