-- set_root_path_only: see set_root_path_only.expect
function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local status = slurm.allocator_command(string.format("cp -a '%s' /scratch/%d", bundle, job_id))
	slurm.set_root_path(string.format("/scratch/%d/rootfs", job_id))
	return status
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
