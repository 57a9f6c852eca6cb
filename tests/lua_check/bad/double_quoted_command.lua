-- double_quoted_command: see double_quoted_command.expect ("..." does not stop $(...))
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local status = slurm.allocator_command(string.format('mkdir -p "%s/rootfs"', spool_dir))
	if status ~= 0 then
		return slurm.ERROR
	end
	status = slurm.allocator_command("touch \"" .. spool_dir .. "/ready\"")
	return status
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
