-- lua_quoted_command: see lua_quoted_command.expect (%q is Lua's quoting, not the shell's)
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local status = slurm.allocator_command(string.format("rsync -a -- %q/ /scratch/%s/", bundle, id))
	return status
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
