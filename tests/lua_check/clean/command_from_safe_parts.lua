-- Command strings built only from safe parts need no quoting: literals, math.floor() of the
-- uid, the container id (scrun accepts only [A-Za-z0-9][A-Za-z0-9_.+-]*), and locals made of
-- those; a value between single quotes counts as quoted.
local scratch = "/scratch"

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local root = scratch .. "/" .. math.floor(user_id) .. "/scrun/"
	local destination = root .. id
	local status, output = slurm.allocator_command("mkdir -p " .. destination .. "/rootfs")
	if status ~= 0 then
		slurm.log_error("mkdir failed: %s", output)
		return slurm.ERROR
	end
	status, output = slurm.allocator_command(string.format(
		"rsync -a -- '%s/' %s/rootfs/ && echo job %d", bundle, destination, job_id))
	if status ~= 0 then
		slurm.log_error("rsync failed: %s", output)
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	local status = slurm.allocator_command("rm -rf -- " .. scratch .. "/" .. user_id .. "/scrun/" .. id)
	return status
end

return slurm.SUCCESS
